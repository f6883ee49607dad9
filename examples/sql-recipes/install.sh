#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the database drivers of docs/sql-recipes.md's programs, pinned, into
# ${OUTBOX_SERVICES_DIR:-/tmp/outbox-relay-services}/sql-recipes (nothing in the source tree):
#   java/    MariaDB Connector/J and rocketmq-client from Maven Central (java/pom.xml)
#   python-<hash of requirements.txt>/  PyMySQL, redis and rocketmq (the C++ client's binding, librocketmq inside) from PyPI
#            (python/requirements.txt)
#   node/    mysql2 from npm (node/package-lock.json, `npm ci`)
# Run by `make sql-recipes-deps` (and so by `make test`); quick when already installed.
set -euo pipefail
cd "$(dirname "$0")"

die() { printf 'sql-recipes: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
# apt_install installs Debian packages when running as root with apt-get (the tools below
# are installed before they are used: a machine without Node stops nowhere).
apt_install() {
	[ "$(id -u)" = 0 ] && have apt-get || return 1
	printf 'sql-recipes: installing %s from Debian'"'"'s packages\n' "$*" >&2
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
DIR=${OUTBOX_SERVICES_DIR:-/tmp/outbox-relay-services}/sql-recipes
mkdir -p "$DIR"

# Java: the JDBC driver and the RocketMQ client (the programs run as single source files, JDK
# 11+); fetched again when pom.xml changes.
if [ ! -f "$DIR/java/.complete" ] || ! cmp -s java/pom.xml "$DIR/java/pom.xml"; then
	have java || apt_install openjdk-17-jdk-headless || die "java not found: install a JDK 11+ (Debian: openjdk-17-jdk-headless)"
	have mvn || apt_install maven || die "mvn not found: install Maven (Debian: maven)"
	rm -rf "$DIR/java.tmp"
	mvn -B -q -f java/pom.xml dependency:copy-dependencies -DoutputDirectory="$DIR/java.tmp" >"$DIR/mvn.log" 2>&1 ||
		{ tail -5 "$DIR/mvn.log" >&2; die "Maven could not fetch the JDBC driver (network?); log: $DIR/mvn.log"; }
	cp java/pom.xml "$DIR/java.tmp/pom.xml"
	touch "$DIR/java.tmp/.complete"
	rm -rf "$DIR/java" && mv "$DIR/java.tmp" "$DIR/java"
fi

# Python: PyMySQL into a directory of its own (PYTHONPATH), not the system's site-packages.
{ have python3 && python3 -m pip --version >/dev/null 2>&1; } || apt_install python3 python3-pip ||
	die "python3 with pip not found (Debian: python3 python3-pip)"
# The directory is named by the requirements' hash, so that checkouts with other requirements
# sharing $DIR (worktrees, branches) never replace each other's packages under a running test.
py=$DIR/python-$(sha256sum python/requirements.txt | cut -c1-12)
if [ ! -f "$py/.complete" ]; then
	rm -rf "$py.tmp"
	python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --target "$py.tmp" -r python/requirements.txt ||
		die "pip could not install python/requirements.txt (network?)"
	cp python/requirements.txt "$py.tmp/requirements.txt"
	touch "$py.tmp/.complete"
	rm -rf "$py" && mv "$py.tmp" "$py"
fi

# Node: mysql2 exactly as package-lock.json says (NODE_PATH).
{ have node && have npm; } || apt_install nodejs npm || die "node and npm not found (Debian: nodejs npm)"
if ! cmp -s node/package-lock.json "$DIR/node/package-lock.json"; then
	rm -rf "$DIR/node" && mkdir -p "$DIR/node"
	cp node/package.json node/package-lock.json "$DIR/node/"
	(cd "$DIR/node" && npm ci --silent --no-audit --no-fund) || die "npm ci failed (network?)"
fi
