#!/usr/bin/env bash
# The GPU worker's data path on a real GPU: the base model (configs/base.pbtxt) trained end to end
# through the parameter servers on a prepared corpus (the bundle's data/bible-37k: the Bible corpus
# with a 37,000-piece BPE, made by make_bundle.sh --corpus), one worker, BSP, for STEPS steps, with
# 1 and 2 servers, fp32 and bf16 on the wire, overlap on (and off), and with 2 servers the
# embedding's gradient in two parts (cluster.split_embedding, fp32 and bf16). For each
# job, over its steps after the first fifth: the mean step (compute + push + wait + pull from
# metrics.jsonl), the device's span of each step (device_s: CUDA events from the upload to the
# end of backward), the launching thread's CPU (launch_cpu_s), the target tokens a step, and the
# step over the bare GPU step: psformer_gpu_bench timing forward + backward of exactly the same
# batches with no servers (its --config/--corpus mode), printed first; where a job splits the
# embedding, also the bare split step, with dE's blocks of rows aligned (as jobs make them) and not;
# and the pulled parts the worker uploaded from the servers' shared memory where they lay, against
# those written into its parameters first ("left / written": all written means the driver refused
# to register that memory, and its warning is printed); and the push parts sent with the CRC-32Cs
# the GPU computed beside its copies (crc32c_kernels.cu) instead of a host pass over them.
#
# Usage: train_on_gpu.sh [--bin DIR] [--corpus DIR] [--steps N] [--backend CUDA|CPU] [--keep DIR]
#                        [--job-timeout S] [--jobs LIST] [--no-bare] [--set F=V ...]
#   --keep DIR keeps each job's metrics.jsonl, output, role logs and trace files
#   (PSFORMER_TRACE_STEPS, scripts/trace-summary) under DIR/JOB/ to read after the machine is gone.
#   --job-timeout S (default 240) ends a job that runs longer: one stuck job cannot spend a lease.
#   --jobs "S W O[ split],..." runs only these jobs (servers, wire, overlap, and "split" for
#   cluster.split_embedding: e.g. "2 FP32 true,2 FP32 true split");
#   --no-bare leaves out the bare GPU step.
#   --backend CPU runs the same jobs on the CPU backend (fp32, no bare GPU step), to check the
#   script and the corpus on a machine without a GPU; there, make the model and batches small
#   with --set (e.g. --set model.layers=1 --set batching.tgt_tokens_per_step=500 ...).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bundle=$(cd "$here/../.." && pwd)
bin="$bundle/bin"
corpus="$bundle/data/bible-37k"
steps=150
backend=CUDA
keep=""
job_timeout=240
jobs="1 FP32 true,1 FP32 false,2 FP32 true,2 FP32 false,1 BF16 true,2 BF16 true,2 FP32 true split,2 BF16 true split"
bare=1
sets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) bin=$(realpath "${2:?--bin wants a directory}"); shift 2 ;;
    --corpus) corpus=$(realpath "${2:?--corpus wants a directory}"); shift 2 ;;
    --steps) steps="${2:?--steps wants a number}"; shift 2 ;;
    --backend) backend="${2:?--backend wants CUDA or CPU}"; shift 2 ;;
    --keep) keep=$(realpath -m "${2:?--keep wants a directory}"); shift 2 ;;
    --jobs) jobs="${2:?--jobs wants a list}"; shift 2 ;;
    --no-bare) bare=0; shift ;;
    --job-timeout) job_timeout="${2:?--job-timeout wants seconds}"; shift 2 ;;
    --set) sets+=(--set "${2:?--set wants FIELD=VALUE}"); shift 2 ;;
    *) echo "train_on_gpu.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ $steps =~ ^[0-9]+$ && $steps -ge 10 ]] || { echo "train_on_gpu.sh: --steps wants a number >= 10" >&2; exit 2; }
