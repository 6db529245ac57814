#!/usr/bin/env bash
# A real local Kubernetes control plane on loopback for tests, the benchmark and the demo:
# etcd + kube-apiserver + kube-controller-manager (garbage collection, namespaces).
#
#   k8s-env.sh start DIR [--watch-pid PID] [--endpointslices] [--node]
#                                            start one; state, logs and kubeconfigs go in DIR
#   k8s-env.sh stop DIR                      stop the processes started in DIR (by their PIDs)
#   k8s-env.sh restart-apiserver DIR         stop and start kube-apiserver only (chaos tests)
#   k8s-env.sh stop-controller-manager DIR   stop kube-controller-manager only (no garbage
#                                            collection: tests of what the controllers do alone)
#   k8s-env.sh provision                     only build/cache the binaries
#
# `start` prints DIR/env, a file of `export` lines: KUBECONFIG (admin), MIDONETKUBE_TEST_*.
# Endpoints: by default the apiserver does not serve discovery.k8s.io (EndpointSlices), so the
# controllers read Endpoints, which most tests write by hand (nothing here mirrors them into
# slices). With --endpointslices it serves discovery.k8s.io/v1beta1 (v1.20 has no v1) with
# the EndpointSliceTerminatingCondition feature, without which it drops the `serving` and
# `terminating` conditions; the controllers then read slices (tests/endpointslices.rs).
# With --node, a real node joins it (scripts/k8s-node.sh: containerd, kubelet, kube-proxy in a
# network namespace of their own, and kube-scheduler); the apiserver then binds to the host's
# end of the node's veth instead of 127.0.0.1, mints ServiceAccount tokens (the ServiceAccount
# admission plugin and the token controller), publishes its address as the `kubernetes`
# Service's endpoint, and the controller-manager runs what a node's workloads need
# (Deployments, ReplicaSets, Endpoints, node CIDR allocation, ServiceAccounts). `stop` removes
# the node with everything it made.
# With --watch-pid, a watchdog stops everything once that process is gone, so a test binary
# that fails, panics or is killed never leaves a control plane behind.
# K8S_ENV_CPUS (a `taskset` CPU list, e.g. 0) keeps the three processes on those CPUs, so a
# benchmark can give its clients cores the control plane does not use.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ADMIN_TOKEN=midonet-test-admin-token
RESTRICTED_TOKEN=midonet-test-restricted-token
RESTRICTED_USER=midonet-test-restricted

log() { echo "k8s-env: $*" >&2; }

# The prefix that starts a control-plane process on the CPUs K8S_ENV_CPUS names. taskset execs
# the command, so `$!` after `... &` stays the process's own PID (the pidfiles, the bench's CPU
# readings).
ON_CPUS=()
[ -z "${K8S_ENV_CPUS:-}" ] || ON_CPUS=(taskset -c "$K8S_ENV_CPUS")

free_ports() { # count: distinct free loopback ports, one per line (all held while chosen)
  python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in socks))
' "$1"
}

# shellcheck source=scripts/pidfiles.sh
. "$HERE/pidfiles.sh"

