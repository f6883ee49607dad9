// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
)

// serverFlags are the servers every command uses.
type serverFlags struct {
	mysqlDSN  string
	redisAddr string
}

func (s *serverFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.mysqlDSN, "mysql", envOr("OUTBOX_TEST_MYSQL_DSN", "root:@tcp(127.0.0.1:3306)/"),
		"MySQL server DSN; a database outbox_bench_<random> is created there and dropped at the end")
	fs.StringVar(&s.redisAddr, "redis", envOr("OUTBOX_TEST_REDIS_ADDR", "127.0.0.1:6379"), "Redis address (locks and nudges)")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// world is one run's servers: a scratch database, Redis with a key prefix, the in-process
// broker.
type world struct {
	cfg    *mysql.Config // the scratch database, interpolateParams on
	db     *sql.DB
	admin  *sql.DB
	rdb    *redis.Client
	prefix string // Redis key prefix of this run
	broker *rmqtest.Server
}

func newWorld(ctx context.Context, s serverFlags) (*world, error) {
	cfg, err := mysql.ParseDSN(s.mysqlDSN)
	if err != nil {
		return nil, fmt.Errorf("--mysql: %w", err)
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("--mysql: %w", err)
	}
	name := "outbox_bench_" + randomHex(5)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		admin.Close()
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	w := &world{cfg: cfg, admin: admin, prefix: "outbox-bench:" + randomHex(5) + ":"}
	cfg.DBName = name
	cfg.InterpolateParams = true
	if w.db, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		w.Close()
		return nil, err
	}
	w.db.SetMaxOpenConns(64)
	w.db.SetMaxIdleConns(64)
	w.rdb = redis.NewClient(&redis.Options{Addr: s.redisAddr})
	if err := w.rdb.Ping(ctx).Err(); err != nil {
		w.Close()
		return nil, fmt.Errorf("redis at %s: %w", s.redisAddr, err)
	}
	if w.broker, err = rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}}); err != nil {
		w.Close()
		return nil, fmt.Errorf("start the in-process broker: %w", err)
	}
	return w, nil
}

// dsnVia is the scratch database's DSN through addr (a proxy) instead of the server.
func (w *world) dsnVia(addr string) string {
	c := w.cfg.Clone()
	c.Addr = addr
	return c.FormatDSN()
}

// Close drops the scratch database and the run's Redis keys and stops the broker.
func (w *world) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if w.broker != nil {
		w.broker.Close()
	}
	if w.rdb != nil {
		iter := w.rdb.Scan(ctx, 0, w.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			w.rdb.Del(ctx, iter.Val())
		}
		w.rdb.Close()
	}
	if w.db != nil {
		w.db.Close()
	}
	if _, err := w.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+w.cfg.DBName); err != nil {
		fmt.Fprintf(os.Stderr, "relaybench: drop database %s by hand: %v\n", w.cfg.DBName, err)
	}
	w.admin.Close()
}

// scratch makes the run's temporary directory and builds outbox-relay into it unless given;
// cleanup removes the directory.
func scratch(ctx context.Context, given string) (bin, dir string, cleanup func(), err error) {
	dir, err = os.MkdirTemp("", "relaybench")
	if err != nil {
		return "", "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	if given != "" {
		return given, dir, cleanup, nil
	}
	bin = filepath.Join(dir, "outbox-relay")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/outbox-relay/outbox-relay/cmd/outbox-relay")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		cleanup()
		return "", "", nil, fmt.Errorf("build outbox-relay (or pass --relay-bin): %w", err)
	}
	return bin, dir, cleanup, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// openDB opens and pings a pool on dsn.
func openDB(dsn string) (*sql.DB, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to the database: %w", err)
	}
	return db, nil
}
