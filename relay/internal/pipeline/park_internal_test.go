// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// The rules of parking, with a fake clock and no database or broker: which rows of an
// ordered key are held behind its unsent head, which of them are parked (made due when the
// head is), and when they follow their head. The statements that park, unpark and find
// parked rows are tested on MariaDB (relay/park_test.go, relay/weather_test.go,
// internal/outboxsql/park_test.go). One test per rule of docs/decisions.md, sections "Dropped
// connections, slow sends, held keys and the poll" (held keys are parked) and "Handovers,
// keyed batch pauses, parked rows that follow their head":
//
//	rule                                                                 test
//	a key's rows go only as the prefix before its unsent head;          TestParkChainGoesOnlyAsThePrefixBeforeItsHead
//	  the key is noted blocked for the pass's later pages
//	a later page holds the key's rows behind that head, unasked         TestParkLaterPageHoldsRowsBehindTheHeadAnEarlierPageFound
//	rows the plan left behind their head are held                       TestParkHoldsTheRowsThePlanLeftBehindTheirHead
//	held rows are parked behind a head due more than a second later     TestParkHeldRowsBehindAHeadDueMoreThanASecondLater
//	  (given its due time, named in their reason)
//	behind a head due within a second they are read again              TestParkNotBehindAHeadDueWithinASecond
//	rows written after a parked backlog name the backlog's head         TestParkRowsWrittenAfterAParkedBacklogNameItsHead
//	a head sent or dead in a pass makes its parked rows due at once     TestParkHeadSentOrDeadInAPassUnparksItsRows
//	up to 100,000 parked keys are remembered                            TestParkRemembersAtMostMaxParkedKeys
//	a head deleted, sent, dead or due at another time unparks its rows  TestParkReviewUnparksWhenTheHeadNoLongerHolds
//	  (one subtest each); a head still waiting holds them
//	the heads are looked at every second, once more per 1,000 keys      TestParkReviewEverySecondOneMorePerThousandKeys
//	and at once after a broker's recovery brought deferred rows forward TestParkReviewAtOnceAfterABrokersRecovery
//	a term first finds the keys parked before, once a term              TestParkFindOncePerTerm
//	a failed search is tried again after a minute, not every pass       TestParkFindAgainAMinuteAfterAFailedSearch
//	early unparking is safe: the rows are held and parked again         TestParkUnparkedEarlyRowsAreHeldAndParkedAgain

// parkKey is the ordered key of the tests.
var parkKey = outboxsql.OrderKey{Topic: "order-events", Key: "SN-1"}

// parkNow is the database's clock in the tests (epoch ms).
const parkNow = int64(1_800_000_000_000)

// orderedItem is the row id of the ordered key key, prepared.
func orderedItem(id int64, key string) item {
	return item{row: &outboxsql.Row{ID: id}, msg: &Message{Topic: parkKey.Topic, ShardingKey: key}, route: Route{Ordered: true}}
}

// itemIDs returns the ids of the items idx.
func itemIDs(items []item, idx []int) []int64 {
	out := make([]int64, len(idx))
	for n, i := range idx {
		out[n] = items[i].row.ID
	}
	return out
}

// newParkBook returns a book that found the keys parked before its term at clock's time.
func newParkBook(clock *fakeClock, keys map[outboxsql.OrderKey]outboxsql.HeldHead) *parkBook {
	b := &parkBook{}
	b.foundKeys(keys)
	b.looked(clock.now())
	return b
}

// wantStep fails t unless a review of b at now does want.
func wantStep(t *testing.T, b *parkBook, now time.Time, want reviewStep, what string) {
	t.Helper()
	names := map[reviewStep]string{reviewNone: "do nothing", reviewFind: "find the parked keys", reviewHeads: "look at the heads"}
	if got := b.next(now); got != want {
		t.Fatalf("%s: the review would %s, want it to %s", what, names[got], names[want])
	}
}

func newParkClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)} }

