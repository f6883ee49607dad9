// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Two databases holding a table of the same name: the overview lists both, each with its own
// counts and lock, and the dead list, the message and requeue act on the database named.
func TestTwoDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	shopA, shopB := testenv.MySQL(t), testenv.MySQL(t)
	for _, db := range []*testenv.DB{shopA, shopB} {
		if err := schema.Migrate(ctx, db.DB, table); err != nil {
			t.Fatal(err)
		}
	}
	src := func(name string, db *testenv.DB) Source {
		return Source{Name: name, Label: "server/" + db.Name, DB: db.DB, Tables: []string{table},
			LockKey: func(t string) string { return prefix + "lock:" + name + ":" + t }}
	}
	d, err := New(rdb, Config{AdminToken: adminToken, OpenReads: true, Databases: []Source{src("shop-a", shopA), src("shop-b", shopB)}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", d)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// The same msg_id dead in both databases: only the one named may move.
	for _, db := range []*testenv.DB{shopA, shopB} {
		if _, err := db.Exec("INSERT INTO `" + table + "` (msg_id, topic, content, status, fail_reason) VALUES ('order-1', 'orders', 'x', 3, 'boom')"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := shopB.Exec("INSERT INTO `" + table + "` (msg_id, topic, content, status) VALUES ('b-sent', 'orders', 'x', 2)"); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, prefix+"lock:shop-b:"+table, "token", 0).Err(); err != nil {
		t.Fatal(err)
	}
	b := &bundle{ctx: ctx, srv: srv}

	var o Overview
	if code, body := b.do(t, "GET", "/ui/api/overview", nil, "", &o); code != 200 {
		t.Fatalf("overview: %d %s", code, body)
	}
	if len(o.Databases) != 2 || o.Databases[1].Name != "shop-b" || len(o.Tables) != 2 {
		t.Fatalf("overview databases %+v, %d tables", o.Databases, len(o.Tables))
	}
	a, bv := o.Tables[0], o.Tables[1]
	if a.Database != "shop-a" || bv.Database != "shop-b" || a.Status.Sent != 0 || bv.Status.Sent != 1 ||
		a.Lock.Held || !bv.Lock.Held || bv.Status.Database != "server/"+shopB.Name {
		t.Fatalf("per-database tables: %+v / %+v", a, bv)
	}

	// Without a database, or with an unknown one, the API refuses: two databases hold the table.
	if code, _ := b.do(t, "GET", "/ui/api/dead?table="+table, nil, "", nil); code != http.StatusNotFound {
		t.Fatalf("dead list without a database: %d", code)
	}
	if code, _ := b.do(t, "GET", "/ui/api/dead?database=shop-c&table="+table, nil, "", nil); code != http.StatusNotFound {
		t.Fatalf("dead list of an unknown database: %d", code)
	}
	var page DeadPage
	if code, body := b.do(t, "GET", "/ui/api/dead?database=shop-b&table="+table, nil, "", &page); code != 200 || page.Count != 1 || page.Database != "shop-b" {
		t.Fatalf("dead list of shop-b: %d %s", code, body)
	}
	auth := map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "application/json"}
	if code, body := b.do(t, "POST", "/ui/api/requeue", auth, `{"database":"shop-b","table":"`+table+`","msg_ids":["order-1"]}`, nil); code != 200 || !strings.Contains(body, "order-1") {
		t.Fatalf("requeue in shop-b: %d %s", code, body)
	}
	if a, b := msgStatus(t, shopA, "order-1"), msgStatus(t, shopB, "order-1"); a != 3 || b != 0 {
		t.Fatalf("after requeue in shop-b: shop-a's row has status %d (want 3, untouched), shop-b's %d (want 0)", a, b)
	}
}

// msgStatus is the status of the row msgID of table in db.
func msgStatus(t *testing.T, db *testenv.DB, msgID string) (st int) {
	t.Helper()
	if err := db.QueryRow("SELECT status FROM `"+table+"` WHERE msg_id = ?", msgID).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}
