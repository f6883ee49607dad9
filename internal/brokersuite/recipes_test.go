// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// recipe is one of docs/sql-recipes.md's programs in examples/sql-recipes.
type recipe struct {
	lang    string // subdirectory of examples/sql-recipes
	file    string
	heading string // the doc section whose code block is the file's recipe region
	command func(deps string) (cmd []string, env []string, installed string)
}

var recipes = []recipe{
	{lang: "java", file: "OrderOutbox.java", heading: "## Java (JDBC)",
		command: func(deps string) ([]string, []string, string) {
			return []string{"java", "-cp", filepath.Join(deps, "java", "*"), "OrderOutbox.java"}, nil, filepath.Join(deps, "java", ".complete")
		}},
	{lang: "python", file: "order_outbox.py", heading: "## Python (PyMySQL)",
		command: func(deps string) ([]string, []string, string) {
			d := pythonDeps(deps)
			return []string{"python3", "order_outbox.py"}, []string{"PYTHONPATH=" + d}, filepath.Join(d, "pymysql")
		}},
	{lang: "node", file: "order_outbox.js", heading: "## Node.js (mysql2)",
		command: func(deps string) ([]string, []string, string) {
			d := filepath.Join(deps, "node", "node_modules")
			return []string{"node", "order_outbox.js"}, []string{"NODE_PATH=" + d}, filepath.Join(d, "mysql2")
		}},
}

var recipesDir = filepath.Join("..", "..", "examples", "sql-recipes")

// pythonDeps is where install.sh puts the Python recipes' packages: a directory named by the
// hash of their requirements.txt.
func pythonDeps(deps string) string {
	b, err := os.ReadFile(filepath.Join(recipesDir, "python", "requirements.txt"))
	if err != nil {
		return filepath.Join(deps, "python-unknown")
	}
	sum := sha256.Sum256(b)
	return filepath.Join(deps, "python-"+hex.EncodeToString(sum[:])[:12])
}

// TestSQLRecipes runs docs/sql-recipes.md's Java, Python and Node programs: each writes
// orders with their outbox rows in one transaction, a third of them rolled back on purpose;
// the relay delivers exactly the committed ones to Apache RocketMQ, as written.
func TestSQLRecipes(t *testing.T) {
	deps := filepath.Join(cmp.Or(os.Getenv("OUTBOX_SERVICES_DIR"), "/tmp/outbox-relay-services"), "sql-recipes")
	for _, r := range recipes {
		t.Run(r.lang, func(t *testing.T) {
			t.Parallel()
			argv, extraEnv, installed := r.command(deps)
			if _, err := os.Stat(installed); err != nil {
				missing(t, r.lang+" driver (make sql-recipes-deps)", err)
			}
			if _, err := exec.LookPath(argv[0]); err != nil {
				missing(t, argv[0], err)
			}
			b := &target{name: "rocketmq", nameServer: testenv.RocketMQ(t), brokerAddr: testenv.RocketMQBroker(), real: true}
			e := newEnv(t, b)
			topic := b.topic(t, "recipe_"+r.lang)
			if _, err := e.db.Exec("CREATE TABLE orders (order_no varchar(32) PRIMARY KEY, amount decimal(10,2) NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			cfg, err := mysql.ParseDSN(e.db.DSN)
			if err != nil {
				t.Fatal(err)
			}
			host, port, _ := strings.Cut(cfg.Addr, ":")
			const orders, rollbackEvery = 30, 3
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = filepath.Join(recipesDir, r.lang)
			cmd.Env = append(os.Environ(), extraEnv...)
			cmd.Env = append(cmd.Env,
				"RECIPE_MYSQL_HOST="+host, "RECIPE_MYSQL_PORT="+port, "RECIPE_MYSQL_USER="+cfg.User,
				"RECIPE_MYSQL_PASSWORD="+cfg.Passwd, "RECIPE_MYSQL_DATABASE="+cfg.DBName, "RECIPE_TOPIC="+topic,
				"RECIPE_ORDER_PREFIX="+r.lang+"-", fmt.Sprintf("RECIPE_ORDERS=%d", orders), fmt.Sprintf("RECIPE_ROLLBACK_EVERY=%d", rollbackEvery))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
			}
			var committed []string
			for i := range orders {
				if i%rollbackEvery != rollbackEvery-1 {
					committed = append(committed, fmt.Sprintf("%s-%d", r.lang, i))
				}
			}
			slices.Sort(committed)
			if got := e.strings(t, "SELECT order_no FROM orders ORDER BY order_no"); !slices.Equal(got, committed) {
				t.Fatalf("orders table holds %v, want the committed %v", got, committed)
			}
			if got := e.strings(t, "SELECT msg_keys FROM local_message ORDER BY msg_keys"); !slices.Equal(got, committed) {
				t.Fatalf("outbox rows for %v, want the committed orders %v", got, committed)
			}

			in := b.consume(t, topic)
			e.startRelay(t)
			testenv.Eventually(t, 60*time.Second, "every outbox row sent", func() bool { return e.count(t, "status = 2") == len(committed) })
			var delivered []string
			for id, m := range in.wait(t, len(committed), 60*time.Second) {
				var body struct{ OrderNo, Amount string }
				if err := json.Unmarshal(m.Body, &body); err != nil {
					t.Errorf("%s: body %q is not the recipe's JSON: %v", id, m.Body, err)
				}
				if body.OrderNo != m.GetKeys() || m.GetTags() != "created" || !strings.HasSuffix(body.Amount, ".50") {
					t.Errorf("%s: keys %q, tag %q, body %s; want the order number as key, tag created (the event), the order's JSON", id, m.GetKeys(), m.GetTags(), m.Body)
				}
				delivered = append(delivered, m.GetKeys())
			}
			slices.Sort(delivered)
			if !slices.Equal(delivered, committed) {
				t.Errorf("delivered %v, want exactly the committed %v", delivered, committed)
			}
		})
	}
}

