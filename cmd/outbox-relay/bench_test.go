// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// benchTables counts the bench command's tables left in db.
func benchTables(t *testing.T, db *testenv.DB) int {
	t.Helper()
	var n int
	err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.tables
		WHERE table_schema = ? AND table_name LIKE 'outbox\_bench\_%'`, db.Name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func benchBroker(t *testing.T) *rmqtest.Server {
	t.Helper()
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	return broker
}

// TestBenchConfiguredBroker: bench publishes to the configured name servers, every row and
// the warm-up message, and drops its table.
func TestBenchConfiguredBroker(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	broker := benchBroker(t)
	r := cli(t, "", false, "bench", "--rows", "2000", "--batch-size", "300", "--log-level=warn",
		"--mysql-dsn="+db.DSN, "--nameservers", broker.NameServerAddr())
	if r.code != exitOK {
		t.Fatalf("bench: %+v", r)
	}
	for _, want := range []string{"2000 rows of 200 bytes, batch size 300, concurrency 16, batch send true",
		"RocketMQ at " + broker.NameServerAddr(), "drain: 2000 rows sent in", "rows/s"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("output lacks %q:\n%s", want, r.out)
		}
	}
	if n := broker.Count("outbox_bench"); n != 2001 { // the rows and the warm-up message
		t.Fatalf("broker stored %d messages, want 2001", n)
	}
	if n := benchTables(t, db); n != 0 {
		t.Fatalf("%d bench tables left behind", n)
	}
}

func TestBenchSingleSends(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	broker := benchBroker(t)
	r := cli(t, "", false, "bench", "--rows", "500", "--batch-send=false", "--concurrency", "4", "--topic", "bench_t",
		"--nameservers", broker.NameServerAddr(), "--log-level=warn", "--mysql-dsn="+db.DSN)
	if r.code != exitOK {
		t.Fatalf("bench: %+v", r)
	}
	if !strings.Contains(r.out, "batch send false") {
		t.Errorf("unexpected output:\n%s", r.out)
	}
	if n := broker.Count("bench_t"); n != 501 {
		t.Fatalf("broker stored %d messages, want 501", n)
	}
	if n := benchTables(t, db); n != 0 {
		t.Fatalf("%d bench tables left behind", n)
	}
}

func TestBenchUsage(t *testing.T) {
	t.Parallel()
	if r := cli(t, "", false, "bench", "--rows", "0", "--mysql-dsn=u:p@tcp(127.0.0.1:1)/x"); r.code != exitUsage || !strings.Contains(r.errOut, "--rows") {
		t.Fatalf("bench --rows 0: %+v", r)
	}
	if r := cli(t, "", false, "bench", "--body-bytes", "0", "--mysql-dsn=u:p@tcp(127.0.0.1:1)/x"); r.code != exitUsage || !strings.Contains(r.errOut, "--body-bytes") {
		t.Fatalf("bench --body-bytes 0: %+v", r)
	}
}

// TestReleaseBinaryHasNoTestBroker: the in-process test broker is a development tool; the
// release binary must not link it (make bench-local runs it instead).
func TestReleaseBinaryHasNoTestBroker(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/outbox-relay/outbox-relay/cmd/outbox-relay").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.Contains(pkg, "internal/rmqtest") || strings.Contains(pkg, "internal/classicrelay") {
			t.Errorf("the release binary links %s", pkg)
		}
	}
}

// TestBenchPositions: with --positions every row's position is appended to the bench
// table's stored-position journal (the output says how many), and both tables are dropped.
func TestBenchPositions(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	broker := benchBroker(t)
	r := cli(t, "", false, "bench", "--rows", "1500", "--positions", "--topic", "bench_p",
		"--nameservers", broker.NameServerAddr(), "--log-level=warn", "--mysql-dsn="+db.DSN)
	if r.code != exitOK || !strings.Contains(r.out, "positions recorded: true") || !strings.Contains(r.out, "journal: 1500 rows' positions in ") {
		t.Fatalf("bench --positions: %+v", r)
	}
	if n := benchTables(t, db); n != 0 {
		t.Fatalf("%d bench tables left behind", n)
	}
}
