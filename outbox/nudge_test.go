// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/outbox-relay/outbox-relay/outbox"
)

func TestNudgePayloadRoundTrip(t *testing.T) {
	hashes := []uint32{0, 5, 4294967295}
	got, ok := outbox.ParseNudge(outbox.NudgePayload(hashes))
	if !ok || fmt.Sprint(got) != fmt.Sprint(hashes) {
		t.Fatalf("ParseNudge(NudgePayload(%v)) = %v, %v", hashes, got, ok)
	}
	for _, payload := range []string{"1", "", "keys=", "keys=x", "keys=1,", "keys=4294967296"} {
		if _, ok := outbox.ParseNudge(payload); ok {
			t.Errorf("ParseNudge(%q) names partitions; want a nudge of every partition", payload)
		}
	}
	if p := outbox.NudgePayload(make([]uint32, 257)); p != "1" {
		t.Errorf("a nudge of 257 rows = %q, want a plain one", p)
	}
}

// keyed records the nudges of a KeyedNudger.
type keyed struct{ plain, named [][]uint32 }

func (k *keyed) Nudge(context.Context, string) error { k.plain = append(k.plain, nil); return nil }
func (k *keyed) NudgeKeys(_ context.Context, _ string, h []uint32) error {
	k.named = append(k.named, h)
	return nil
}

// NudgeFor names the messages' partition hashes to a KeyedNudger (the sharding key's, else
// the msg_id's), and falls back to a plain nudge otherwise.
func TestNudgeForNamesThePartitionHashes(t *testing.T) {
	k := &keyed{}
	w, err := outbox.NewWriter(outbox.Config{Nudger: k})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []*outbox.Message{{MsgID: "m1", ShardingKey: "order-7"}, {MsgID: "m2"}}
	if err := w.NudgeFor(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	want := []uint32{crc32.ChecksumIEEE([]byte("order-7")), crc32.ChecksumIEEE([]byte("m2"))}
	if len(k.named) != 1 || fmt.Sprint(k.named[0]) != fmt.Sprint(want) || len(k.plain) != 0 {
		t.Fatalf("NudgeFor sent named %v and %d plain nudges; want one naming %v", k.named, len(k.plain), want)
	}
	plainOnly := 0
	w, err = outbox.NewWriter(outbox.Config{Nudger: outbox.NudgeFunc(func(context.Context, string) error { plainOnly++; return nil })})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.NudgeFor(context.Background(), msgs...); err != nil || plainOnly != 1 {
		t.Fatalf("NudgeFor with a plain Nudger: %v, %d nudges", err, plainOnly)
	}
}
