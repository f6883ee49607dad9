// SPDX-License-Identifier: Apache-2.0

package dashboard

import "testing"

// The Host check accepts localhost, IP literals and the configured names, with or without a
// port, and refuses every other name (a DNS-rebinding page's own).
func TestHostCheck(t *testing.T) {
	t.Parallel()
	d := &Dashboard{cfg: Config{Hosts: []string{"relay.internal", "outbox.example.com."}}}
	for host, want := range map[string]bool{
		"localhost:9464": true, "LOCALHOST": true, "127.0.0.1:9464": true, "[::1]:9464": true, "10.1.2.3": true,
		"relay.internal:9464": true, "Relay.Internal": true, "outbox.example.com": true, "outbox.example.com.:80": true,
		"": false, "attacker.example:9464": false, "relay.internal.attacker.example": false, "localhost.attacker.example": false,
	} {
		if got := d.hostOK(host); got != want {
			t.Errorf("hostOK(%q) = %v, want %v", host, got, want)
		}
	}
}
