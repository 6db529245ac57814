#!/usr/bin/env bash
# The main job: the controllers on a local real control plane with the simulator backend.
# (Foundation stage: brings up the control plane and installs the Translation CRD.)
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_DIR="${MIDONETKUBE_DEMO_DIR:-$PWD/.k8s-run}"

cleanup() { bash scripts/k8s-env.sh stop "$RUN_DIR" || true; }
trap cleanup EXIT INT TERM

cargo build --release --quiet
ENV_FILE=$(bash scripts/k8s-env.sh start "$RUN_DIR" | tail -n1)
# shellcheck disable=SC1090
. "$ENV_FILE"
./target/release/midonet-kube-controllers crd | "$MIDONETKUBE_TEST_KUBECTL" apply -f -
"$MIDONETKUBE_TEST_KUBECTL" wait --for=condition=Established crd/translations.midonet.org --timeout=60s

cat <<MSG

The local control plane is up with the Translation CRD installed. Try, in another shell:

  export KUBECONFIG=$KUBECONFIG
  export PATH=$(dirname "$MIDONETKUBE_TEST_KUBECTL"):\$PATH
  kubectl get tr -A

Press Ctrl-C to stop everything.
MSG
while true; do sleep 3600; done
