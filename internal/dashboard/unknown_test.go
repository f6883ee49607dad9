// SPDX-License-Identifier: Apache-2.0

package dashboard

import "testing"

// TestOverviewCountsUnknownStatuses: rows whose status is NULL or outside 0-4 are counted
// in the overview (the page shows them on the table's card), not left out of every count.
func TestOverviewCountsUnknownStatuses(t *testing.T) {
	t.Parallel()
	b := setup(t, adminToken)
	b.seed(t, table, 2, 0, 0, "orders", "", "x")
	for _, stmt := range []string{
		"ALTER TABLE `" + table + "` MODIFY status tinyint NULL DEFAULT NULL",
		"INSERT INTO `" + table + "` (msg_id, topic, content, status) VALUES ('odd-9', 'orders', 'x', 9), ('odd-null', 'orders', 'x', NULL)",
	} {
		if _, err := b.db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	var o Overview
	if code, raw := b.do(t, "GET", "/ui/api/overview", nil, "", &o); code != 200 || len(o.Tables) == 0 {
		t.Fatalf("overview: %d %s", code, raw)
	}
	if st := o.Tables[0].Status; st.Unknown != 2 || st.Pending != 2 {
		t.Errorf("overview of a table with rows of status 9 and NULL: %+v; want unknown 2, pending 2", st)
	}
}
