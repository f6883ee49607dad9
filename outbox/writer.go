// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/msgtrace"
	"github.com/outbox-relay/outbox-relay/internal/mysqlerr"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Message is one outbox message as a service writes it.
type Message struct {
	// MsgID is the unique id of the message; a second insert of the same id fails with
	// *DuplicateError. Empty: the writer generates a time-sortable id (NewID) and sets it
	// here, on the caller's message.
	MsgID string
	// Topic is the RocketMQ topic.
	Topic string
	// Tag is the RocketMQ tag; may be empty.
	Tag string
	// Keys are the RocketMQ message keys; put the order number here so consumers can dedupe
	// by it. Empty: the relay sends MsgID as the key.
	Keys []string
	// ShardingKey chooses the queue by hash and, on routes marked ordered, keeps the
	// messages of one key in insertion order. Empty: any queue, no order.
	ShardingKey string
	// Body is sent to the broker byte for byte. It must be valid UTF-8 (it is stored in a text
	// column) and within the writer's MaxBodyBytes.
	Body []byte
	// Properties are RocketMQ user properties. When the insert's context carries a valid
	// OpenTelemetry span, the writer stores its W3C trace context as "traceparent" and
	// "tracestate" beside them (not in this map), unless the map sets either itself.
	Properties map[string]string
	// DeliverAt delays the first attempt until then. Zero: as soon as committed.
	DeliverAt time.Time
	// MaxRetries is how many retries are allowed after the first attempt. 0 means the
	// writer's default (3); NoRetries gives a single attempt.
	MaxRetries int
}

// NoRetries as Message.MaxRetries allows a single attempt and no retry.
const NoRetries = -1

// Tx is the transaction Insert and InsertMany write through: *sql.Tx has these methods,
// and so do wrappers that keep them (sqlx.Tx). Commit and Rollback are not called by the
// writer; they are in the interface so that a *sql.DB, which would write the message
// outside the business transaction, does not compile. InsertNoTx is the explicit
// non-transactional variant.
type Tx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	Commit() error
	Rollback() error
}

// Execer runs a statement outside any transaction the writer knows of: *sql.DB, *sql.Conn
// and *sql.Tx have it. Only InsertNoTx takes it.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Nudger wakes the relay of table after a commit. A Nudger is a hint: an error only delays
// delivery to the relay's next poll. outbox/redisnudge publishes on the relay's Redis
// channel (NudgeChannel); NudgeFunc adapts a function.
type Nudger interface {
	Nudge(ctx context.Context, table string) error
}

// KeyedNudger is a Nudger that can also name the rows' partition keys (PartitionHash), so
// that a relay group of a partitioned table (relay.partitions > 1) wakes only the partitions
// the rows are in. redisnudge's Nudger is one.
type KeyedNudger interface {
	Nudger
	NudgeKeys(ctx context.Context, table string, hashes []uint32) error
}

// PartitionHash is the hash the relay partitions a table's rows by: CRC32 (IEEE) of the
// sharding key, or of the msg_id when the key is empty, as the table's relay_partition
// column computes it in SQL.
func PartitionHash(shardingKey, msgID string) uint32 {
	if shardingKey == "" {
		return crc32.ChecksumIEEE([]byte(msgID))
	}
	return crc32.ChecksumIEEE([]byte(shardingKey))
}

// NudgeFunc is a function that is a Nudger.
type NudgeFunc func(ctx context.Context, table string) error

// Nudge calls f.
func (f NudgeFunc) Nudge(ctx context.Context, table string) error { return f(ctx, table) }

// Config configures a Writer.
type Config struct {
	// Table is the outbox table. Defaults to "local_message".
	Table string
	// MaxBodyBytes refuses larger bodies. Defaults to DefaultMaxBodyBytes (4 MiB), RocketMQ's
	// default limit.
	MaxBodyBytes int
	// DefaultMaxRetries is used for messages with MaxRetries 0. Defaults to 3.
	DefaultMaxRetries int
	// Nudger, when set, lets Writer.Nudge wake the relay right after a commit (for example
	// redisnudge.New(rdb)). Defaults to nil: no nudge, the relay finds rows at its next poll.
	Nudger Nudger
}

// Writer inserts outbox messages into one table. It is safe for concurrent use.
type Writer struct {
	table      string
	insertSQL  string // "INSERT INTO `table` (columns) VALUES "
	maxBody    int
	maxRetries int
	nudger     Nudger
}

// NewWriter checks cfg and returns a Writer; an invalid table name is refused here, before it
// can reach a statement.
func NewWriter(cfg Config) (*Writer, error) {
	if cfg.Table == "" {
		cfg.Table = "local_message"
	}
	if err := schema.ValidateIdent(cfg.Table); err != nil {
		return nil, fmt.Errorf("outbox: Table: %w", err)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("outbox: MaxBodyBytes: must be positive, got %d", cfg.MaxBodyBytes)
	}
	if cfg.DefaultMaxRetries == 0 {
		cfg.DefaultMaxRetries = 3
	}
	if cfg.DefaultMaxRetries < 0 {
		return nil, fmt.Errorf("outbox: DefaultMaxRetries: must be positive, got %d", cfg.DefaultMaxRetries)
	}
	return &Writer{
		table:      cfg.Table,
		insertSQL:  "INSERT INTO " + schema.QuoteIdent(cfg.Table) + " (" + insertColumns + ") VALUES ",
		maxBody:    cfg.MaxBodyBytes,
		maxRetries: cfg.DefaultMaxRetries,
		nudger:     cfg.Nudger,
	}, nil
}

