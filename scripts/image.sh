#!/usr/bin/env bash
# The controllers' container image, built offline with buildah FROM scratch (no registry, no
# base image): the binary, the shared libraries it is linked against (the glibc build is
# dynamic), CA certificates, an /etc/passwd and /etc/group naming the non-root user 65532;
# user 65532:65532, entrypoint `/midonet-kube-controllers run`, port 9453, as the
# Dockerfile's image.
#
#   image.sh [--binary PATH] [--tag TAG] [--out FILE] [--import CONTAINERD_SOCKET]
#       the image midonet/midonet-kube-controllers:TAG (default: the crate's version) as a
#       docker-archive FILE (default target/image/midonet-kube-controllers-TAG.tar); without
#       --binary, the `dist` profile's binary (built); with --import, imported into that
#       containerd's k8s.io namespace (what a kubelet on it runs). Prints FILE and the image
#       size (the archive's, uncompressed) on stderr, FILE on stdout.
#   image.sh scratch ROOTFS IMAGE FILE [--entrypoint JSON] [--cmd WORD] [--user U] [--port P]
#       any directory as a FROM scratch image (scripts/k8s-node.sh builds its pause image so)
#
# buildah keeps its storage (vfs: plain directories, no mounts) in a temporary directory
# removed at the end, so nothing is left in /var/lib/containers.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
NAME=midonet/midonet-kube-controllers

log() { echo "image: $*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

ensure_buildah() {
  command -v buildah >/dev/null && return 0
  log "installing buildah"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    buildah >/dev/null
}

cmd_scratch() { # rootfs image file [options]
  local rootfs=$1 image=$2 out=$3 work c
  shift 3
  local cfg=()
  while [ $# -gt 0 ]; do
    case $1 in
      --entrypoint) cfg+=(--entrypoint "$2"); shift 2 ;;
      --cmd) cfg+=(--cmd "$2"); shift 2 ;;
      --user) cfg+=(--user "$2"); shift 2 ;;
      --port) cfg+=(--port "$2"); shift 2 ;;
      *) log "unknown option $1"; exit 2 ;;
    esac
  done
  ensure_buildah
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  local b=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
  c=$("${b[@]}" from scratch)
  "${b[@]}" copy "$c" "$rootfs/" / >/dev/null
  "${b[@]}" config "${cfg[@]}" "$c"
  rm -f "$out"
  "${b[@]}" commit --quiet "$c" "docker-archive:$out:$image" >/dev/null
  "${b[@]}" rm "$c" >/dev/null
}

# The controllers' root filesystem in $1 from the binary $2.
controllers_rootfs() {
  local r=$1 bin=$2 lib
  mkdir -p "$r/etc/ssl/certs" "$r/tmp"
  cp "$bin" "$r/midonet-kube-controllers"
  strip "$r/midonet-kube-controllers"
  for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
    mkdir -p "$r$(dirname "$lib")"
    cp -L "$lib" "$r$lib"
  done
  cp -L /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$r/etc/group"
  chmod 1777 "$r/tmp"
}

cmd_controllers() {
  local binary="" tag="" out="" sock="" work size
  while [ $# -gt 0 ]; do
    case $1 in
      --binary) binary=$2; shift 2 ;;
      --tag) tag=$2; shift 2 ;;
      --out) out=$2; shift 2 ;;
      --import) sock=$2; shift 2 ;;
      *) log "unknown option $1"; exit 2 ;;
    esac
  done
  if [ -z "$tag" ]; then
    tag=$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -n1)
  fi
  if [ -z "$binary" ]; then
    log "building the dist binary"
    (cd "$ROOT" && cargo build --profile dist --locked --bin midonet-kube-controllers --quiet)
    binary="$ROOT/target/dist/midonet-kube-controllers"
  fi
  out=${out:-$ROOT/target/image/midonet-kube-controllers-$tag.tar}
  mkdir -p "$(dirname "$out")"
  work=$(mktemp -d)
  controllers_rootfs "$work/rootfs" "$binary"
  (cmd_scratch "$work/rootfs" "$NAME:$tag" "$out" --user 65532:65532 \
    --entrypoint '["/midonet-kube-controllers"]' --cmd run --port 9453) || { rm -rf "$work"; exit 1; }
  rm -rf "$work"
  size=$(stat -c %s "$out")
  log "$NAME:$tag in $out: $((size / 1024 / 1024)) MiB ($size bytes)"
  if [ -n "$sock" ]; then
    ctr --address "$sock" --namespace k8s.io images import "$out" >/dev/null
    log "imported into the containerd at $sock"
  fi
  echo "$out"
}

case "${1:-}" in
  scratch) shift; cmd_scratch "$@" ;;
  *) cmd_controllers "$@" ;;
esac
