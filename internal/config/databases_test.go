// SPDX-License-Identifier: Apache-2.0

package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// loadEnv loads yaml with environ as the process environment (the OUTBOX_ variables checked
// and the databases' DSN variables read), without touching the real one.
func loadEnv(t *testing.T, yaml string, environ ...string) (Config, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "outbox-relay.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return loadFrom(NewViper(), file, environ)
}

const twoDatabases = `
databases:
  - name: shop-a
    dsn: relay:pa55word@tcp(db-a:3306)/shop
    tables: [local_message, outbox_payments]
  - name: shop_b
    dsn: relay:s3cret@tcp(db-b:3306)/shop
`

func TestDatabasesList(t *testing.T) {
	t.Parallel()
	c, err := loadEnv(t, twoDatabases)
	if err != nil {
		t.Fatal(err)
	}
	want := []Database{
		{Name: "shop-a", DSN: "relay:pa55word@tcp(db-a:3306)/shop", Tables: []string{"local_message", "outbox_payments"}},
		{Name: "shop_b", DSN: "relay:s3cret@tcp(db-b:3306)/shop", Tables: []string{"local_message"}}, // the default table
	}
	if got := c.EffectiveDatabases(); !reflect.DeepEqual(got, want) {
		t.Fatalf("EffectiveDatabases = %+v\nwant %+v", got, want)
	}
	if !c.MultiDatabase() {
		t.Fatal("MultiDatabase is false with a databases list")
	}
	// The lock key names the database by server and schema, never by credentials.
	if k := c.LockKeyIn(want[0], "outbox_payments"); k != "outbox-relay:lock:db-a:3306/shop:outbox_payments" {
		t.Fatalf("LockKeyIn = %q", k)
	}
	if k := c.LockKeyIn(want[1], "local_message"); k != "outbox-relay:lock:db-b:3306/shop:local_message" {
		t.Fatalf("LockKeyIn = %q", k)
	}
	got, err := c.SelectDatabases("shop_b")
	if err != nil || len(got) != 1 || got[0].Name != "shop_b" {
		t.Fatalf("SelectDatabases(shop_b) = %+v, %v", got, err)
	}
	if _, err := c.SelectDatabases("shop-c"); err == nil || !strings.Contains(err.Error(), "configured: shop-a, shop_b") {
		t.Fatalf("SelectDatabases(shop-c): %v", err)
	}
	if all, _ := c.SelectDatabases(""); len(all) != 2 {
		t.Fatalf("SelectDatabases(\"\") = %+v", all)
	}
}

// The single-database form is one entry of the same list, named "default".
func TestSingleFormIsOneDatabase(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, "mysql:\n  dsn: u:p@tcp(h:3306)/shop\n  tables: [a, b]\n")
	want := []Database{{Name: DefaultDatabaseName, DSN: "u:p@tcp(h:3306)/shop", Tables: []string{"a", "b"}}}
	if got := c.EffectiveDatabases(); !reflect.DeepEqual(got, want) {
		t.Fatalf("EffectiveDatabases = %+v", got)
	}
	if c.MultiDatabase() {
		t.Fatal("MultiDatabase is true in the single-database form")
	}
	if c.LockKeyIn(want[0], "a") != c.LockKey("a") {
		t.Fatalf("LockKeyIn %q differs from LockKey %q", c.LockKeyIn(want[0], "a"), c.LockKey("a"))
	}
}

// A DSN may come from OUTBOX_DATABASES_<NAME>_DSN (name upper-cased, - written _), which wins
// over the file; a variable naming no configured database is an error naming it.
func TestDatabaseDSNFromTheEnvironment(t *testing.T) {
	t.Parallel()
	yaml := `
databases:
  - name: shop-a
    tables: [local_message]
  - name: shop_b
    dsn: relay:old@tcp(db-b:3306)/shop
`
	c, err := loadEnv(t, yaml, "OUTBOX_DATABASES_SHOP_A_DSN=relay:fromenv@tcp(db-a:3306)/shop",
		"OUTBOX_DATABASES_SHOP_B_DSN=relay:newer@tcp(db-b:3306)/shop", "HOME=/root")
	if err != nil {
		t.Fatal(err)
	}
	dbs := c.EffectiveDatabases()
	if dbs[0].DSN != "relay:fromenv@tcp(db-a:3306)/shop" || dbs[1].DSN != "relay:newer@tcp(db-b:3306)/shop" {
		t.Fatalf("DSNs = %q, %q", dbs[0].DSN, dbs[1].DSN)
	}

	_, err = loadEnv(t, yaml, "OUTBOX_DATABASES_SHOP_A_DSN=relay:x@tcp(db-a:3306)/shop", "OUTBOX_DATABASES_SHOP_C_DSN=relay:leak@tcp(db-c:3306)/shop")
	if err == nil || !strings.Contains(err.Error(), "OUTBOX_DATABASES_SHOP_C_DSN: names no configured database (databases: shop-a, shop_b)") {
		t.Fatalf("unknown database variable: %v", err)
	}
	if strings.Contains(err.Error(), "leak") {
		t.Fatalf("the error shows the variable's value: %v", err)
	}
	// Without a databases list, no such variable is accepted.
	_, err = loadEnv(t, "log:\n  level: info\n", "OUTBOX_DATABASES_SHOP_A_DSN=relay:x@tcp(db-a:3306)/shop")
	if err == nil || !strings.Contains(err.Error(), "OUTBOX_DATABASES_SHOP_A_DSN: names no configured database (databases: none") {
		t.Fatalf("variable without databases: %v", err)
	}
	// Missing everywhere: the error names the key and the variable.
	_, err = loadEnv(t, yaml)
	if err == nil || !strings.Contains(err.Error(), "databases[0].dsn: missing: set it here or in the environment variable OUTBOX_DATABASES_SHOP_A_DSN") {
		t.Fatalf("missing DSN: %v", err)
	}
}

