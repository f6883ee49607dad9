#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks that the test servers listen on loopback only: lists the listening TCP sockets of the
# processes this checkout's servers and tests started and fails, naming each, when one listens
# on an address outside 127.0.0.0/8 and ::1 (0.0.0.0, ::, a host address).
#
#   scripts/listeners.sh                  check the servers now: every process with a pid file
#                                         under the services directory (MariaDB, Redis, the
#                                         RocketMQ name servers, brokers and proxy)
#   scripts/listeners.sh --during CMD...  run CMD and, every 3 s while it runs and once after,
#                                         check the servers and every process CMD started
#                                         (test binaries, the relays and servers they start);
#                                         exit with CMD's status, or 1 if a check failed
#
# `make test` runs the first once the servers are up and wraps `go test` in the second.
# Findings go to standard error. Settings: OUTBOX_SERVICES_DIR (default
# /tmp/outbox-relay-services), OUTBOX_SERVICES_LISTENERS_INTERVAL (seconds, default 3).
set -euo pipefail

cd "$(dirname "$0")/.."

SERVICES_DIR=${OUTBOX_SERVICES_DIR:-/tmp/outbox-relay-services}
INTERVAL=${OUTBOX_SERVICES_LISTENERS_INTERVAL:-3}

die() { printf 'listeners: %s\n' "$*" >&2; exit 2; }
have() { command -v "$1" >/dev/null 2>&1; }

# ss lists the sockets; installed from Debian's iproute2 when missing and running as root.
if ! have ss; then
	if [ "$(id -u)" = 0 ] && have apt-get; then
		printf 'listeners: installing iproute2 from Debian'"'"'s packages (ss)\n' >&2
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null
	fi
	have ss || die "ss not found and not installable here (needs root and apt-get): install iproute2"
fi

# service_pids prints the pid of every live process with a pid file under the services
# directory, with the file's path relative to it.
service_pids() {
	local f pid
	while IFS= read -r f; do
		pid=$(cat "$f" 2>/dev/null) || continue
		[[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && printf '%s %s\n' "$pid" "${f#"$SERVICES_DIR"/}"
	done < <(find "$SERVICES_DIR" -maxdepth 3 \( -name pid -o -name '*.pid' \) -type f 2>/dev/null)
	return 0
}

# descendants ROOT prints the pid of every process under ROOT (not ROOT itself).
descendants() {
	ps -e -o pid=,ppid= | awk -v root="$1" '
		{ parent[$1] = $2 }
		END {
			for (p in parent) {
				q = parent[p]
				for (n = 0; q != "" && q > 1 && n < 64; n++) {
					if (q == root) { print p " started by the command"; break }
					q = parent[q]
				}
			}
		}'
}

# offenders reads "PID WHAT" lines and prints one line per listening socket of those
# processes that is not on a loopback address.
offenders() {
	awk '
		NR == FNR { what[$1] = substr($0, length($1) + 2); next }
		{
			addr = $4
			host = addr; sub(/:[0-9]+$/, "", host); gsub(/[\[\]]/, "", host); sub(/%.*$/, "", host)
			if (host ~ /^127\./ || host == "::1" || host ~ /^::ffff:127\./) next
			line = $0
			while (match(line, /\("[^"]*",pid=[0-9]+/)) {
				entry = substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH)
				pid = entry; sub(/.*pid=/, "", pid)
				name = entry; sub(/^\("/, "", name); sub(/".*/, "", name)
				if (pid in what) printf "%s (pid %s, %s) listens on %s\n", name, pid, what[pid], addr
			}
		}' - <(ss -H -ltnp 2>/dev/null)
}

# check [ROOT]: prints the offenders among the services (and ROOT's descendants); fails if any.
check() {
	local found
	found=$({ service_pids; [ -z "${1:-}" ] || descendants "$1"; } | offenders | sort -u)
	[ -z "$found" ] && return 0
	printf '%s\n' "$found" | sed 's/^/listeners: not on loopback: /' >&2
	return 1
}

case "${1:-}" in
"")
	check
	echo "listeners: every test server listens on loopback only" >&2
	;;
--during)
	shift
	[ $# -gt 0 ] || die "usage: $0 --during CMD..."
	seen=$(mktemp)
	# The sampler runs in the background and CMD in the foreground, so that CMD gets the
	# terminal's signals (Ctrl-C) as it would without this script.
	(while :; do
		check "$$" 2>>"$seen" || true
		sleep "$INTERVAL"
	done) &
	sampler=$!
	trap 'kill "$sampler" 2>/dev/null || true; rm -f "$seen"' EXIT
	rc=0
	"$@" || rc=$?
	kill "$sampler" 2>/dev/null && wait "$sampler" 2>/dev/null || true
	check 2>>"$seen" || true
	if [ -s "$seen" ]; then
		sort -u "$seen" >&2
		echo "listeners: a test server listened on a non-loopback address (above)" >&2
		[ "$rc" -ne 0 ] || rc=1
	fi
	exit "$rc"
	;;
*)
	die "usage: $0 [--during CMD...]"
	;;
esac
