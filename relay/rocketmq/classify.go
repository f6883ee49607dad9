// SPDX-License-Identifier: Apache-2.0

package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/relay/message"
)

// errConnectionLost marks a send written to a connection the broker had closed (broken
// pipe, reset): never sent, so the publisher sends it again at once on the client's new
// connection.
var errConnectionLost = errors.New("connection to the broker lost")

// errRouteUnsettled marks a send that rocketmq-client-go failed with "topic=T route info not
// found" (no leading "the"): the queue was chosen but the client knew no address for its
// broker, as when another goroutine of the same client was storing the topic's new route
// (the client publishes it to its producer before the brokers' addresses). Never sent, so
// the publisher sends it again at once.
var errRouteUnsettled = errors.New("the client was still storing the topic's route")

// This file is the only reader of rocketmq-client-go's errors and send statuses: every
// failure of a Publisher leaves it as a *SendError whose Kind the relay acts on
// (docs/decisions.md, "Failure accounting").

// Response codes of RocketMQ's remoting protocol (ResponseCode) that classify reads.
const (
	codeSystemError        = 1
	codeSystemBusy         = 2
	codeFlushDiskTimeout   = 10
	codeSlaveNotAvailable  = 11
	codeFlushSlaveTimeout  = 12
	codeMessageIllegal     = 13
	codeServiceUnavailable = 14
	codeVersionUnsupported = 15
	codeNoPermission       = 16
	codeTopicNotExist      = 17
)

