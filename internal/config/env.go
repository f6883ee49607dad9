package config

import (
	"fmt"
	"strings"
)

// EnvConfigFile is the environment variable naming the configuration file (like --config).
const EnvConfigFile = "OUTBOX_CONFIG"

// ReservedEnvPrefixes are OUTBOX_ variable prefixes that belong to the project's test, bench
// and service scripts, not to the relay: the configuration ignores them. Every other OUTBOX_
// variable must set a key, or loading fails naming it.
var ReservedEnvPrefixes = []string{"OUTBOX_TEST_", "OUTBOX_BENCH_", "OUTBOX_SERVICES_"}

// envProblems reports the OUTBOX_ variables of environ ("NAME=value" entries) that set no
// key: a typo there must not silently fall back to a default, as in the file.
func envProblems(environ []string) []problem {
	known := map[string]bool{EnvConfigFile: true}
	for _, d := range defaults {
		known[EnvName(d.key)] = true
	}
	var out []problem
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix+"_") || known[name] || reservedEnv(name) {
			continue
		}
		out = append(out, problem{name, fmt.Sprintf("unknown environment variable: no configuration key is set by it (keys: docs/configuration.md; reserved for scripts: %s)",
			strings.Join(ReservedEnvPrefixes, "*, ")+"*")})
	}
	return out
}

func reservedEnv(name string) bool {
	for _, p := range ReservedEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
