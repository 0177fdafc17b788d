#!/usr/bin/env bash
# Build the controller and example box images with whichever builder works here:
# docker (with a reachable daemon), podman or buildah (BUILDER=docker|podman|buildah forces one).
# Usage: hack/images.sh <controller image ref> <box image ref>     (make images)
# Prints the builder used on the last line ("builder: <name>") for hack/kind-up.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
controller_ref=${1:?controller image reference}
box_ref=${2:?box image reference}

pick_builder() {
  if [ -n "${BUILDER:-}" ]; then echo "$BUILDER"; return; fi
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then echo docker; return; fi
  if command -v podman >/dev/null 2>&1; then echo podman; return; fi
  if command -v buildah >/dev/null 2>&1; then echo buildah; return; fi
  echo none
}

builder=$(pick_builder)
case "$builder" in
  docker|podman) build() { "$builder" build -f "$1" -t "$2" .; } ;;
  buildah)       build() { buildah bud -f "$1" -t "$2" .; } ;;
  *)
    {
      echo "make images: no container image builder found."
      if command -v docker >/dev/null 2>&1; then
        echo "  docker is installed but its daemon is not reachable ('docker info' fails): start Docker."
      fi
      echo "  Install one of: Docker (with its daemon running), Podman, or Buildah; or set BUILDER=..."
      echo "  No image is published yet: ghcr.io/agentbox-dev/* does not exist, so a cluster needs these builds."
    } >&2
    exit 2 ;;
esac

echo "building $controller_ref with $builder"
build images/controller/Dockerfile "$controller_ref"
echo "building $box_ref with $builder (downloads Claude Code and Codex from npm)"
build images/box/Dockerfile "$box_ref"
echo "builder: $builder"
