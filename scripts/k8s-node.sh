#!/usr/bin/env bash
# A real Kubernetes node beside the control plane of scripts/k8s-env.sh: containerd, runc and
# the CNI plugins from Debian, kubelet, kube-proxy and kube-scheduler v1.20.2 built from the
# same source as the control plane. Called by `k8s-env.sh start DIR --node` and `k8s-env.sh
# stop DIR`; not meant to be run alone.
#
#   k8s-node.sh net-up DIR    the node's network (before the apiserver, which binds to it)
#   k8s-node.sh start DIR     containerd, kubelet, kube-proxy, kube-scheduler; the pause image
#   k8s-node.sh stop DIR      undo everything net-up and start did
#
# Isolation, so that several nodes (other test binaries, other checkouts) run at once and a
# stop removes exactly what its node made:
# - The node lives in a network namespace of its own, `mkn-ID`, joined to the host by a veth
#   pair `mknID-h` (host, 10.N.255.1/30) / `mknID-n` (node, 10.N.255.2). containerd, the
#   kubelet and kube-proxy run in it (`nsenter --net`), so the CNI bridge `mknbrID`, the
#   pods' veths and every iptables chain the kubelet, kube-proxy and the CNI plugins add are
#   in that namespace and go with it. The apiserver binds to 10.N.255.1.
# - Pods get addresses from the node's podCIDR (nodeipam, cluster CIDR 10.N.0.0/17) through
#   the CNI plugins (bridge + host-local IPAM + portmap); the host routes 10.N.0.0/17 to the
#   node so the tests and Prometheus reach pod addresses.
# - Cgroups: the kubelet's `--cgroup-root` is `/mkn-ID` in every v1 hierarchy.
# - State, sockets, IPAM, netns mounts, the kubelet's root: under DIR/node. containerd, the
#   kubelet and kube-proxy share a mount namespace of their own (held by a `sleep` started
#   with `unshare`; shared, so that the kubelet's volume mounts are the ones containerd's
#   containers get), in which the fixed paths they write to, /var/log/pods,
#   /var/log/containers (the kubelet's container logs) and /var/lib/cni (libcni's cache), are
#   directories of DIR/node: their mounts (volumes, rootfs, sandbox netns) end with the
#   namespace, and nothing is written outside DIR.
# - The kubelet sets vm.overcommit_memory, kernel.panic and kernel.panic_on_oops: their
#   values from before the first node of the machine are restored when the last one stops.
# Facts of this kind of machine (a VM, cgroup v1, no systemd, no CAP_SYS_RESOURCE):
# containerd needs `restrict_oom_score_adj` (runc fails otherwise, "can't get final child's
# PID from pipe: EOF"), and the kubelet and kube-proxy `--oom-score-adj=0`; the sandbox image
# is containerd's `sandbox_image` (a static pause built from the kubernetes tree).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
CNI_BIN=/usr/lib/cni
SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops)
PAUSE_IMAGE=registry.k8s.io/pause:3.4.1-midonet-local

log() { echo "k8s-node: $*" >&2; }

# shellcheck source=scripts/pidfiles.sh
. "$HERE/pidfiles.sh"

# --- net-up -------------------------------------------------------------------------------

