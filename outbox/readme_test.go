// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// readmeMain wraps the README's Go quick-start, verbatim, into a program.
const readmeMain = `package main

import (
	"context"
	"database/sql"
	"log"
	"os"

	_ "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/redisnudge"
)

func main() {
	db, err := sql.Open("mysql", os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Args[2]})
	if err := quickStart(context.Background(), db, rdb); err != nil {
		log.Fatal(err)
	}
}

func quickStart(ctx context.Context, db *sql.DB, rdb *redis.Client) error {
%s
}
`

// TestDocumentedGoQuickStart compiles and runs, verbatim, the Go quick-start of README.md
// against a real database, and checks the row it wrote.
func TestDocumentedGoQuickStart(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- go-quick-start -->\\s*```go\\s*(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no ```go block after <!-- go-quick-start -->")
	}
	if _, err := db.Exec("CREATE TABLE orders (order_sn varchar(32) PRIMARY KEY, amount int)"); err != nil {
		t.Fatal(err)
	}
	rdb, _ := testenv.Redis(t)
	// Inside the module, so that the program builds with its go.mod; "_" keeps it out of ./...
	dir, err := os.MkdirTemp("..", "_readme_quickstart_")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(fmt.Sprintf(readmeMain, string(m[1]))), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), "go", "run", ".", db.DSN, rdb.Options().Addr)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README quick-start: %v\n%s", err, out)
	}
	if n := count(t, db.DB, "topic = 'orders' AND tag = 'created' AND msg_keys = 'SN-1001' AND status = 0"); n != 1 {
		t.Fatalf("quick-start left %d pending rows, want 1", n)
	}
}
