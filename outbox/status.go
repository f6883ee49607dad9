// SPDX-License-Identifier: Apache-2.0

package outbox

// Status is the delivery state of an outbox row, stored in its status column.
type Status int

// The statuses of an outbox row. A row is due when it is Pending or Failed and its
// next_retry_time has passed.
const (
	// StatusPending is a row not yet attempted.
	StatusPending Status = 0
	// StatusFailed is a row whose last attempt failed and that will be retried.
	StatusFailed Status = 1
	// StatusSent is a row the broker acknowledged.
	StatusSent Status = 2
	// StatusDead is a row that ran out of retries or can never be sent; an operator decides.
	StatusDead Status = 3
	// StatusHanded is a row committed together with a transactional half whose writer could
	// not learn whether its END_TRANSACTION landed (an SDK's one-way END): the broker delivers
	// it, the relay never sends it on its own. A check-back answers COMMIT for it, and a half
	// the broker discards makes it pending again (docs/transactional.md).
	StatusHanded Status = 4
)

func (s Status) String() string {
	switch s {
	case StatusPending:
		return "pending"
	case StatusFailed:
		return "failed"
	case StatusSent:
		return "sent"
	case StatusDead:
		return "dead"
	case StatusHanded:
		return "handed"
	}
	return "unknown"
}
