// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// TestMigrateNullableColumns: an adopted table whose state columns allow NULL. `migrate
// --check` reports each nullable column and exits 1; --print-sql shows the backfills and the
// online ALTER; migrate runs them online on a table with rows (no --allow-blocking), keeping
// every column's type, character set, own default, ON UPDATE and comment; a row of NULL
// status is parked dead with a reason, the other NULLs get their defaults, update_time is
// kept, and the table is up to date afterwards.
func TestMigrateNullableColumns(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	if r := cli(t, "", false, "migrate", dsn); r.code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	for _, stmt := range []string{
		"ALTER TABLE local_message MODIFY is_deleted tinyint NULL DEFAULT NULL, MODIFY status tinyint(3) unsigned NULL DEFAULT NULL," +
			" MODIFY retry_count int NULL DEFAULT NULL COMMENT 'failures so far', MODIFY next_retry_time bigint NULL," +
			" MODIFY max_retry_count int NULL DEFAULT 5, MODIFY tag varchar(200) CHARACTER SET latin1 COLLATE latin1_bin NULL DEFAULT NULL," +
			" MODIFY update_time datetime NULL DEFAULT NULL ON UPDATE CURRENT_TIMESTAMP",
		"INSERT INTO local_message (msg_id, topic, content, status, retry_count, next_retry_time, is_deleted, max_retry_count, tag, update_time) VALUES" +
			" ('null-status', 'orders', '{}', NULL, 0, 0, 0, 3, 't', '2020-01-02 03:04:05')," +
			" ('nulls', 'orders', '{}', 0, NULL, NULL, NULL, NULL, NULL, '2020-01-02 03:04:05')," +
			" ('null-updated', 'orders', '{}', 2, 0, 5, 0, 3, 't', NULL)," +
			" ('status-7', 'orders', '{}', 7, 0, 0, 0, 3, 't', NOW())",
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	types := func() string {
		var s string
		if err := db.QueryRow(`SELECT GROUP_CONCAT(CONCAT_WS(' ', COLUMN_NAME, COLUMN_TYPE, CHARACTER_SET_NAME, COLLATION_NAME, COLUMN_DEFAULT, EXTRA, COLUMN_COMMENT) ORDER BY COLUMN_NAME SEPARATOR '; ')
			FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'local_message'
			AND COLUMN_NAME IN ('status', 'retry_count', 'max_retry_count', 'tag', 'update_time')`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := types()

	r := cli(t, "", false, "migrate", dsn, "--check")
	for _, col := range []string{"is_deleted", "status", "retry_count", "next_retry_time", "max_retry_count", "tag", "update_time"} {
		if !strings.Contains(r.out, "nullable column "+col+" ") {
			t.Errorf("migrate --check does not report nullable %s", col)
		}
	}
	if !strings.Contains(r.out, "2 row(s) of unknown status") {
		t.Errorf("migrate --check does not report the rows of unknown status: %s", r.out)
	}
	if r.code != 1 {
		t.Errorf("migrate --check on nullable columns: exit %d, want 1: %s", r.code, r.out)
	}
	r = cli(t, "", false, "migrate", dsn, "--print-sql")
	if r.code != 0 || !strings.Contains(r.out, "WHERE (`status` IS NULL)") || !strings.Contains(r.out, "`retry_count` = COALESCE(`retry_count`, 0)") ||
		!strings.Contains(r.out, "MODIFY COLUMN `retry_count` int(11) NOT NULL DEFAULT 0 COMMENT 'failures so far'") || strings.Contains(r.out, "BLOCKING") {
		t.Errorf("migrate --print-sql: %+v", r)
	}
	if r := cli(t, "", false, "migrate", dsn); r.code != 0 || strings.Contains(r.out, "BLOCKING") {
		t.Fatalf("migrate of nullable columns on a table with rows: %+v", r)
	}
	if r := cli(t, "", false, "migrate", dsn, "--check"); r.code != 0 || !strings.Contains(r.out, "1 row(s) of unknown status") {
		t.Errorf("migrate --check after migrate: %+v", r)
	}
	// MariaDB's information_schema: the NULL defaults became the contract's, or stayed the column's own (5).
	want := "max_retry_count int(11) 5  ; retry_count int(11) 0  failures so far; status tinyint(3) unsigned 0  ; " +
		"tag varchar(200) latin1 latin1_bin ''  ; update_time datetime current_timestamp() on update current_timestamp() "
	if got := types(); got != want {
		t.Errorf("column definitions after migrate:\n got %s\nwant %s\n(before: %s)", got, want, before)
	}
	var got string
	if err := db.QueryRow(`SELECT GROUP_CONCAT(CONCAT_WS(',', msg_id, status, retry_count, next_retry_time > 0, is_deleted, max_retry_count, tag, update_time, COALESCE(fail_reason, '-')) ORDER BY id SEPARATOR ' | ')
		FROM local_message`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	// The row parked dead has a new update_time, as every row going dead; the others keep theirs.
	want = "null-status,3,0,1,0,3,t,"
	rest := ",status was NULL: parked dead by outbox-relay migrate; requeue to send | nulls,0,0,0,0,5,,2020-01-02 03:04:05,- | null-updated,2,0,1,0,3,t,"
	if !strings.HasPrefix(got, want) || !strings.Contains(got, rest) || strings.Contains(got, "2020-01-02 03:04:05,status") || !strings.Contains(got, ",- | status-7,7,0,0,0,3,t,") {
		t.Errorf("rows after migrate:\n got %s\nwant %s<now>%s<now>,- | status-7 untouched", got, want, rest)
	}
}

// TestStatusShowsUnknownStatuses: a NULL status no longer makes `status` fail for the whole
// table; rows of NULL or out-of-range status are shown as unknown, by value, and in --json.
func TestStatusShowsUnknownStatuses(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	if r := cli(t, "", false, "migrate", dsn); r.code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	for _, stmt := range []string{
		"ALTER TABLE local_message MODIFY status tinyint NULL DEFAULT NULL",
		"INSERT INTO local_message (msg_id, topic, content, status) VALUES ('a', 'orders', '{}', 0), ('b', 'orders', '{}', NULL), ('c', 'orders', '{}', 7)",
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	r := cli(t, "", false, "status", dsn, "--redis-addr=127.0.0.1:1")
	if r.code != 0 || !strings.Contains(r.out, "unknown status, never sent  2") || !strings.Contains(r.out, "status NULL: 1") || !strings.Contains(r.out, "status 7: 1") {
		t.Errorf("status of a table with a NULL and an unknown status: %+v", r)
	}
	r = cli(t, "", false, "status", "--json", dsn, "--redis-addr=127.0.0.1:1")
	if r.code != 0 || !strings.Contains(r.out, `"unknown": 2`) || !strings.Contains(r.out, `"value": "NULL"`) {
		t.Errorf("status --json: %+v", r)
	}
}
