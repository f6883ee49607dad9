// SPDX-License-Identifier: Apache-2.0

package relay

import "time"

// SetMetricsClock sets the clock of m's activity minutes, for tests; call it before m records
// anything.
func SetMetricsClock(m *Metrics, now func() time.Time) { m.SetClock(now) }
