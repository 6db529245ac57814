#!/usr/bin/env bash
# The main job: the controllers on a local real cluster (etcd + kube-apiserver +
# kube-controller-manager v1.20.2) with the MidoNet API simulator as the backend.
#
#   bash scripts/demo.sh              the controllers deployed as users deploy them: a real
#                                     node (kubelet, containerd, kube-proxy, CNI plugins), the
#                                     image of scripts/image.sh, `kubectl apply -k` of an overlay
#                                     of deploy/; workloads as Deployments whose pods get their
#                                     addresses from the node's podCIDR; `check` and `trace`
#   bash scripts/demo.sh --processes  no node: the controllers as a process of a least-privilege
#                                     user, sample Nodes, Pods, Services and Endpoints by hand
#
# Runs until Ctrl-C, then stops and removes everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RUN_DIR="${MIDONETKUBE_DEMO_DIR:-$ROOT/.k8s-run}"
SIM_PORT="${MIDONETKUBE_DEMO_SIM_PORT:-18181}"
METRICS_PORT="${MIDONETKUBE_DEMO_METRICS_PORT:-19453}"
BIN=$ROOT/target/release/midonet-kube-controllers
MODE=node
case "${1:-}" in
  --processes) MODE=processes ;;
  "") ;;
  *) echo "usage: $0 [--processes]" >&2; exit 2 ;;
esac
pids=()

cleanup() {
  trap - EXIT INT TERM
  echo; echo "demo: stopping"
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  bash scripts/k8s-env.sh stop "$RUN_DIR" || true
}
trap cleanup EXIT INT TERM

wait_in_sync() { # minimum number of Translations
  echo -n "demo: waiting until every Translation is pushed "
  for _ in $(seq 1 240); do
    states=$("$K" get tr -A --no-headers -o custom-columns=S:.status.conditions[0].status 2>/dev/null || true)
    total=$(printf '%s\n' "$states" | grep -c . || true)
    ready=$(printf '%s\n' "$states" | grep -c '^True$' || true)
    if [ "$total" -gt "$1" ] && [ "$total" = "$ready" ]; then break; fi
    echo -n .; sleep 1
  done
  echo " $ready/$total in sync"
}

start_sim() { # listen address, hosts...
  local listen=$1
  shift
  echo "demo: starting the MidoNet API simulator on $listen"
  "$BIN" backend-sim --listen "$listen" \
    --username admin --password demo-password --project admin \
    "${@/#/--host=}" \
    >"$RUN_DIR/backend-sim.log" 2>&1 &
  pids+=($!)
}

run_processes() {
  ENV_FILE=$(bash scripts/k8s-env.sh start "$RUN_DIR" | tail -n1)
  # shellcheck disable=SC1090
  . "$ENV_FILE"
  K="$MIDONETKUBE_TEST_KUBECTL"
  start_sim "127.0.0.1:$SIM_PORT" demo-node-1 demo-node-2 demo-node-3

  echo "demo: installing the CRD and the least-privilege RBAC of deploy/"
  "$K" apply -f deploy/crd.yaml -f deploy/rbac.yaml -f scripts/demo/restricted-user-rbac.yaml >/dev/null
  "$K" wait --for=condition=Established crd/translations.midonet.org --timeout=60s >/dev/null

  echo "demo: starting the controllers as user $MIDONETKUBE_TEST_RESTRICTED_USER"
  printf 'demo-password\n' >"$RUN_DIR/password"
  MIDONETKUBE_KUBECONFIG="$MIDONETKUBE_TEST_RESTRICTED_KUBECONFIG" \
  MIDONETKUBE_MIDONET_API="http://127.0.0.1:$SIM_PORT/midonet-api" \
  MIDONETKUBE_USERNAME=admin MIDONETKUBE_PROJECT=admin \
  MIDONETKUBE_PASSWORD_FILE="$RUN_DIR/password" \
  MIDONETKUBE_METRICS_ADDRESS="127.0.0.1:$METRICS_PORT" \
    "$BIN" run >"$RUN_DIR/controllers.log" 2>&1 &
  pids+=($!)

  echo "demo: creating sample Nodes, Pods, Services and Endpoints"
  "$K" apply -f scripts/demo/samples.yaml >/dev/null
  wait_in_sync 10
  "$K" get tr -A
  cat <<MSG

The demo is running. In another shell:

  export KUBECONFIG=$KUBECONFIG
  export PATH=$(dirname "$K"):\$PATH
  kubectl get tr -A                       # every Translation, its owner and sync state
  kubectl describe tr -n demo \$(kubectl get tr -n demo -o name | head -n1 | cut -d/ -f2)
  kubectl get nodes -o yaml | grep midonet.org   # annotations set by the nodeannotator
  curl -s http://127.0.0.1:$SIM_PORT/_sim/state | head -c 2000   # the backend's state
  curl -s http://127.0.0.1:$METRICS_PORT/metrics | grep ^midonet_kube_controllers_translations
  kubectl delete pod -n demo web-3 --grace-period=0 --force   # watch its Translation and port go (no kubelet here)

Logs: $RUN_DIR/controllers.log, $RUN_DIR/backend-sim.log
Press Ctrl-C to stop everything.
MSG
}

