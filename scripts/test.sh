#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests, and the integration tests against a
# real local control plane (started per test binary by tests/support) and the simulator; the
# tests/node_*.rs binaries add a real node (scripts/k8s-node.sh) and deploy the image there.
# Installs what it needs (Debian packages, control-plane and node binaries built once and
# cached).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/provision-k8s.sh >/dev/null
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
# --no-fail-fast: a failing test binary does not hide the results of the others.
cargo test --workspace --no-fail-fast -- --test-threads="${TEST_THREADS:-4}"
