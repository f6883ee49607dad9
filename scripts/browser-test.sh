#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# browser-test.sh installs what the dashboard's browser test needs when it is missing (Debian's
# chromium package, node and npm, and `npm ci` in internal/dashboard/testdata/browser), then
# runs those tests (TestBrowser, TestBrowserExplorer). `browser-test.sh install` only installs. Playwright's own
# browser downloads are never used: the test drives /usr/bin/chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=internal/dashboard/testdata/browser

apt_install() {
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "browser-test: $* missing; install Debian's package(s): apt-get install $*" >&2
    exit 1
  fi
  echo "browser-test: installing $* (apt-get)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

[ -x "${CHROMIUM:-/usr/bin/chromium}" ] || apt_install chromium
command -v node >/dev/null && command -v npm >/dev/null || apt_install nodejs npm
if [ ! -f "$dir/node_modules/playwright-core/package.json" ]; then
  echo "browser-test: npm ci in $dir" >&2
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
[ "${1:-}" = install ] && exit 0

if [ -f bin/services.env ]; then set -a && . bin/services.env && set +a; fi
exec go test -count=1 -run '^TestBrowser(Explorer)?$' -v ./internal/dashboard/
