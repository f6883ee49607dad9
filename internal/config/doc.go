// SPDX-License-Identifier: Apache-2.0

// Package config loads the sidecar's configuration: a YAML file, then OUTBOX_* environment
// variables, then command-line flags, each overriding the one before, on top of the defaults
// of docs/configuration.md. Load returns a typed Config that has been validated: every error
// names the offending key (for example "relay.batch_size: must be between 1 and 10000, got 0"),
// durations are parsed strictly and table names are checked as SQL identifiers once, here,
// so the rest of the binary can trust them.
//
// Secrets (the password in mysql.dsn, redis.password, rocketmq.secret_key) never leave the
// package in clear through Redacted, String or YAML, the only forms meant for logs and output.
package config
