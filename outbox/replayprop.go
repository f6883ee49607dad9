// SPDX-License-Identifier: Apache-2.0

package outbox

// ReplayProperty marks a copy re-published by `outbox-relay replay` (or the dashboard's
// replay): its value is the replay run's id, a space, and the time the run started (RFC 3339,
// UTC). The copy keeps the row's identity (OUTBOX_MSG_ID, keys, tag, sharding key), so a
// consumer that kept its dedupe state skips it; the mark tells the copy apart in logs and
// traces. It is reserved: a writer's row cannot forge it.
const ReplayProperty = "OUTBOX_REPLAY"
