#!/usr/bin/env bash
# Runs the benchmark's initial sync N times (default 5), each on a fresh control plane, and
# prints every run's convergence, floor and ratio, then the median ratio. One run on a
# shared 2-core machine varies by ±15 %; the median is the figure to compare.
#   bash scripts/bench-ratio.sh [N] [extra bench arguments, e.g. --pods 8000]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
shift || true
cargo build --release --quiet --bins
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

field() { # file key: the JSON number after "key":
  grep -o "\"$2\": [0-9.e+-]*" "$1" | head -n1 | awk '{print $2}'
}

printf '%-4s %14s %10s %8s\n' run convergence floor ratio
for i in $(seq 1 "$runs"); do
  ./target/release/midonet-kube-bench --only-initial --json-out "$out/$i.json" "$@" \
    >"$out/$i.log" 2>&1 || { echo "run $i failed; its output:" >&2; tail -n 30 "$out/$i.log" >&2; exit 1; }
  printf '%-4s %12.2f s %8.2f s %8.2f\n' "$i" \
    "$(field "$out/$i.json" initialConvergenceSeconds)" \
    "$(field "$out/$i.json" floorSeconds)" \
    "$(field "$out/$i.json" convergenceOverFloor)"
  field "$out/$i.json" convergenceOverFloor >>"$out/ratios"
done
sort -n "$out/ratios" | awk '{ r[NR] = $1 }
  END { m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
        printf "convergence / floor over %d runs: min %.2f, median %.2f, max %.2f (target <= 1.5)\n", NR, r[1], m, r[NR] }'