# The overlay of docs/operations.md, one replica (a single node), beside the run's state.
write_overlay() { # dir api-url
  local dir=$1 base
  mkdir -p "$dir"
  base=$(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$ROOT/deploy" "$dir")
  printf 'demo-password' >"$dir/password"
  cat >"$dir/kustomization.yaml" <<EOF
namespace: kube-system
bases:
  - $base
images:
  - name: midonet/midonet-kube-controllers
    newTag: demo
secretGenerator:
  - name: midonet-kube-credentials
    behavior: replace
    files:
      - password
    literals:
      - MIDONETKUBE_USERNAME=admin
      - MIDONETKUBE_PROJECT=admin
configMapGenerator:
  - name: midonet-kube-config
    behavior: merge
    literals:
      - MIDONETKUBE_MIDONET_API=$2
patchesStrategicMerge:
  - replicas.yaml
EOF
  cat >"$dir/replicas.yaml" <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: midonet-kube-controllers, namespace: kube-system}
spec: {replicas: 1}
EOF
}

run_node() {
  ENV_FILE=$(bash scripts/k8s-env.sh start "$RUN_DIR" --node | tail -n1)
  # shellcheck disable=SC1090
  . "$ENV_FILE"
  K="$MIDONETKUBE_TEST_KUBECTL"
  local node=$MIDONETKUBE_TEST_NODE_NAME api="http://$MIDONETKUBE_TEST_HOST_ADDR:$SIM_PORT/midonet-api"
  start_sim "$MIDONETKUBE_TEST_HOST_ADDR:$SIM_PORT" "$node"

  echo "demo: building the image (scripts/image.sh) into the node's containerd"
  bash scripts/image.sh --binary "$BIN" --tag demo --out "$RUN_DIR/image.tar" \
    --import "$MIDONETKUBE_TEST_CONTAINERD" >/dev/null

  echo "demo: kubectl apply -k $RUN_DIR/overlay (deploy/ with the image, credentials, backend URL)"
  write_overlay "$RUN_DIR/overlay" "$api"
  "$K" apply -k "$RUN_DIR/overlay" >/dev/null
  "$K" -n kube-system rollout status deployment/midonet-kube-controllers --timeout=300s

  echo "demo: creating workloads (Deployments web and db, Services web and db in namespace demo)"
  "$K" apply -f scripts/demo/workloads.yaml >/dev/null
  "$K" -n demo rollout status deployment/web --timeout=300s >/dev/null
  "$K" -n demo rollout status deployment/db --timeout=300s >/dev/null
  wait_in_sync 10
  "$K" get pods -A -o wide
  echo
  "$K" get tr -A
  local web db creds=(--kubeconfig "$KUBECONFIG" --midonet-api "$api" --username admin --password demo-password --project admin)
  web=$("$K" -n demo get pods -l app=web -o jsonpath='{.items[0].metadata.name}')
  db=$("$K" -n demo get pods -l app=db -o jsonpath='{.items[0].metadata.name}')
  echo
  echo "\$ midonet-kube-controllers check"
  "$BIN" check "${creds[@]}" || true
  echo
  echo "\$ midonet-kube-controllers trace --from pod/demo/$web --to svc/demo/db:postgres"
  "$BIN" trace "${creds[@]}" --from "pod/demo/$web" --to svc/demo/db:postgres || true
  cat <<MSG

The demo is running. In another shell:

  export KUBECONFIG=$KUBECONFIG
  export PATH=$(dirname "$K"):\$PATH
  kubectl get pods -A -o wide             # the controllers' pod and the workloads on node $node
  kubectl get tr -A                       # every Translation, its owner and sync state
  kubectl -n kube-system logs deploy/midonet-kube-controllers
  kubectl -n demo scale deployment web --replicas=5   # new pods, new addresses, new Translations
  $BIN check ${creds[*]}
  $BIN trace ${creds[*]} --from pod/demo/$db --to svc/demo/web:http
  curl -s http://$MIDONETKUBE_TEST_NODE_ADDR:9453/metrics | grep ^midonet_kube_controllers_translations
  curl -s http://$MIDONETKUBE_TEST_HOST_ADDR:$SIM_PORT/_sim/state | head -c 2000   # the backend's state

Logs: $RUN_DIR/backend-sim.log, $RUN_DIR/node/*.log (kubelet, containerd, kube-proxy)
Press Ctrl-C to stop everything (the node, its network namespace, mounts and cgroups included).
MSG
}

echo "demo: building (release)"
cargo build --release --quiet
bash scripts/k8s-env.sh stop "$RUN_DIR" >/dev/null 2>&1 || true
rm -rf "$RUN_DIR"
if [ "$MODE" = node ]; then run_node; else run_processes; fi
while true; do sleep 3600 & wait $! ; done
