package main

import (
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

func TestBenchInProcessBroker(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	r := cli(t, "", false, "bench", "--rows", "2000", "--batch-size", "300", "--log-level=warn", "--mysql-dsn="+db.DSN)
	if r.code != exitOK {
		t.Fatalf("bench: %+v", r)
	}
	for _, want := range []string{"2000 rows of 200 bytes, batch size 300, concurrency 16, batch send true",
		"in-process test broker", "drain: 2000 rows sent in", "rows/s"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("output lacks %q:\n%s", want, r.out)
		}
	}
	if n := benchTables(t, db); n != 0 {
		t.Fatalf("%d bench tables left behind", n)
	}
}

func TestBenchGivenNameServers(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	r := cli(t, "", false, "bench", "--rows", "500", "--batch-send=false", "--concurrency", "4", "--topic", "bench_t",
		"--nameservers", broker.NameServerAddr(), "--log-level=warn", "--mysql-dsn="+db.DSN)
	if r.code != exitOK {
		t.Fatalf("bench: %+v", r)
	}
	if !strings.Contains(r.out, "batch send false") || !strings.Contains(r.out, "RocketMQ at "+broker.NameServerAddr()) {
		t.Errorf("unexpected output:\n%s", r.out)
	}
	if n := broker.Count("bench_t"); n != 501 { // the rows and the warm-up message
		t.Fatalf("broker stored %d messages, want 501", n)
	}
	if n := benchTables(t, db); n != 0 {
		t.Fatalf("%d bench tables left behind", n)
	}
}

func TestBenchUsage(t *testing.T) {
	t.Parallel()
	if r := cli(t, "", false, "bench", "--rows", "0"); r.code != exitUsage || !strings.Contains(r.errOut, "--rows") {
		t.Fatalf("bench --rows 0: %+v", r)
	}
}
