#!/usr/bin/env bash
# The matrix products of the demo model's step (configs/bible.pbtxt) and of one layer of the base
# model (configs/base.pbtxt), forward + backward, under each BLAS library from Debian's archive
# that is installed: OpenBLAS (its own kernel choice and each AVX2 set forced by
# OPENBLAS_CORETYPE), BLIS (pthread and OpenMP builds), oneDNN's dnnl_sgemm and MKL. Installs
# nothing: it names what is missing and the package that has it. One process per library, thread
# count and round, in ROUNDS interleaved rounds so that a neighbour's load falls on all alike;
# each result is checked against a double-precision sum and against every other library's.
# Results go to bench/RESULTS.md ("BLAS libraries").
#   bench/blas_libraries_bench.sh [SECONDS per shape (default 0.3)] [ROUNDS (default 3)]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-0.3} rounds=${2:-3}
for target in psformer_gemm_shapes blas_libraries_bench; do
  [[ -x build/$target ]] || { echo "blas_libraries_bench: build build/$target first (cmake --build build --target $target)" >&2; exit 2; }
done
lib=/usr/lib/$(gcc -dumpmachine)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# label | KIND | library | Debian package | OPENBLAS_CORETYPE
candidates=(
  "OpenBLAS, its own choice|openblas|$lib/openblas-pthread/libopenblas.so.0|libopenblas0-pthread|"
  "OpenBLAS, Zen|openblas|$lib/openblas-pthread/libopenblas.so.0|libopenblas0-pthread|Zen"
  "OpenBLAS, Haswell|openblas|$lib/openblas-pthread/libopenblas.so.0|libopenblas0-pthread|Haswell"
)
flags=$(grep -m1 '^flags' /proc/cpuinfo)
[[ $flags == *avx512f* && $flags == *avx512bw* ]] &&
  candidates+=("OpenBLAS, SkylakeX|openblas|$lib/openblas-pthread/libopenblas.so.0|libopenblas0-pthread|SkylakeX")
candidates+=(
  "BLIS, pthreads|blis|$lib/blis-pthread/libblis.so.4|libblis4-pthread|"
  "BLIS, OpenMP|blis|$lib/blis-openmp/libblis.so.4|libblis4-openmp|"
  "oneDNN (dnnl_sgemm)|dnnl|$lib/libdnnl.so.2|libdnnl2|"
  "MKL|mkl|$lib/libmkl_rt.so|libmkl-rt (non-free)|"
)
present=()
for c in "${candidates[@]}"; do
  IFS='|' read -r label kind path package coretype <<<"$c"
  if [[ -e $path ]]; then present+=("$c"); else echo "not installed: $label ($path; apt-get install $package)"; fi
done

build/psformer_gemm_shapes configs/bible.pbtxt 30 0 4000 >"$work/demo.shapes"
build/psformer_gemm_shapes configs/base.pbtxt 32 1 >"$work/base.shapes"
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, $(date -u '+%F %H:%M UTC')"
for case in demo base; do
  echo "$case: $(head -1 "$work/$case.shapes" | sed 's/^# //'), $(grep -vc '^#' "$work/$case.shapes") distinct products"
done

# results: case|candidate index|threads|round|ms|error|kernels
for ((r = 1; r <= rounds; r++)); do
  echo "round $r: load average $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)"
  for case in demo base; do
    for i in "${!present[@]}"; do
      IFS='|' read -r label kind path package coretype <<<"${present[$i]}"
      if [[ -n $coretype ]]; then run=(env OPENBLAS_CORETYPE="$coretype"); else run=(env -u OPENBLAS_CORETYPE); fi
      for threads in 1 2; do
        total=$("${run[@]}" build/blas_libraries_bench time "$kind" "$path" "$work/$case.shapes" "$threads" \
          "$seconds" "$work/$case.$i.$threads.samples" | grep '^total')
        read -r _ ms _ _ _ error _ kernels <<<"${total//,/}"
        echo "$case|$i|$threads|$r|$ms|$error|$kernels" >>"$work/results"
        echo "  $case, $label, $threads thread(s): $ms ms"
      done
    done
  done
done
echo "end: load average $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)"

# The largest difference of each library's products from any other's (first round, same threads).
for case in demo base; do
  for threads in 1 2; do
    for i in "${!present[@]}"; do
      others=()
      for j in "${!present[@]}"; do [[ $j != "$i" ]] && others+=("$work/$case.$j.$threads.samples"); done
      ((${#others[@]})) || continue
      largest=$(build/blas_libraries_bench compare "$work/$case.$i.$threads.samples" "${others[@]}" |
        awk '$2 > m { m = $2 } END { print m + 0 }')
      echo "$case|$i|$threads|$largest" >>"$work/differences"
    done
  done
done

echo
echo "| step | library | kernels | 1 thread: best / median | 2 threads: best / median | error vs double | vs other libraries |"
echo "|---|---|---|---|---|---|---|"
for case in demo base; do
  for i in "${!present[@]}"; do
    label=${present[$i]%%|*}
    cells=()
    for threads in 1 2; do
      cells+=("$(awk -F'|' -v c="$case" -v i="$i" -v t="$threads" '$1 == c && $2 == i && $3 == t { print $5 }' \
        "$work/results" | sort -g | awk '{ v[NR] = $1 } END { printf "%.1f / %.1f ms", v[1], (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2 }')")
    done
    kernels=$(awk -F'|' -v c="$case" -v i="$i" '$1 == c && $2 == i { print $7; exit }' "$work/results")
    error=$(awk -F'|' -v c="$case" -v i="$i" '$1 == c && $2 == i && $6 > m { m = $6 } END { printf "%.1e", m }' "$work/results")
    difference=$(awk -F'|' -v c="$case" -v i="$i" '$1 == c && $2 == i && $4 > m { m = $4 } END { printf "%.1e", m }' \
      "$work/differences" 2>/dev/null || echo -)
    echo "| $case | $label | $kernels | ${cells[0]} | ${cells[1]} | $error | $difference |"
  done
done
