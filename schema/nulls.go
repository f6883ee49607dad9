// SPDX-License-Identifier: Apache-2.0

package schema

// An adopted table may declare contract columns nullable (Check reports them, and Plan makes
// them NOT NULL). Until then every statement of the relay and of the operator commands reads
// a NULL as below (docs/decisions.md, "NULLs in an adopted table"): nothing is lost, nothing
// is sent twice, nothing is ignored without being counted.
//   - retry_count NULL is 0 failures: the row is read, and guarded on write-back, as 0.
//   - max_retry_count NULL is the contract's default, 3.
//   - next_retry_time NULL is due now (as 0, due since its creation).
//   - is_deleted NULL is not deleted: only a non-zero value keeps a row from being sent.
//   - status NULL (like any value outside 0-4) is unknown: never sent, never purged, counted
//     and reported as unknown.
const (
	// RetryCountSQL is a row's retry_count, NULL read as 0.
	RetryCountSQL = "COALESCE(retry_count, 0)"
	// MaxRetrySQL is a row's max_retry_count, NULL read as the contract's default.
	MaxRetrySQL = "COALESCE(max_retry_count, 3)"
	// NotDeletedSQL holds for a row that is not soft-deleted, is_deleted NULL included.
	NotDeletedSQL = "COALESCE(is_deleted, 0) = 0"
	// NextRetrySQL is a row's next_retry_time, NULL read as 0 (due since its creation).
	NextRetrySQL = "COALESCE(next_retry_time, 0)"
)