func TestParkChainGoesOnlyAsThePrefixBeforeItsHead(t *testing.T) {
	// The page holds rows 10, 12 and 13 of the key, and row 30 of another; row 11, unsent
	// and not due, holds the key (the ordered check's head).
	items := []item{orderedItem(13, "SN-1"), orderedItem(10, "SN-1"), orderedItem(12, "SN-1"), orderedItem(30, "SN-2")}
	r := &Engine{cfg: Config{DisableBatchSend: true}}
	g := r.group(items)
	for _, k := range g.chainOrder {
		slices.SortFunc(g.chains[k], func(a, b int) int { return cmp.Compare(items[a].row.ID, items[b].row.ID) })
	}
	head := outboxsql.HeldHead{ID: 11, DueMs: parkNow + time.Hour.Milliseconds()}
	blocked := blockedKeys{}
	units := r.laneUnits(nil, items, g, map[outboxsql.OrderKey]outboxsql.HeldHead{parkKey: head}, blocked)
	var got [][]int64
	for _, u := range units {
		got = append(got, itemIDs(items, u.idx))
	}
	if len(got) != 2 || !slices.Equal(got[0], []int64{10}) || !slices.Equal(got[1], []int64{30}) {
		t.Fatalf("lanes %v, want [10] (the prefix before the head 11) and [30] (a key nothing holds)", got)
	}
	if h, ok := blocked[parkKey]; !ok || h != head {
		t.Fatalf("blocked %v, want the key noted behind its head %v", blocked, head)
	}
	if _, ok := blocked[outboxsql.OrderKey{Topic: parkKey.Topic, Key: "SN-2"}]; ok {
		t.Fatal("a key nothing holds is noted blocked")
	}
	// A head below every row of the page holds them all.
	chain := []int{1, 2, 0}
	if ok, cut := sendablePrefix(items, chain, outboxsql.HeldHead{ID: 9}, true); len(ok) != 0 || !cut {
		t.Fatalf("behind a head older than the page: %v go (cut %v), want none", itemIDs(items, ok), cut)
	}
	if ok, cut := sendablePrefix(items, chain, outboxsql.HeldHead{}, false); len(ok) != 3 || cut {
		t.Fatalf("nothing holding the key: %v go (cut %v), want all three", itemIDs(items, ok), cut)
	}
}

func TestParkLaterPageHoldsRowsBehindTheHeadAnEarlierPageFound(t *testing.T) {
	head := outboxsql.HeldHead{ID: 5, DueMs: parkNow + time.Hour.Milliseconds()}
	blocked := blockedKeys{parkKey: head}
	rows := []outboxsql.Row{{ID: 7}, {ID: 8}}
	inPage := blocked.pageIDs(rows)
	ordered := Route{Ordered: true}
	msg := &Message{Topic: parkKey.Topic, ShardingKey: parkKey.Key}
	if k, h, held := blocked.holds(msg, ordered, 7, inPage); !held || k != parkKey || h != head {
		t.Fatalf("a row after the head of a blocked key: held %v behind %v, want held behind %v", held, h, head)
	}
	if _, _, held := blocked.holds(msg, ordered, 3, inPage); held {
		t.Fatal("a row older than the head is held: the ordered check decides it")
	}
	withHead := blocked.pageIDs([]outboxsql.Row{{ID: 5}, {ID: 7}})
	if _, _, held := blocked.holds(msg, ordered, 7, withHead); held {
		t.Fatal("a row held though its head is in the page: the page's plan decides it")
	}
	if _, _, held := blocked.holds(msg, Route{}, 7, inPage); held {
		t.Fatal("a row of an unordered route is held: it is no part of the key's stream")
	}
	other := &Message{Topic: parkKey.Topic, ShardingKey: "SN-2"}
	if _, _, held := blocked.holds(other, ordered, 7, inPage); held {
		t.Fatal("a row of another key is held")
	}
	if in := (blockedKeys{}).pageIDs(rows); in != nil {
		t.Fatalf("the page's ids read with no key blocked: %v", in)
	}
}

