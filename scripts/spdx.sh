#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Every source file of the project carries an SPDX licence identifier (the licence is
# Apache-2.0: LICENSE). `scripts/spdx.sh --check` lists the files without one and exits 1;
# `scripts/spdx.sh` (`make spdx`) adds it: as the first line (after a #! line), followed by a
# blank line in Go so that it never becomes part of a package's doc comment.
set -euo pipefail
cd "$(dirname "$0")/.."
ID="SPDX-License-Identifier: Apache-2.0"

files() {
	git ls-files '*.go' '*.sh' '*.py' '*.java' '*.js' |
		grep -v -e '/testdata/' -e '/node_modules/' -e '^\.ci/' || true
}

missing=()
while IFS= read -r f; do
	[ -f "$f" ] || continue
	head -n 3 "$f" | grep -q "$ID" || missing+=("$f")
done < <(files)

if [ "${1:-}" = "--check" ]; then
	if [ ${#missing[@]} -gt 0 ]; then
		printf 'no SPDX identifier (run `make spdx`): %s\n' "${missing[@]}" >&2
		exit 1
	fi
	exit 0
fi

for f in "${missing[@]}"; do
	case "$f" in
	*.go | *.java | *.js) c="// $ID" ;;
	*) c="# $ID" ;;
	esac
	tmp=$(mktemp)
	if head -n 1 "$f" | grep -q '^#!'; then
		{ head -n 1 "$f"; printf '%s\n' "$c"; tail -n +2 "$f"; } >"$tmp"
	elif [[ "$f" == *.go ]]; then
		{ printf '%s\n\n' "$c"; cat "$f"; } >"$tmp"
	else
		{ printf '%s\n' "$c"; cat "$f"; } >"$tmp"
	fi
	chmod --reference="$f" "$tmp"
	mv "$tmp" "$f"
done
printf 'spdx: %d file(s) given an SPDX identifier\n' "${#missing[@]}"