// TestSQLRecipesDocIsTheCode: each code block of docs/sql-recipes.md for Java, Python and Node
// is the recipe region of the program TestSQLRecipes (or, for the consumers,
// TestConsumerRecipesShareSQLGuardsTable, and for transactional messages,
// TestJavaTransactionalRecipe) runs, so the doc cannot drift.
func TestSQLRecipesDocIsTheCode(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "sql-recipes.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append(append(slices.Clone(recipes), consumerRecipes...), txRecipes...) {
		src, err := os.ReadFile(filepath.Join(recipesDir, r.lang, r.file))
		if err != nil {
			t.Fatal(err)
		}
		region, err := recipeRegion(string(src))
		if err != nil {
			t.Fatalf("%s: %v", r.file, err)
		}
		block, err := docBlock(string(doc), r.heading)
		if err != nil {
			t.Fatalf("docs/sql-recipes.md: %v", err)
		}
		if block != region {
			t.Errorf("docs/sql-recipes.md %q block differs from examples/sql-recipes/%s/%s's recipe region:\n--- doc\n%s\n--- file\n%s",
				r.heading, r.lang, r.file, block, region)
		}
	}
}

// recipeRegion returns the lines between the "recipe:start" and "recipe:end" marker lines,
// with their common indentation removed.
func recipeRegion(src string) (string, error) {
	lines := strings.Split(src, "\n")
	start, end := -1, -1
	for i, l := range lines {
		switch {
		case strings.HasSuffix(l, "recipe:start"):
			start = i
		case strings.HasSuffix(l, "recipe:end"):
			end = i
		}
	}
	if start < 0 || end < start {
		return "", errors.New("no recipe:start ... recipe:end marker lines")
	}
	lines = lines[start+1 : end]
	indent := -1
	for _, l := range lines {
		if n := len(l) - len(strings.TrimLeft(l, " ")); strings.TrimSpace(l) != "" && (indent < 0 || n < indent) {
			indent = n
		}
	}
	for j, l := range lines {
		lines[j] = l[min(indent, len(l)):]
	}
	return strings.Join(lines, "\n"), nil
}

var fence = regexp.MustCompile("(?s)\n```[a-z]*\n(.*?)\n```")

// docBlock returns the first fenced code block after the heading line.
func docBlock(doc, heading string) (string, error) {
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		return "", fmt.Errorf("no heading %q", heading)
	}
	m := fence.FindStringSubmatch(doc[i+len(heading)+1:])
	if m == nil {
		return "", fmt.Errorf("no code block after %q", heading)
	}
	return m[1], nil
}

// strings returns the first column of query's rows.
func (e *env) strings(t *testing.T, query string) []string {
	t.Helper()
	rs, err := e.db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var s string
		if err := rs.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// missing fails the test under CI=true and skips it otherwise.
func missing(t *testing.T, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s unavailable: %v", what, err)
	}
	t.Skipf("%s unavailable: %v", what, err)
}
