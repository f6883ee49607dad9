// SPDX-License-Identifier: Apache-2.0

// Package txmsg writes outbox messages on RocketMQ's transactional (half-message) path:
// the row is inserted in the caller's transaction, a half message is sent before the
// commit, and END_TRANSACTION(COMMIT) after it makes the message visible at once, without
// waiting for the relay. The row is marked sent only when the broker acknowledged the
// COMMIT, so the relay remains the safety net for every failure: a writer that dies, an
// END that is lost, a half send that fails. The relay's check responder
// (rocketmq.transaction_check_groups) answers the broker's check-backs from the row.
//
//	h, err := p.Prepare(ctx, tx, &msg) // INSERT the row, then send the half
//	err = tx.Commit()
//	err = p.Finish(ctx, db, h, err)    // END_TRANSACTION, then mark the row sent
//
// Messages with a ShardingKey or a DeliverAt stay ordinary rows (the broker supports
// neither order nor delay for halves). See docs/transactional.md.
package txmsg

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/internal/rowmsg"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Sender sends the half. A rocketmq-client-go producer has this method; it must be a plain
// producer whose group is not the CheckGroup (a plain producer of the check group would
// receive check-backs it cannot answer), and should be built with WithRetry(0): a retried
// half leaves an orphan that a check rolls back. Give it its own WithInstanceName, so that a
// dropped connection of the writer's never stalls a consumer of the same process.
type Sender interface {
	SendSync(ctx context.Context, msgs ...*primitive.Message) (*primitive.SendResult, error)
}

// Config configures a Producer.
type Config struct {
	// Writer inserts the rows; its table is the one the relay serves. Required.
	Writer *outbox.Writer
	// Sender sends the halves. Required.
	Sender Sender
	// NameServers find the broker of a half for its END_TRANSACTION. Required.
	NameServers []string
	// CheckGroup is the producer group named in every half (PGROUP): the group the broker
	// checks back, listed in the relay's rocketmq.transaction_check_groups. Required.
	CheckGroup string
	// Secret signs every half (outbox.SignHalf); the relays answering the CheckGroup's
	// checks must list it in rocketmq.transaction_check_secrets, for they act only on
	// signed halves. Required, 16 bytes or more.
	Secret string
	// Grace is how long the relay leaves a new row to the writer before it sends the row
	// itself. Defaults to 15 seconds. A writer that ends a half later than Grace/2 after the
	// insert rolls it back and leaves the row to the relay, so that the two never race.
	Grace time.Duration
	// EndTimeout bounds END_TRANSACTION. Defaults to 3 seconds.
	EndTimeout time.Duration
	// AccessKey and SecretKey sign END_TRANSACTION for a broker with ACL (give the Sender
	// the same credentials). Default to empty: unsigned.
	AccessKey, SecretKey string
	// SendTimeout bounds the half's send, which runs inside the business transaction: a
	// half whose answer is lost holds the transaction open this long before the row is
	// handed to the relay. Defaults to 3 seconds (the client's own timeout).
	SendTimeout time.Duration
}

// Producer writes messages on the half-message path. It is safe for concurrent use.
type Producer struct {
	cfg      Config
	table    string
	markSQL  string
	relaySQL string
	mu       sync.Mutex
	addrs    map[string]string         // broker name -> master address
	conns    map[string]*remoting.Conn // master address -> connection for END_TRANSACTION
	closed   bool
	now      func() time.Time
}

// New checks cfg and returns a Producer.
func New(cfg Config) (*Producer, error) {
	switch {
	case cfg.Writer == nil:
		return nil, errors.New("txmsg: Writer: required")
	case cfg.Sender == nil:
		return nil, errors.New("txmsg: Sender: required")
	case len(cfg.NameServers) == 0:
		return nil, errors.New("txmsg: NameServers: at least one is needed")
	case cfg.CheckGroup == "":
		return nil, errors.New("txmsg: CheckGroup: required")
	case len(cfg.Secret) < 16:
		return nil, fmt.Errorf("txmsg: Secret: at least 16 bytes, got %d", len(cfg.Secret))
	}
	if cfg.Grace == 0 {
		cfg.Grace = 15 * time.Second
	}
	if cfg.Grace < 0 {
		return nil, fmt.Errorf("txmsg: Grace: must be positive, got %s", cfg.Grace)
	}
	if cfg.EndTimeout <= 0 {
		cfg.EndTimeout = 3 * time.Second
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = 3 * time.Second
	}
	t := schema.QuoteIdent(cfg.Writer.Table())
	// markSQL writes sent_time and next_retry_time on the database's clock, as the relay does.
	return &Producer{
		cfg:      cfg,
		table:    cfg.Writer.Table(),
		markSQL:  "UPDATE " + t + " SET status = 2, sent_time = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), next_retry_time = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) WHERE msg_id = ? AND status IN (0,1)",
		relaySQL: "UPDATE " + t + " SET next_retry_time = 0 WHERE msg_id = ? AND status IN (0,1)",
		addrs:    map[string]string{},
		conns:    map[string]*remoting.Conn{},
		now:      time.Now,
	}, nil
}

