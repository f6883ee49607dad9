// SPDX-License-Identifier: Apache-2.0

package txcheck

// HoldAnswers makes every worker of r wait on gate before it answers a check, so that a test
// can fill the queue of checks deterministically. Set it before Start.
func HoldAnswers(r *Responder, gate <-chan struct{}) { r.beforeAnswer = func() { <-gate } }