# The second octet of a 10.N.0.0/16 no route and no other node of this machine uses (the
# Service range 10.96.0.0/12 aside). Called under a machine-wide lock.
pick_octet() {
  local n used
  used=$(ip -4 route show table all 2>/dev/null; cat /tmp/midonet-kube-nodes/*.octet 2>/dev/null || true)
  for n in $(seq 200 254); do
    grep -qE "(^|[^0-9])10\.$n\." <<<"$used" && continue
    grep -qx "$n" <<<"$used" && continue
    echo "$n"; return 0
  done
  return 1
}

cmd_net_up() {
  local d=$1 id n ns
  mkdir -p "$d/node" /tmp/midonet-kube-nodes
  id=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
  ns="mkn-$id"
  exec 8>/tmp/midonet-kube-nodes/.lock
  flock 8
  n=$(pick_octet) || { log "no free 10.N.0.0/16 for a node"; exit 1; }
  echo "$n" >"/tmp/midonet-kube-nodes/$id.octet"
  {
    echo "NODE_ID=$id"
    echo "NODE_NS=$ns"
    echo "NODE_OCTET=$n"
    echo "NODE_NAME=midonet-node-$id"
    echo "HOST_ADDR=10.$n.255.1"
    echo "NODE_ADDR=10.$n.255.2"
    echo "CLUSTER_CIDR=10.$n.0.0/17"
    echo "NODE_BRIDGE=mknbr$id"
    echo "CGROUP_ROOT=/mkn-$id"
  } >"$d/node/vars"
  ip netns add "$ns"
  ip link add "mkn$id-h" type veth peer name "mkn$id-n"
  ip link set "mkn$id-n" netns "$ns"
  ip addr add "10.$n.255.1/30" dev "mkn$id-h"
  ip link set "mkn$id-h" up
  ip -n "$ns" addr add "10.$n.255.2/30" dev "mkn$id-n"
  ip -n "$ns" link set "mkn$id-n" up
  ip -n "$ns" link set lo up
  ip -n "$ns" route add default via "10.$n.255.1"
  ip route add "10.$n.0.0/17" via "10.$n.255.2" dev "mkn$id-h"
  ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
  flock -u 8
  log "node network $ns: host 10.$n.255.1, node 10.$n.255.2, pods 10.$n.0.0/17"
}

# --- images -------------------------------------------------------------------------------

CACHE_ROOT="${MIDONETKUBE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/midonet-kube-controllers}"

# The pod sandbox image: pause.c of the same kubernetes tree, linked statically, FROM scratch.
pause_archive() {
  local out="$CACHE_ROOT/images/pause-3.4.1.tar" src work
  mkdir -p "$CACHE_ROOT/images"
  # One build at a time: nodes start in parallel.
  exec 7>"$CACHE_ROOT/images/.lock"
  flock 7
  if [ -s "$out" ]; then exec 7>&-; echo "$out"; return 0; fi
  src=$(ls -d "$CACHE_ROOT"/build/src/kubernetes-*/build/pause/linux | head -n1)
  work=$(mktemp -d)
  cc -Os -Wall -static -DVERSION=v3.4.1-midonet-local -o "$work/pause" "$src/pause.c"
  mkdir -p "$work/rootfs"
  mv "$work/pause" "$work/rootfs/pause"
  bash "$HERE/image.sh" scratch "$work/rootfs" "$PAUSE_IMAGE" "$out.tmp" \
    --entrypoint '["/pause"]' --user 65535:65535 >&2
  mv "$out.tmp" "$out"
  rm -rf "$work"
  exec 7>&- # the lock must not be inherited by the node's processes
  echo "$out"
}

ctr_() { ctr --address "$NODE_DIR/containerd/containerd.sock" --namespace k8s.io "$@"; }

# --- start --------------------------------------------------------------------------------

write_containerd_config() {
  local n=$1
  mkdir -p "$n/containerd" "$n/cni/net.d" "$n/cni/ipam"
  cat >"$n/containerd/config.toml" <<EOF
version = 2
root = "$n/containerd/root"
state = "$n/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$n/containerd/containerd.sock"
[ttrpc]
  address = "$n/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$n/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$n/containerd/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$n/cni/net.d"
EOF
}

