#!/usr/bin/env bash
# The main job: the controllers on a local real control plane (etcd + kube-apiserver +
# kube-controller-manager v1.20.2) with the MidoNet API simulator as the backend, running as
# a least-privilege user, seeded with sample Nodes, Pods, Services and Endpoints.
# Runs until Ctrl-C, then stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RUN_DIR="${MIDONETKUBE_DEMO_DIR:-$ROOT/.k8s-run}"
SIM_PORT="${MIDONETKUBE_DEMO_SIM_PORT:-18181}"
METRICS_PORT="${MIDONETKUBE_DEMO_METRICS_PORT:-19453}"
BIN=$ROOT/target/release/midonet-kube-controllers
pids=()

cleanup() {
  trap - EXIT INT TERM
  echo; echo "demo: stopping"
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  bash scripts/k8s-env.sh stop "$RUN_DIR" || true
}
trap cleanup EXIT INT TERM

echo "demo: building (release)"
cargo build --release --quiet
rm -rf "$RUN_DIR"
ENV_FILE=$(bash scripts/k8s-env.sh start "$RUN_DIR" | tail -n1)
# shellcheck disable=SC1090
. "$ENV_FILE"
K="$MIDONETKUBE_TEST_KUBECTL"

echo "demo: starting the MidoNet API simulator on 127.0.0.1:$SIM_PORT"
"$BIN" backend-sim --listen "127.0.0.1:$SIM_PORT" \
  --username admin --password demo-password --project admin \
  --host demo-node-1 --host demo-node-2 --host demo-node-3 \
  >"$RUN_DIR/backend-sim.log" 2>&1 &
pids+=($!)

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

echo -n "demo: waiting until every Translation is pushed "
for _ in $(seq 1 240); do
  states=$("$K" get tr -A --no-headers -o custom-columns=S:.status.conditions[0].status 2>/dev/null || true)
  total=$(printf '%s\n' "$states" | grep -c . || true)
  ready=$(printf '%s\n' "$states" | grep -c '^True$' || true)
  if [ "$total" -gt 10 ] && [ "$total" = "$ready" ]; then break; fi
  echo -n .; sleep 1
done
echo " $ready/$total in sync"

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
while true; do sleep 3600 & wait $! ; done
