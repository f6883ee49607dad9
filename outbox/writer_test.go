// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/redisnudge"
	"github.com/outbox-relay/outbox-relay/schema"
)

func setup(t *testing.T) (*testenv.DB, *outbox.Writer) {
	t.Helper()
	db := testenv.MySQL(t)
	if err := schema.Migrate(context.Background(), db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return db, w
}

func count(t *testing.T, db *sql.DB, where string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM local_message WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestInsertCommitsWithTheBusinessRows(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ctx := context.Background()
	if _, err := db.Exec("CREATE TABLE orders (order_sn varchar(32) PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	deliverAt := time.UnixMilli(4102444800000) // 2100-01-01
	msgs := []outbox.Message{
		{Topic: "orders", Tag: "created", Keys: []string{"SN1"}, Body: []byte(`{"orderSn":"SN1"}`),
			Properties: map[string]string{"traceparent": "00-abc-def-01"}, ShardingKey: "user-7"},
		{MsgID: "explicit-2", Topic: "orders", Body: []byte("二"), DeliverAt: deliverAt, MaxRetries: 7},
		{Topic: "stock", Tag: "reduce", Body: []byte("3"), MaxRetries: outbox.NoRetries},
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders VALUES ('SN1')"); err != nil {
		t.Fatal(err)
	}
	if err := w.InsertMany(ctx, tx, msgs); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if msgs[0].MsgID == "" || msgs[2].MsgID == "" || msgs[1].MsgID != "explicit-2" {
		t.Fatalf("msg ids not set as documented: %q %q %q", msgs[0].MsgID, msgs[1].MsgID, msgs[2].MsgID)
	}

	type row struct {
		topic, tag, content, keys, shard string
		props                            sql.NullString
		status, maxRetries               int
		next                             int64
	}
	get := func(id string) row {
		var r row
		err := db.QueryRow(`SELECT topic, tag, content, msg_keys, sharding_key, properties, status, max_retry_count, next_retry_time
			FROM local_message WHERE msg_id = ?`, id).Scan(&r.topic, &r.tag, &r.content, &r.keys, &r.shard, &r.props, &r.status, &r.maxRetries, &r.next)
		if err != nil {
			t.Fatalf("row %s: %v", id, err)
		}
		return r
	}
	r0 := get(msgs[0].MsgID)
	if r0.topic != "orders" || r0.tag != "created" || r0.content != `{"orderSn":"SN1"}` || r0.keys != "SN1" ||
		r0.shard != "user-7" || r0.props.String != `{"traceparent":"00-abc-def-01"}` || r0.status != 0 || r0.maxRetries != 3 || r0.next != 0 {
		t.Errorf("first message stored as %+v", r0)
	}
	r1 := get("explicit-2")
	if r1.content != "二" || r1.next != deliverAt.UnixMilli() || r1.maxRetries != 7 || r1.props.Valid {
		t.Errorf("second message stored as %+v", r1)
	}
	if r2 := get(msgs[2].MsgID); r2.maxRetries != 0 {
		t.Errorf("NoRetries stored max_retry_count %d, want 0", r2.maxRetries)
	}
}

func TestInsertInRolledBackTransactionLeavesNoRow(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Insert(ctx, tx, &outbox.Message{MsgID: "rolled-back", Topic: "orders", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db.DB, "1=1"); n != 0 {
		t.Fatalf("%d rows after rollback, want 0", n)
	}
}

func TestInsertManyIsChunked(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	msgs := make([]outbox.Message, 2500)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "bulk", Body: []byte("b")}
	}
	if err := w.InsertNoTx(context.Background(), db.DB, msgs); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db.DB, "topic = 'bulk'"); n != 2500 {
		t.Fatalf("%d rows, want 2500", n)
	}
}

func TestDuplicateMsgIDGivesTypedError(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ctx := context.Background()
	if err := w.InsertNoTx(ctx, db.DB, []outbox.Message{{MsgID: "order-42", Topic: "orders", Body: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	err := w.InsertNoTx(ctx, db.DB, []outbox.Message{{MsgID: "other", Topic: "orders", Body: []byte("2")},
		{MsgID: "order-42", Topic: "orders", Body: []byte("3")}})
	var dup *outbox.DuplicateError
	if !errors.As(err, &dup) || !errors.Is(err, outbox.ErrDuplicate) {
		t.Fatalf("second insert = %v, want *DuplicateError", err)
	}
	if dup.MsgID != "order-42" {
		t.Fatalf("DuplicateError.MsgID = %q, want order-42", dup.MsgID)
	}
	// The multi-row statement failed whole: "other" was not written either.
	if n := count(t, db.DB, "1=1"); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
	var content string
	if err := db.QueryRow("SELECT content FROM local_message WHERE msg_id = 'order-42'").Scan(&content); err != nil || content != "1" {
		t.Fatalf("original row: %q, %v", content, err)
	}
}

func TestInvalidMessagesAreRefusedWithTheReason(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	small, err := outbox.NewWriter(outbox.Config{MaxBodyBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	ok := outbox.Message{Topic: "orders", Body: []byte("ok")}
	cases := []struct {
		name string
		w    *outbox.Writer
		msg  outbox.Message
		want string
	}{
		{"empty topic", w, outbox.Message{Body: []byte("x")}, "topic is empty"},
		{"topic characters", w, outbox.Message{Topic: "order topic", Body: []byte("x")}, `topic "order topic" has characters`},
		{"topic length", w, outbox.Message{Topic: strings.Repeat("t", 128), Body: []byte("x")}, "over RocketMQ's limit of 127"},
		{"system topic", w, outbox.Message{Topic: "%RETRY%group", Body: []byte("x")}, "reserved by the broker"},
		{"tag separator", w, outbox.Message{Topic: "t", Tag: "a||b", Body: []byte("x")}, `tag "a||b" contains "||"`},
		{"tag wildcard", w, outbox.Message{Topic: "t", Tag: "*", Body: []byte("x")}, "subscription wildcard"},
		{"oversized body", small, outbox.Message{Topic: "t", Body: []byte("12345678901")}, "body is 11 bytes, over the limit of 10"},
		{"binary body", w, outbox.Message{Topic: "t", Body: []byte{0xff, 0xfe}}, "not valid UTF-8"},
		{"key with space", w, outbox.Message{Topic: "t", Keys: []string{"a b"}, Body: []byte("x")}, `message key "a b" contains white space`},
		{"reserved property", w, outbox.Message{Topic: "t", Properties: map[string]string{"KEYS": "x"}, Body: []byte("x")}, `property "KEYS" is reserved`},
		{"long msg id", w, outbox.Message{MsgID: strings.Repeat("m", 65), Topic: "t", Body: []byte("x")}, "msg_id is 65 characters"},
	}
	for _, c := range cases {
		err := c.w.InsertNoTx(context.Background(), db.DB, []outbox.Message{ok, c.msg})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "message 1") {
			t.Errorf("%s: err = %v, want it to name message 1 and say %q", c.name, err, c.want)
		}
	}
	if n := count(t, db.DB, "1=1"); n != 0 {
		t.Fatalf("%d rows written by refused inserts, want 0", n)
	}
	if _, err := outbox.NewWriter(outbox.Config{Table: "orders; DROP TABLE x"}); err == nil || !strings.Contains(err.Error(), "Table") {
		t.Fatalf("NewWriter with a bad table name = %v, want an error naming Table", err)
	}
}

func TestNudgeReachesTheRelayChannel(t *testing.T) {
	t.Parallel()
	rdb, _ := testenv.Redis(t)
	table := "nudge_" + testenv.RandomSuffix(8)
	w, err := outbox.NewWriter(outbox.Config{Table: table, Nudger: redisnudge.New(rdb)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub := rdb.Subscribe(ctx, outbox.NudgeChannel(table))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // subscription confirmed
		t.Fatal(err)
	}
	if err := w.Nudge(ctx); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatalf("no nudge received: %v", err)
	}
	if msg.Channel != outbox.NudgeChannel(table) {
		t.Fatalf("nudge on %q", msg.Channel)
	}
}

func TestNewIDSortsByTime(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	var ids []string
	for i := 0; i < 1000; i++ {
		id := outbox.NewID()
		if len(id) != 26 || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	a := outbox.NewID()
	time.Sleep(2 * time.Millisecond) // two ids a millisecond apart, not a synchronisation
	b := outbox.NewID()
	if !(a[:10] < b[:10]) {
		t.Fatalf("later id %q does not sort after %q", b, a)
	}
	sorted := append([]string(nil), ids...)
	sort.Strings(sorted)
	if sorted[0][:10] > ids[0][:10] {
		t.Fatal("ids do not start with their time")
	}
}
