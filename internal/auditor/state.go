// SPDX-License-Identifier: Apache-2.0

package auditor

import "time"

// State is what an auditor has done in this process since it started: the same counts as
// its Prometheus series, kept in memory so that the dashboard reads them without a query.
type State struct {
	// Ready is true once the table and the brokers allow the audit (Status is nil).
	Ready bool
	// Owner is true while this process runs the audit (it holds the group's partition 0).
	Owner bool
	// Checked, Missing, Repaired (RepairedOrdered of them on ordered routes) and Unknown
	// count the rows of every round, as outbox_relay_audit_* do.
	Checked, Missing, Repaired, RepairedOrdered, Unknown int64
	// Corrupt counts the journal entries that did not decode (outbox_relay_audit_corrupt_entries_total).
	Corrupt int64
	// LagSeconds is the age of the oldest sent row still to check after the last round (0
	// when caught up or not the owner).
	LagSeconds float64
	// LastRound is when the last round ended; zero before the first.
	LastRound time.Time
}

// State returns the auditor's state; Status says why it is off when it is not Ready.
func (a *Auditor) State() State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// count adds what a round found to the state.
func (a *Auditor) count(r Report) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := &a.state
	s.Checked, s.Missing, s.Unknown = s.Checked+int64(r.Checked), s.Missing+int64(r.Missing), s.Unknown+int64(r.Unknown)
	s.Repaired, s.RepairedOrdered = s.Repaired+int64(r.Repaired), s.RepairedOrdered+int64(r.RepairedOrdered)
	s.Corrupt += int64(r.Corrupt)
	s.LastRound = time.Now()
}

func (a *Auditor) setLag(seconds float64) {
	a.mu.Lock()
	a.state.LagSeconds = seconds
	a.mu.Unlock()
}

func (a *Auditor) setOwner(owner bool) {
	a.mu.Lock()
	a.state.Owner = owner
	if !owner {
		a.state.LagSeconds = 0
	}
	a.mu.Unlock()
}