// Close closes the connections kept for END_TRANSACTION. The Sender is the caller's to
// shut down. Safe to call twice.
func (p *Producer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for addr, c := range p.conns {
		_ = c.Close()
		delete(p.conns, addr)
	}
	return nil
}

// endInvoke sends END_TRANSACTION to addr on a kept connection and waits for the answer.
// A connection that failed is closed and dialled again at the next call.
func (p *Producer) endInvoke(ctx context.Context, addr string, ext map[string]string) (*remoting.Response, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("txmsg: producer closed")
	}
	c := p.conns[addr]
	p.mu.Unlock()
	if c == nil || c.Closed() {
		nc, err := remoting.Dial(ctx, addr, nil, remoting.WithCredentials(remoting.Credentials{AccessKey: p.cfg.AccessKey, SecretKey: p.cfg.SecretKey}))
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = nc.Close()
			return nil, errors.New("txmsg: producer closed")
		}
		if cur := p.conns[addr]; cur != nil && cur != c && !cur.Closed() {
			_ = nc.Close() // another call dialled first: share its connection
			nc = cur
		} else {
			p.conns[addr] = nc
		}
		p.mu.Unlock()
		c = nc
	}
	resp, err := c.Invoke(ctx, remoting.EndTransaction, ext, nil)
	if err != nil {
		_ = c.Close() // a late answer must not be read as the next request's
	}
	return resp, err
}

// Half is a message prepared by Prepare, to be finished by Finish.
type Half struct {
	msgID    string
	inserted time.Time
	sent     *primitive.SendResult // nil: no half, the relay delivers the row
	topic    string
}

// MsgID returns the message's msg_id.
func (h *Half) MsgID() string { return h.msgID }

// Relayed reports whether the message is left to the relay (no half was sent: an ordered
// or delayed message, or a failed half send).
func (h *Half) Relayed() bool { return h.sent == nil }

// Prepare inserts m through tx and then sends its half. Call it inside the business
// transaction, before the commit. A failed half send is not an error: the row is made due
// at once and the relay delivers it after the commit. An error is returned only when the
// row could not be inserted (the transaction should roll back).
func (p *Producer) Prepare(ctx context.Context, tx outbox.Tx, m *outbox.Message) (*Half, error) {
	if m.ShardingKey != "" || !m.DeliverAt.IsZero() {
		if err := p.cfg.Writer.Insert(ctx, tx, m); err != nil {
			return nil, err
		}
		return &Half{msgID: m.MsgID, inserted: p.now()}, nil
	}
	row := *m
	now := p.now()
	row.DeliverAt = now.Add(p.cfg.Grace) // the writer's turn first; the relay's after Grace
	if err := p.cfg.Writer.Insert(ctx, tx, &row); err != nil {
		return nil, err
	}
	m.MsgID = row.MsgID
	h := &Half{msgID: row.MsgID, inserted: now, topic: m.Topic}
	sctx, cancel := context.WithTimeout(ctx, p.cfg.SendTimeout)
	res, err := p.cfg.Sender.SendSync(sctx, p.halfMessage(m))
	cancel()
	if err != nil || res == nil || res.Status != primitive.SendOK {
		if _, err := tx.ExecContext(ctx, p.relaySQL, row.MsgID); err != nil {
			return nil, fmt.Errorf("txmsg: half not sent, and the row could not be handed to the relay: %w", err)
		}
		return h, nil
	}
	h.sent = res
	return h, nil
}

// halfMessage builds the half as the relay would send the row, plus the transaction's
// properties.
func (p *Producer) halfMessage(m *outbox.Message) *primitive.Message {
	pm := rowmsg.Build(rowmsg.Fields{MsgID: m.MsgID, Topic: m.Topic, Tag: m.Tag, Body: m.Body, Keys: m.Keys, Properties: m.Properties})
	pm.WithProperty(outbox.TableProperty, p.table)
	pm.WithProperty(outbox.WriterProperty, "c")
	pm.WithProperty(outbox.SignatureProperty, outbox.SignHalf(p.cfg.Secret, p.table, m.MsgID, m.Topic))
	pm.WithProperty(primitive.PropertyTransactionPrepared, "true")
	pm.WithProperty(primitive.PropertyProducerGroup, p.cfg.CheckGroup)
	return pm
}

