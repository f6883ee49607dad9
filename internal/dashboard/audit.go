// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"net/http"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/auditor"
)

// TableAudit is the broker audit of one table as this process runs it (package auditor),
// read from the auditor's own counts: no query per page view.
type TableAudit struct {
	Database string `json:"database"`
	Table    string `json:"table"`
	// State is "on" (this process audits the table), "standby" (another process holds the
	// table's partition 0 and audits it), "starting" or "off".
	State string `json:"state"`
	// Why says why the audit is off: disabled by configuration, no stored-position journal, brokers
	// that cannot be asked.
	Why string `json:"why,omitempty"`
	// Checked, Missing, Repaired (RepairedOrdered of them of ordered routes) and Unknown count
	// the rows since this process started, as the outbox_relay_audit_* series do.
	Checked         int64 `json:"checked"`
	Missing         int64 `json:"missing"`
	Repaired        int64 `json:"repaired"`
	RepairedOrdered int64 `json:"repaired_ordered"`
	Unknown         int64 `json:"unknown"`
	// LagSeconds is the age of the oldest sent row still to check (0: caught up).
	LagSeconds float64 `json:"lag_seconds"`
	// LastRound is when the last round ended; nil before the first.
	LastRound *time.Time `json:"last_round,omitempty"`
}

// AuditAnswer is the answer of GET /ui/api/audit.
type AuditAnswer struct {
	Tables []TableAudit `json:"tables"`
	// Known is false when the process serving the page runs no relay (no Audit given).
	Known bool `json:"known"`
}

// handleAudit answers GET /ui/api/audit: each table's broker audit, from Config.Audit.
func (d *Dashboard) handleAudit(w http.ResponseWriter, _ *http.Request) {
	ans := AuditAnswer{Tables: []TableAudit{}}
	if d.cfg.Audit != nil {
		ans.Known = true
		if t := d.cfg.Audit(); t != nil {
			ans.Tables = t
		}
	}
	writeJSON(w, http.StatusOK, ans)
}

// AuditOf is the panel's view of a's audit of database's table: its state and why it is
// off (auditor.Status), its in-memory counts (auditor.State).
func AuditOf(database, table string, a *auditor.Auditor) TableAudit {
	s := a.State()
	t := TableAudit{Database: database, Table: table, Checked: s.Checked, Missing: s.Missing, Repaired: s.Repaired,
		RepairedOrdered: s.RepairedOrdered, Unknown: s.Unknown, LagSeconds: s.LagSeconds}
	if !s.LastRound.IsZero() {
		last := s.LastRound.UTC()
		t.LastRound = &last
	}
	switch err := a.Status(); {
	case err != nil:
		t.State, t.Why = "off", err.Error()
	case !s.Ready:
		t.State = "starting"
	case s.Owner:
		t.State = "on"
	default:
		t.State = "standby"
	}
	return t
}