make_certs() { # dir [extra IP SAN]
  local d=$1 san="IP:127.0.0.1,DNS:localhost"
  [ -n "${2:-}" ] && san+=",IP:$2,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  [ -f "$d/pki/serving.crt" ] && return 0
  mkdir -p "$d/pki"
  (
    cd "$d/pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=midonet-test-ca" \
      -keyout ca.key -out ca.crt 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
      -keyout serving.key -out serving.csr 2>/dev/null
    printf 'subjectAltName=%s\n' "$san" >san.ext
    openssl x509 -req -in serving.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile san.ext -out serving.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
}

write_kubeconfig() { # file port token user
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://$API_HOST:$2
    certificate-authority: $(dirname "$1")/pki/ca.crt
users:
- name: $4
  user:
    token: $3
contexts:
- name: local
  context: {cluster: local, user: $4}
current-context: local
EOF
}

start_apiserver() { # dir
  local d=$1
  # shellcheck disable=SC1091
  . "$d/ports"
  local mode=(--endpoint-reconciler-type=none --disable-admission-plugins=ServiceAccount)
  if [ -n "$NODE_MODE" ]; then
    # The node's name resolves nowhere: `kubectl logs` and `exec` reach it by its address.
    mode=(--endpoint-reconciler-type=lease --service-account-lookup=true
      --kubelet-preferred-address-types=InternalIP)
  fi
  "${ON_CPUS[@]}" "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --secure-port="$API_PORT" --bind-address="$API_HOST" --advertise-address="$API_HOST" \
    --insecure-port=0 \
    --tls-cert-file="$d/pki/serving.crt" --tls-private-key-file="$d/pki/serving.key" \
    --client-ca-file="$d/pki/ca.crt" \
    --token-auth-file="$d/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$d/pki/sa.pub" \
    --service-account-signing-key-file="$d/pki/sa.key" \
    --service-cluster-ip-range=10.96.0.0/12 \
    "${mode[@]}" \
    --cert-dir="$d/pki" \
    ${API_EXTRA:+"$API_EXTRA"} \
    >"$d/kube-apiserver.log" 2>&1 &
  echo $! >"$d/kube-apiserver.pid"
}

wait_serving() { # dir name seconds check...: runs the check every 0.5 s while DIR/name.pid lives
  local d=$1 name=$2 seconds=$3
  shift 3
  wait_for "$name" "$seconds" "$d/$name.pid" "$@"
}

apiserver_ready() { # dir
  curl -sf --cacert "$1/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
    "https://$API_HOST:$API_PORT/readyz" >/dev/null 2>&1
}

etcd_healthy() {
  curl -sf "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'
}

wait_ready() { # dir
  # shellcheck disable=SC1091
  . "$1/ports"
  wait_serving "$1" kube-apiserver 120 apiserver_ready "$1"
}

start_etcd() { # dir
  local d=$1
  # shellcheck disable=SC1091
  . "$d/ports"
  "${ON_CPUS[@]}" etcd --data-dir "$d/etcd" --name local \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "local=http://127.0.0.1:$ETCD_PEER_PORT" \
    >"$d/etcd.log" 2>&1 &
  echo $! >"$d/etcd.pid"
}

wait_etcd() { # dir; the apiserver gives up on an etcd that does not serve within its deadline
  # shellcheck disable=SC1091
  . "$1/ports"
  wait_serving "$1" etcd 60 etcd_healthy
}

# The ports are free when chosen but only taken when etcd and the apiserver bind them; on a
# busy machine an outgoing connection can take one in between. A start that fails is tried
# again on new ports, from an empty etcd.
START_ATTEMPTS=3
API_HOST=127.0.0.1
NODE_MODE=

start_attempt() { # dir api_extra
  local d=$1 ports
  ports=$(free_ports 3)
  {
    echo "ETCD_PORT=$(sed -n 1p <<<"$ports")"
    echo "ETCD_PEER_PORT=$(sed -n 2p <<<"$ports")"
    echo "API_PORT=$(sed -n 3p <<<"$ports")"
    echo "API_EXTRA=$2"
    echo "API_HOST=$API_HOST"
    echo "NODE_MODE=$NODE_MODE"
  } >"$d/ports"
  # shellcheck disable=SC1091
  . "$d/ports"
  write_kubeconfig "$d/kubeconfig" "$API_PORT" "$ADMIN_TOKEN" admin
  write_kubeconfig "$d/kubeconfig-restricted" "$API_PORT" "$RESTRICTED_TOKEN" "$RESTRICTED_USER"
  log "starting etcd on 127.0.0.1:$ETCD_PORT"
  start_etcd "$d"
  wait_etcd "$d" || return 1
  log "starting kube-apiserver on https://$API_HOST:$API_PORT"
  start_apiserver "$d"
  wait_ready "$d"
}

cmd_start() {
  local d="" watch="" api_extra="--runtime-config=discovery.k8s.io/v1beta1=false" attempt
  while [ $# -gt 0 ]; do
    case $1 in
      --watch-pid) watch=$2; shift 2 ;;
      --endpointslices) api_extra="--feature-gates=EndpointSliceTerminatingCondition=true"; shift ;;
      --node) NODE_MODE=1; shift ;;
      *) d=$1; shift ;;
    esac
  done
  [ -n "$d" ] || { log "usage: start DIR [--watch-pid PID] [--endpointslices] [--node]"; exit 2; }
  BIN=$("$HERE/provision-k8s.sh" | tail -n1)
  mkdir -p "$d"; d=$(cd "$d" && pwd)
  touch "$d/running"
  if [ -n "$watch" ]; then
    # The watchdog stops everything when the watched process (a test binary) is gone.
    nohup setsid bash -c "while kill -0 $watch 2>/dev/null && [ -f '$d/running' ]; do sleep 1; done; '$HERE/k8s-env.sh' stop '$d' && rm -rf '$d'" \
      >/dev/null 2>&1 &
  fi
  if [ -n "$NODE_MODE" ]; then
    "$HERE/k8s-node.sh" net-up "$d"
    # shellcheck disable=SC1091
    . "$d/node/vars"
    API_HOST=$HOST_ADDR
  fi
  make_certs "$d" "${HOST_ADDR:-}"
  printf '%s,admin,admin-uid,"system:masters"\n%s,%s,restricted-uid\n' \
    "$ADMIN_TOKEN" "$RESTRICTED_TOKEN" "$RESTRICTED_USER" >"$d/tokens.csv"

  for attempt in $(seq 1 "$START_ATTEMPTS"); do
    start_attempt "$d" "$api_extra" && break
    stop_processes "$d"
    rm -rf "$d/etcd"
    if [ "$attempt" -eq "$START_ATTEMPTS" ]; then
      log "the control plane did not start in $START_ATTEMPTS attempts"
      exit 1
    fi
    log "start attempt $attempt failed; trying again on new ports"
  done

  start_controller_manager "$d"
  if [ -n "$NODE_MODE" ]; then
    "$HERE/k8s-node.sh" start "$d" || { cmd_stop "$d"; exit 1; }
  fi

  {
    echo "export KUBECONFIG=$d/kubeconfig"
    echo "export MIDONETKUBE_TEST_KUBECONFIG=$d/kubeconfig"
    echo "export MIDONETKUBE_TEST_RESTRICTED_KUBECONFIG=$d/kubeconfig-restricted"
    echo "export MIDONETKUBE_TEST_RESTRICTED_USER=$RESTRICTED_USER"
    echo "export MIDONETKUBE_TEST_K8S_DIR=$d"
    echo "export MIDONETKUBE_TEST_KUBECTL=$BIN/kubectl"
    if [ -n "$NODE_MODE" ]; then
      echo "export MIDONETKUBE_TEST_NODE_NAME=$NODE_NAME"
      echo "export MIDONETKUBE_TEST_NODE_ADDR=$NODE_ADDR"
      echo "export MIDONETKUBE_TEST_HOST_ADDR=$HOST_ADDR"
      echo "export MIDONETKUBE_TEST_CLUSTER_CIDR=$CLUSTER_CIDR"
      echo "export MIDONETKUBE_TEST_CONTAINERD=$d/node/containerd/containerd.sock"
      echo "export MIDONETKUBE_TEST_NODE_NS=$NODE_NS"
    fi
  } >"$d/env"
  log "ready: source $d/env"
  echo "$d/env"
}

