// SPDX-License-Identifier: Apache-2.0

// Package testenv gives tests real MariaDB and Redis connections, each test isolated in a
// database (MySQL) or key prefix (Redis) of its own.
//
// A server that cannot be reached skips the test on a developer machine, but fails it when
// CI=true, so a CI run can never pass by silently skipping the integration tests.
// The addresses come from OUTBOX_TEST_MYSQL_DSN and OUTBOX_TEST_REDIS_ADDR; their defaults
// are the private servers that scripts/services.sh (`make services`) starts:
// outbox:outbox@tcp(127.0.0.1:13306)/ and 127.0.0.1:16379.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// MySQLServerDSN returns the DSN of the test server without a database name.
func MySQLServerDSN() string {
	if v := os.Getenv("OUTBOX_TEST_MYSQL_DSN"); v != "" {
		return v
	}
	return "outbox:outbox@tcp(127.0.0.1:13306)/"
}

// RedisAddr returns the address of the test Redis server.
func RedisAddr() string {
	if v := os.Getenv("OUTBOX_TEST_REDIS_ADDR"); v != "" {
		return v
	}
	return "127.0.0.1:16379"
}

// Unavailable fails the test under CI=true and skips it otherwise.
func Unavailable(tb testing.TB, what string, err error) {
	tb.Helper()
	msg := fmt.Sprintf("%s unavailable: %v (run `make services` to start it)", what, err)
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}

// RandomSuffix returns n random hex characters for unique names.
func RandomSuffix(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// DB is an isolated MySQL database created for one test and dropped after it.
type DB struct {
	*sql.DB
	// Name is the database (schema) name.
	Name string
	// DSN connects to this database; give it to code under test that opens its own pool.
	DSN string
}

// MySQL creates a fresh database for the test, opens a pool on it and drops it at cleanup.
func MySQL(tb testing.TB) *DB {
	tb.Helper()
	cfg, err := mysql.ParseDSN(MySQLServerDSN())
	if err != nil {
		tb.Fatalf("parse OUTBOX_TEST_MYSQL_DSN: %v", err)
	}
	cfg.DBName = ""
	cfg.ParseTime = false
	cfg.Timeout = 3 * time.Second
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatalf("open mysql: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		admin.Close()
		Unavailable(tb, "MariaDB/MySQL at "+cfg.Addr, err)
	}
	name := "outbox_t_" + strings.ToLower(RandomSuffix(10))
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		admin.Close()
		tb.Fatalf("create database %s: %v", name, err)
	}
	cfg.DBName = name
	cfg.InterpolateParams = true
	dsn := cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatalf("open %s: %v", name, err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	tb.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			tb.Logf("drop database %s: %v", name, err)
		}
		admin.Close()
	})
	return &DB{DB: db, Name: name, DSN: dsn}
}

// Redis returns a client on the test server and a key prefix unique to this test; keys under
// the prefix are deleted at cleanup.
func Redis(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: RedisAddr(), DialTimeout: 3 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		Unavailable(tb, "Redis at "+RedisAddr(), err)
	}
	prefix := "outboxtest:" + RandomSuffix(10) + ":"
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
	})
	return rdb, prefix
}

// MySQLAdmin returns a pool on the test server for an account that may create accounts and
// grant privileges: OUTBOX_TEST_MYSQL_ADMIN_DSN (scripts/services.sh sets it to its private
// server's root over the socket), else the test account itself, which must then hold GRANT
// OPTION. Without either the test is Unavailable.
func MySQLAdmin(tb testing.TB) *sql.DB {
	tb.Helper()
	dsn := os.Getenv("OUTBOX_TEST_MYSQL_ADMIN_DSN")
	if dsn == "" {
		dsn = MySQLServerDSN()
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatalf("open the admin account: %v", err)
	}
	tb.Cleanup(func() { admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var grants []string
	rows, err := admin.QueryContext(ctx, "SHOW GRANTS")
	if err == nil {
		for rows.Next() {
			var g string
			_ = rows.Scan(&g)
			grants = append(grants, g)
		}
		rows.Close()
	}
	if err != nil || !strings.Contains(strings.ToUpper(strings.Join(grants, "\n")), "WITH GRANT OPTION") {
		Unavailable(tb, "a MySQL account that may grant privileges (OUTBOX_TEST_MYSQL_ADMIN_DSN)",
			fmt.Errorf("%v; grants %q", err, grants))
	}
	return admin
}

// Account creates a MySQL account for this test, runs stmts with {user} replaced by the
// account ('name'@'%') and {db} by db's database (e.g. "GRANT SELECT ON {db}.* TO {user}"),
// drops the account at cleanup and returns a DSN of db for it.
func (db *DB) Account(tb testing.TB, stmts ...string) string {
	tb.Helper()
	admin := MySQLAdmin(tb)
	name := "outbox_u_" + strings.ToLower(RandomSuffix(8))
	user := "'" + name + "'@'%'"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE USER "+user+" IDENTIFIED BY 'pw-"+name+"'"); err != nil {
		tb.Fatalf("create account %s: %v", user, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP USER IF EXISTS "+user); err != nil {
			tb.Logf("drop account %s: %v", user, err)
		}
	})
	for _, s := range stmts {
		s = strings.NewReplacer("{user}", user, "{db}", "`"+db.Name+"`").Replace(s)
		if _, err := admin.ExecContext(ctx, s); err != nil {
			tb.Fatalf("%s: %v", s, err)
		}
	}
	cfg, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.User, cfg.Passwd = name, "pw-"+name
	return cfg.FormatDSN()
}