// brokerCode returns the response code of a broker's answer as rocketmq-client-go reports
// it ("CODE: n, DESC: ..."), or -1 when no broker answered.
func brokerCode(msg string) int {
	rest, ok := strings.CutPrefix(msg, "CODE: ")
	if !ok {
		return -1
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end <= 0 {
		return -1
	}
	n, err := strconv.Atoi(rest[:end])
	if err != nil {
		return -1
	}
	return n
}

// misconfiguredAnswer reports whether a broker's or proxy's answer refuses the relay's
// configuration rather than the message or the broker's state: ACL (1.0 and 2.0) refusing
// the credentials or their permission, a topic whose message type (FIFO, NORMAL) is not the
// route's, a proxy that needs the broker name.
func misconfiguredAnswer(code int, lower string) bool {
	switch {
	case code == codeNoPermission:
		// A broker whose write permission is off (brokerPermission=4, a broker being
		// drained) answers NO_PERMISSION too: that is the broker's state, not ours.
		return !strings.Contains(lower, "sending message is forbidden")
	case strings.Contains(lower, "signature"), strings.Contains(lower, "authentication"),
		strings.Contains(lower, "accesskey"), strings.Contains(lower, "no permission"):
		return true
	case strings.Contains(lower, "topicmessagetype"):
		return true
	case code == codeVersionUnsupported && strings.Contains(lower, "bname"):
		return true
	}
	return false
}

// atBroker attributes the client's error of a send to the broker at addr, for classify to
// read: a transient SendError until classify judges it (err itself when addr is empty).
func atBroker(addr string, err error) error {
	if addr == "" {
		return err
	}
	return &message.SendError{Kind: message.SendTransient, Broker: addr, Code: -1, Err: err}
}

// classify turns the client's error of a send into a *SendError. A broker's answer is judged
// by its code (and, for the few codes that carry several meanings, its text); "route info
// not found" is a missing topic when the name servers list live brokers and an unreachable
// cluster when they list none or do not answer; a refused connection is unreachable;
// anything else (a timeout, a dropped connection) is transient.
func (p *Publisher) classify(ctx context.Context, err error, topic string, batch bool) error {
	msg := err.Error()
	var at *message.SendError
	if errors.As(err, &at) {
		msg = at.Err.Error()
	}
	lower := strings.ToLower(msg)
	out := &message.SendError{Kind: message.SendTransient, Broker: message.BrokerOf(err), Code: brokerCode(msg), Err: err}
	if out.Code >= 0 {
		p.judgeAnswer(out, lower, batch)
	} else {
		p.judgeUnanswered(ctx, out, lower, topic)
	}
	return out
}

// judgeAnswer sets the kind of out, a send a broker answered with out.Code (lower is the
// answer's text in lower case); batch says whether the send was a batch request.
func (p *Publisher) judgeAnswer(out *message.SendError, lower string, batch bool) {
	code, err := out.Code, out.Err
	switch {
	case misconfiguredAnswer(code, lower):
		out.Kind = message.SendMisconfigured
		if code == codeNoPermission {
			// ACL: name the credential, which a wrong secret's answer does not.
			out.Err = fmt.Errorf("%w (%s)", err, p.credentialName())
		}
	case code == codeMessageIllegal: // size or properties: no retry can cure it
		out.Kind = message.SendPermanent
	case code == codeTopicNotExist:
		out.Kind, out.Err = message.SendTopicMissing, fmt.Errorf("%w: %w", message.ErrTopicNotFound, err)
	case code == codeSystemError && strings.Contains(lower, "size exceeded"):
		// Apache RocketMQ 5.3 refuses a batch holding an oversized message, or too large as
		// a whole, with SYSTEM_ERROR ("message body size exceeded"): about the request, not
		// the broker, so the relay sends the batch's messages one by one.
		out.Kind = message.SendPermanent
		if batch {
			out.Kind = message.SendRefused
		}
	case code == codeSystemError, code == codeSystemBusy, code == codeServiceUnavailable, code == codeNoPermission:
		// The broker's state, not the message's: busy, flow control, disk full, read-only.
	default:
		out.Kind = message.SendRefused
	}
}

// judgeUnanswered sets the kind of out, a send no broker answered (lower is the client's
// error in lower case): refused credentials, a dropped connection, a route the client or the
// name servers lack, an unreachable broker, or (anything else) transient.
func (p *Publisher) judgeUnanswered(ctx context.Context, out *message.SendError, lower, topic string) {
	err := out.Err
	switch {
	case misconfiguredAnswer(-1, lower):
		out.Kind = message.SendMisconfigured
	case containsAny(lower, "use of closed network connection", "broken pipe", "connection reset by peer"):
		// Written to, or waiting on, a connection the broker had closed: the client opens a
		// new one for the next send.
		out.Err = fmt.Errorf("%w: %w", errConnectionLost, err)
	case strings.HasPrefix(lower, "topic=") && strings.Contains(lower, "route info not found"):
		out.Err = fmt.Errorf("%w: %w", errRouteUnsettled, err)
	case strings.Contains(lower, "route info not found"):
		p.judgeNoRoute(ctx, out, topic)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		containsAny(lower, "connection refused", "no route to host", "network is unreachable"):
		out.Kind, out.Err = message.SendUnreachable, fmt.Errorf("%w: %w", message.ErrBrokerUnreachable, err)
	}
}

// judgeNoRoute sets the kind of out, a send the client found no route for, from what the
// name servers say of topic: none answers or none lists a broker (unreachable), the topic's
// brokers take no writes (unreachable), or the topic does not exist.
func (p *Publisher) judgeNoRoute(ctx context.Context, out *message.SendError, topic string) {
	err := out.Err
	live, routed, nsErr := p.routeState(ctx, topic)
	switch {
	case nsErr != nil:
		out.Kind = message.SendUnreachable
		out.Err = fmt.Errorf("%w: no name server answers at %s (%v): %w", message.ErrBrokerUnreachable, strings.Join(p.cfg.NameServers, ","), nsErr, err)
	case routed:
		// The name servers know the topic, but the client found no queue it may write
		// to: its brokers are read-only (brokerPermission=4, being drained) or going.
		out.Kind = message.SendUnreachable
		out.Err = fmt.Errorf("%w: the topic's brokers take no writes now: %w", message.ErrBrokerUnreachable, err)
	case live == 0:
		out.Kind = message.SendUnreachable
		out.Err = fmt.Errorf("%w: no broker is registered with the name servers: %w", message.ErrBrokerUnreachable, err)
	default:
		out.Kind = message.SendTopicMissing
		out.Err = fmt.Errorf("%w: %w (does the topic exist? with autoCreateTopicEnable=false it must be created first)", message.ErrTopicNotFound, err)
	}
}

// containsAny reports whether s contains any of subs.
func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// storedStatus judges a send the broker answered with a status other than SEND_OK. The
// three "stored on the master, not flushed or replicated as asked" statuses are sent unless
// RequireReplication is set (stored means sent: RocketMQ documents each as a stored
// message, and sending it again only adds a copy); any other status is transient.
func (p *Publisher) storedStatus(res *primitive.SendResult, topic string, n int) error {
	var name string
	switch res.Status {
	case primitive.SendFlushDiskTimeout:
		name = "FLUSH_DISK_TIMEOUT"
	case primitive.SendFlushSlaveTimeout:
		name = "FLUSH_SLAVE_TIMEOUT"
	case primitive.SendSlaveNotAvailable:
		name = "SLAVE_NOT_AVAILABLE"
	default:
		return &message.SendError{Kind: message.SendTransient, Code: -1, Err: fmt.Errorf("broker answered send status %d", res.Status)}
	}
	broker := ""
	if res.MessageQueue != nil {
		broker = res.MessageQueue.BrokerName
	}
	if p.cfg.RequireReplication {
		return &message.SendError{Kind: message.SendUnreplicated, Code: -1,
			Err: fmt.Errorf("broker %s stored the message but answered %s (rocketmq.require_replication is on)", broker, name)}
	}
	p.cfg.Metrics.SentUnreplicated(name, n)
	p.unreplicated.note(p.cfg.Log, broker, topic, name, n)
	return nil
}

// routeState asks the first answering name server whether topic has a route and how many
// brokers are registered, at most once a second per topic: it tells a topic that does not
// exist from one whose brokers take no writes, and from a cluster without brokers.
func (p *Publisher) routeState(ctx context.Context, topic string) (live int, routed bool, err error) {
	p.probeMu.Lock()
	defer p.probeMu.Unlock()
	if st, ok := p.probed[topic]; ok && time.Since(st.at) < time.Second {
		return st.live, st.routed, st.err
	}
	var errs []error
	for _, addr := range p.cfg.NameServers {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		routed, err = remoting.TopicRouted(cctx, addr, p.qualified(topic), remoting.WithTLS(p.cfg.TLS))
		if err == nil && !routed {
			live, err = remoting.LiveBrokers(cctx, addr, remoting.WithTLS(p.cfg.TLS))
		}
		cancel()
		if errors.Is(err, remoting.ErrNotSupported) {
			// A 5.x proxy given as name server: it answers routes but not the broker
			// list. It answered, and it fronts its brokers: count it as one.
			live, err = 1, nil
		}
		if err == nil {
			errs = nil
			break
		}
		errs = append(errs, err)
	}
	err = errors.Join(errs...)
	if p.probed == nil || len(p.probed) > 1000 {
		p.probed = map[string]routeProbe{}
	}
	p.probed[topic] = routeProbe{at: time.Now(), live: live, routed: routed, err: err}
	return live, routed, err
}

// routeProbe is what the name servers said of a topic's route.
type routeProbe struct {
	at     time.Time
	live   int
	routed bool
	err    error
}

// unreplicatedLog logs sends stored without replication at most once per broker and status
// every 10 seconds, with how many there were meanwhile: a SYNC_MASTER whose slave is down
// answers every send so, and a line per send would flood the log.
type unreplicatedLog struct {
	mu   sync.Mutex
	last map[[2]string]time.Time
	held map[[2]string]int
}

func (u *unreplicatedLog) note(log zerolog.Logger, broker, topic, status string, n int) {
	k := [2]string{broker, status}
	u.mu.Lock()
	if u.last == nil {
		u.last, u.held = map[[2]string]time.Time{}, map[[2]string]int{}
	}
	u.held[k] += n
	if time.Since(u.last[k]) < 10*time.Second {
		u.mu.Unlock()
		return
	}
	count := u.held[k]
	u.last[k], u.held[k] = time.Now(), 0
	u.mu.Unlock()
	log.Warn().Str("broker", broker).Str("topic", topic).Str("status", status).Int("messages", count).
		Msg("broker stored messages without replicating or flushing them as configured: marked sent (is its slave down?)")
}
