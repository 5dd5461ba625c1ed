#!/usr/bin/env bash
# Runs on a GPU machine, from a bundle made by make_bundle.sh (or from a build tree with
# --build-dir): the gpu-labelled tests, then the GPU benchmark of psformer's CUDA backend in each
# math mode and the PyTorch reference (bf16 autocast) on the same model and batch, then a short
# table of tokens per second, step time, MFU and peak memory; then the cost of one pass over host
# memory of each kind the data path makes (psformer_host_passes); then, when the bundle carries a
# prepared corpus (make_bundle.sh --corpus), real training jobs of the base model through the
# servers beside the bare GPU step over the same batches (train_on_gpu.sh).
#
# Usage: run_on_gpu.sh [--build-dir DIR] [--steps N] [--skip-tests] [--train-steps N] [--keep DIR]
#   --keep DIR: train_on_gpu.sh keeps each job's metrics.jsonl and output there.
#   --train-steps 0 leaves the training jobs out (to run train_on_gpu.sh first, on its own).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bundle=$(cd "$here/../.." && pwd)
steps=10
train_steps=150
tests=1
keep=()
bin="$bundle/bin"
tests_dir="$bundle/bin"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) bin=$(realpath "${2:?--build-dir wants a directory}"); tests_dir="$bin/tests"; shift 2 ;;
    --steps) steps="${2:?--steps wants a number}"; shift 2 ;;
    --skip-tests) tests=0; shift ;;
    --keep) keep=(--keep "${2:?--keep wants a directory}"); shift 2 ;;
    --train-steps) train_steps="${2:?--train-steps wants a number}"; shift 2 ;;
    *) echo "run_on_gpu.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
# gpu_training_test runs psformer from a source tree (configs/): the bundle, or this checkout.
export PSFORMER_SOURCE_DIR="$bundle" PSFORMER_BINARY="$bin/psformer"
if [[ -d "$bundle/lib" ]]; then export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$bin/psformer" version || true  # the build measured: its commit, CUDA runtime and driver

[[ $train_steps =~ ^[0-9]+$ ]] || { echo "run_on_gpu.sh: --train-steps wants a number" >&2; exit 2; }
status=0
if [[ $tests -eq 1 ]]; then
  for t in cuda_backend_test cuda_model_test cuda_range_downloader_test decode_cuda_test gpu_training_test; do
    echo "== $t ($(date -u +%T))"
    # A test binary that hangs is ended, so that it cannot spend the lease (PSFORMER_GPU_TEST_TIMEOUT).
    # Traces (PSFORMER_TRACE_STEPS) are for the training jobs below, not the tests' own jobs.
    env -u PSFORMER_TRACE_STEPS timeout --kill-after=10 "${PSFORMER_GPU_TEST_TIMEOUT:-300}" "$tests_dir/$t" \
      --gtest_brief=1 || status=1
  done
fi

# What one pass over host memory costs here (the data path's CRC, copies and the servers' Adam),
# at 1, 2, 4 ... threads: whether this machine's cores or its memory bandwidth set the pace.
echo "== psformer_host_passes"
"$bin/psformer_host_passes" --mib 128 --reps 3 || status=1

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for math in bf16 tf32 fp32; do
  echo "== psformer_gpu_bench --math $math"
  "$bin/psformer_gpu_bench" --math "$math" --steps "$steps" | tee -a "$results" || status=1
done
# The same without cuBLASLt's fused bias/ReLU epilogues: what the fusion buys.
echo "== psformer_gpu_bench --math bf16 --fused-epilogues 0"
"$bin/psformer_gpu_bench" --math bf16 --fused-epilogues 0 --steps "$steps" | tee -a "$results" || status=1
echo "== pytorch_transformer.py --math bf16"
python3 "$here/pytorch_transformer.py" --math bf16 --steps "$steps" | tee -a "$results" || status=1

echo
printf '%-28s %-5s %9s %14s %7s %8s %9s\n' implementation math step_ms tgt_tokens/s TFLOPS MFU peak_GiB
while read -r line; do
  field() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" <<< "$line"; }
  printf '%-28s %-5s %9s %14s %7s %8s %9s\n' "$(field impl)" "$(field math)" "$(field step_ms)" \
    "$(field tgt_tokens_per_s)" "$(field tflops)" "$(field mfu)" "$(field peak_mem_gib)"
done < "$results"

if [[ $train_steps -gt 0 && -f "$bundle/data/bible-37k/spm.model" ]]; then
  echo
  echo "== train_on_gpu.sh: the base model through the servers, $train_steps steps a job ($(date -u +%T))"
  "$here/train_on_gpu.sh" --bin "$bin" --steps "$train_steps" ${keep[@]+"${keep[@]}"} || status=1
fi
exit $status
