#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Builds a tagged release into dist/VERSION (`make release VERSION=v1.2.3`):
#   outbox-relay_VERSION_OS_ARCH.tar.gz for linux and darwin, amd64 and arm64: the static
#       binary with its version stamped (`outbox-relay version` prints VERSION and the commit), LICENSE,
#       README.md and CHANGELOG.md
#   SHA256SUMS                                                         `sha256sum -c SHA256SUMS`
#   RELEASE_NOTES.md                                                   CHANGELOG.md's section
# It refuses a VERSION that is not vMAJOR.MINOR.PATCH[-PRERELEASE], a CHANGELOG.md without a
# "## [MAJOR.MINOR.PATCH]" (or "## [VERSION]") section, a working tree with uncommitted changes, and a HEAD that the tag
# VERSION, when it exists, does not point at; it creates the (annotated) tag otherwise,
# locally: pushing it is the maintainer's step. RELEASE_PLATFORMS (default "linux/amd64
# linux/arm64 darwin/amd64 darwin/arm64") chooses the platforms.
#
# The container image is built and pushed by digest, which needs Docker (not run here):
#   docker buildx build --platform linux/amd64,linux/arm64 --target relay \
#     --build-arg VERSION=$VERSION --build-arg COMMIT=$(git rev-parse HEAD) \
#     --tag ghcr.io/outbox-relay/outbox-relay:$VERSION --push --metadata-file dist/$VERSION/image.json .
# then record "containerimage.digest" of image.json in the release notes, and deploy
# ghcr.io/outbox-relay/outbox-relay@sha256:<digest>, never the tag (docs/releasing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
die() { printf 'release: %s\n' "$*" >&2; exit 1; }

VERSION=${VERSION:-${1:-}}
[ -n "$VERSION" ] || die "set VERSION, e.g. make release VERSION=v0.1.0"
[[ "$VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
	die "VERSION $VERSION is not vMAJOR.MINOR.PATCH[-PRERELEASE]"
# Keep a Changelog writes the heading without the tag's v ("## [0.1.0] - 2026-11-27").
notes=$(awk -v v="$VERSION" -v s="${VERSION#v}" '
	$0 ~ "^## \\[" { if (found) exit; if (index($0, "## [" v "]") == 1 || index($0, "## [" s "]") == 1) { found = 1; next } }
	found { print }' CHANGELOG.md)
[ -n "$(printf '%s' "$notes" | tr -d '[:space:]')" ] ||
	die "CHANGELOG.md has no \"## [${VERSION#v}]\" section with notes: write them first"
[ -z "$(git status --porcelain)" ] || die "the working tree has uncommitted changes: commit them first"
commit=$(git rev-parse HEAD)
if git rev-parse -q --verify "refs/tags/$VERSION" >/dev/null; then
	[ "$(git rev-list -n 1 "$VERSION")" = "$commit" ] || die "tag $VERSION exists and is not HEAD"
else
	git tag -a "$VERSION" -m "outbox-relay $VERSION"
fi
date=$(git log -1 --format=%cI "$commit")

out=dist/$VERSION
rm -rf "$out" && mkdir -p "$out"
printf '%s\n' "$notes" >"$out/RELEASE_NOTES.md"
for platform in ${RELEASE_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}; do
	os=${platform%/*} arch=${platform#*/}
	name=outbox-relay_${VERSION}_${os}_${arch}
	stage=$out/$name
	mkdir -p "$stage"
	GOOS=$os GOARCH=$arch make --no-print-directory build BIN="$stage/outbox-relay" \
		VERSION="$VERSION" COMMIT="$commit" DATE="$date" >/dev/null
	cp LICENSE README.md CHANGELOG.md "$stage/"
	# Reproducible archives: fixed order, owner and times.
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="$date" -C "$out" -czf "$out/$name.tar.gz" "$name"
	rm -rf "$stage"
done
(cd "$out" && sha256sum -- *.tar.gz >SHA256SUMS)
printf 'release: %s (%s) in %s:\n' "$VERSION" "$commit" "$out"
cat "$out/SHA256SUMS"
