#!/bin/bash
# The worker's data path, side by side in one run: one EMULATED worker of the base model's size
# (63.1M parameters, emulated steps of STEP_MS) on one machine, 1 and 2 servers, fp32 and bf16 on
# the wire, for each psformer binary given (the reference first, e.g. a build of the commit
# before worker/datapath/, then this tree's). For each job: the median step (worker 0's
# compute + push + wait + pull, steps 3 .. STEPS-1), its efficiency against the emulated step,
# and CPU seconds per step of the worker's launching thread (its main thread, sampled from
# /proc/PID/task/PID/stat while it runs: the same measure for any binary), of the whole worker
# process, of the data path's threads and of the emulated copy engine. Start-up and the end
# (allocating, the first pull, the final pull, model.bin) are taken out: the CPU is sampled in
# the run as metrics.jsonl reaches step STEPS / 3 and step STEPS - 1, and divided by the steps
# logged between the two samples. With a binary that reports them, also metrics.jsonl's
# launch_cpu_s (the thread's own clock, per step) and device_s.
#
# SPLIT="false late true" also runs each job with the embedding's gradient in two parts
# (cluster.split_embedding), "late" with each piece waiting for its rows (cluster.name_rows=false),
# "true" with the rows named up front (the emulated worker then looks up LOOKUP_ROWS rows a step, default
# 7500: the distinct source and target pieces of a base batch of 25,000 target tokens of the
# Bible corpus with the 37,000-piece BPE were 7,433-7,652 in five random draws).
#
# Usage: [STEP_MS=1000] [STEPS=18] [SPLIT="false late true"] bench/datapath_bench.sh BINARY [BINARY ...]
# Results go to bench/RESULTS.md ("The worker's data path").
set -euo pipefail

