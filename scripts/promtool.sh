#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs promtool (Prometheus's rule checker) with the given arguments; `--path` prints the
# promtool it would run instead. promtool on PATH is used as it is. Otherwise the promtool of
# Debian's `prometheus` package is used from bin/promtool/, where this script puts it the
# first time: `apt-get download prometheus` and unpack it there. Nothing is installed system
# wide (no Prometheus server, no service, no system user); only bin/promtool/ is written.
set -euo pipefail

cd "$(dirname "$0")/.."

die() { printf 'promtool.sh: %s\n' "$*" >&2; exit 1; }

find_promtool() {
	if command -v promtool >/dev/null 2>&1; then
		command -v promtool
		return 0
	fi
	local local_bin=bin/promtool/usr/bin/promtool
	if [ -x "$local_bin" ]; then
		echo "$PWD/$local_bin"
		return 0
	fi
	return 1
}

install_promtool() {
	command -v apt-get >/dev/null 2>&1 || die "promtool is missing and apt-get is not available: install Prometheus's promtool"
	command -v dpkg-deb >/dev/null 2>&1 || die "promtool is missing and dpkg-deb is not available"
	local tmp
	tmp=$(mktemp -d)
	printf 'promtool.sh: fetching promtool from Debian'"'"'s prometheus package\n' >&2
	if ! (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1); then
		if [ "$(id -u)" = 0 ]; then
			DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || die "apt-get update failed"
			(cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1) || die "apt-get download prometheus failed"
		else
			die "apt-get download prometheus failed (run apt-get update as root, or install promtool)"
		fi
	fi
	dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
	rm -rf bin/promtool
	mkdir -p bin/promtool/usr/bin
	cp "$tmp/x/usr/bin/promtool" bin/promtool/usr/bin/promtool
	rm -rf "$tmp"
}

if ! bin=$(find_promtool); then
	# Tests call this script in parallel: one installs, the others wait for it.
	mkdir -p bin
	exec 9>bin/.promtool.lock
	flock 9
	bin=$(find_promtool) || { install_promtool; bin=$(find_promtool) || die "promtool still missing after install"; }
	flock -u 9
fi

if [ "${1:-}" = "--path" ]; then
	echo "$bin"
	exit 0
fi
exec "$bin" "$@"
