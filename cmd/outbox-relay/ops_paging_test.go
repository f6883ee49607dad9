package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// dead list over several tables pages with a cursor naming the table: 5 dead rows in ta, 3 in
// tb, --limit 5: page 2 shows tb's 3 rows (they were hidden when --after-id applied to every
// table and the limit stopped at the first table).
func TestDeadListPagesOverSeveralTables(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	if r := cli(t, "", false, "migrate", dsn, "--tables=ta,tb"); r.code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	for tb, n := range map[string]int{"ta": 5, "tb": 3} {
		for i := 0; i < n; i++ {
			if _, err := db.Exec("INSERT INTO "+tb+" (msg_id, topic, content, status, fail_reason) VALUES (?, 'orders', 'x', 3, 'boom')", fmt.Sprintf("%s-%d", tb, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	msgIDs := regexp.MustCompile(`(?m)^t[ab]\s+\d+\s+(t[ab]-\d)\s`)
	r := cli(t, "", false, "dead", "list", dsn, "--tables=ta,tb", "--limit=5")
	m := regexp.MustCompile(`more: next page with --after (\S+)`).FindStringSubmatch(r.out)
	if r.code != 0 || len(msgIDs.FindAllString(r.out, -1)) != 5 || m == nil || m[1] != "ta:5" {
		t.Fatalf("page 1:\n%s", r.out)
	}
	r = cli(t, "", false, "dead", "list", dsn, "--tables=ta,tb", "--limit=5", "--after="+m[1])
	var page2 []string
	for _, g := range msgIDs.FindAllStringSubmatch(r.out, -1) {
		page2 = append(page2, g[1])
	}
	if r.code != 0 || strings.Join(page2, ",") != "tb-0,tb-1,tb-2" || strings.Contains(r.out, "more:") {
		t.Fatalf("page 2 = %v:\n%s", page2, r.out)
	}
	if r := cli(t, "", false, "dead", "list", dsn, "--tables=ta,tb", "--after-id=2"); r.code != exitUsage || !strings.Contains(r.errOut, "--after TABLE:ID") {
		t.Fatalf("--after-id with several tables: %+v", r)
	}
	if r := cli(t, "", false, "dead", "list", dsn, "--tables=ta,tb", "--after=tc:1"); r.code != exitUsage || !strings.Contains(r.errOut, "tc") {
		t.Fatalf("--after on an unconfigured table: %+v", r)
	}
	// One table: --after-id still pages it.
	r = cli(t, "", false, "dead", "list", dsn, "--table=ta", "--after-id=3")
	if r.code != 0 || len(msgIDs.FindAllString(r.out, -1)) != 2 {
		t.Fatalf("--after-id on one table:\n%+v", r)
	}
}
