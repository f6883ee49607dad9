// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/ops"
)

// TestTimelineByStatus: each status ends the story its own way, from the columns alone, and
// an attempt the relay did not count is told apart from one that cost a retry.
func TestTimelineByStatus(t *testing.T) {
	t.Parallel()
	created := time.Unix(1_800_000_000, 0).UTC()
	base := ops.Found{MsgID: "m", Topic: "orders", CreateTime: created, UpdateTime: created.Add(time.Minute), MaxRetryCount: 3}
	cases := []struct {
		name  string
		edit  func(*ops.Found)
		steps string
		want  string // in the last step's detail
	}{
		{"pending, never tried", func(f *ops.Found) {}, "written due", "due now"},
		{"failed, counted", func(f *ops.Found) {
			f.Status, f.RetryCount, f.FailReason, f.NextRetryTime = 1, 2, "busy", 1_800_000_100_000
		},
			"written attempts failed due", "due at this time"},
		{"deferred by an incident", func(f *ops.Found) { f.Status, f.FailReason = 1, "refused "+deferredMark }, "written failed due", ""},
		{"sent", func(f *ops.Found) { f.Status, f.SentTime = 2, 1_800_000_090_000 }, "written sent stored audit", "requeues are not recorded"},
		{"dead", func(f *ops.Found) { f.Status, f.RetryCount, f.FailReason = 3, 4, "too large" }, "written attempts failed dead audit", "requeues"},
		{"handed", func(f *ops.Found) { f.Status = 4 }, "written handed", "the broker delivers it"},
		{"deleted", func(f *ops.Found) { f.Deleted = true }, "written deleted", "never sends"},
		{"unknown status", func(f *ops.Found) { f.Status = 7 }, "written unknown", "status 7"},
	}
	for _, c := range cases {
		f := base
		c.edit(&f)
		ev := Timeline(f)
		var steps []string
		for _, e := range ev {
			steps = append(steps, e.Step)
		}
		if strings.Join(steps, " ") != c.steps || !strings.Contains(ev[len(ev)-1].Detail, c.want) {
			t.Errorf("%s: %v, last %q", c.name, steps, ev[len(ev)-1].Detail)
		}
		if c.name == "sent" && (ev[1].At == nil || ev[1].At.UnixMilli() != f.SentTime) {
			t.Errorf("sent at %v, want sent_time", ev[1].At)
		}
		if c.name == "deferred by an incident" && !strings.Contains(ev[1].Detail, "no retry spent") {
			t.Errorf("a deferred attempt reads %q", ev[1].Detail)
		}
	}
}
