// SPDX-License-Identifier: Apache-2.0

package ops

import "github.com/outbox-relay/outbox-relay/schema"

// The SQL of the package, in one place. {T} is replaced by the table name, validated with
// schema.ValidateIdent first and quoted with schema.QuoteIdent (a table may be called order); values always go through placeholders. Statuses are the
// outbox package's: 0 pending, 1 failed (will retry), 2 sent, 3 dead.
const (
	// sqlCountByStatus reads the whole (status, next_retry_time) index, not the rows. A NULL
	// status (an adopted table's) is a group of its own, counted as unknown.
	sqlCountByStatus = "SELECT status, COUNT(*) FROM {T} GROUP BY status"

	// sqlCountUnknown counts the rows whose status is NULL or outside 0-4: three ranges of
	// the (status, next_retry_time) index, read from the index alone.
	sqlCountUnknown = "SELECT COUNT(*) FROM {T} WHERE status IS NULL OR status < 0 OR status > 4"

	// sqlCountUnsentByTopic breaks the unsent rows down; sent rows are left out so the cost
	// follows the backlog, not the history.
	sqlCountUnsentByTopic = "SELECT status, COALESCE(topic, '') tp, " + schema.NotDeletedSQL + " live, COUNT(*) FROM {T}" +
		" WHERE status IN (0, 1, 3) GROUP BY status, tp, live ORDER BY status, tp"

	// sqlDue counts the due rows. Ranges over the (status, next_retry_time) index.
	// A NULL next_retry_time is due (schema.NextRetrySQL): one more range, (status, NULL).
	sqlDue = "SELECT COUNT(*) FROM {T} WHERE status IN (0, 1) AND (next_retry_time <= ? OR next_retry_time IS NULL) AND " + schema.NotDeletedSQL

	// sqlDueHead reads when the first row of one status and next_retry_time range became due
	// (the later of its creation and its next_retry_time): one seek at the head of the
	// range in the index's (next_retry_time, id) order. See OldestDue.
	sqlDueHead = "SELECT GREATEST(UNIX_TIMESTAMP(create_time) * 1000, next_retry_time) FROM {T}" +
		" WHERE status = ? AND next_retry_time BETWEEN ? AND ? AND " + schema.NotDeletedSQL + " ORDER BY next_retry_time, id LIMIT 1"

	// sqlDueHeadNull is sqlDueHead for the rows whose next_retry_time is NULL, due since
	// their creation: the head of the range (status, NULL), in id order (ORDER BY id, not
	// "next_retry_time, id", which MariaDB 10.11 sorts: a filesort of every NULL row).
	sqlDueHeadNull = "SELECT UNIX_TIMESTAMP(create_time) * 1000 FROM {T}" +
		" WHERE status = ? AND next_retry_time IS NULL AND " + schema.NotDeletedSQL + " ORDER BY id LIMIT 1"

	// sqlDeadSelect lists dead rows; {W} is the filter (see Filter.where).
	// An adopted table's NULLs read as the contract's defaults (schema.RetryCountSQL).
	sqlDeadSelect = "SELECT id, " + sqlDeadNames + ", COALESCE(fail_reason, ''), " + schema.RetryCountSQL + ", " + schema.MaxRetrySQL + "," +
		" " + sqlTimes + ", COALESCE(msg_keys, ''), COALESCE(sharding_key, ''), COALESCE(CHAR_LENGTH(content), 0)" +
		" FROM {T} WHERE status = 3 AND " + schema.NotDeletedSQL + "{W} AND id > ? ORDER BY id LIMIT ?"

	// sqlTimes are a row's create_time and update_time in epoch seconds, NULL read as 0.
	sqlTimes = "COALESCE(UNIX_TIMESTAMP(create_time), 0), COALESCE(UNIX_TIMESTAMP(update_time), 0)"

	// sqlDeadNames are a dead row's msg_id, topic and tag, NULL read as empty (a row of NULL
	// msg_id or topic is dead for that reason).
	sqlDeadNames = "COALESCE(msg_id, ''), COALESCE(topic, ''), COALESCE(tag, '')"

	// sqlCountDead counts the dead rows a filter selects; {W} is the filter.
	sqlCountDead = "SELECT COUNT(*) FROM {T} WHERE status = 3 AND " + schema.NotDeletedSQL + "{W}"

	// sqlRequeueSelect selects one chunk of dead rows to requeue. It is a plain consistent read,
	// not a locking one: walking the primary key, a locking read would wait for every
	// application transaction holding an uncommitted row in its way.
	sqlRequeueSelect = "SELECT id, COALESCE(msg_id, '') FROM {T} WHERE status = 3 AND " + schema.NotDeletedSQL + "{W} AND id > ?" +
		" ORDER BY id LIMIT ?"

	// sqlRequeue gives dead rows a fresh start: due now, with their full retry budget. It
	// names its rows by primary key (never a status-index range that holds writers' rows) and
	// runs in READ COMMITTED (no gap locks), so it never waits for nor blocks the application.
	sqlRequeue = "UPDATE {T} FORCE INDEX (PRIMARY) SET status = 0, retry_count = 0, next_retry_time = 0, fail_reason = NULL" +
		" WHERE status = 3 AND id IN ({IDS})"

	// sqlStatusOfMsgIDs reports the state of the msg_ids asked for, to explain the ones left alone.
	sqlStatusOfMsgIDs = "SELECT msg_id, status, NOT " + schema.NotDeletedSQL + " FROM {T} WHERE msg_id IN ({IDS})"

	// sqlCutoff reads the database clock once, so that a purge has a fixed horizon and the
	// comparison with update_time (a DATETIME in the server's zone) is zone-correct.
	sqlCutoff = "SELECT DATE_FORMAT(NOW() - INTERVAL ? SECOND, '%Y-%m-%d %H:%i:%s')"

	// sqlPurgeCount counts what a purge would delete of one status (dry run): the head of that
	// status's range of the (status, next_retry_time) index, whose rows are then read for the
	// guard. The purge deletes sent rows (2) and handed ones (4, delivered by the broker:
	// docs/transactional.md), one status at a time so that each walk is one index range; a
	// handed row's next_retry_time is when it was handed (its writer sets it).
	sqlPurgeCount = "SELECT COUNT(*) FROM {T} WHERE status = ? AND next_retry_time < ? AND " + sqlPurgeAge

	// sqlPurgeSelect finds one small batch of old sent rows after a cursor, walking the sent
	// rows' range of the (status, next_retry_time) index with a plain consistent read; small
	// batches keep each transaction, its locks and its replication event short. A sent row's
	// next_retry_time is when it was sent (the relay writes it with sent_time), and is never
	// later than its sent_time on rows other writers marked sent (a row is not attempted before
	// its next_retry_time), so "next_retry_time < the horizon" holds every row to delete; the
	// rest of the condition is checked on the row. The cursor (next_retry_time, id) makes a
	// purge read each row of the range once, even the rows it keeps, written as two ranges so
	// that the index range is bounded by id too (see relay's page query).
	sqlPurgeSelect = "SELECT id, next_retry_time FROM {T}{I}" +
		" WHERE status = ? AND next_retry_time < ? AND ((next_retry_time = ? AND id > ?) OR next_retry_time > ?)" +
		" AND " + sqlPurgeAge + " ORDER BY next_retry_time, id LIMIT ?"

	// sqlPurgeAge is the purge's age condition on the row: an adopted table's NULL
	// update_time or sent_time holds no row back (its next_retry_time, when it was settled,
	// already bounds the age).
	sqlPurgeAge = "(update_time < ? OR update_time IS NULL) AND COALESCE(sent_time, 0) < ?"

	// sqlPurgeDelete deletes the batch by primary key, guarded by the same condition. A DELETE
	// that scans for its rows locks every row it examines and, unlike an UPDATE, waits for
	// rows an application transaction holds uncommitted; by primary key it touches only the
	// rows it names.
	sqlPurgeDelete = "DELETE {T} FROM {T} FORCE INDEX (PRIMARY) WHERE id IN ({IDS}) AND status = ? AND " + sqlPurgeAge
)

