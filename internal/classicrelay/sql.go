// SPDX-License-Identifier: Apache-2.0

package classicrelay

import "strings"

// queries are the seed's statements on one table (validated by New).
type queries struct {
	table     string
	scan      string
	markSent  string
	markRetry string
}

func newQueries(table string) queries {
	return queries{
		table: table,
		scan: "SELECT id, msg_id, topic, tag, content, retry_count, max_retry_count, next_retry_time FROM " + table +
			" WHERE is_deleted = 0 AND (status = 0 OR status = 1) AND next_retry_time < ?",
		markSent:  "UPDATE " + table + " SET status = 2 WHERE id = ?",
		markRetry: "UPDATE " + table + " SET status = 1, retry_count = ?, next_retry_time = ?, fail_reason = ? WHERE id = ?",
	}
}

// listByIDs is MyBatis-Plus listByIds, reduced to the columns the seed reads from it.
func (q queries) listByIDs(n int) string {
	return "SELECT id, retry_count FROM " + q.table + " WHERE id IN (?" + strings.Repeat(", ?", n-1) + ")"
}