// Table returns the table the writer inserts into.
func (w *Writer) Table() string { return w.table }

// insertColumns is the column list Insert writes; everything else takes its default.
const insertColumns = "msg_id, topic, tag, content, msg_keys, sharding_key, properties, next_retry_time, max_retry_count"

// rowsPerStatement keeps one INSERT well under MySQL's 65,535 placeholders.
const rowsPerStatement = 1000

// Insert validates m and writes it through tx, the transaction that writes the business
// rows, so that the message exists if and only if they commit. An empty m.MsgID is
// generated and set on m. An invalid message is refused before anything is written, with
// an error naming the field at fault; a msg_id that exists already gives *DuplicateError.
// When ctx carries an OpenTelemetry span, its trace context goes into the row's properties,
// so that the relay's and the consumer's spans join the caller's trace (Message.Properties).
func (w *Writer) Insert(ctx context.Context, tx Tx, m *Message) error {
	if m == nil {
		return errors.New("outbox: Insert: nil message")
	}
	if m.MsgID == "" {
		m.MsgID = NewID()
	}
	return w.insert(ctx, tx, []Message{*m})
}

// InsertMany is Insert for several messages, written with one multi-row INSERT per 1,000
// messages through tx. Empty MsgIDs are generated and set in msgs (the caller's slice).
// Nothing is written when any message is invalid; the error names the message by index.
func (w *Writer) InsertMany(ctx context.Context, tx Tx, msgs []Message) error {
	return w.insert(ctx, tx, msgs)
}

// InsertNoTx is InsertMany outside a transaction: each statement of up to 1,000 messages
// commits on its own through db. It is for backfills, tools and tests; a service writing
// business rows must use Insert or InsertMany with its transaction, or a message can be
// published for a change that was rolled back.
func (w *Writer) InsertNoTx(ctx context.Context, db Execer, msgs []Message) error {
	return w.insert(ctx, db, msgs)
}

func (w *Writer) insert(ctx context.Context, exec Execer, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	for i := range msgs {
		if msgs[i].MsgID == "" {
			msgs[i].MsgID = NewID()
		}
		if err := w.validate(&msgs[i]); err != nil {
			return fmt.Errorf("outbox: message %d (msg_id %q): %w", i, msgs[i].MsgID, err)
		}
	}
	trace := msgtrace.Inject(ctx) // the caller's span, parent of the relay's producer span
	for start := 0; start < len(msgs); start += rowsPerStatement {
		end := min(start+rowsPerStatement, len(msgs))
		if err := w.insertChunk(ctx, exec, msgs[start:end], trace); err != nil {
			return err
		}
	}
	return nil
}

// insertChunk writes msgs in one statement; trace, when not nil, is the trace context added
// to the properties of the messages that carry none of their own.
func (w *Writer) insertChunk(ctx context.Context, exec Execer, msgs []Message, trace map[string]string) error {
	var b strings.Builder
	b.WriteString(w.insertSQL)
	args := make([]any, 0, len(msgs)*9)
	for i, m := range msgs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?)")
		var props any
		if p := withTrace(m.Properties, trace); len(p) > 0 {
			raw, err := json.Marshal(p)
			if err != nil {
				return fmt.Errorf("outbox: encode properties of %q: %w", m.MsgID, err)
			}
			props = string(raw)
		}
		var next int64
		if !m.DeliverAt.IsZero() {
			next = m.DeliverAt.UnixMilli()
		}
		retries := m.MaxRetries
		switch {
		case retries == 0:
			retries = w.maxRetries
		case retries < 0:
			retries = 0
		}
		args = append(args, m.MsgID, m.Topic, m.Tag, string(m.Body), strings.Join(m.Keys, " "), m.ShardingKey, props, next, retries)
	}
	if _, err := exec.ExecContext(ctx, b.String(), args...); err != nil {
		if dup := asDuplicate(err); dup != nil {
			return dup
		}
		return fmt.Errorf("outbox: insert %d messages into %s: %w", len(msgs), w.table, err)
	}
	return nil
}

// withTrace returns props with the trace context added, or props itself when there is none
// to add or props set trace context explicitly. The caller's map is never changed.
func withTrace(props, trace map[string]string) map[string]string {
	switch {
	case trace == nil || msgtrace.Has(props):
		return props
	case len(props) == 0:
		return trace
	}
	merged := make(map[string]string, len(props)+len(trace))
	maps.Copy(merged, props)
	maps.Copy(merged, trace)
	return merged
}