// ErrLeftToRelay is matched by errors.Is when Finish could not complete the broker side;
// the message is not lost: the relay (or a check-back) delivers the row.
var ErrLeftToRelay = errors.New("txmsg: delivery left to the relay")

// Finish ends the half after the commit: commitErr is tx.Commit's result. On a commit it
// sends END_TRANSACTION(COMMIT), waits for the broker's answer and then marks the row
// sent through db; on a failed commit it rolls the half back. A nil error means the
// message is visible to consumers (or, for a relayed one, that the relay has it). An error
// matching ErrLeftToRelay means the broker's side is uncertain and the row is left to the
// relay, which delivers it after Grace (earlier if a check-back pulls it forward): a
// duplicate is possible then, a loss is not.
func (p *Producer) Finish(ctx context.Context, db outbox.Execer, h *Half, commitErr error) error {
	if h == nil || h.sent == nil {
		if commitErr == nil {
			_ = p.cfg.Writer.Nudge(ctx)
		}
		return nil
	}
	if commitErr != nil {
		// Rolled back, or unknown: a ROLLBACK is right either way, for a committed row
		// is still the relay's after Grace.
		_, _ = p.end(ctx, h, false)
		return nil
	}
	if p.now().Sub(h.inserted) > p.cfg.Grace/2 {
		_, _ = p.end(ctx, h, false)
		_, _ = db.ExecContext(ctx, p.relaySQL, h.msgID)
		_ = p.cfg.Writer.Nudge(ctx)
		return fmt.Errorf("%w: the half of %s was ended %s after the insert (Grace %s)", ErrLeftToRelay, h.msgID, p.now().Sub(h.inserted).Round(time.Millisecond), p.cfg.Grace)
	}
	ok, err := p.end(ctx, h, true)
	if !ok {
		return fmt.Errorf("%w: END_TRANSACTION of %s: %w", ErrLeftToRelay, h.msgID, err)
	}
	// A settled row's next_retry_time is when it was settled (purge, activity).
	if _, err := db.ExecContext(ctx, p.markSQL, h.msgID); err != nil {
		return fmt.Errorf("%w: %s committed on the broker but not marked sent (the relay sends it again): %w", ErrLeftToRelay, h.msgID, err)
	}
	return nil
}

// end sends END_TRANSACTION for h and reports whether the broker acknowledged it.
func (p *Producer) end(ctx context.Context, h *Half, commit bool) (bool, error) {
	res := h.sent
	if len(res.OffsetMsgID) < 16 {
		return false, fmt.Errorf("txmsg: offset message id %q too short", res.OffsetMsgID)
	}
	raw, err := hex.DecodeString(res.OffsetMsgID[len(res.OffsetMsgID)-16:])
	if err != nil {
		return false, fmt.Errorf("txmsg: offset message id %q: %w", res.OffsetMsgID, err)
	}
	var phys uint64
	for _, b := range raw {
		phys = phys<<8 | uint64(b)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.EndTimeout)
	defer cancel()
	addr, err := p.brokerAddr(ctx, res.MessageQueue.BrokerName)
	if err != nil {
		return false, err
	}
	kind := "12"
	if commit {
		kind = "8"
	}
	id := res.TransactionID
	if id == "" {
		id = res.MsgID
	}
	ext := map[string]string{
		"producerGroup":        p.cfg.CheckGroup,
		"tranStateTableOffset": strconv.FormatInt(res.QueueOffset, 10),
		"commitLogOffset":      strconv.FormatUint(phys, 10),
		"commitOrRollback":     kind,
		"fromTransactionCheck": "false",
		"msgId":                res.MsgID,
		"transactionId":        id,
		"topic":                h.topic,
		"bname":                res.MessageQueue.BrokerName,
	}
	resp, err := p.endInvoke(ctx, addr, ext)
	if err != nil {
		return false, err
	}
	if resp.Code != 0 {
		return false, fmt.Errorf("txmsg: END_TRANSACTION answered code %d: %s", resp.Code, resp.Remark)
	}
	return true, nil
}

// brokerAddr returns the master address of a broker name, asking the name servers when
// it is not known yet.
func (p *Producer) brokerAddr(ctx context.Context, name string) (string, error) {
	p.mu.Lock()
	a := p.addrs[name]
	p.mu.Unlock()
	if a != "" {
		return a, nil
	}
	m, err := remoting.FindMasters(ctx, p.cfg.NameServers, func(m map[string]string) bool { return m[name] != "" })
	p.mu.Lock()
	maps.Copy(p.addrs, m)
	p.mu.Unlock()
	if a = m[name]; a != "" {
		return a, nil
	}
	if err != nil {
		return "", fmt.Errorf("txmsg: no master address for broker %q: %w", name, err)
	}
	return "", fmt.Errorf("txmsg: no name server knows a master for broker %q", name)
}