stop_processes() { # dir
  local d=$1
  kill_pidfile "$d/kube-controller-manager.pid"
  kill_pidfile "$d/kube-apiserver.pid"
  kill_pidfile "$d/etcd.pid"
}

cmd_stop() {
  local d=${1:?usage: stop DIR}
  rm -f "$d/running"
  local node_ok=0
  "$HERE/k8s-node.sh" stop "$d" || node_ok=1
  stop_processes "$d"
  return $node_ok
}

start_controller_manager() { # dir
  local d=$1 mode=(--controllers=garbagecollector,namespace)
  if [ -n "$NODE_MODE" ]; then
    mode=(--controllers=garbagecollector,namespace,nodeipam,nodelifecycle,serviceaccount,serviceaccount-token,deployment,replicaset,endpoint,podgc,ttl,clusterrole-aggregation,root-ca-cert-publisher
      --allocate-node-cidrs=true --cluster-cidr="$CLUSTER_CIDR" --node-cidr-mask-size=24
      --service-cluster-ip-range=10.96.0.0/12
      --service-account-private-key-file="$d/pki/sa.key" --root-ca-file="$d/pki/ca.crt")
  fi
  "${ON_CPUS[@]}" "$BIN/kube-controller-manager" --kubeconfig="$d/kubeconfig" \
    "${mode[@]}" --leader-elect=false --secure-port=0 --port=0 \
    >"$d/kube-controller-manager.log" 2>&1 &
  echo $! >"$d/kube-controller-manager.pid"
}

cmd_restart_apiserver() {
  local d=${1:?usage: restart-apiserver DIR}
  BIN=$("$HERE/provision-k8s.sh" | tail -n1)
  kill_pidfile "$d/kube-apiserver.pid"
  start_apiserver "$d"
  wait_ready "$d"
}

cmd_stop_controller_manager() {
  local d=${1:?usage: stop-controller-manager DIR}
  kill_pidfile "$d/kube-controller-manager.pid"
}

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  stop-controller-manager) shift; cmd_stop_controller_manager "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  restart-apiserver) shift; cmd_restart_apiserver "$@" ;;
  provision) "$HERE/provision-k8s.sh" ;;
  *) echo "usage: $0 start DIR [--watch-pid PID] [--endpointslices] [--node] | stop DIR | restart-apiserver DIR | stop-controller-manager DIR | provision" >&2; exit 2 ;;
esac
