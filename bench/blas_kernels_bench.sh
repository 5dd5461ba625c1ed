#!/usr/bin/env bash
# The demo model's forward + backward step (psformer_model_bench's "bible demo" case) under each
# OpenBLAS kernel set this CPU runs, side by side: the library's own choice first, then each set
# forced by OPENBLAS_CORETYPE, in ROUNDS interleaved rounds so that a neighbour's load falls on
# all of them alike. Results go to bench/RESULTS.md ("OpenBLAS kernel sets").
#   bench/blas_kernels_bench.sh [SECONDS per case (default 10)] [ROUNDS (default 2)]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10} rounds=${2:-2}
bench=build/psformer_model_bench
[[ -x $bench ]] || { echo "blas_kernels_bench: build $bench first (cmake --build build --target psformer_model_bench)" >&2; exit 2; }
flags=$(grep -m1 '^flags' /proc/cpuinfo)
sets=("" Prescott Sandybridge Haswell Zen)
[[ $flags == *avx512f* && $flags == *avx512bw* ]] && sets+=(SkylakeX)
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, $(date -u '+%F %H:%M UTC')"
for ((r = 1; r <= rounds; r++)); do
  for s in "${sets[@]}"; do
    if [[ -n $s ]]; then run=(env OPENBLAS_CORETYPE="$s"); else run=(env -u OPENBLAS_CORETYPE); fi
    "${run[@]}" timeout 600 "$bench" "$seconds" "bible demo" | grep '^| bible' | sed "s/^/round $r, ${s:-default}: /"
  done
done
