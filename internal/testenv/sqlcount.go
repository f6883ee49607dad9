// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// Counts is what a counted pool sent to the server, by kind of statement.
type Counts struct {
	// Reads are SELECTs (a read of the database clock included) outside the catalog.
	Reads int64
	// Writes are INSERT, UPDATE, DELETE and REPLACE statements.
	Writes int64
	// Catalog are reads of information_schema (a start's look at the table).
	Catalog int64
	// Other are the rest: transaction control, SET, DDL, prepares.
	Other int64
}

// StatementCounter counts the statements a pool opened by CountedDB sends, and keeps the
// text of each when Keep is set.
type StatementCounter struct {
	mu     sync.Mutex
	counts Counts
	keep   bool
	sent   []string
}

// Counts returns the counts so far.
func (c *StatementCounter) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts
}

// Keep starts keeping each statement's text (Statements) and forgets the counts so far.
func (c *StatementCounter) Keep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keep, c.counts, c.sent = true, Counts{}, nil
}

// Statements returns the texts kept since Keep, in the order sent.
func (c *StatementCounter) Statements() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.sent...)
}

func (c *StatementCounter) add(query string) {
	kind := StatementKind(query)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch kind {
	case "read":
		c.counts.Reads++
	case "write":
		c.counts.Writes++
	case "catalog":
		c.counts.Catalog++
	default:
		c.counts.Other++
	}
	if c.keep {
		c.sent = append(c.sent, query)
	}
}

// StatementKind classifies a statement by its first keyword: "read", "write", "catalog"
// (a read of information_schema) or "other".
func StatementKind(query string) string {
	q := strings.TrimLeft(query, " \t\r\n(")
	word, _, _ := strings.Cut(q, " ")
	switch strings.ToUpper(strings.TrimSpace(word)) {
	case "SELECT", "WITH", "SHOW":
		if strings.Contains(strings.ToLower(q), "information_schema") {
			return "catalog"
		}
		return "read"
	case "INSERT", "UPDATE", "DELETE", "REPLACE":
		return "write"
	}
	return "other"
}

// CountedDB opens a pool on dsn through go-sql-driver/mysql's own connector, wrapped so
// that every statement it sends is counted; every call goes on to the real server. The pool
// is closed at cleanup.
func CountedDB(tb testing.TB, dsn string) (*sql.DB, *StatementCounter) {
	tb.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		tb.Fatalf("parse %s: %v", dsn, err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		tb.Fatalf("connector: %v", err)
	}
	c := &StatementCounter{}
	db := sql.OpenDB(countingConnector{Connector: conn, c: c})
	tb.Cleanup(func() { db.Close() })
	return db, c
}

type countingConnector struct {
	driver.Connector
	c *StatementCounter
}

func (k countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := k.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: k.c}, nil
}

// countingConn forwards to the driver's connection, counting each statement it runs. A
// statement the driver skips (driver.ErrSkip: database/sql prepares it instead) is counted
// where it then runs.
type countingConn struct {
	driver.Conn
	c *StatementCounter
}

var errNotImplemented = errors.New("testenv: the driver's connection lacks this method")

func (k *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := k.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	rows, err := q.QueryContext(ctx, query, args)
	if !errors.Is(err, driver.ErrSkip) {
		k.c.add(query)
	}
	return rows, err
}

func (k *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := k.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	res, err := e.ExecContext(ctx, query, args)
	if !errors.Is(err, driver.ErrSkip) {
		k.c.add(query)
	}
	return res, err
}

func (k *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	p, ok := k.Conn.(driver.ConnPrepareContext)
	if !ok {
		return nil, errNotImplemented
	}
	k.c.add("PREPARE " + query)
	st, err := p.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &countingStmt{Stmt: st, conn: k, query: query}, nil
}

func (k *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b, ok := k.Conn.(driver.ConnBeginTx)
	if !ok {
		return nil, errNotImplemented
	}
	k.c.add("START TRANSACTION")
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countingTx{Tx: tx, c: k.c}, nil
}

func (k *countingConn) Ping(ctx context.Context) error {
	if p, ok := k.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (k *countingConn) ResetSession(ctx context.Context) error {
	if r, ok := k.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (k *countingConn) IsValid() bool {
	v, ok := k.Conn.(driver.Validator)
	return !ok || v.IsValid()
}

func (k *countingConn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := k.Conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type countingTx struct {
	driver.Tx
	c *StatementCounter
}

func (t countingTx) Commit() error {
	t.c.add("COMMIT")
	return t.Tx.Commit()
}

func (t countingTx) Rollback() error {
	t.c.add("ROLLBACK")
	return t.Tx.Rollback()
}

// countingStmt counts each run of a prepared statement.
type countingStmt struct {
	driver.Stmt
	conn  *countingConn
	query string
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	e, ok := s.Stmt.(driver.StmtExecContext)
	if !ok {
		return nil, errNotImplemented
	}
	s.conn.c.add(s.query)
	return e.ExecContext(ctx, args)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := s.Stmt.(driver.StmtQueryContext)
	if !ok {
		return nil, errNotImplemented
	}
	s.conn.c.add(s.query)
	return q.QueryContext(ctx, args)
}

func (s *countingStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return s.conn.CheckNamedValue(nv)
}
