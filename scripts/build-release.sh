#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the release binaries into OUTDIR (default bin/release): the static outbox-relay
# binary (the Makefile's build target: CGO_ENABLED=0, -trimpath, version stamps) and the
# demo order service. The Dockerfile's build stage runs exactly this script, and
# `make check-build` runs it without Docker, so both build the same way.
# VERSION, COMMIT and DATE come from the environment when set (the image has no .git).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin/release}
mkdir -p "$out"
make --no-print-directory build BIN="$out/outbox-relay" \
	${VERSION:+VERSION="$VERSION"} ${COMMIT:+COMMIT="$COMMIT"} ${DATE:+DATE="$DATE"}
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/orders-demo" ./examples/orders
"$out/outbox-relay" version
