# SPDX-License-Identifier: Apache-2.0
# Sourced by scripts/services.sh and scripts/rocketmq.sh: the checkouts using the machine's
# test servers. One set of servers under $OUTBOX_SERVICES_DIR serves every checkout; each
# checkout that starts or reuses them registers itself in $OUTBOX_SERVICES_DIR/users/ (a file
# named by a hash of its path, holding the path), and `stop` stops the servers only when no
# other registered checkout remains, unless it is given --force. A registration whose
# checkout no longer exists is dropped.
# Needs USERS_DIR (the users/ directory) and log.

USERS_SELF=$(pwd -P)
users_file() { printf '%s/%s' "$USERS_DIR" "$(printf '%s' "$1" | sha256sum | cut -c1-16)"; }

# users_register records this checkout as a user of the servers.
users_register() {
	mkdir -p "$USERS_DIR"
	printf '%s\n' "$USERS_SELF" >"$(users_file "$USERS_SELF")"
}

# users_others prints the other checkouts registered (and still present), one a line.
users_others() {
	local f p
	for f in "$USERS_DIR"/*; do
		[ -f "$f" ] || continue
		p=$(cat "$f")
		[ "$p" = "$USERS_SELF" ] && continue
		if [ -d "$p" ]; then printf '%s\n' "$p"; else rm -f "$f"; fi
	done
}

# users_may_stop unregisters this checkout and says whether the servers may stop: yes when
# FORCE is set or no other checkout is registered; otherwise it names the others.
users_may_stop() {
	rm -f "$(users_file "$USERS_SELF")"
	[ -n "${FORCE:-}" ] && return 0
	local others
	others=$(users_others)
	[ -z "$others" ] && return 0
	log "not stopping the servers under ${USERS_DIR%/users}: other checkouts use them ($(printf '%s' "$others" | paste -sd, -)); stop --force stops them anyway"
	return 1
}
