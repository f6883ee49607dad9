#!/usr/bin/env bash
# Brings up the MariaDB (or MySQL) and Redis servers that the tests and the demo use, and
# prints one line per service. Idempotent: servers that already answer are reused.
#
# In order, for each service:
#   1. reuse it when it answers (OUTBOX_TEST_MYSQL_DSN / OUTBOX_TEST_REDIS_ADDR, or the
#      defaults 127.0.0.1:3306 with root and no password, and 127.0.0.1:6379);
#   2. as root on Debian/Ubuntu: install mariadb-server / redis-server with apt-get and
#      start them in the background (no init system needed);
#   3. with a Docker engine: docker compose up -d mysql redis (docker-compose.yml);
#   4. otherwise fail, saying what is missing and how to provide it.
set -euo pipefail

cd "$(dirname "$0")/.."

log() { printf '%s\n' "$*"; }
die() { printf 'services: %s\n' "$*" >&2; exit 1; }

is_root() { [ "$(id -u)" = 0 ]; }
have() { command -v "$1" >/dev/null 2>&1; }

# tcp_open HOST PORT: true when something accepts connections there.
tcp_open() { (exec 3<>"/dev/tcp/$1/$2") >/dev/null 2>&1; }

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
	local secs=$1 what=$2; shift 2
	local i
	for ((i = 0; i < secs * 4; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.25
	done
	die "$what did not come up within ${secs}s"
}

APT_UPDATED=
apt_install() {
	have apt-get || return 1
	if [ -z "$APT_UPDATED" ]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || return 1
		APT_UPDATED=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

docker_up() { # docker_up SERVICE...
	have docker && docker info >/dev/null 2>&1 && docker compose version >/dev/null 2>&1 || return 1
	docker compose up -d "$@" >/dev/null
}

# ---------------------------------------------------------------- MariaDB / MySQL
mysql_host=127.0.0.1
mysql_port=3306
if [ -n "${OUTBOX_TEST_MYSQL_DSN:-}" ]; then
	# user:pass@tcp(host:port)/...
	addr=$(printf '%s' "$OUTBOX_TEST_MYSQL_DSN" | sed -n 's/.*tcp(\([^)]*\)).*/\1/p')
	[ -n "$addr" ] || die "OUTBOX_TEST_MYSQL_DSN has no tcp(host:port) part"
	mysql_host=${addr%:*}
	mysql_port=${addr##*:}
fi

mysql_query_ok() { # the default account answers over TCP
	if have mysql; then
		mysql --protocol=TCP -h"$mysql_host" -P"$mysql_port" -uroot -e 'SELECT 1' >/dev/null 2>&1
	else
		tcp_open "$mysql_host" "$mysql_port"
	fi
}

mysql_socket_ok() { mysql -uroot -e 'SELECT 1' >/dev/null 2>&1; }

start_mariadb_local() {
	if ! have mariadbd && [ ! -x /usr/sbin/mariadbd ]; then
		apt_install mariadb-server mariadb-client || return 1
	fi
	mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
	if [ ! -d /var/lib/mysql/mysql ]; then
		mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
	fi
	if ! tcp_open 127.0.0.1 3306; then
		# --user=mysql is required when started as root, or the daemon aborts while
		# start-stop-daemon still exits 0; so check that it answers afterwards.
		start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
	fi
	wait_for 60 "MariaDB" mysql_socket_ok
	# On Debian, root@localhost is unix_socket-only; allow the empty password over TCP too.
	# TCP from 127.0.0.1 is root@localhost with name resolution, root@127.0.0.1 under
	# skip-name-resolve: provide both.
	mysql -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('');
		CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
		GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
		CREATE DATABASE IF NOT EXISTS test"
}

if [ -n "${OUTBOX_TEST_MYSQL_DSN:-}" ]; then
	tcp_open "$mysql_host" "$mysql_port" || die "mysql: nothing answers at $mysql_host:$mysql_port (OUTBOX_TEST_MYSQL_DSN)"
	log "mysql: using $mysql_host:$mysql_port from OUTBOX_TEST_MYSQL_DSN"
elif mysql_query_ok; then
	if have mysql; then mysql --protocol=TCP -h127.0.0.1 -uroot -e 'CREATE DATABASE IF NOT EXISTS test' >/dev/null 2>&1 || true; fi
	log "mysql: reusing the server at 127.0.0.1:3306"
elif is_root && have apt-get && start_mariadb_local; then
	wait_for 30 "MariaDB over TCP" mysql_query_ok
	log "mysql: started MariaDB at 127.0.0.1:3306 (root, empty password, database test)"
elif docker_up mysql; then
	wait_for 120 "MySQL (docker compose)" mysql_query_ok
	log "mysql: started MySQL 8 with docker compose at 127.0.0.1:3306"
else
	die "mysql: no server at 127.0.0.1:3306, and none could be started (needs root on Debian for apt-get, or a Docker engine with compose).
  Start MariaDB 10.6+ or MySQL 8 yourself and point the tests at it:
  export OUTBOX_TEST_MYSQL_DSN='user:password@tcp(host:3306)/'"
fi

# ---------------------------------------------------------------- Redis
redis_addr=${OUTBOX_TEST_REDIS_ADDR:-127.0.0.1:6379}
redis_host=${redis_addr%:*}
redis_port=${redis_addr##*:}

redis_ok() {
	if have redis-cli; then
		[ "$(redis-cli -h "$redis_host" -p "$redis_port" ping 2>/dev/null)" = PONG ]
	else
		tcp_open "$redis_host" "$redis_port"
	fi
}

start_redis_local() {
	if ! have redis-server; then
		apt_install redis-server redis-tools || return 1
	fi
	# redis-server exits 0 even when the port is taken: redis_ok below is the real check.
	redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
}

if redis_ok; then
	log "redis: reusing the server at $redis_addr"
elif [ -n "${OUTBOX_TEST_REDIS_ADDR:-}" ] && [ "$redis_addr" != 127.0.0.1:6379 ]; then
	die "redis: nothing answers at $redis_addr (OUTBOX_TEST_REDIS_ADDR)"
elif is_root && have apt-get && start_redis_local; then
	wait_for 30 "Redis" redis_ok
	log "redis: started redis-server at 127.0.0.1:6379"
elif docker_up redis; then
	wait_for 60 "Redis (docker compose)" redis_ok
	log "redis: started Redis 7 with docker compose at 127.0.0.1:6379"
else
	die "redis: no server at 127.0.0.1:6379, and none could be started (needs root on Debian for apt-get, or a Docker engine with compose).
  Start Redis 6+ yourself and point the tests at it: export OUTBOX_TEST_REDIS_ADDR=host:6379"
fi
