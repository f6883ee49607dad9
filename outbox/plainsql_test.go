// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/schema"
)

// TestDocumentedPlainSQLInsert runs, verbatim, the plain-SQL insert that README.md shows
// to services in other languages, inside a transaction with a business row.
func TestDocumentedPlainSQLInsert(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- plain-sql-insert -->\\s*```sql\\s*(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no ```sql block after <!-- plain-sql-insert -->")
	}
	documented := strings.TrimSpace(string(m[1]))
	if !strings.Contains(documented, schema.InsertSQL) {
		t.Fatalf("README's SQL does not contain schema.InsertSQL:\n%s", documented)
	}
	if _, err := db.Exec("CREATE TABLE orders (order_sn varchar(32) PRIMARY KEY, amount int)"); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The README block is a whole transaction: statements separated by semicolons.
	for _, stmt := range strings.Split(documented, ";") {
		stmt = strings.TrimSpace(stmt)
		if stmt == "" || strings.HasPrefix(stmt, "--") {
			continue
		}
		if strings.Contains(stmt, "?") {
			args := map[bool][]any{true: {"SN-1001", 99}, false: {"SN-1001", "orders", "created", `{"orderSn":"SN-1001"}`, "SN-1001"}}
			_, err = conn.ExecContext(context.Background(), stmt, args[strings.Contains(stmt, "INTO orders")]...)
		} else {
			_, err = conn.ExecContext(context.Background(), stmt)
		}
		if err != nil {
			t.Fatalf("documented statement %q: %v", stmt, err)
		}
	}
	if n := count(t, db.DB, "msg_id = 'SN-1001' AND status = 0 AND msg_keys = 'SN-1001'"); n != 1 {
		t.Fatalf("documented insert left %d pending rows, want 1", n)
	}
}
