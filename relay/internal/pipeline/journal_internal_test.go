// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/relay/message"
)

// The appender's queue is bounded: while nothing is appended (the appender not running, or
// its appends slow), a write-back's positions past journalMaxRows pending are dropped and
// counted, and adding never blocks the write-back.
func TestJournalQueueIsBounded(t *testing.T) {
	j, err := storedlog.Open(nil, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	a := newAppender(j, zerolog.Nop(), nil, time.Second)
	const per = 500
	ps := make([]storedlog.Pos, per)
	for i := range ps {
		ps[i] = storedlog.Pos{ID: int64(i + 1), Broker: "b", CommitOffset: -1}
	}
	for n := 0; n < journalMaxRows/per+3; n++ {
		a.add(int64(n), ps)
	}
	if a.rows != journalMaxRows || a.dropped != 3*per {
		t.Fatalf("%d rows pending, %d dropped; want %d and %d", a.rows, a.dropped, journalMaxRows, 3*per)
	}
}

// Only positions the journal can hold are recorded: a broker name of 1 to MaxBrokerName
// bytes, queue and offset in range. An offset msg id that is not one records the position
// without its commit log offset.
func TestStoredPosKeepsWhatTheJournalHolds(t *testing.T) {
	long := string(make([]byte, storedlog.MaxBrokerName))
	for _, c := range []struct {
		in *message.Stored
		ok bool
		cp int64
	}{
		{nil, false, 0},
		{&message.Stored{Broker: "broker-a", QueueID: 3, Offset: 42, OffsetMsgID: "C0A8000100002A9F000000000000ABCD"}, true, 0xABCD},
		{&message.Stored{Broker: long, OffsetMsgID: "20010DB800000000000000000000000100002A9F00000000000000FF"}, true, 255},
		{&message.Stored{Broker: "broker-a", QueueID: 1, Offset: 2, OffsetMsgID: "not hex"}, true, -1},
		{&message.Stored{Broker: long + "b", QueueID: 1, Offset: 2}, false, 0},
		{&message.Stored{Broker: "", QueueID: 1, Offset: 2}, false, 0},
		{&message.Stored{Broker: "broker-a", QueueID: -1, Offset: 2}, false, 0},
		{&message.Stored{Broker: "broker-a", QueueID: 1, Offset: -2}, false, 0},
	} {
		p, ok := storedPos(7, c.in)
		if ok != c.ok || (ok && (p.CommitOffset != c.cp || p.Broker != c.in.Broker || p.QueueID != c.in.QueueID || p.Offset != c.in.Offset)) {
			t.Errorf("storedPos(%+v) = %+v, %v", c.in, p, ok)
			continue
		}
		if ok {
			if _, err := storedlog.Encode([]storedlog.Pos{p}); err != nil {
				t.Errorf("storedPos(%+v) = %+v, which Encode refuses: %v", c.in, p, err)
			}
		}
	}
}