[[ $backend == CUDA || $backend == CPU ]] || { echo "train_on_gpu.sh: --backend wants CUDA or CPU" >&2; exit 2; }
[[ $job_timeout =~ ^[0-9]+$ && $job_timeout -ge 1 ]] || { echo "train_on_gpu.sh: --job-timeout wants seconds >= 1" >&2; exit 2; }
if [[ -n $keep ]]; then mkdir -p "$keep"; fi
IFS=, read -ra job_list <<<"$jobs"
for job in "${job_list[@]}"; do
  read -r servers wire overlap split <<<"$job"
  if ! [[ $servers =~ ^[1-9][0-9]*$ && ($wire == FP32 || $wire == BF16) && ($overlap == true || $overlap == false) &&
    ($split == "" || ($split == split && $overlap == true)) ]]; then
    echo "train_on_gpu.sh: --jobs: '$job' is not 'SERVERS FP32|BF16 true|false' (then 'split' with overlap true)" >&2
    exit 2
  fi
done
if [[ ! -f "$corpus/spm.model" ]]; then
  echo "train_on_gpu.sh: no prepared corpus in $corpus (make the bundle with make_bundle.sh --corpus DIR)" >&2
  exit 2
fi
config="$bundle/configs/base.pbtxt"
every=$((steps / 15 > 0 ? steps / 15 : 1))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
compute=()
[[ $backend == CUDA ]] && compute=(--set cluster.compute_dtype=BF16)