# The CNI configuration once the controller-manager has given the node its podCIDR: the
# bridge plugin with host-local IPAM over the podCIDR from its third address on, as MidoNet
# lays a node's pod network out (translators/MAPPING.md, Node: the first address is the
# pods' gateway, the second the node's own). containerd loads it when it appears.
write_cni_config() { # node dir, podCIDR
  local n=$1 cidr=$2 first
  first=$(python3 -c 'import ipaddress,sys; print(ipaddress.ip_network(sys.argv[1])[3])' "$cidr")
  cat >"$n/cni/net.d/10-$NODE_NS.conflist.tmp" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$NODE_NS",
  "plugins": [
    {
      "type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
      "ipam": {"type": "host-local", "dataDir": "$n/cni/ipam", "ranges": [[{"subnet": "$cidr", "rangeStart": "$first"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  mv "$n/cni/net.d/10-$NODE_NS.conflist.tmp" "$n/cni/net.d/10-$NODE_NS.conflist"
}

pod_cidr() {
  "$BIN/kubectl" --kubeconfig "$D/kubeconfig" get node "$NODE_NAME" \
    -o jsonpath='{.spec.podCIDR}' 2>/dev/null | grep .
}

make_cgroups() {
  local h
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h" ] || continue
    mkdir -p "$h${CGROUP_ROOT#/}"
    if [ -f "$h/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" >"$h${CGROUP_ROOT#/}/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h${CGROUP_ROOT#/}/cpuset.mems"
    fi
  done
}

# The prefix that runs a command in the node's network and mount namespaces: nsenter execs
# it, so `$!` after `"${IN_NODE[@]}" cmd &` is the command's own PID (the pidfiles).
IN_NODE=()
# Where the node's processes expect fixed host paths, and the directory of DIR/node in
# their place.
PRIVATE_DIRS=("/var/log/pods:varlog/pods" "/var/log/containers:varlog/containers" "/var/lib/cni:cni/cache")

start_mount_namespace() { # node dir
  local n=$1 holder pair host own i
  for pair in "${PRIVATE_DIRS[@]}"; do
    host=${pair%%:*} own=$n/${pair#*:}
    mkdir -p "$own"
    if [ ! -d "$host" ]; then mkdir -p "$host"; echo "$host" >>"$n/created-dirs"; fi
  done
  unshare --mount --propagation slave sleep infinity >/dev/null 2>&1 &
  holder=$!
  echo "$holder" >"$n/mountns.pid"
  for i in $(seq 1 50); do
    [ "$(readlink "/proc/$holder/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ] && break
    [ "$i" = 50 ] && { log "no mount namespace"; return 1; }
    sleep 0.1
  done
  for pair in "${PRIVATE_DIRS[@]}"; do
    nsenter --mount="/proc/$holder/ns/mnt" mount --bind "$n/${pair#*:}" "${pair%%:*}"
  done
  IN_NODE=(nsenter --mount="/proc/$holder/ns/mnt" --net="/run/netns/$NODE_NS")
}

node_ready() {
  "$BIN/kubectl" --kubeconfig "$D/kubeconfig" get node "$NODE_NAME" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True
}

cmd_start() {
  D=$1
  # shellcheck disable=SC1091
  . "$D/node/vars"
  # shellcheck disable=SC1091
  . "$D/ports"
  NODE_DIR="$D/node"
  BIN=$("$HERE/provision-k8s.sh" | tail -n1)
  local n=$NODE_DIR s
  save_sysctls
  write_containerd_config "$n"
  make_cgroups
  mkdir -p "$n/kubelet"
  start_mount_namespace "$n"

  log "starting containerd in $NODE_NS"
  "${IN_NODE[@]}" containerd --config "$n/containerd/config.toml" >"$n/containerd.log" 2>&1 &
  echo $! >"$n/containerd.pid"
  wait_for containerd 60 "$n/containerd.pid" ctr_ version
  ctr_ images import "$(pause_archive)" >/dev/null

  sed "s#https://$API_HOST:$API_PORT#https://$HOST_ADDR:$API_PORT#" "$D/kubeconfig" >"$n/kubeconfig"

  log "starting kube-scheduler"
  "$BIN/kube-scheduler" --kubeconfig="$D/kubeconfig" --leader-elect=false --port=0 \
    --secure-port=0 >"$n/kube-scheduler.log" 2>&1 &
  echo $! >"$n/kube-scheduler.pid"

  log "starting kubelet $NODE_NAME in $NODE_NS"
  "${IN_NODE[@]}" "$BIN/kubelet" --kubeconfig="$n/kubeconfig" \
    --hostname-override="$NODE_NAME" --node-ip="$NODE_ADDR" \
    --container-runtime=remote \
    --container-runtime-endpoint="unix://$n/containerd/containerd.sock" \
    --root-dir="$n/kubelet" --cert-dir="$n/kubelet/pki" \
    --volume-plugin-dir="$n/kubelet/volume-plugins" \
    --pod-infra-container-image="$PAUSE_IMAGE" \
    --cgroup-driver=cgroupfs --cgroup-root="$CGROUP_ROOT" --cgroups-per-qos=true \
    --fail-swap-on=false --oom-score-adj=0 --read-only-port=0 \
    --eviction-hard='memory.available<100Mi,nodefs.available<1%,imagefs.available<1%' \
    --image-gc-high-threshold=100 --image-gc-low-threshold=99 \
    --node-status-update-frequency=4s \
    --serialize-image-pulls=false --max-pods=60 --v=1 \
    >"$n/kubelet.log" 2>&1 &
  echo $! >"$n/kubelet.pid"

  # kube-proxy 1.20 reads EndpointSlices by default; the apiserver serves them only with
  # `k8s-env.sh --endpointslices`.
  local PROXY_GATES=EndpointSliceProxying=false
  case $API_EXTRA in *EndpointSlice*) PROXY_GATES=EndpointSliceProxying=true ;; esac
  log "starting kube-proxy in $NODE_NS"
  "${IN_NODE[@]}" "$BIN/kube-proxy" --kubeconfig="$n/kubeconfig" --hostname-override="$NODE_NAME" \
    --cluster-cidr="$CLUSTER_CIDR" --proxy-mode=iptables --oom-score-adj=0 \
    --feature-gates="$PROXY_GATES" \
    --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 \
    --conntrack-tcp-timeout-close-wait=0 \
    --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 \
    >"$n/kube-proxy.log" 2>&1 &
  echo $! >"$n/kube-proxy.pid"

  wait_for "node $NODE_NAME's podCIDR" 120 "$n/kubelet.pid" pod_cidr
  write_cni_config "$n" "$(pod_cidr)"
  wait_for "node $NODE_NAME Ready" 180 "$n/kubelet.pid" node_ready
  log "node $NODE_NAME is Ready"
}

# --- stop ---------------------------------------------------------------------------------

# The sysctls the kubelet sets are the machine's, shared by every node on it: the values
# from before the first node are kept in NODES/sysctls.saved and restored when the last
# node (the last NODES/*.octet) is gone.
NODES=/tmp/midonet-kube-nodes
save_sysctls() {
  local s
  exec 8>"$NODES/.lock"
  flock 8
  if [ ! -f "$NODES/sysctls.saved" ]; then
    for s in "${SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"$NODES/sysctls.saved"
  fi
  exec 8>&-
}

restore_sysctls() {
  exec 8>"$NODES/.lock"
  flock 8
  rm -f "$NODES/$NODE_ID.octet"
  if ! ls "$NODES"/*.octet >/dev/null 2>&1 && [ -f "$NODES/sysctls.saved" ]; then
    while IFS= read -r kv; do sysctl -qw "$kv" || true; done <"$NODES/sysctls.saved"
    rm -f "$NODES/sysctls.saved"
  fi
  exec 8>&-
}

kill_cgroup_tree() { # every process in the node's cgroups (the containers)
  local h procs
  for _ in 1 2 3; do
    procs=""
    for h in /sys/fs/cgroup/*/; do
      [ -d "$h${CGROUP_ROOT#/}" ] || continue
      procs+=" $(find "$h${CGROUP_ROOT#/}" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')"
    done
    [ -n "${procs// /}" ] || return 0
    # shellcheck disable=SC2086
    kill -KILL $procs 2>/dev/null || true
    sleep 0.3
  done
}

kill_shims() { # the runc shims serving this node's containerd (by its socket's path)
  local p
  for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "-address $NODE_DIR/containerd/containerd.sock" \
      && kill -KILL "${p#/proc/}" 2>/dev/null || true
  done
}

unmount_under() { # dir: every mount below it, deepest first
  local m
  awk '{print $5}' /proc/self/mountinfo | { grep -F "$1/" || true; } | awk '{print length, $0}' \
    | sort -rn | cut -d' ' -f2- | while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
}

remove_cgroups() { # a cgroup is removable once its last process has exited: a few tries
  local h left
  for _ in $(seq 1 20); do
    left=
    for h in /sys/fs/cgroup/*/; do
      [ -d "$h${CGROUP_ROOT#/}" ] || continue
      find "$h${CGROUP_ROOT#/}" -depth -type d -exec rmdir {} \; 2>/dev/null || left=1
    done
    [ -z "$left" ] && return 0
    sleep 0.5
  done
  log "cgroups $CGROUP_ROOT not removed"
}

cmd_stop() {
  # Every step is tried, whatever the previous one did: a stop must not leave half a node.
  set +e +o pipefail
  D=$1
  [ -f "$D/node/vars" ] || return 0
  # shellcheck disable=SC1091
  . "$D/node/vars"
  NODE_DIR="$D/node"
  kill_pidfile "$NODE_DIR/kubelet.pid"
  kill_pidfile "$NODE_DIR/kube-proxy.pid"
  kill_pidfile "$NODE_DIR/kube-scheduler.pid"
  kill_cgroup_tree
  kill_shims
  kill_pidfile "$NODE_DIR/containerd.pid"
  kill_cgroup_tree
  kill_pidfile "$NODE_DIR/mountns.pid"
  unmount_under "$NODE_DIR"
  if [ -f "$NODE_DIR/created-dirs" ]; then
    while IFS= read -r dir; do rmdir "$dir" 2>/dev/null || true; done <"$NODE_DIR/created-dirs"
  fi
  ip netns del "$NODE_NS" 2>/dev/null || true
  ip link del "mkn$NODE_ID-h" 2>/dev/null || true
  remove_cgroups
  restore_sysctls
  if ip netns list | grep -qw "$NODE_NS" || [ -d "/sys/fs/cgroup/memory$CGROUP_ROOT" ]; then
    log "node $NODE_NAME not removed completely (kept $D/node/vars for another stop)"
    return 1
  fi
  rm -f "$D/node/vars"
}

case "${1:-}" in
  net-up) shift; cmd_net_up "$@" ;;
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  *) echo "usage: $0 net-up DIR | start DIR | stop DIR" >&2; exit 2 ;;
esac
