package relay

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestInflightSendsGivesUpASendOnADroppedConnection: a send that a later send of the same
// client to the same broker overtakes, answered far sooner than it has waited, is cancelled
// with errOvertaken; one of another client or broker is left alone.
func TestInflightSendsGivesUpASendOnADroppedConnection(t *testing.T) {
	var s inflightSends
	stuck, stuckSend := s.start(context.Background(), "broker-a#0", 1)
	other, otherSend := s.start(context.Background(), "broker-a#1", 1)
	// Wait out the detector's least wait: a condition of the detector, not a synchronisation.
	time.Sleep(minStuck + stuckPerMessage + 20*time.Millisecond)
	_, later := s.start(context.Background(), "broker-a#0", 1)
	s.finish(later, true)
	if !errors.Is(context.Cause(stuck), errOvertaken) {
		t.Fatalf("the overtaken send's context: cause %v, want errOvertaken", context.Cause(stuck))
	}
	if other.Err() != nil {
		t.Fatal("a send of another client was given up")
	}
	s.finish(stuckSend, false)
	s.finish(otherSend, false)
}

// TestInflightSendsKeepsSendsOfASlowBroker: a newer send that failed, or that was answered
// after a wait comparable to the older one's, gives nothing up.
func TestInflightSendsKeepsSendsOfASlowBroker(t *testing.T) {
	var s inflightSends
	old, oldSend := s.start(context.Background(), "broker-a#0", 1)
	_, failed := s.start(context.Background(), "broker-a#0", 1)
	time.Sleep(minStuck + stuckPerMessage + 20*time.Millisecond)
	s.finish(failed, false) // a timeout or an error: no sign that the connection works
	if old.Err() != nil {
		t.Fatal("a send was given up although no newer send was answered")
	}
	_, slow := s.start(context.Background(), "broker-a#0", 1)
	time.Sleep(20 * time.Millisecond) // 16 × 20 ms is more than the old send has waited
	s.finish(slow, true)
	if old.Err() != nil {
		t.Fatal("a send was given up although the newer answer was as slow")
	}
	s.finish(oldSend, true)
}
