// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// Event is one step of a message's timeline.
type Event struct {
	// At is when it happened or is due; nil when the table does not record it.
	At *time.Time `json:"at,omitempty"`
	// Step names it: written, attempts, failed, lost, due, sent, stored, audited, dead,
	// handed, deleted, audit, replay.
	Step   string `json:"step"`
	Detail string `json:"detail"`
	// Kind colours it: ok, wait, warn, bad or info.
	Kind string `json:"kind"`
}

// Marks the relay appends to the reason of an attempt it did not count (package relay).
const (
	deferredMark      = "(broker incident: attempt not counted)"
	misconfiguredMark = "(refused for the relay's configuration: attempt not counted)"
)

// lostPrefix starts the fail_reason the broker audit writes on a row the broker lost after
// acknowledging it (package auditor).
const lostPrefix = "lost by broker "

// Timeline tells a row's story from what the table keeps: when it was written, how many
// attempts failed and the last one's reason, when it is due again, when the broker
// acknowledged it or it died or was handed to the broker. The table keeps no per-attempt
// history and no audit of requeues: the timeline says so rather than guess. It is
// TimelineStored for a table without its stored-position journal.
func Timeline(m ops.Found) []Event { return TimelineStored(m, ops.StoredAt{}) }

// TimelineStored is Timeline with where the broker stored the message and when the broker
// audit found it there (the table's stored-position journal, when it has one), and, for a row
// the audit found lost and made due again, that finding.
func TimelineStored(m ops.Found, pos ops.StoredAt) []Event {
	ev := []Event{{At: at(m.CreateTime), Step: "written", Kind: "info",
		Detail: fmt.Sprintf("committed by the application: topic %s, tag %q, keys %q, sharding key %q", m.Topic, m.Tag, m.MsgKeys, m.ShardingKey)}}
	if m.RetryCount > 0 {
		ev = append(ev, Event{Step: "attempts", Kind: "warn", Detail: fmt.Sprintf("%d failed attempt%s counted of %d allowed (%d retries after the first);"+
			" the table keeps the last attempt's reason only", m.RetryCount, plural(m.RetryCount), m.MaxRetryCount+1, m.MaxRetryCount)})
	}
	if strings.HasPrefix(m.FailReason, lostPrefix) {
		ev = append(ev, lostEvent(m))
	} else if m.FailReason != "" {
		detail := "last failure: " + m.FailReason
		switch {
		case strings.HasSuffix(m.FailReason, deferredMark):
			detail += " — the broker was failing: the attempt was deferred, no retry spent"
		case strings.HasSuffix(m.FailReason, misconfiguredMark):
			detail += " — the broker refused the relay's configuration (ACL, topic type): the row waits, no retry spent"
		}
		var when *time.Time
		if st := outbox.Status(m.Status); st == outbox.StatusPending || st == outbox.StatusFailed || st == outbox.StatusDead {
			when = at(m.UpdateTime) // the last change was that failure; a sent row's is its sending
		}
		ev = append(ev, Event{At: when, Step: "failed", Kind: "warn", Detail: detail})
	}
	return append(ev, outcome(m, pos)...)
}

// lostEvent is the broker audit's finding on a row the broker lost: made due again without
// spending a retry, sent again with the same msg_id and keys.
func lostEvent(m ops.Found) Event {
	e := Event{Step: "lost", Kind: "warn", Detail: "the broker audit did not find it at the broker: " + m.FailReason +
		" — made due again (no retry spent), to be sent again with the same msg_id and keys"}
	if st := outbox.Status(m.Status); st == outbox.StatusPending || st == outbox.StatusFailed {
		e.At = at(m.UpdateTime)
	} else if st == outbox.StatusSent {
		e.Detail = "the broker audit did not find it at the broker: " + m.FailReason +
			" — made due again (no retry spent) and sent again with the same msg_id and keys, below"
	}
	return e
}

// outcome is the end of a row's timeline by its status.
func outcome(m ops.Found, pos ops.StoredAt) []Event {
	if m.Deleted && m.Status != int(outbox.StatusSent) && m.Status != int(outbox.StatusHanded) {
		return []Event{{At: at(m.UpdateTime), Step: "deleted", Kind: "info", Detail: "marked is_deleted: the relay never sends it"}}
	}
	switch outbox.Status(m.Status) {
	case outbox.StatusPending, outbox.StatusFailed:
		due := "due now: the leading relay sends it at its next poll"
		if m.NextRetryTime > 0 {
			due = "due at this time: the leading relay sends it then (a retry's backoff, a broker's deferral, or a delay the writer set)"
		}
		return []Event{{At: atMillis(m.NextRetryTime), Step: "due", Kind: "wait", Detail: due}}
	case outbox.StatusSent:
		sent := atMillis(m.SentTime)
		if sent == nil {
			sent = at(m.UpdateTime)
		}
		ev := []Event{{At: sent, Step: "sent", Kind: "ok", Detail: "the broker acknowledged it; the relay marked it sent"}, stored(m, pos)}
		if pos.AuditedTime > 0 {
			ev = append(ev, Event{At: atMillis(pos.AuditedTime), Step: "audited", Kind: "ok",
				Detail: "the broker audit found it present at the broker"})
		}
		return append(ev, audit())
	case outbox.StatusDead:
		return []Event{{At: at(m.UpdateTime), Step: "dead", Kind: "bad", Detail: "out of retries or never sendable: it waits for an operator (requeue)"}, audit()}
	case outbox.StatusHanded:
		return []Event{{At: at(m.UpdateTime), Step: "handed", Kind: "ok",
			Detail: "written with a transactional half: the broker delivers it; the relay sends it only if the broker discards the half"}}
	}
	return []Event{{Step: "unknown", Kind: "bad", Detail: fmt.Sprintf("status %d is none the relay writes: it never sends this row", m.Status)}}
}

// stored says where the broker stored a sent row's message: the position the relay recorded,
// or how to find it when none is.
func stored(m ops.Found, pos ops.StoredAt) Event {
	find := "at the broker in topic " + m.Topic + ", found there by key " + keysOrID(m)
	switch {
	case pos.BrokerName != "" && pos.QueueID != nil && pos.QueueOffset != nil:
		d := fmt.Sprintf("stored at broker %s, queue %d, offset %d", pos.BrokerName, *pos.QueueID, *pos.QueueOffset)
		if pos.CommitOffset != nil {
			d += fmt.Sprintf(" (commit log offset %d)", *pos.CommitOffset)
		}
		return Event{Step: "stored", Kind: "info", Detail: d + ", topic " + m.Topic}
	case pos.Recorded:
		return Event{Step: "stored", Kind: "info", Detail: find + " (no position recorded for this send: sent while the broker audit was off, before the table had its journal, or moments ago)"}
	}
	return Event{Step: "stored", Kind: "info", Detail: find + " (the table records no broker, queue or offset)"}
}

func audit() Event {
	return Event{Step: "audit", Kind: "info", Detail: "requeues are not recorded in the table: the relay logs each (\"dashboard: requeue\", `outbox-relay requeue`)"}
}

func keysOrID(m ops.Found) string {
	if m.MsgKeys != "" {
		return strings.Join(strings.Fields(m.MsgKeys), ", ")
	}
	return m.MsgID
}

func at(t time.Time) *time.Time {
	if t.IsZero() || t.Unix() <= 0 {
		return nil
	}
	return &t
}

func atMillis(ms int64) *time.Time {
	if ms <= 0 {
		return nil
	}
	t := time.UnixMilli(ms).UTC()
	return &t
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