func TestParkHoldsTheRowsThePlanLeftBehindTheirHead(t *testing.T) {
	items := []item{orderedItem(4, "SN-1"), orderedItem(6, "SN-1"), orderedItem(7, "SN-1"), orderedItem(9, "SN-2"), {}}
	head := outboxsql.HeldHead{ID: 5, DueMs: parkNow + time.Hour.Milliseconds()}
	units := []unit{{idx: []int{0}, lane: true}}
	var hold heldRows
	hold.addUnscheduled(items, units, blockedKeys{})
	if hold != nil {
		t.Fatalf("rows held with no key blocked: %v", hold)
	}
	hold.addUnscheduled(items, units, blockedKeys{parkKey: head})
	hk := hold[parkKey]
	if len(hold) != 1 || hk == nil || hk.head != head || !slices.Equal(hk.ids, []int64{6, 7}) {
		t.Fatalf("held %v, want rows 6 and 7 of the key behind its head %v (not the scheduled row 4, not another key's)", hold, head)
	}
}

func TestParkHeldRowsBehindAHeadDueMoreThanASecondLater(t *testing.T) {
	b := &parkBook{}
	head := outboxsql.HeldHead{ID: 5, DueMs: parkNow + parkAfter.Milliseconds() + 1}
	var hold heldRows
	hold.add(parkKey, head, 6)
	hold.add(parkKey, head, 7)
	got := b.toPark(hold, parkNow)
	if len(got) != 1 || got[0].key != parkKey || got[0].head != head || !slices.Equal(got[0].ids, []int64{6, 7}) {
		t.Fatalf("parkings %+v, want rows 6 and 7 parked until the head %v is due, naming it", got, head)
	}
	b.remember(got[0].key, got[0].head)
	if h := b.keys[parkKey]; h != head {
		t.Fatalf("the key's head remembered is %v, want %v", h, head)
	}
}

func TestParkNotBehindAHeadDueWithinASecond(t *testing.T) {
	b := &parkBook{}
	for _, due := range []int64{parkNow - 1, parkNow, parkNow + parkAfter.Milliseconds()} {
		var hold heldRows
		hold.add(parkKey, outboxsql.HeldHead{ID: 5, DueMs: due}, 6)
		if got := b.toPark(hold, parkNow); len(got) != 0 {
			t.Fatalf("a head due %d ms from now: %+v parked, want its rows read again", due-parkNow, got)
		}
	}
}

func TestParkRowsWrittenAfterAParkedBacklogNameItsHead(t *testing.T) {
	due := parkNow + time.Hour.Milliseconds()
	b := &parkBook{}
	b.remember(parkKey, outboxsql.HeldHead{ID: 5, DueMs: due})
	// The ordered check names the nearest unsent row, 20, a parked row due with the real head.
	var hold heldRows
	hold.add(parkKey, outboxsql.HeldHead{ID: 20, DueMs: due}, 21)
	if got := b.toPark(hold, parkNow); len(got) != 1 || got[0].head != (outboxsql.HeldHead{ID: 5, DueMs: due}) {
		t.Fatalf("parkings %+v, want row 21 parked behind the backlog's head 5", got)
	}
	// A row 20 due at another time is no parked row of head 5: it is the head itself.
	hold = nil
	other := outboxsql.HeldHead{ID: 20, DueMs: due + 1000}
	hold.add(parkKey, other, 21)
	if got := b.toPark(hold, parkNow); len(got) != 1 || got[0].head != other {
		t.Fatalf("parkings %+v, want row 21 parked behind its own head %v", got, other)
	}
}

