// SPDX-License-Identifier: Apache-2.0

package outboxsql

// HasPositions reports whether the table has its stored-position journal
// (schema.StoredLogTable), so that the relay can record where the broker stored each row
// it marks sent (known once the scan is prepared).
func (s *Store) HasPositions() bool { return s.positions }
