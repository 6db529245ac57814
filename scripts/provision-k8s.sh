#!/usr/bin/env bash
# Provisions the binaries of the local test control plane (idempotent, cached):
#   etcd 3.4 (Debian package etcd-server), and kube-apiserver, kube-controller-manager,
#   kubectl, kubelet, kube-scheduler and kube-proxy v1.20.2 built from Debian bookworm's
#   `kubernetes` source package with Go 1.15 (a Go >= 1.18 build of that tree crashes in
#   vendored reflect2 at run time), CGO_ENABLED=0. Only the missing ones are built.
# Prints the directory holding the binaries on its last line.
set -euo pipefail

K8S_VERSION=v1.20.2
CACHE_ROOT="${MIDONETKUBE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/midonet-kube-controllers}"
BIN_DIR="$CACHE_ROOT/k8s-$K8S_VERSION"
WORK="$CACHE_ROOT/build"
WANT=(kube-apiserver kube-controller-manager kubectl kubelet kube-scheduler kube-proxy)

log() { echo "provision-k8s: $*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=
ensure_pkgs() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

ensure_pkgs etcd-server rsync openssl curl ca-certificates dpkg-dev make

# The real node (scripts/k8s-node.sh), its images (scripts/image.sh: buildah; a static pause
# from the kubernetes tree: gcc, libc6-dev) and the monitoring tests' Prometheus. These
# machines run no init system; any service a package would start is left stopped (Debian's
# policy-rc.d, for the install only, where the machine has none) and recommended packages
# (prometheus-node-exporter, a service too) are not installed.
ensure_node_pkgs() {
  local missing=() p policy=/usr/sbin/policy-rc.d made_policy=
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod +x "$policy"
    made_policy=1
  fi
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
  local ok=0
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null || ok=$?
  [ -z "$made_policy" ] || as_root rm -f "$policy"
  return $ok
}
ensure_node_pkgs containerd runc containernetworking-plugins buildah iptables iproute2 \
  util-linux gcc libc6-dev python3 prometheus

missing() { MISSING=(); for b in "${WANT[@]}"; do [ -x "$BIN_DIR/$b" ] || MISSING+=("$b"); done; }
missing
if [ ${#MISSING[@]} -eq 0 ]; then echo "$BIN_DIR"; exit 0; fi

mkdir -p "$WORK"
# One build at a time (test binaries start in parallel); a waiter finds it done.
exec 9>"$WORK/.lock"
flock 9
missing
if [ ${#MISSING[@]} -eq 0 ]; then echo "$BIN_DIR"; exit 0; fi
cd "$WORK"

# A private apt configuration so the system's sources and lists stay untouched.
mirror_of() { # suite -> the URI of the system's deb entry
  grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 | awk '{print $2}'
}
MIRROR="$(mirror_of)"; MIRROR="${MIRROR:-http://deb.debian.org/debian}"
private_apt() { # name, sources-line...
  local name=$1; shift
  local dir="$WORK/apt-$name"
  mkdir -p "$dir/sources.list.d" "$dir/lists/partial" "$dir/archives/partial"
  printf '%s\n' "$@" >"$dir/sources.list.d/private.list"
  echo -o Dir::Etc::SourceList="$dir/sources.list.d/private.list" \
       -o Dir::Etc::SourceParts="$dir/sources.list.d" \
       -o Dir::State::Lists="$dir/lists" \
       -o Dir::Cache::Archives="$dir/archives"
}

# 1. Go 1.15 from Debian bullseye, unpacked privately.
GOROOT_DIR="$WORK/go115/usr/lib/go-1.15"
if [ ! -x "$GOROOT_DIR/bin/go" ]; then
  log "fetching Go 1.15 (bullseye)"
  opts=$(private_apt bullseye "deb $MIRROR bullseye main")
  # shellcheck disable=SC2086
  apt-get $opts update -qq
  mkdir -p "$WORK/debs" && cd "$WORK/debs"
  # shellcheck disable=SC2086
  apt-get $opts download golang-1.15-go golang-1.15-src >/dev/null
  for d in golang-1.15-*.deb; do dpkg -x "$d" "$WORK/go115"; done
  cd "$WORK"
fi

# 2. The kubernetes source package (full upstream tree with vendor/).
SRC_DIR=$(ls -d "$WORK"/src/kubernetes-*/ 2>/dev/null | head -n1 || true)
if [ -z "$SRC_DIR" ]; then
  log "fetching the kubernetes source package (bookworm)"
  opts=$(private_apt bookworm-src "deb-src $MIRROR bookworm main")
  # shellcheck disable=SC2086
  apt-get $opts update -qq
  mkdir -p "$WORK/src" && cd "$WORK/src"
  # shellcheck disable=SC2086
  apt-get $opts source --download-only kubernetes >/dev/null
  for t in kubernetes_*.orig*.tar.*; do tar xf "$t"; done
  cd "$WORK"
  SRC_DIR=$(ls -d "$WORK"/src/kubernetes-*/ | head -n1)
fi
SRC_DIR=${SRC_DIR%/}

# 3. Build with Go 1.15 in a GOPATH layout.
log "building ${MISSING[*]} (a few minutes)"
cd "$SRC_DIR"
mkdir -p .go/src/k8s.io
[ -e .go/src/k8s.io/kubernetes ] || ln -s "$SRC_DIR" .go/src/k8s.io/kubernetes
export GOROOT="$GOROOT_DIR" PATH="$GOROOT_DIR/bin:$PATH" GOPATH="$SRC_DIR/.go" CGO_ENABLED=0
export GOFLAGS=-mod=vendor GO111MODULE=off GOCACHE="$WORK/gocache"
cd .go/src/k8s.io/kubernetes
make WHAT="${MISSING[*]/#/cmd/}" >&2
mkdir -p "$BIN_DIR"
for b in "${MISSING[@]}"; do cp "_output/bin/$b" "$BIN_DIR/$b.tmp" && mv "$BIN_DIR/$b.tmp" "$BIN_DIR/$b"; done
log "binaries cached in $BIN_DIR"
echo "$BIN_DIR"