func TestParkHeadSentOrDeadInAPassUnparksItsRows(t *testing.T) {
	head := outboxsql.HeldHead{ID: 5, DueMs: parkNow + time.Hour.Milliseconds()}
	for _, c := range []struct {
		name    string
		id      int64
		kind    int
		unparks bool
	}{
		{"head sent", 5, sent, true},
		{"head dead", 5, dead, true},
		{"head retried", 5, retry, false},
		{"head deferred", 5, deferred, false},
		{"another row of the key sent", 7, sent, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &parkBook{}
			b.remember(parkKey, head)
			got := b.settled([]item{orderedItem(c.id, parkKey.Key)}, []result{{kind: c.kind}})
			if c.unparks {
				if len(got) != 1 || got[0] != (parkedKey{key: parkKey, head: head}) {
					t.Fatalf("unparked %+v, want the key's rows behind %v", got, head)
				}
				if _, known := b.keys[parkKey]; known {
					t.Fatal("the key is still remembered parked")
				}
				return
			}
			if len(got) != 0 || b.keys[parkKey] != head {
				t.Fatalf("unparked %+v (remembered %v), want the key left parked behind %v", got, b.keys, head)
			}
		})
	}
}

func TestParkRemembersAtMostMaxParkedKeys(t *testing.T) {
	b := &parkBook{}
	head := outboxsql.HeldHead{ID: 1, DueMs: parkNow + time.Hour.Milliseconds()}
	b.remember(parkKey, head)
	for i := 1; i < maxParkedKeys; i++ {
		b.remember(outboxsql.OrderKey{Topic: "t", Key: strconv.Itoa(i)}, head)
	}
	b.remember(outboxsql.OrderKey{Topic: "t", Key: "one too many"}, head)
	if len(b.keys) != maxParkedKeys {
		t.Fatalf("%d keys remembered, want at most %d", len(b.keys), maxParkedKeys)
	}
	moved := outboxsql.HeldHead{ID: 2, DueMs: head.DueMs}
	b.remember(parkKey, moved)
	if b.keys[parkKey] != moved {
		t.Fatalf("a remembered key's head is %v, want it replaced by %v", b.keys[parkKey], moved)
	}
}

func TestParkReviewUnparksWhenTheHeadNoLongerHolds(t *testing.T) {
	due := parkNow + time.Hour.Milliseconds()
	head := outboxsql.HeldHead{ID: 5, DueMs: due}
	state := func(st outbox.Status, due int64) map[int64]outboxsql.HeadState {
		return map[int64]outboxsql.HeadState{5: {Status: int(st), Due: due}}
	}
	for _, c := range []struct {
		name    string
		heads   map[int64]outboxsql.HeadState // as Store.HeadStates reads them: deleted rows absent
		unparks bool
	}{
		{"deleted (soft or hard)", map[int64]outboxsql.HeadState{}, true},
		{"sent", state(outbox.StatusSent, due), true},
		{"dead", state(outbox.StatusDead, due), true},
		{"brought due", state(outbox.StatusFailed, parkNow), true},
		{"requeued", state(outbox.StatusPending, 0), true},
		{"put off", state(outbox.StatusFailed, due+time.Hour.Milliseconds()), true},
		{"still failed, due with its rows", state(outbox.StatusFailed, due), false},
		{"still pending, due with its rows", state(outbox.StatusPending, due), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newParkBook(newParkClock(), map[outboxsql.OrderKey]outboxsql.HeldHead{parkKey: head})
			if got := b.headIDs(); !slices.Equal(got, []int64{5}) {
				t.Fatalf("heads looked at: %v, want [5]", got)
			}
			got := b.moved(c.heads)
			_, still := b.keys[parkKey]
			if c.unparks && (len(got) != 1 || got[0] != (parkedKey{key: parkKey, head: head}) || still) {
				t.Fatalf("unparked %+v (still remembered %v), want the key's rows due now", got, still)
			}
			if !c.unparks && (len(got) != 0 || !still) {
				t.Fatalf("unparked %+v (still remembered %v), want the key left parked", got, still)
			}
		})
	}
}

