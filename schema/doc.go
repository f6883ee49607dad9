// SPDX-License-Identifier: Apache-2.0

// Package schema owns the outbox table: its DDL (embedded in the binary), Migrate, which
// creates the table or upgrades one made with the original local_message DDL without
// touching its rows, and Check, which reports exactly what a table lacks.
//
// The table is the language-agnostic contract between services and the relay: any
// language writes a row with a plain INSERT inside its own transaction (see InsertSQL),
// and the relay reads and updates it. The DDL runs unchanged on MySQL 8.0+ and
// MariaDB 10.6+.
//
// Table names are validated with ValidateIdent before they are put into any statement;
// everything else goes through placeholders.
package schema
