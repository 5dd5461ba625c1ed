#!/bin/bash
# What starting a psformer process costs, for two builds side by side (e.g. before and after a
# change to what the binary links): the wall time, CPU time and peak resident memory of a command
# that does nothing but start, read its arguments and fail (`psformer status` of a missing run
# directory), the median of REPETITIONS runs of each, alternating between the binaries.
#
# Usage: bench/process_start_bench.sh BINARY_A BINARY_B [REPETITIONS]   (default 21)
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: bench/process_start_bench.sh BINARY_A BINARY_B [REPETITIONS]" >&2
  exit 2
fi
binaries=("$(realpath "$1")" "$(realpath "$2")")
reps=${3:-21}
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "process_start_bench.sh: REPETITIONS must be a whole number >= 1" >&2; exit 2; }
for b in "${binaries[@]}"; do
  [[ -x $b ]] || { echo "process_start_bench.sh: $b is not an executable" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for ((i = 0; i < reps; i++)); do
  for k in 0 1; do
    # %e wall s, %U user s, %S system s, %M peak resident KiB; the command's own output is dropped.
    /usr/bin/time -f "%e %U %S %M" -o "$work/t" "${binaries[$k]}" status "$work/no-such-run" >/dev/null 2>&1 || true
    tail -n 1 "$work/t" >> "$work/$k"  # after time's "Command exited with non-zero status" line
  done
done

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for k in 0 1; do
  wall=$(awk '{ print $1 }' "$work/$k" | median)
  cpu=$(awk '{ printf "%.2f\n", $2 + $3 }' "$work/$k" | median)
  rss=$(awk '{ print $4 }' "$work/$k" | median)
  echo "${binaries[$k]}: start and exit ${wall} s wall, ${cpu} s CPU, $((rss / 1024)) MiB peak resident" \
    "(median of $reps)"
done
