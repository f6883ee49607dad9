// SPDX-License-Identifier: Apache-2.0

package txcheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// docs/transactional.md lists exactly the responder's metrics, with their types and labels,
// and every reason an answer can carry.
func TestTransactionalDocMatches(t *testing.T) {
	b, err := os.ReadFile("../../docs/transactional.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "db")
	m.Observe("g", Rollback, ReasonSent, 1)
	m.Recovered("g")
	m.Dropped("queue_full")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(outbox_relay_transaction_\\w+)` \\| (\\w+) \\| ([\\w, ]+) \\|")
	documented := map[string][]string{}
	for _, r := range row.FindAllStringSubmatch(doc, -1) {
		labels := strings.Split(r[3], ", ")
		slices.Sort(labels)
		documented[r[1]] = append([]string{strings.ToLower(r[2])}, labels...)
	}
	if len(documented) != len(mfs) {
		t.Errorf("docs/transactional.md lists %d metrics, the responder exports %d", len(documented), len(mfs))
	}
	for _, mf := range mfs {
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		want := append([]string{strings.ToLower(mf.GetType().String())}, labels...)
		if got := documented[mf.GetName()]; !slices.Equal(got, want) {
			t.Errorf("docs/transactional.md: %s documented as %v, exported as %v", mf.GetName(), got, want)
		}
	}
	for _, r := range []string{ReasonNoMsgID, ReasonUnknownTable, ReasonOpen, ReasonDatabase, ReasonRelayDelivers,
		ReasonSent, ReasonDead, ReasonRolledBack, ReasonSDKWait, ReasonFenced, ReasonUnknownStatus, ReasonHanded, ReasonHandedNoRow,
		ReasonHandedYoung, ReasonForged, ReasonMismatch} {
		if !strings.Contains(doc, "| `"+r+"` |") {
			t.Errorf("docs/transactional.md's decision table has no row for reason %s", r)
		}
	}
}

// Every test docs/transactional.md names (its failure tables) exists in the repository.
func TestTransactionalDocTestsExist(t *testing.T) {
	b, err := os.ReadFile("../../docs/transactional.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	fn := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fn.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`(Test\\w+)`").FindAllStringSubmatch(string(b), -1)
	if len(named) == 0 {
		t.Fatal("docs/transactional.md names no test")
	}
	for _, m := range named {
		if !defined[m[1]] {
			t.Errorf("docs/transactional.md names %s, which no test file defines", m[1])
		}
	}
}