cd "$(dirname "$0")/.."
((${#} > 0)) || { echo "usage: bench/datapath_bench.sh BINARY [BINARY ...]" >&2; exit 2; }
step_ms=${STEP_MS:-1000}
steps=${STEPS:-18}
short=$((steps / 3))
work=$(mktemp -d)
sampler=""
cleanup() {
  [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The pid of this benchmark's running worker process, or nothing.
worker_pid() {
  for stat in /proc/[0-9]*/stat; do
    pid=${stat#/proc/}; pid=${pid%/stat}
    cmd=$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null) || continue
    if [[ $cmd == *"$work"* && $cmd == *psformer\ worker* ]]; then
      echo "$pid"
      return 0
    fi
  done
  return 0
}

# The CPU (clock ticks) of worker process PID now: "MAIN_THREAD PROCESS DATA_PATH ENGINE";
# DATA_PATH: the data path's threads (psf-client, psf-d2h, psf-land, the copy threads
# psf-parallel, and ZeroMQ's I/O threads), ENGINE: the emulated GPU's copy engine (psf-emu-dma),
# the device's. Fails when the process is gone.
worker_cpu() {
  local pid=$1 path=0 engine=0 comm
  read -r -a p <"/proc/$pid/stat" 2>/dev/null || return 1
  read -r -a t <"/proc/$pid/task/$pid/stat" 2>/dev/null || return 1
  # utime and stime are the 14th and 15th fields (1-based); the names here have no spaces, so
  # the fields after a thread's (comm) stay in place.
  for task in /proc/"$pid"/task/*; do
    comm=$(cat "$task/comm" 2>/dev/null) || continue
    read -r -a c <"$task/stat" 2>/dev/null || continue
    case $comm in
      psf-client | psf-d2h | psf-land | psf-parallel | ZMQbg/IO/*) path=$((path + c[13] + c[14])) ;;
      psf-emu-dma) engine=$((engine + c[13] + c[14])) ;;
    esac
  done
  echo "$((t[13] + t[14])) $((p[13] + p[14])) $path $engine"
}

# Takes "STEPS_LOGGED CPU..." (worker_cpu) into $work/cpu.N once RUN's metrics.jsonl holds N
# steps, for N = SHORT and N = STEPS - 1 (a sample after both, should the lines come faster than
# it looks): the CPU between is that of the steps between, in one run, without start-up and the
# end (allocating, the first pull, the final pull, model.bin).
sample_cpu() {
  local run=$1 pid="" count cpu
  while true; do
    [[ -n $pid ]] || pid=$(worker_pid)
    count=$(grep -c '"loss"' "$run/metrics.jsonl" 2>/dev/null || true)
    count=${count:-0}
    for n in "$short" "$((steps - 1))"; do
      if [[ -n $pid && $count -ge $n && ! -e $work/cpu.$n ]] && cpu=$(worker_cpu "$pid"); then
        echo "$count $cpu" >"$work/cpu.$n"
      fi
    done
    sleep 0.1
  done
}

median() { sort -g | awk '{v[NR] = $1} END { if (NR == 0) { print "nan"; exit } print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# The median over steps 3 .. STEPS-1 of metrics.jsonl's KEY ("step": the sum of the four phases).
metric() {
  grep '"loss"' "$1/metrics.jsonl" | awk -v key="$2" -v last="$steps" '{
      match($0, /"step": [0-9]+/); s = substr($0, RSTART + 8, RLENGTH - 8) + 0
      if (s < 3 || s >= last) next
      n = split(key == "step" ? "compute_s push_s wait_s pull_s" : key, keys, " ")
      t = 0; found = 0
      for (i = 1; i <= n; ++i) {
        if (match($0, "\"" keys[i] "\": [0-9.eE+-]+")) { t += substr($0, RSTART + length(keys[i]) + 4, RLENGTH - length(keys[i]) - 4); found = 1 }
      }
      if (found) print t }' | median
}

ticks=$(getconf CLK_TCK)
echo "| binary | servers | wire | embedding | median step | efficiency | launching thread CPU / step (/proc) | launch_cpu_s / step | worker process CPU / step | data path threads / step | copy engine / step | device_s / step |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for binary in "$@"; do
  for servers in 1 2; do
    for wire in FP32 BF16; do
    for split in ${SPLIT:-false}; do
      embedding=whole name_rows=true
      [[ $split == true ]] && embedding=named
      [[ $split == late ]] && embedding=split name_rows=false split=true
      name="$work/run-$(basename "$(dirname "$(dirname "$(realpath "$binary")")")")-$servers-$wire-$embedding"
      failed=""
      run="$name"
      rm -f "$work"/cpu.*
      sample_cpu "$run" &
      sampler=$!
      if ! "$binary" train --config configs/base.pbtxt --set cluster.backend=EMULATED \
        --set cluster.emulated_step_ms="$step_ms" --set cluster.workers=1 --set cluster.servers="$servers" \
        --set cluster.gradient_dtype="$wire" --set cluster.param_dtype="$wire" \
        $([[ $split == true ]] && echo "--set cluster.split_embedding=true --set cluster.name_rows=$name_rows --set cluster.emulated_lookup_rows=${LOOKUP_ROWS:-7500}") \
        --set training.max_steps="$steps" --set training.valid_every=0 --set logging.every_steps=1 \
        --set checkpoint.every_steps=0 --set checkpoint.every_minutes=0 --run-dir "$run" >"$run.out" 2>&1; then
        failed="$run.out"
      fi
      kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; sampler=""
      first=(0 0 0 0 0) last=(0 0 0 0 0)
      if [[ -s $work/cpu.$short && -s $work/cpu.$((steps - 1)) ]]; then
        read -r -a first <"$work/cpu.$short"
        read -r -a last <"$work/cpu.$((steps - 1))"
      fi
      if ((last[0] <= first[0])); then
        echo "the CPU was not sampled at two step counts (see $run.out)" >"$run.sampling"
        failed=${failed:-$run.sampling}
      fi
      if [[ -n $failed ]]; then
        echo "| $binary | $servers | $wire | $embedding | failed: see below | | | | | | | |"
        tail -20 "$failed" >&2
        continue
      fi
      awk -v b="$binary" -v s="$servers" -v w="$wire" -v e="$embedding" -v step="$(metric "$run" step)" -v ms="$step_ms" \
        -v main="$((last[1] - first[1]))" -v proc="$((last[2] - first[2]))" -v hz="$ticks" \
        -v path="$((last[3] - first[3]))" -v engine="$((last[4] - first[4]))" -v steps="$((last[0] - first[0]))" -v launch="$(metric "$run" launch_cpu_s)" -v device="$(metric "$run" device_s)" 'BEGIN {
          printf "| %s | %d | %s | %s | %.0f ms | %.2f | %.1f ms | %s | %.0f ms | %.0f ms | %.0f ms | %s |\n", b, s, w, e,
            step * 1000, ms / 1000 / step, main / hz / steps * 1000,
            (launch == "nan" ? "-" : sprintf("%.1f ms", launch * 1000)), proc / hz / steps * 1000,
            path / hz / steps * 1000, engine / hz / steps * 1000, (device == "nan" ? "-" : sprintf("%.0f ms", device * 1000)) }'
    done
    done
  done
done
