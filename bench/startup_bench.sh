#!/bin/bash
# Launcher startup cost: the time from starting `psformer train` (by hand, or under mpirun) to the
# first training step's line in RUN_DIR/metrics.jsonl, for jobs of 3 processes (1 server, 2
# workers) and 8 processes (2 servers, 6 workers), on the copy config. That span holds process
# start, the MPI bootstrap (cluster mode), endpoint reservation, role-process start, ZeroMQ
# connections, the first pull, and step 1 itself (forward, backward, push); `--local` (one
# process, no servers) is the floor without any of the launcher's work.
#
# Usage: bench/startup_bench.sh [PSFORMER_BINARY] [REPETITIONS]   (defaults: build/psformer, 5)
# Prints one line per configuration: the median and the spread of the repetitions, in seconds.
set -euo pipefail

cd "$(dirname "$0")/.."
binary=$(realpath "${1:-build/psformer}")
reps=${2:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Few steps, a metrics line after each, no validation or checkpoints: the job ends right after.
common=(--config configs/copy.pbtxt --set training.max_steps=2 --set training.valid_every=0
        --set training.stop_at_valid_accuracy=0 --set logging.every_steps=1 --set checkpoint.every_steps=0)

# Runs one job (its command in "$@") with run directory $run; prints the seconds from launch to
# the first step line.
time_to_first_step() {
  local run=$1
  shift
  local start now
  start=$(date +%s.%N)
  "$@" >"$run.out" 2>&1 &
  local pid=$!
  until grep -q '"loss"' "$run/metrics.jsonl" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "job exited before its first step; its output:" >&2
      cat "$run.out" >&2
      exit 1
    fi
    sleep 0.005
  done
  now=$(date +%s.%N)
  wait "$pid" || { echo "job failed; its output:" >&2; cat "$run.out" >&2; exit 1; }
  awk -v a="$now" -v b="$start" 'BEGIN { printf "%.3f\n", a - b }'
}

# median and min..max of the numbers on stdin
summarize() {
  sort -g | awk '{v[NR] = $1} END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "median %.3f s  (min %.3f, max %.3f, n=%d)\n", m, v[1], v[NR], NR }'
}

# Open MPI's own share: mpirun starting N copies of /bin/true until they all exited.
bench_mpirun_alone() {
  local ranks=$1
  local times=()
  for ((r = 0; r < reps; ++r)); do
    local start end
    start=$(date +%s.%N)
    mpirun --allow-run-as-root --oversubscribe -np "$ranks" /bin/true
    end=$(date +%s.%N)
    times+=("$(awk -v a="$end" -v b="$start" 'BEGIN { printf "%.3f\n", a - b }')")
  done
  printf '%-34s %s\n' "mpirun -np $ranks /bin/true" "$(printf '%s\n' "${times[@]}" | summarize)"
}

bench() {
  local label=$1 mode=$2 servers=$3 workers=$4
  local times=()
  for ((r = 0; r < reps; ++r)); do
    local run="$work/${label//[^A-Za-z0-9]/_}-$r"  # a plain name, so that older binaries run it too
    local job=(train "${common[@]}" --set cluster.servers="$servers" --set cluster.workers="$workers" --run-dir "$run")
    case $mode in
      local) times+=("$(time_to_first_step "$run" "$binary" train "${common[@]}" --local --run-dir "$run")") ;;
      single) times+=("$(time_to_first_step "$run" "$binary" "${job[@]}")") ;;
      mpi) times+=("$(time_to_first_step "$run" mpirun --allow-run-as-root --oversubscribe \
                        -np $((servers + workers)) "$binary" "${job[@]}")") ;;
    esac
  done
  printf '%-34s %s\n' "$label" "$(printf '%s\n' "${times[@]}" | summarize)"
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr)"
echo "binary: $binary; $reps repetitions each; launch -> first metrics line"
bench "local (1 process, no servers)" local 0 1
bench "single-node, 3 processes (1s+2w)" single 1 2
bench "mpirun -np 3 (1s+2w)" mpi 1 2
bench "single-node, 8 processes (2s+6w)" single 2 6
bench "mpirun -np 8 (2s+6w)" mpi 2 6
bench_mpirun_alone 3
bench_mpirun_alone 8
