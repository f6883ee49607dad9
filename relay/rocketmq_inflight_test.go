package relay

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestInflightSendsGivesUpASendOnADroppedConnection: a send to a broker that later sends to
// the same broker overtake, answered far sooner than it has waited, is cancelled with
// errConnectionLost; one they do not overtake, or of another broker, is left alone.
func TestInflightSendsGivesUpASendOnADroppedConnection(t *testing.T) {
	var s inflightSends
	stuck, stuckSend := s.start(context.Background(), "broker-a", 1)
	other, otherSend := s.start(context.Background(), "broker-b", 1)
	// Wait out minStuck: a condition of the detector, not a synchronisation.
	time.Sleep(minStuck + stuckPerMessage + 20*time.Millisecond)
	_, later := s.start(context.Background(), "broker-a", 1)
	s.finish(later, true)
	if !errors.Is(context.Cause(stuck), errConnectionLost) {
		t.Fatalf("the overtaken send's context: cause %v, want errConnectionLost", context.Cause(stuck))
	}
	if other.Err() != nil {
		t.Fatal("a send to another broker was given up")
	}
	s.finish(stuckSend, false)
	s.finish(otherSend, false)
}

// TestInflightSendsKeepsSendsOfASlowBroker: when nothing newer is answered (a slow broker
// answers in order, or not at all), and when a newer answer took about as long, no send is
// given up.
func TestInflightSendsKeepsSendsOfASlowBroker(t *testing.T) {
	var s inflightSends
	old, oldSend := s.start(context.Background(), "broker-a", 1)
	_, failed := s.start(context.Background(), "broker-a", 1)
	time.Sleep(minStuck + stuckPerMessage + 20*time.Millisecond)
	s.finish(failed, false) // a timeout or an error: no sign that the broker answers
	if old.Err() != nil {
		t.Fatal("a send was given up although no newer send was answered")
	}
	_, slow := s.start(context.Background(), "broker-a", 1)
	time.Sleep(30 * time.Millisecond) // 8 × 30 ms is more than the old send has waited
	s.finish(slow, true)              // answered, but after a wait comparable to the old send's
	if old.Err() != nil {
		t.Fatal("a send was given up although the newer answer was as slow")
	}
	s.finish(oldSend, true)
}
