#!/usr/bin/env bash
# The GPU check as one call on a lent machine, whose minutes are few and whose files are gone
# afterwards: unpacks a bundle (make_bundle.sh --bible), then runs run_on_gpu.sh (the gpu tests,
# the benchmarks against PyTorch, and the base model trained through the servers on the bundle's
# corpus) under one time limit, writing as it goes into OUT: machine.txt (card, driver, CPU, the
# build), run.log (everything printed), and keep.tgz (each training job's metrics, role logs and
# traces). Whatever the limit cut off, what was done by then is in OUT.
#
# Usage, from this tree's root on the GPU machine:
#   bench/gpu/device_call.sh [--archive FILE] [--budget SECONDS] [-- RUN_ON_GPU_ARGS...]
#   --archive FILE  the bundle's archive (default build/bundle.tar.gz, make_bundle.sh
#                   --build-dir build --bible's)
#   --budget S      seconds for run_on_gpu.sh in all (default 480: a call may run 600 s, and the
#                   lease's 15 minutes also pay for starting the machine)
#   RUN_ON_GPU_ARGS default: --steps 10 --train-steps 100 (e.g. -- --skip-tests --train-steps 150)
# OUT: the device tool's $OUT, or ./device-out. The training jobs trace steps 60 and 61
# (PSFORMER_TRACE_STEPS, default 60:2; set it empty for none) into keep.tgz, and run.log ends
# with scripts/trace-summary of the acceptance's job (2 servers, fp32, overlap, whole embedding):
# where a step's time went, from the one call. Two traced steps of the 80 a job's means cover
# move them by well under 1%.
# Here, beforehand: bench/gpu/make_bundle.sh --build-dir build --bible, then the device tool's run
# with carry ["build/bundle.tar.gz"] and command "bench/gpu/device_call.sh".
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
archive="$root/build/bundle.tar.gz"
budget=480
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --archive) archive=$(realpath -m "${2:?--archive wants a file}"); shift 2 ;;
    --budget) budget="${2:?--budget wants seconds}"; shift 2 ;;
    --) shift; args=("$@"); break ;;
    *) echo "device_call.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ $budget =~ ^[0-9]+$ && $budget -ge 10 ]] || { echo "device_call.sh: --budget wants seconds >= 10" >&2; exit 2; }
[[ ${#args[@]} -gt 0 ]] || args=(--steps 10 --train-steps 100)
[[ -f $archive ]] || { echo "device_call.sh: no bundle archive at $archive (make_bundle.sh makes it)" >&2; exit 2; }
out="${OUT:-$root/device-out}"
mkdir -p "$out" || exit 1
bundle=$(mktemp -d /tmp/psformer-bundle.XXXXXX)
keep=$(mktemp -d /tmp/psformer-keep.XXXXXX)
trap 'rm -rf "$bundle" "$keep"' EXIT

tar -C "$bundle" -xzf "$archive" || { echo "device_call.sh: cannot unpack $archive" >&2; exit 1; }
{
  date -u '+%Y-%m-%d %H:%M:%S UTC'
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1
  nvidia-smi topo -m 2>&1 | head -5
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Socket|NUMA node\(s\))' 2>&1
  free -g | head -2
  LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bundle/bin/psformer" version 2>&1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} > "$out/machine.txt"
cat "$out/machine.txt"

# SIGTERM at the budget, SIGKILL 20 s later: run_on_gpu.sh's jobs stop in order and keep their files.
# A gpu test binary that hangs gets 150 s, not the whole budget (how long each takes on a GPU
# was never recorded; the times in run.log's headers will say).
export PSFORMER_GPU_TEST_TIMEOUT="${PSFORMER_GPU_TEST_TIMEOUT:-150}"
export PSFORMER_TRACE_STEPS="${PSFORMER_TRACE_STEPS-60:2}"
timeout --kill-after=20 "$budget" "$bundle/bench/gpu/run_on_gpu.sh" --keep "$keep" "${args[@]}" 2>&1 |
  tee "$out/run.log"
status=${PIPESTATUS[0]}
if ((status == 124 || status == 137)); then
  echo "device_call.sh: run_on_gpu.sh ran past its budget of $budget s and was stopped" | tee -a "$out/run.log"
fi
acceptance="$keep/run-2-FP32-true-whole"
if [[ -d $acceptance/trace ]]; then
  echo "== trace-summary of $(basename "$acceptance") (PSFORMER_TRACE_STEPS=$PSFORMER_TRACE_STEPS)" | tee -a "$out/run.log"
  timeout 60 python3 "$bundle/scripts/trace-summary" "$acceptance" 2>&1 | tee -a "$out/run.log"
fi
# Role logs and traces can be large; the device tool brings back files of a bounded size.
tar -C "$keep" -czf "$out/keep.tgz" . 2>/dev/null
echo "device_call.sh: exit $status; in $out: $(cd "$out" && ls | tr '\n' ' ')($(du -sh "$out/keep.tgz" | cut -f1) kept)"
exit "$status"