func (w *Writer) validate(m *Message) error {
	if err := ValidateFields(Fields{MsgID: m.MsgID, Tag: m.Tag, Keys: m.Keys, ShardingKey: m.ShardingKey, Properties: m.Properties}); err != nil {
		return err
	}
	if len(m.MsgID) > MaxMsgIDLen {
		return fmt.Errorf("msg_id is %d characters, over the limit of %d", len(m.MsgID), MaxMsgIDLen)
	}
	if err := ValidateTopic(m.Topic); err != nil {
		return err
	}
	if err := ValidateTag(m.Tag); err != nil {
		return err
	}
	if err := ValidateKeys(m.Keys); err != nil {
		return err
	}
	if len(m.ShardingKey) > MaxShardingKeyLen {
		return fmt.Errorf("sharding key is %d characters, over the limit of %d", len(m.ShardingKey), MaxShardingKeyLen)
	}
	if err := ValidateBody(m.Body, w.maxBody); err != nil {
		return err
	}
	return ValidateProperties(m.Properties)
}

// ErrDuplicate is matched by errors.Is for every *DuplicateError.
var ErrDuplicate = errors.New("outbox: duplicate msg_id")

// DuplicateError reports an insert of a msg_id that is already in the table. In MySQL the
// failed statement is rolled back but the transaction is not: the caller decides whether
// the duplicate means "already done" or is a bug.
type DuplicateError struct {
	// MsgID is the id the database reported as duplicate.
	MsgID string
	err   error
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("outbox: duplicate msg_id %q: %v", e.MsgID, e.err)
}

// Unwrap returns the driver's error.
func (e *DuplicateError) Unwrap() error { return e.err }

// Is makes errors.Is(err, ErrDuplicate) true.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

var duplicateEntryRE = regexp.MustCompile(`Duplicate entry '(.*)' for key '(?:[^']*\.)?uk_msg_id'`)

func asDuplicate(err error) *DuplicateError {
	var me *mysql.MySQLError
	if mysqlerr.Number(err) != mysqlerr.DuplicateEntry || !errors.As(err, &me) {
		return nil
	}
	m := duplicateEntryRE.FindStringSubmatch(me.Message)
	if m == nil {
		return nil // a duplicate on another unique key of the caller's making
	}
	return &DuplicateError{MsgID: m[1], err: err}
}

// NudgeChannel is the Redis pub/sub channel of table's relay for writers that name no
// database (see outbox/redisnudge). Relays listen on it as well as on NudgeChannelIn, the
// channel of their own database, which writers should prefer: every relay of a table of
// that name on the same Redis wakes on this one.
func NudgeChannel(table string) string { return "outbox-relay:nudge:" + table }

// maxNudgeKeys bounds the hashes one nudge carries; a nudge for more rows wakes every
// partition, which costs a probe per partition held, no more than those hashes would.
const maxNudgeKeys = 256

// NudgePayload is the message of a nudge on NudgeChannel that names its rows' partition
// hashes (PartitionHash): "keys=" and the hashes in decimal, separated by commas. Any other
// message, such as the "1" of a plain nudge or of a PUBLISH by hand, wakes every partition.
func NudgePayload(hashes []uint32) string {
	if len(hashes) == 0 || len(hashes) > maxNudgeKeys {
		return "1"
	}
	b := make([]byte, 0, 5+11*len(hashes))
	b = append(b, "keys="...)
	for i, h := range hashes {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(h), 10)
	}
	return string(b)
}

// ParseNudge returns the partition hashes a nudge's message names; ok is false for a nudge
// that names none (it wakes every partition).
func ParseNudge(payload string) (hashes []uint32, ok bool) {
	rest, found := strings.CutPrefix(payload, "keys=")
	if !found || rest == "" {
		return nil, false
	}
	for _, f := range strings.Split(rest, ",") {
		h, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return nil, false
		}
		hashes = append(hashes, uint32(h))
	}
	return hashes, true
}

// Nudge tells the relay of the writer's table, through Config.Nudger, that new rows are
// committed, so it publishes now rather than at its next poll. Call it after Commit, never
// inside the transaction. It is a hint: an error or no Nudger only delays delivery to the
// next poll.
func (w *Writer) Nudge(ctx context.Context) error {
	if w.nudger == nil {
		return nil
	}
	if err := w.nudger.Nudge(ctx, w.table); err != nil {
		return fmt.Errorf("outbox: nudge %s: %w", w.table, err)
	}
	return nil
}

// NudgeFor is Nudge naming the messages just committed (after Insert, which fills in their
// MsgID): with a KeyedNudger, a relay group of a partitioned table wakes only the partitions
// that hold them, instead of every partition each relay holds. Otherwise it is Nudge.
func (w *Writer) NudgeFor(ctx context.Context, msgs ...*Message) error {
	kn, ok := w.nudger.(KeyedNudger)
	if !ok || len(msgs) == 0 {
		return w.Nudge(ctx)
	}
	hashes := make([]uint32, len(msgs))
	for i, m := range msgs {
		hashes[i] = PartitionHash(m.ShardingKey, m.MsgID)
	}
	if err := kn.NudgeKeys(ctx, w.table, hashes); err != nil {
		return fmt.Errorf("outbox: nudge %s: %w", w.table, err)
	}
	return nil
}
