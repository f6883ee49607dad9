// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Insert fills in the generated msg_id on the message it was given, for one message as for
// many, so that the caller can log it or return it to its client.
func TestInsertFillsInGeneratedMsgID(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	one := outbox.Message{Topic: "orders", Tag: "created", Body: []byte("1")}
	if err := w.Insert(ctx, tx, &one); err != nil {
		t.Fatal(err)
	}
	if one.MsgID == "" {
		t.Fatal("Insert of one message left its MsgID empty")
	}
	many := []outbox.Message{{Topic: "orders", Body: []byte("2")}, {MsgID: "explicit", Topic: "orders", Body: []byte("3")}}
	if err := w.InsertMany(ctx, tx, many); err != nil {
		t.Fatal(err)
	}
	if many[0].MsgID == "" || many[1].MsgID != "explicit" {
		t.Fatalf("InsertMany set ids %q, %q; want a generated one and explicit", many[0].MsgID, many[1].MsgID)
	}
	for _, id := range []string{one.MsgID, many[0].MsgID} {
		if n := countTx(t, tx, id); n != 1 {
			t.Fatalf("msg_id %s: %d rows in the transaction, want 1", id, n)
		}
	}
}

// A table named by a reserved word passes schema.ValidateIdent, so the writer must quote it.
func TestInsertIntoReservedWordTable(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, db.DB, "order"); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(outbox.Config{Table: "order"})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := w.Insert(ctx, tx, &outbox.Message{Topic: "orders", Body: []byte("1")}); err != nil {
		t.Fatalf("insert into table `order`: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM `order`").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows in `order`: %d (%v), want 1", n, err)
	}
}

func countTx(t *testing.T, tx *sql.Tx, msgID string) int {
	t.Helper()
	var n int
	if err := tx.QueryRow("SELECT COUNT(*) FROM local_message WHERE msg_id = ?", msgID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