bare_ms=""
if [[ $backend == CUDA && $bare -eq 1 ]]; then
  echo "== the bare GPU step over the jobs' batches (steps 6 .. $((steps + 5)) of worker 0 of 1; bf16 matrix products)"
  step_times=()
  [[ -n $keep ]] && step_times=(--step-times "$keep/bare-steps.txt")  # each step's time, beside a traced job step
  if bare=$("$bin/psformer_gpu_bench" --math bf16 --config "$config" --corpus "$corpus" --warmup 5 --steps "$steps" \
    ${step_times[@]+"${step_times[@]}"}); then
    echo "$bare"
    bare_ms=$(sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' <<<"$bare")
  fi
  # The same with every parameter uploaded (pinned, synchronously) before each forward: what the
  # job's uploads would add were none of them hidden behind forward.
  echo "== the same, 30 steps, each uploading every parameter first"
  "$bin/psformer_gpu_bench" --math bf16 --config "$config" --corpus "$corpus" --warmup 5 --steps 30 --upload 1 || true
  if [[ $jobs == *split* ]]; then
    # The split embedding's bare step: dE in 8 blocks of rows aligned to 64 rows (as jobs make it),
    # and unaligned as before (cuBLAS's tensor-core kernels need 16-byte-aligned operands).
    for align in 64 1; do
      echo "== the same, 30 steps, the split embedding's step: dE in 8 blocks, aligned to up to $align rows"
      "$bin/psformer_gpu_bench" --math bf16 --config "$config" --corpus "$corpus" --warmup 5 --steps 30 \
        --split-blocks 8 --block-align "$align" || true
    done
  fi
fi

# Means over the metrics lines after the first fifth of the steps, per step: "STEP DEVICE CPU TOKENS".
means() {
  grep '"loss"' "$1/metrics.jsonl" | awk -v first="$((steps / 5))" -v every="$every" '
    function get(k) { if (match($0, "\"" k "\": [0-9.eE+-]+")) return substr($0, RSTART + length(k) + 4, RLENGTH - length(k) - 4); return 0 }
    { match($0, /"step": [0-9]+/); s = substr($0, RSTART + 8, RLENGTH - 8) + 0; if (s <= first) next
      k = get("steps"); n += (k > 0 ? k : every)  # the steps a line covers (the last may hold fewer)
      step += get("compute_s") + get("push_s") + get("wait_s") + get("pull_s")
      device += get("device_s"); cpu += get("launch_cpu_s"); tokens += get("tokens") }
    END { if (n == 0) print "nan nan nan nan"; else printf "%.6f %.6f %.6f %.0f\n", step / n, device / n, cpu / n, tokens / n }'
}

# Copies a job's metrics and output into --keep's directory, when asked.
keep_job() {
  [[ -z $keep ]] && return 0
  local name
  name=$(basename "$1")
  mkdir -p "$keep/$name"
  cp "$1.out" "$keep/$name/out.txt" 2>/dev/null || true
  cp -r "$1/metrics.jsonl" "$1/logs" "$1/trace" "$keep/$name/" 2>/dev/null || true
}

echo
# The worker's pulled parts left where they came (uploaded from the servers' shared memory) and
# written into its parameters, as its client logged them at its end: "LEFT/WRITTEN".
pulled_parts() {
  sed -n 's/.*ps client: \([0-9]*\) pulled part(s) written into the parameters, \([0-9]*\) left where they came.*/\2\/\1/p' \
    "$1/logs/worker-0.log" 2>/dev/null | tail -1
}

# The push parts the worker sent with the CRC-32Cs its GPU recorded beside each copy (none means
# the kernel's self-check failed, and its warning is printed, or the copies could not pin).
crc_parts() {
  sed -n 's/.*ps client: \([0-9]*\) push part(s) sent with the CRC-32C recorded.*/\1/p' \
    "$1/logs/worker-0.log" 2>/dev/null | tail -1
}

echo "| servers | wire | overlap | embedding | step (ms) | device_s (ms) | step / device_s | step / bare GPU step | launching thread CPU (ms) | target tokens a step | pulled parts left / written | push parts with the GPU's CRC |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
status=0
for job in "${job_list[@]}"; do
  read -r servers wire overlap split <<<"$job"
  embedding=whole
  [[ $split == split ]] && embedding=split
  run="$work/run-$servers-$wire-$overlap-$embedding"
  if ! timeout --kill-after=20 "$job_timeout" "$bin/psformer" train --config "$config" --set data.train_dir="$corpus" --set cluster.backend="$backend" \
    ${compute[@]+"${compute[@]}"} --set cluster.workers=1 --set cluster.servers="$servers" \
    --set cluster.gradient_dtype="$wire" --set cluster.param_dtype="$wire" --set cluster.overlap="$overlap" \
    --set cluster.split_embedding="$([[ $embedding == split ]] && echo true || echo false)" \
    --set training.max_steps="$steps" --set training.valid_every=0 --set logging.every_steps="$every" \
    --set checkpoint.every_steps=0 --set checkpoint.every_minutes=0 ${sets[@]+"${sets[@]}"} \
    --run-dir "$run" >"$run.out" 2>&1; then
    keep_job "$run"
    echo "| $servers | $wire | $overlap | $embedding | failed: see below | | | | | | | |"
    tail -20 "$run.out" >&2
    status=1
    continue
  fi
  keep_job "$run"
  read -r step device cpu tokens < <(means "$run")
  parts=$(pulled_parts "$run")
  crcs=$(crc_parts "$run")
  awk -v s="$servers" -v w="$wire" -v o="$overlap" -v e="$embedding" -v step="$step" -v device="$device" -v cpu="$cpu" \
    -v tokens="$tokens" -v bare="${bare_ms:-}" -v parts="${parts:--}" -v crcs="${crcs:--}" 'BEGIN {
      printf "| %s | %s | %s | %s | %.1f | %.1f | %.2f | %s | %.2f | %s | %s | %s |\n", s, w, o, e, step * 1000, device * 1000,
        (device > 0 ? step / device : 0), (bare == "" ? "-" : sprintf("%.2f", step * 1000 / bare)), cpu * 1000, tokens, parts, crcs }'
  # A registration of the servers' shared memory that failed (the parts are then written), or a
  # GPU CRC kernel that disagreed with the host (the push then checksummed on the host).
  grep -h "cannot pin\|CRC-32C of a test block\|block CRCs" "$run/logs/worker-0.log" 2>/dev/null | head -3 >&2 || true
done
exit $status
