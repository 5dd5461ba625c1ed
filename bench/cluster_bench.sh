#!/bin/bash
# Across hosts, on a cluster simulated by scripts/cluster-sim (network namespaces on a bridge, each
# link shaped to RATE by tbf): (1) one worker's push + pull of a base-sized gradient (63M
# parameters) through a server on another host, fp32 and bf16, as a fraction of the line rate
# (bench/host_roundtrip.cc); (2) `psformer launch` on 3 hosts, from its start to the first
# training step's line in metrics.jsonl (copy config, 2 workers + 1 server); (3) what losing a
# host costs: the same job for 40 steps with a checkpoint every 8, undisturbed and with a worker's
# host killed (link down, every process SIGKILLed) at step 12, the launch continuing on a spare.
#
# Usage: bench/cluster_bench.sh [BUILD_DIR] [REPETITIONS] [RATE]   (defaults: build, 5, 10gbit)
# Needs root (namespaces). Results go to bench/RESULTS.md ("Across hosts").
set -euo pipefail

cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
reps=${2:-5}
rate=${3:-10gbit}
name="b$(($$ % 100000))"
sim=scripts/cluster-sim
work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
  "$sim" down --name "$name" || true
  rm -rf "$work"
}
trap cleanup EXIT

up=$("$sim" up 3 --spares 1 --rate "$rate" --name "$name")
field() { sed -n "s/^$1=//p" <<<"$up"; }
IFS=, read -r -a hosts <<<"$(field hosts)"
spare=$(field spares)
hostfile=$(field hostfile)
agent=$(field agent)
subnet=$(field subnet)
gbit=$(awk -v r="$rate" 'BEGIN { n = r + 0; if (r ~ /mbit$/) n /= 1000; if (r ~ /kbit$/) n /= 1e6; print n }')

echo "== push + pull between ${hosts[0]} (server) and ${hosts[1]} (worker), links at $rate"
for dtype in "" --bf16; do
  # A fresh server for each: its step count starts where the client's does.
  "$sim" exec "${hosts[0]}" "$build/bench/host_roundtrip" --serve tcp://0.0.0.0:5601 &
  server_pid=$!
  until "$sim" exec "${hosts[1]}" "bash -c 'exec 3<>/dev/tcp/${hosts[0]}/5601'" 2>/dev/null; do sleep 0.2; done
  "$sim" exec "${hosts[1]}" "$build/bench/host_roundtrip" --connect "tcp://${hosts[0]}:5601" --iters "$reps" \
    --line-gbit "$gbit" $dtype || echo "the client failed" >&2
  # The server is a child of the agent's shell: end it by its host's processes.
  ip netns pids "${hosts[0]}" | xargs -r kill
  wait "$server_pid" || true
  server_pid=""
done
echo "== the same on loopback (no namespaces, no shaping): this machine's ceiling for the round trip"
for dtype in "" --bf16; do
  "$build/bench/host_roundtrip" --serve tcp://127.0.0.1:5602 &
  server_pid=$!
  sleep 2
  "$build/bench/host_roundtrip" --connect tcp://127.0.0.1:5602 --iters "$reps" --line-gbit "$gbit" $dtype ||
    echo "the client failed" >&2
  kill "$server_pid"
  wait "$server_pid" || true
  server_pid=""
done

summarize() {  # median, min and max of the numbers on stdin, labelled $1
  sort -g | awk -v label="$1" '{v[NR] = $1} END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%s: median %.3f s (min %.3f, max %.3f, n=%d)\n", label, m, v[1], v[NR], NR }'
}
seconds_since() { awk -v a="$(date +%s.%N)" -v b="$1" 'BEGIN { printf "%.3f\n", a - b }'; }
last_step() { grep -o '"step": [0-9]*, "loss"' "$1/metrics.jsonl" 2>/dev/null | tail -1 | grep -o '[0-9][0-9]*' || echo 0; }

# Starts `psformer launch` of the copy job in the background (pid in $pid); "$@" are extra train
# arguments, the last of them --run-dir DIR.
launch() {
  "$build/psformer" launch --hostfile "$hostfile" -np 3 --rsh-agent "$agent" --network "$subnet" \
    --host-timeout 6 --max-restarts 2 -- train --config configs/copy.pbtxt --set cluster.workers=2 \
    --set cluster.servers=1 "$@" >"${!#}.out" 2>&1 &
  pid=$!
}

echo "== psformer launch on 3 hosts: start to first step, $reps runs"
for i in $(seq 1 "$reps"); do
  run="$work/first$i"
  start=$(date +%s.%N)
  launch --set training.max_steps=2 --set training.valid_every=0 --set training.stop_at_valid_accuracy=0 \
    --set logging.every_steps=1 --set checkpoint.every_steps=0 --run-dir "$run"
  until grep -q '"loss"' "$run/metrics.jsonl" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { echo "launch ended before its first step:" >&2; cat "$run.out" >&2; exit 1; }
    sleep 0.005
  done
  seconds_since "$start"
  wait "$pid" || { echo "launch failed:" >&2; cat "$run.out" >&2; exit 1; }
done | summarize "launch -> first step"

echo "== losing a host at step 12 of 40 (checkpoint every 8 steps), $reps runs each"
job=(--set training.max_steps=40 --set training.valid_every=20 --set logging.every_steps=1
     --set checkpoint.every_steps=8)
for i in $(seq 1 "$reps"); do
  run="$work/calm$i"
  start=$(date +%s.%N)
  launch "${job[@]}" --run-dir "$run"
  wait "$pid" || { echo "launch failed:" >&2; cat "$run.out" >&2; exit 1; }
  seconds_since "$start" >>"$work/calm.times"
  "$build/psformer" checksum "$run/model.bin" | cut -d' ' -f1 >>"$work/digests"
  run="$work/lost$i"
  start=$(date +%s.%N)
  launch "${job[@]}" --run-dir "$run"
  until [ "$(last_step "$run")" -ge 12 ]; do sleep 0.01; done
  "$sim" kill "${hosts[1]}" >/dev/null
  killed=$(date +%s.%N)
  # BSP: no step completes without the lost host's worker, so the next step line in metrics.jsonl
  # is the first one computed after the restart.
  lines=$(grep -c '"loss"' "$run/metrics.jsonl")
  until [ "$(grep -c '"loss"' "$run/metrics.jsonl")" -gt "$lines" ]; do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
  done
  seconds_since "$killed" >>"$work/recover.times"
  wait "$pid" || { echo "launch failed:" >&2; cat "$run.out" >&2; exit 1; }
  seconds_since "$start" >>"$work/lost.times"
  "$build/psformer" checksum "$run/model.bin" | cut -d' ' -f1 >>"$work/digests"
  "$sim" link "${hosts[1]}" up
  sleep 1
done
summarize "undisturbed, wall" <"$work/calm.times"
summarize "a host lost at step 12, wall" <"$work/lost.times"
summarize "kill -> the first step computed again" <"$work/recover.times"
echo "distinct final weights over all runs: $(sort -u "$work/digests" | wc -l) (1 = all the same)"
