// SPDX-License-Identifier: Apache-2.0

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
// key: a typo there must not silently fall back to a default, as in the file. Kubernetes'
// service-link variables of a Service named outbox* pass (serviceLink). A database's DSN
// variable (DatabaseEnvName) counts only when it names one of dbs.
func envProblems(environ []string, dbs []Database) []problem {
	known := map[string]bool{EnvConfigFile: true}
	for _, d := range defaults {
		known[EnvName(d.key)] = true
	}
	names := make([]string, 0, len(dbs))
	for _, db := range dbs {
		if db.Name != "" {
			known[DatabaseEnvName(db.Name)] = true
			names = append(names, db.Name)
		}
	}
	var out []problem
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix+"_") || known[name] || reservedEnv(name) || serviceLink(name, value) {
			continue
		}
		if strings.HasPrefix(name, EnvPrefix+"_DATABASES_") && strings.HasSuffix(name, "_DSN") {
			configured := "none: databases is not set"
			if len(names) > 0 {
				configured = strings.Join(names, ", ")
			}
			out = append(out, problem{name, fmt.Sprintf("names no configured database (databases: %s); the name is upper-cased with - written _", configured)})
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
