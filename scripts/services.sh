#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Brings up the MariaDB and Redis servers that the tests and the demo use, and prints the
# environment that points at them (eval-able lines, also written to bin/services.env).
#
# It never touches a server it did not start: no account, password or setting of an existing
# server is changed. Either
#   1. OUTBOX_TEST_MYSQL_DSN / OUTBOX_TEST_REDIS_ADDR name servers of yours: they are checked
#      (the MySQL account needs CREATE DATABASE: each test makes and drops its own database),
#      and used as they are; or
#   2. the script runs private servers of its own on loopback, with their data under
#      $OUTBOX_SERVICES_DIR (default /tmp/outbox-relay-services): MariaDB on 127.0.0.1:13306
#      (user outbox, password outbox, created by this script in that private data directory)
#      and Redis on 127.0.0.1:16379. Missing binaries are installed from Debian's packages
#      (mariadb-server, redis-server, redis-sentinel) when running as root with apt-get. Servers that a
#      previous run started are reused.
#
# `scripts/services.sh stop` stops the private servers, unless another checkout registered as
# their user still is (scripts/users.sh); `stop --force` stops them anyway.
set -euo pipefail

cd "$(dirname "$0")/.."

log() { printf 'services: %s\n' "$*" >&2; }
die() { printf 'services: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [ "$(id -u)" = 0 ]; }
tcp_open() { (exec 3<>"/dev/tcp/$1/$2") >/dev/null 2>&1; }

DIR=${OUTBOX_SERVICES_DIR:-/tmp/outbox-relay-services}
MYSQL_PORT=${OUTBOX_SERVICES_MYSQL_PORT:-13306}
REDIS_PORT=${OUTBOX_SERVICES_REDIS_PORT:-16379}
USERS_DIR=$DIR/users
# shellcheck source=scripts/users.sh
. scripts/users.sh
MYSQL_DSN_PRIVATE="outbox:outbox@tcp(127.0.0.1:${MYSQL_PORT})/"
REDIS_ADDR_PRIVATE="127.0.0.1:${REDIS_PORT}"

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
	local secs=$1 what=$2; shift 2
	local i
	for ((i = 0; i < secs * 4; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.25
	done
	return 1
}

APT_UPDATED=
apt_install() {
	is_root && have apt-get || return 1
	if [ -z "$APT_UPDATED" ]; then
		log "installing $* from Debian's packages"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || return 1
		APT_UPDATED=1
	fi
	# policy-rc.d keeps the packages' own init scripts from starting a system-wide server.
	DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

mariadbd_bin() {
	for b in /usr/sbin/mariadbd /usr/sbin/mysqld "$(command -v mariadbd 2>/dev/null || true)"; do
		[ -n "$b" ] && [ -x "$b" ] && { echo "$b"; return 0; }
	done
	return 1
}

# ---------------------------------------------------------------- stop
if [ "${1:-}" = stop ]; then
	[ "${2:-}" = --force ] && FORCE=1
	users_may_stop || exit 0
	for pidf in "$DIR/mariadb/mariadbd.pid" "$DIR/redis/redis.pid"; do
		if [ -f "$pidf" ] && kill "$(cat "$pidf")" 2>/dev/null; then
			log "stopped $(basename "$pidf" .pid)"
		fi
	done
	exit 0
fi

# ---------------------------------------------------------------- MariaDB / MySQL
private_mysql_ok() {
	mysql --protocol=TCP -h127.0.0.1 -P"$MYSQL_PORT" -uoutbox -poutbox -e 'SELECT 1' >/dev/null 2>&1
}

start_private_mariadb() {
	local bin
	if ! bin=$(mariadbd_bin) || ! have mariadb-install-db || ! have mysql; then
		apt_install mariadb-server mariadb-client ||
			die "MariaDB is not installed and cannot be installed here (needs root and apt-get).
  Install MariaDB 10.6+ or MySQL 8, or point the tests at a server of yours:
  export OUTBOX_TEST_MYSQL_DSN='user:password@tcp(host:3306)/'   (the account needs CREATE DATABASE)"
		bin=$(mariadbd_bin) || die "mariadbd not found after installing mariadb-server"
	fi
	local data=$DIR/mariadb
	local user_args=()
	mkdir -p "$data"
	if is_root; then
		# mariadbd refuses to run as root; its files belong to the mysql account.
		user_args=(--user=mysql)
		chmod 755 "$DIR"
		chown -R mysql:mysql "$data"
	fi
	if [ ! -d "$data/db/mysql" ]; then
		log "creating a private MariaDB data directory in $data/db"
		mariadb-install-db "${user_args[@]}" --datadir="$data/db" --auth-root-authentication-method=socket \
			--skip-test-db >"$data/install.log" 2>&1 || { cat "$data/install.log" >&2; die "mariadb-install-db failed"; }
	fi
	if ! tcp_open 127.0.0.1 "$MYSQL_PORT"; then
		# --no-defaults: the system's my.cnf belongs to the system's server, not to ours.
		nohup "$bin" --no-defaults "${user_args[@]}" --datadir="$data/db" --socket="$data/mariadbd.sock" \
			--pid-file="$data/mariadbd.pid" --bind-address=127.0.0.1 --port="$MYSQL_PORT" \
			--skip-log-bin --max-connections=600 --innodb-buffer-pool-size=512M \
			--innodb-log-file-size=256M --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
			>"$data/mariadbd.log" 2>&1 &
	fi
	wait_for 60 MariaDB mysql --no-defaults -S "$data/mariadbd.sock" -uroot -e 'SELECT 1' ||
		{ tail -20 "$data/mariadbd.log" >&2; die "the private MariaDB did not come up within 60s (log: $data/mariadbd.log)"; }
	# Our own server, our own account: root stays socket-only.
	mysql --no-defaults -S "$data/mariadbd.sock" -uroot -e "
		CREATE USER IF NOT EXISTS 'outbox'@'127.0.0.1' IDENTIFIED BY 'outbox';
		CREATE USER IF NOT EXISTS 'outbox'@'localhost' IDENTIFIED BY 'outbox';
		GRANT ALL PRIVILEGES ON *.* TO 'outbox'@'127.0.0.1';
		GRANT ALL PRIVILEGES ON *.* TO 'outbox'@'localhost';
		CREATE DATABASE IF NOT EXISTS test;"
	wait_for 30 "MariaDB over TCP" private_mysql_ok || die "the private MariaDB does not accept outbox@127.0.0.1"
}

if [ -n "${OUTBOX_TEST_MYSQL_DSN:-}" ]; then
	addr=$(printf '%s' "$OUTBOX_TEST_MYSQL_DSN" | sed -n 's/.*tcp(\([^)]*\)).*/\1/p')
	[ -n "$addr" ] || die "OUTBOX_TEST_MYSQL_DSN has no tcp(host:port) part"
	tcp_open "${addr%:*}" "${addr##*:}" || die "mysql: nothing answers at $addr (OUTBOX_TEST_MYSQL_DSN)"
	MYSQL_DSN=$OUTBOX_TEST_MYSQL_DSN
	log "mysql: using your server at $addr (OUTBOX_TEST_MYSQL_DSN); nothing on it is changed"
elif have mysql && private_mysql_ok; then
	MYSQL_DSN=$MYSQL_DSN_PRIVATE
	log "mysql: reusing the private MariaDB at 127.0.0.1:$MYSQL_PORT"
else
	start_private_mariadb
	MYSQL_DSN=$MYSQL_DSN_PRIVATE
	log "mysql: started a private MariaDB at 127.0.0.1:$MYSQL_PORT (data in $DIR/mariadb)"
fi

# ---------------------------------------------------------------- Redis
redis_ping() { [ "$(redis-cli -h "$1" -p "$2" ping 2>/dev/null)" = PONG ]; }

start_private_redis() {
	if ! have redis-server || ! have redis-cli; then
		apt_install redis-server redis-tools ||
			die "Redis is not installed and cannot be installed here (needs root and apt-get).
  Install Redis 6+, or point the tests at a server of yours: export OUTBOX_TEST_REDIS_ADDR=host:6379"
	fi
	local data=$DIR/redis
	mkdir -p "$data"
	# redis-server --daemonize exits 0 even when the port is taken: the ping below checks.
	redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$data" \
		--pidfile "$data/redis.pid" --logfile "$data/redis.log" --save "" --appendonly yes >/dev/null
	wait_for 30 Redis redis_ping 127.0.0.1 "$REDIS_PORT" ||
		die "the private Redis did not come up within 30s (log: $data/redis.log)"
}

if [ -n "${OUTBOX_TEST_REDIS_ADDR:-}" ]; then
	h=${OUTBOX_TEST_REDIS_ADDR%:*} p=${OUTBOX_TEST_REDIS_ADDR##*:}
	tcp_open "$h" "$p" || die "redis: nothing answers at $OUTBOX_TEST_REDIS_ADDR (OUTBOX_TEST_REDIS_ADDR)"
	REDIS_ADDR=$OUTBOX_TEST_REDIS_ADDR
	log "redis: using your server at $REDIS_ADDR (OUTBOX_TEST_REDIS_ADDR); tests use keys under their own prefixes"
elif have redis-cli && redis_ping 127.0.0.1 "$REDIS_PORT"; then
	REDIS_ADDR=$REDIS_ADDR_PRIVATE
	log "redis: reusing the private Redis at $REDIS_ADDR"
else
	start_private_redis
	REDIS_ADDR=$REDIS_ADDR_PRIVATE
	log "redis: started a private Redis at $REDIS_ADDR (data in $DIR/redis)"
fi

# The Sentinel and Redlock tests (internal/redisconn) start redis-server and redis-sentinel
# processes of their own on free ports; Debian ships redis-sentinel as a package of its own.
if ! have redis-sentinel; then
	apt_install redis-sentinel ||
		log "redis-sentinel is not installed and cannot be installed here: the Sentinel tests will skip (fail under CI=true)"
fi

# Tests of the documented grants create accounts, which the outbox account may not do (it
# has no GRANT OPTION). On our own server, root over its socket can, for a test running as
# the OS root (unix_socket authentication): OUTBOX_TEST_MYSQL_ADMIN_DSN names that account.
ADMIN_DSN=${OUTBOX_TEST_MYSQL_ADMIN_DSN:-}
if [ -z "$ADMIN_DSN" ] && [ "$MYSQL_DSN" = "$MYSQL_DSN_PRIVATE" ] && is_root && [ -S "$DIR/mariadb/mariadbd.sock" ]; then
	ADMIN_DSN="root@unix($DIR/mariadb/mariadbd.sock)/"
fi

users_register
mkdir -p bin
{
	printf "OUTBOX_TEST_MYSQL_DSN='%s'\n" "$MYSQL_DSN"
	[ -z "$ADMIN_DSN" ] || printf "OUTBOX_TEST_MYSQL_ADMIN_DSN='%s'\n" "$ADMIN_DSN"
	printf "OUTBOX_TEST_REDIS_ADDR='%s'\n" "$REDIS_ADDR"
} | tee bin/services.env
