// SPDX-License-Identifier: Apache-2.0

package main

import (
	"sync"

	"github.com/outbox-relay/outbox-relay/internal/auditor"
	"github.com/outbox-relay/outbox-relay/internal/dashboard"
)

// auditPanel collects the process's broker auditors for the dashboard, which reads their
// in-memory counts (auditor.State) on each page view.
type auditPanel struct {
	mu      sync.Mutex
	entries []auditEntry
}

// auditEntry is one table's auditor, or why it has none.
type auditEntry struct {
	database, table string
	a               *auditor.Auditor
	off             string
}

func (p *auditPanel) add(e auditEntry) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.entries = append(p.entries, e)
	p.mu.Unlock()
}

// tables is the dashboard's Config.Audit.
func (p *auditPanel) tables() []dashboard.TableAudit {
	p.mu.Lock()
	entries := append([]auditEntry(nil), p.entries...)
	p.mu.Unlock()
	out := make([]dashboard.TableAudit, 0, len(entries))
	for _, e := range entries {
		if e.a != nil {
			out = append(out, dashboard.AuditOf(e.database, e.table, e.a))
		} else {
			out = append(out, dashboard.TableAudit{Database: e.database, Table: e.table, State: "off", Why: e.off})
		}
	}
	return out
}
