// SPDX-License-Identifier: Apache-2.0

package charttest

import (
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// `helm lint` finds nothing to warn about, in the classic and the standalone form. Lint renders
// for Kubernetes 1.20, where the chart refuses the native sidecar by design (TestBadValuesAreRefused;
// `helm lint --kube-version 1.31` lints the defaults).
func TestHelmLint(t *testing.T) {
	for _, vals := range []map[string]any{{"nativeSidecar": false}, {"mode": "standalone"}} {
		l := lint.All(chartDir, vals, "shop", false)
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint %v: %v", vals, m)
			} else {
				t.Logf("helm lint %v: %v", vals, m)
			}
		}
	}
}
