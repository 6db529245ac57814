#!/usr/bin/env bash
# Runs the benchmark's initial sync N times (default 5), each on a fresh control plane, and
# prints every run's convergence, floors and ratios, then the median ratios. One run varies
# with what else the machine does; the median is the figure to compare. The second floor
# adds a status write per Translation (see docs/benchmark.md). The last column is the
# controllers' peak RSS. With --watched-floor, also the ratio to a third floor (a status write
# and a second Translation watch) and the apiserver's CPU in the sync over each floor's.
# The floor with a status write is measured again after the sync; the sync is also compared
# with the mean of the two, and the floor's drift (after / before) is printed.
# BENCH_RATIO_KEEP=DIR keeps each run's JSON there. BENCH_RATIO_SPLIT_CORES=1 runs the control
# plane on the first half of the CPUs and the bench (its floor clients, the simulator, the
# controllers) on the other half, as where the controllers run on a node of their own.
#   bash scripts/bench-ratio.sh [N] [extra bench arguments, e.g. --pods 8000 or --unwatched-sync]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
shift || true
cargo build --profile dist --quiet --workspace --bins
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
keep=${BENCH_RATIO_KEEP:-}
[ -z "$keep" ] || mkdir -p "$keep"
bench=(./target/dist/midonet-kube-bench)
if [ -n "${BENCH_RATIO_SPLIT_CORES:-}" ]; then
  cpus=$(nproc)
  [ "$cpus" -ge 2 ] || { echo "BENCH_RATIO_SPLIT_CORES needs 2 CPUs or more" >&2; exit 1; }
  half=$((cpus / 2))
  export K8S_ENV_CPUS="0-$((half - 1))"
  bench=(taskset -c "$half-$((cpus - 1))" "${bench[@]}")
  echo "control plane on CPUs $K8S_ENV_CPUS, the bench and the controllers on CPUs $half-$((cpus - 1))"
fi

field() { # file key: the JSON number after "key": (nothing, and no failure, if it is absent)
  { grep -o "\"$2\": [0-9.e+-]*" "$1" || true; } | head -n1 | awk '{print $2}'
}
quotient() { # file key-a key-b: field a / field b
  awk -v a="$(field "$1" "$2")" -v b="$(field "$1" "$3")" 'BEGIN { print a / b }'
}

printf '%-4s %14s %10s %8s %16s %8s %12s\n' run convergence floor ratio "floor w/ status" ratio "peak RSS"
for i in $(seq 1 "$runs"); do
  "${bench[@]}" --only-initial --json-out "$out/$i.json" "$@" \
    >"$out/$i.log" 2>&1 || { echo "run $i failed; its output:" >&2; tail -n 30 "$out/$i.log" >&2; exit 1; }
  printf '%-4s %12.2f s %8.2f s %8.2f %14.2f s %8.2f %8.1f MiB\n' "$i" \
    "$(field "$out/$i.json" initialConvergenceSeconds)" \
    "$(field "$out/$i.json" floorSeconds)" \
    "$(field "$out/$i.json" convergenceOverFloor)" \
    "$(field "$out/$i.json" floorWithStatusSeconds)" \
    "$(field "$out/$i.json" convergenceOverFloorWithStatus)" \
    "$(awk -v k="$(field "$out/$i.json" peakRssKiB)" 'BEGIN { print k / 1024 }')"
  field "$out/$i.json" peakRssKiB >>"$out/rss"
  field "$out/$i.json" convergenceOverFloor >>"$out/ratios"
  field "$out/$i.json" convergenceOverFloorWithStatus >>"$out/status-ratios"
  quotient "$out/$i.json" floorWithStatusSeconds floorSeconds >>"$out/floor-ratios"
  quotient "$out/$i.json" apiserverCpuSecondsSync apiserverCpuSecondsFloorWithStatus >>"$out/cpu-ratios"
  field "$out/$i.json" convergenceOverFloorWithStatusMean >>"$out/status-mean-ratios"
  quotient "$out/$i.json" apiserverCpuSecondsSync apiserverCpuSecondsFloorWithStatusMean >>"$out/cpu-mean-ratios"
  quotient "$out/$i.json" apiserverCpuSecondsFloorWithStatusAfter apiserverCpuSecondsFloorWithStatus >>"$out/status-drift"
  watched=$(field "$out/$i.json" convergenceOverFloorWatched)
  if [ -n "$watched" ]; then
    echo "$watched" >>"$out/watched-ratios"
    quotient "$out/$i.json" apiserverCpuSecondsSync apiserverCpuSecondsFloorWatched >>"$out/watched-cpu-ratios"
  fi
  [ -z "$keep" ] || cp "$out/$i.json" "$keep/$i.json"
done
summary() { # file label
  sort -n "$1" | awk -v label="$2" '{ r[NR] = $1 }
    END { m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
          printf "%s over %d runs: min %.2f, median %.2f, max %.2f\n", label, NR, r[1], m, r[NR] }'
}
summary "$out/ratios" "convergence / floor"
summary "$out/status-ratios" "convergence / floor with a status write"
summary "$out/floor-ratios" "floor with a status write / floor"
summary "$out/cpu-ratios" "apiserver CPU, sync / floor with a status write"
summary "$out/status-mean-ratios" "convergence / floor with a status write (mean of before and after the sync; target: median <= 1.05)"
summary "$out/cpu-mean-ratios" "apiserver CPU, sync / floor with a status write (mean of before and after)"
summary "$out/status-drift" "apiserver CPU, floor with a status write after the sync / before"
if [ -s "$out/watched-ratios" ]; then
  summary "$out/watched-ratios" "convergence / floor with a status write and a second watch (mean of before and after the sync)"
  summary "$out/watched-cpu-ratios" "apiserver CPU, sync / floor with a status write and a second watch"
fi
awk '{ print $1 / 1024 }' "$out/rss" >"$out/rss-mib"
summary "$out/rss-mib" "peak RSS of the controllers, MiB"