func TestParkReviewEverySecondOneMorePerThousandKeys(t *testing.T) {
	clock := newParkClock()
	keys := map[outboxsql.OrderKey]outboxsql.HeldHead{parkKey: {ID: 5, DueMs: parkNow}}
	b := newParkBook(clock, keys)
	clock.advance(time.Second - time.Millisecond)
	wantStep(t, b, clock.now(), reviewNone, fmt.Sprintf("%v after the last look", time.Second-time.Millisecond))
	clock.advance(time.Millisecond)
	wantStep(t, b, clock.now(), reviewHeads, "a second after the last look")
	for i := len(keys); i < 1000; i++ {
		keys[outboxsql.OrderKey{Topic: "t", Key: strconv.Itoa(i)}] = outboxsql.HeldHead{ID: int64(i), DueMs: parkNow}
	}
	b.looked(clock.now())
	clock.advance(2*time.Second - time.Millisecond)
	wantStep(t, b, clock.now(), reviewNone, fmt.Sprintf("1,000 keys, %v after the last look", 2*time.Second-time.Millisecond))
	clock.advance(time.Millisecond)
	wantStep(t, b, clock.now(), reviewHeads, "1,000 keys, two seconds after the last look")
}

func TestParkReviewAtOnceAfterABrokersRecovery(t *testing.T) {
	clock := newParkClock()
	b := newParkBook(clock, map[outboxsql.OrderKey]outboxsql.HeldHead{parkKey: {ID: 5, DueMs: parkNow}})
	b.reviewNow() // judge: a broker recovered and its deferred rows were brought forward
	wantStep(t, b, clock.now(), reviewHeads, "asked at once after a broker's recovery")
	b.looked(clock.now())
	wantStep(t, b, clock.now(), reviewNone, "the ask served, looked at again at once")
}

func TestParkFindOncePerTerm(t *testing.T) {
	clock := newParkClock()
	b := &parkBook{}
	wantStep(t, b, clock.now(), reviewFind, "a term's first review")
	b.foundKeys(map[outboxsql.OrderKey]outboxsql.HeldHead{})
	b.looked(clock.now())
	for i := 0; i < 3; i++ {
		clock.advance(time.Hour)
		wantStep(t, b, clock.now(), reviewHeads, fmt.Sprintf("review %d of the term (no second search)", i+2))
		b.looked(clock.now())
	}
	b.newTerm() // another leader may have parked rows meanwhile
	wantStep(t, b, clock.now(), reviewFind, "a new term's first review")
}

func TestParkFindAgainAMinuteAfterAFailedSearch(t *testing.T) {
	clock := newParkClock()
	b := &parkBook{}
	wantStep(t, b, clock.now(), reviewFind, "a term's first review")
	b.searchFailed(clock.now())
	clock.advance(parkFindAgain - time.Millisecond)
	wantStep(t, b, clock.now(), reviewNone, "just under a minute after a failed search")
	clock.advance(time.Millisecond)
	wantStep(t, b, clock.now(), reviewFind, "a minute after a failed search")
}

func TestParkUnparkedEarlyRowsAreHeldAndParkedAgain(t *testing.T) {
	// The head is put off after its rows were parked: the review unparks them (early) ...
	due := parkNow + time.Hour.Milliseconds()
	b := newParkBook(newParkClock(), map[outboxsql.OrderKey]outboxsql.HeldHead{parkKey: {ID: 5, DueMs: due}})
	later := outboxsql.HeldHead{ID: 5, DueMs: due + time.Hour.Milliseconds()}
	if got := b.moved(map[int64]outboxsql.HeadState{5: {Status: int(outbox.StatusFailed), Due: later.DueMs}}); len(got) != 1 {
		t.Fatalf("unparked %+v, want the key whose head was put off", got)
	}
	// ... the next page reads them; the ordered check finds the head still unsent, and they
	// are held and parked again behind it, until its new due time.
	items := []item{orderedItem(6, parkKey.Key), orderedItem(7, parkKey.Key)}
	ok, cut := sendablePrefix(items, []int{0, 1}, later, true)
	if len(ok) != 0 || !cut {
		t.Fatalf("%v go behind the unsent head, want none", itemIDs(items, ok))
	}
	var hold heldRows
	hold.addUnscheduled(items, nil, blockedKeys{parkKey: later})
	got := b.toPark(hold, parkNow)
	if len(got) != 1 || got[0].head != later || !slices.Equal(got[0].ids, []int64{6, 7}) {
		t.Fatalf("parkings %+v, want rows 6 and 7 parked again behind %v", got, later)
	}
}