// The dashboard's statements (see dashboard.go).
const (
	// sqlDeadPage selects one page of matching dead rows' ids, for RequeueQuery.
	sqlDeadPage = "SELECT id, COALESCE(msg_id, '') FROM {T} WHERE status = 3 AND " + schema.NotDeletedSQL + "{W} AND id > ? ORDER BY id LIMIT ?"

	// sqlDeadBody reads one dead row's body, cut to a length, and its properties.
	sqlDeadBody = "SELECT id, " + sqlDeadNames + ", COALESCE(fail_reason, ''), COALESCE(LEFT(content, ?), ''), COALESCE(CHAR_LENGTH(content), 0)," +
		" COALESCE(properties, ''), COALESCE(msg_keys, ''), COALESCE(sharding_key, ''), " + schema.RetryCountSQL + ", " + schema.MaxRetrySQL + "," +
		" " + sqlTimes + "" +
		" FROM {T} WHERE id = ? AND status = 3 AND " + schema.NotDeletedSQL

	// sqlActivity counts the rows that reached status 1, 2 or 3 in a window, by bucket of a
	// given width. Sent and dead rows: two ranges of the (status, next_retry_time) index, read
	// from the index alone (a settled row's next_retry_time is when it was settled, epoch ms).
	// Failed rows: the failed rows' range of the same index, each row read for its
	// update_time; they are the backlog of retries, not the history. The cost follows the
	// rows settled in the window and the rows failed, not the table.
	sqlActivity = "SELECT status, FLOOR((next_retry_time DIV 1000 - ?) / ?), COUNT(*) FROM {T}{I}" +
		" WHERE status IN (2, 3) AND next_retry_time >= ? * 1000 AND next_retry_time < ? * 1000" +
		" GROUP BY 1, 2" +
		" UNION ALL SELECT 1, FLOOR((UNIX_TIMESTAMP(update_time) - ?) / ?), COUNT(*) FROM {T}{I}" +
		" WHERE status = 1 AND update_time >= FROM_UNIXTIME(?) AND update_time < FROM_UNIXTIME(?)" +
		" GROUP BY 1, 2"

	// sqlClock reads the database clock in epoch seconds, the clock of update_time.
	sqlClock = "SELECT UNIX_TIMESTAMP(NOW())"
	// sqlClockMs is the database's clock in epoch ms.
	sqlClockMs = "SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
)
