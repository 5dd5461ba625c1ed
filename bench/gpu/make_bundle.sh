#!/usr/bin/env bash
# Builds psformer with the CUDA backend and packs what a GPU machine needs to run the gpu tests
# and the GPU benchmark: the binaries, these scripts, and the shared libraries they load that a
# machine with the CUDA driver, nvcc and PyTorch but no Debian packages lacks (protobuf, zmq,
# sentencepiece, openblas, boost, openmpi and what they pull in). glibc and the CUDA driver stay
# out (the target provides them); the CUDA toolkit's runtime and cuBLAS go in only with
# --with-cuda-libs (for a target whose toolkit is not CUDA 13).
#
# Usage: bench/gpu/make_bundle.sh [--build-dir DIR] [--out DIR] [--with-cuda-libs] [--corpus DIR | --bible]
# Result: OUT (default BUILD_DIR/bundle, BUILD_DIR default build-gpu/) with bin/, lib/, configs/,
# bench/gpu/, scripts/trace-summary, and OUT.tar.gz holding the same; run
# OUT/bench/gpu/run_on_gpu.sh there.
# --corpus DIR: a corpus prepared for the base model (psformer prepare --vocab-size 37000 --out
# DIR, e.g. from scripts/get-bible-corpus), carried as data/bible-37k for train_on_gpu.sh, which
# run_on_gpu.sh then runs too (the GPU machine has no package registry to fetch one).
# --bible: the same corpus made here first (scripts/get-bible-corpus, then psformer prepare
# --vocab-size 37000; under a minute on 2 cores), kept as BUILD_DIR/bible-37k, which later bundles
# reuse. With a GPU lent for minutes, this and --build-dir build leave only the call itself:
# bench/gpu/device_call.sh, which names the archive to carry.
# --build-dir build reuses scripts/build's tree where it found nvcc (PSFORMER_CUDA=AUTO): its
# CUDA code is already built for sm_80/sm_90, so the bundle takes minutes instead of a second
# full build (~40 min on 2 cores). The archive with the 37,000-piece corpus: ~32 MB.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build="$root/build-gpu"
out=""
cuda_libs=0
corpus=""
bible=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build=$(realpath -m "${2:?--build-dir wants a directory}"); shift 2 ;;
    --out) out=$(realpath -m "${2:?--out wants a directory}"); shift 2 ;;
    --with-cuda-libs) cuda_libs=1; shift ;;
    --corpus) corpus=$(realpath "${2:?--corpus wants a directory}"); shift 2 ;;
    --bible) bible=1; shift ;;
    *) echo "make_bundle.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
out="${out:-$build/bundle}"  # under build*/, which git ignores
if [[ $bible -eq 1 && -n $corpus ]]; then
  echo "make_bundle.sh: --bible makes the corpus that --corpus names: give one of them" >&2
  exit 2
fi
if [[ -n $corpus && ! -f $corpus/spm.model ]]; then
  echo "make_bundle.sh: $corpus is not a prepared corpus (no spm.model; see psformer prepare)" >&2
  exit 2
fi

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPSFORMER_CUDA=ON > /dev/null
gpu_tests=(cuda_backend_test cuda_model_test cuda_range_downloader_test decode_cuda_test gpu_training_test)
cmake --build "$build" -j"$(nproc)" --target psformer psformer_cuda psformer_gpu_bench psformer_host_passes \
  "${gpu_tests[@]}"

if [[ $bible -eq 1 ]]; then
  corpus="$build/bible-37k"
  if [[ ! -f $corpus/spm.model ]]; then
    raw="$build/bible-raw"
    [[ -f $raw/test.es ]] || "$root/scripts/get-bible-corpus" "$raw"
    rm -rf "$corpus"  # a directory there without spm.model is no prepared corpus; prepare wants a new --out
    "$build/psformer" prepare --src "$raw/train.en" --tgt "$raw/train.es" --valid-src "$raw/valid.en" \
      --valid-tgt "$raw/valid.es" --vocab-size 37000 --out "$corpus"
  fi
fi

binaries=("$build/psformer" "$build/psformer_gpu_bench" "$build/psformer_host_passes")
for t in "${gpu_tests[@]}"; do binaries+=("$build/tests/$t"); done

# Build into a temporary directory and move it into place at the end: no half-made bundle on failure.
tmp=$(mktemp -d "${out%/}.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/lib" "$tmp/bench/gpu" "$tmp/configs"
cp "${binaries[@]}" "$tmp/bin/"
# The CUDA backend psformer loads when a GPU is asked for: it looks beside itself and in ../lib.
cp "$build/libpsformer_cuda.so" "$tmp/lib/"
cp "$root/configs/copy.pbtxt" "$root/configs/base.pbtxt" "$tmp/configs/"  # gpu_training_test, train_on_gpu.sh
if [[ -n $corpus ]]; then
  mkdir -p "$tmp/data"
  cp -r "$corpus" "$tmp/data/bible-37k"
fi
strip --strip-debug "$tmp"/bin/* "$tmp/lib/libpsformer_cuda.so"  # debug info is most of their size
cp "$root/bench/gpu/run_on_gpu.sh" "$root/bench/gpu/train_on_gpu.sh" "$root/bench/gpu/pytorch_transformer.py" \
  "$tmp/bench/gpu/"
mkdir -p "$tmp/scripts"
cp "$root/scripts/trace-summary" "$tmp/scripts/"  # for the traces train_on_gpu.sh --keep keeps

# Libraries the target provides itself: glibc's, the driver's, and (unless asked) the toolkit's.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libresolv\.so|libcuda\.so)'
toolkit='^(libcudart|libcublas|libcublasLt)\.so'
for bin in "${binaries[@]}" "$build/libpsformer_cuda.so"; do
  ldd "$bin" | awk '/=> \// { print $1, $3 }'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $skip ]]; then continue; fi
  if [[ "$name" =~ $toolkit && $cuda_libs -eq 0 ]]; then continue; fi
  cp -L "$path" "$tmp/lib/$name"
done

rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
# The same as one archive: about a third of the size (OpenBLAS's every-CPU build is half of
# lib/), for transfers that limit bytes.
tar -C "$out" -czf "$out.tar.gz" .
echo "bundle: $out ($(du -sh "$out" | cut -f1)); libraries: $(ls "$out/lib" | wc -l); archive: $out.tar.gz ($(du -sh "$out.tar.gz" | cut -f1))"
echo "on the GPU machine: $out/bench/gpu/run_on_gpu.sh (or unpack the archive and run bench/gpu/run_on_gpu.sh there)"
