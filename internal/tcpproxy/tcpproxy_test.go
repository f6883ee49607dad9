// SPDX-License-Identifier: Apache-2.0

package tcpproxy

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// TestCountsAndFreezes: queries through the proxy are counted one each; a frozen proxy
// holds a query (its deadline passes) without closing the connection, and a thawed one
// forwards again.
func TestCountsAndFreezes(t *testing.T) {
	db := testenv.MySQL(t)
	cfg, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cfg.Addr = p.Addr()
	via, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer via.Close()
	via.SetMaxOpenConns(1)
	if err := via.Ping(); err != nil {
		t.Fatal(err)
	}
	before := p.Commands()
	for i := 0; i < 10; i++ {
		var one int
		if err := via.QueryRow("SELECT 1").Scan(&one); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Commands() - before; got != 10 {
		t.Fatalf("counted %d commands for 10 queries", got)
	}

	p.Freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	var one int
	err = via.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	cancel()
	if err == nil {
		t.Fatal("a query went through a frozen proxy")
	}
	p.Thaw()
	testenv.Eventually(t, 10*time.Second, "queries through the thawed proxy", func() bool {
		return via.QueryRow("SELECT 1").Scan(&one) == nil
	})
}