// OUTBOX_DATABASES holds the list as a JSON array, as OUTBOX_ROUTES does for routes.
func TestDatabasesFromTheEnvironment(t *testing.T) {
	t.Setenv("OUTBOX_DATABASES", `[{"name":"a","dsn":"u:p@tcp(h1:3306)/s","tables":"t1,t2"},{"name":"b","dsn":"u:p@tcp(h2:3306)/s"}]`)
	c, err := Load(NewViper(), "")
	if err != nil {
		t.Fatal(err)
	}
	dbs := c.EffectiveDatabases()
	if len(dbs) != 2 || !reflect.DeepEqual(dbs[0].Tables, []string{"t1", "t2"}) || dbs[1].Label() != "h2:3306/s" {
		t.Fatalf("databases from OUTBOX_DATABASES = %+v", dbs)
	}
}

// Every problem of the databases list is reported at once, each naming its key.
func TestDatabasesErrorsNameTheirKey(t *testing.T) {
	t.Parallel()
	yaml := `
mysql:
  dsn: u:p@tcp(h:3306)/single
  tables: [x]
lock:
  key: "lock:{table}"
databases:
  - name: Shop A
    dsn: u:p@tcp(h:3306)/a
    tables: [local_message, ok_table, local_message, "bad-name"]
  - name: b
    dsn: u:p@tcp(h:3306)/
  - name: c
    dsn: "not a dsn"
  - name: d
    dsn: other:pw@tcp(H:3306)/a?parseTime=true
  - name: b
    dsn: u:p@tcp(h:3306)/e
    color: blue
  - name: f-g
    dsn: u:p@tcp(h:3306)/f
  - name: f_g
    dsn: u:p@tcp(h:3306)/g
  - name: ""
    dsn: u:p@tcp(h:3306)/h
    tables: []
  - just a string
`
	_, err := loadEnv(t, yaml)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"databases: cannot be combined with mysql.dsn, mysql.tables (the single-database form)",
		`databases[0].name: must be lower-case letters, digits, - and _`,
		`databases[0].tables[2]: duplicate table "local_message"`,
		"databases[0].tables[3]: ",
		"databases[1].dsn: names no database",
		"databases[2].dsn: invalid DSN",
		"databases[3].dsn: same database as databases[0] (h:3306/a)",
		`databases[4].name: duplicate name "b" (also databases[1])`,
		"databases[4].color: unknown key (known: name, dsn, tables)",
		`databases[6].name: "f_g" and databases[5].name share the environment variable OUTBOX_DATABASES_F_G_DSN`,
		"databases[7].name: must not be empty",
		"databases[7].tables: must list at least one table",
		"databases[8]: must be an object with name, dsn, tables",
		"lock.key: must contain {db} when several databases are relayed",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "other:pw") || strings.Contains(err.Error(), "u:p@") {
		t.Errorf("an error shows a DSN's credentials:\n%v", err)
	}
}

// config (YAML) masks the password of every database's DSN and reads back the same list.
func TestDatabasesRedacted(t *testing.T) {
	t.Parallel()
	c, err := loadEnv(t, twoDatabases, "OUTBOX_DATABASES_SHOP_B_DSN=relay:env-s3cret@tcp(db-b:3306)/shop")
	if err != nil {
		t.Fatal(err)
	}
	out := c.String()
	for _, secret := range []string{"pa55word", "s3cret"} {
		if strings.Contains(out, secret) || strings.Contains(sprintf("%#v %v %+v", c, c, c), secret) {
			t.Fatalf("the printed configuration shows %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{"relay:*****@tcp(db-a:3306)/shop", "relay:*****@tcp(db-b:3306)/shop", "name: shop-a", "- outbox_payments"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the printed configuration lacks %q:\n%s", want, out)
		}
	}
	if c.Databases[1].DSN != "relay:env-s3cret@tcp(db-b:3306)/shop" {
		t.Fatal("Redacted changed the configuration it was called on")
	}
	back, err := loadEnv(t, out)
	if err != nil {
		t.Fatalf("the printed configuration does not load: %v\n%s", err, out)
	}
	if got := back.EffectiveDatabases(); got[0].Name != "shop-a" || len(got[0].Tables) != 2 || got[1].Label() != "db-b:3306/shop" {
		t.Fatalf("read back: %+v", got)
	}
}
