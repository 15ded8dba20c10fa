#!/usr/bin/env bash
# Builds Weir's container image (deploy/Dockerfile) with podman, from a binary already built,
# on a Debian base made here from Debian's packages (no image registry is needed):
#
#   scripts/container-image.sh BINARY [TAG]    # prints the image's name
#
# The base (localhost/weir-base:bookworm: Debian bookworm minbase with ca-certificates, by
# mmdebstrap) is made once and kept. Podman runs with runc (scripts/install-deps.sh installs
# both and sets default_ulimits = [] in /etc/containers/containers.conf, as this machine needs).
set -euo pipefail

binary=${1:?usage: scripts/container-image.sh BINARY [TAG]}
tag=${2:-localhost/weir:test}
here=$(cd "$(dirname "$0")/.." && pwd)
base=localhost/weir-base:bookworm
podman=(podman --runtime /usr/sbin/runc)

if ! "${podman[@]}" image exists "$base"; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mmdebstrap --quiet --variant=minbase --include=ca-certificates --format=tar bookworm "$work/base.tar" >&2
  "${podman[@]}" import --quiet "$work/base.tar" "$base" >/dev/null
fi

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$binary" "$context/weir"
"${podman[@]}" build --quiet --format docker -f "$here/deploy/Dockerfile" \
  --build-arg BASE="$base" --build-arg WEIR_BINARY=prebuilt -t "$tag" "$context" >/dev/null
echo "$tag"
