#!/bin/bash
# Host summing across hosts, side by side in one run, on a cluster simulated by scripts/cluster-sim
# (network namespaces on a bridge, each link shaped by tbf): H hosts, each with one server and two
# EMULATED workers (emulated steps of 1000 ms) of each model shape (by default the scaled pair
# below), launched with `psformer launch`; host summing on (and off with SUMMING="true false"),
# traffic protected by CURVE, by AES-256-GCM (cluster.encryption) or not at all, links at each
# RATE's equivalent, the embedding's gradient whole, in two parts with each piece waiting for its
# rows ("late", cluster.name_rows=false) and in two parts with the rows named up front ("true",
# the default of cluster.split_embedding's two parts) (SPLIT="false late true" by default; name
# the ones to run, a two-part one with ":N" for cluster.output_projection_blocks N, default 8,
# e.g. SPLIT="true:1 true" puts the output projection's gradient whole beside it in 8 blocks;
# the emulated workers look up LOOKUP_ROWS rows a step, default
# 3000: the distinct source and target pieces of 6,250 target tokens of the Bible corpus with the
# 37,000-piece BPE, a quarter of the base batch, were 3,028-3,090 in five random draws). For each
# job: the median step (steps 3 .. STEPS-1, worker 0's compute + push + wait + pull), its
# efficiency against the emulated 1000 ms, the bytes each host sent and received on its link
# (interface counters, over the whole run, divided by STEPS: the initial and final pulls are
# in it), and the CPU seconds per step of each kind of process (every process of the job is
# sampled from /proc while it runs). Also the raw ZeroMQ ceiling of this machine: one connection
# on loopback, with and without CURVE (bench/streams_bench).
# STRETCH="1 2 4" runs each job also with time stretched K times: emulated steps of K x 1000 ms
# on links K times slower, so that the link's share of a step is the same while the CPU a step
# costs (the same bytes, the same work) is spread over K times as long: where the efficiency
# rises with K, this machine's cores and not the link or the schedule held it back (2 simulated
# hosts share 2 cores here; bench/RESULTS.md). Efficiency is K x 1000 ms / step.
# LINKS="fair pushes-first" runs each job also on links that send every host's pushes (and any
# packet under 128 bytes: acknowledgements) ahead of the answers its role processes send from
# their listening ports (scripts/cluster-sim rate --sport-last): an experiment on the simulated
# link, not something psformer does, to show what a link ranked so would change.
#
# Usage: [SUMMING="true false"] [SPLIT="false late true"] [LOOKUP_ROWS=N] [CEILING=0] [MODELS="shape;shape"] [STRETCH="1 2"] [LINKS="fair pushes-first"] [KEEP=1]
#        bench/host_summing_bench.sh [BUILD_DIR] [STEPS] [HOSTS] [RATES] [SECURITY]
#   defaults: build, 12, 2, "2500mbit 10gbit", curve, SUMMING=true. Needs root (namespaces).
#   MODELS: the model shapes, ';'-separated, each "field=value ..." overriding configs/base.pbtxt;
#   "base" is the base model itself. Default: the scaled pair "model.d_model=256 model.d_ff=1024
#   model.heads=4" with the paper's 37,000-piece vocabulary and with 8,000. Each RATE is what the
#   base model's link would be: a smaller model runs on a link slowed by its bytes / the base
#   model's, so each step's bytes take as long on the link as the base model's would, while the
#   CPU a step costs shrinks with the bytes. That measures what the link and the schedule allow
#   and not this machine's cores (two simulated hosts of the base model need more CPU a step than
#   2 cores have; bench/RESULTS.md). MODELS=base runs the base model at the rates as given.
#   bench/link_schedule.py models the same runs (and other schedules) by arithmetic.
# Results go to bench/RESULTS.md ("Host summing across hosts").
set -euo pipefail

cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
steps=${2:-12}
host_counts=${3:-2}
rates=${4:-2500mbit 10gbit}
securities=${5:-curve}
name="h$(($$ % 100000))"
scaled="model.d_model=256 model.d_ff=1024 model.heads=4"
models=${MODELS:-$scaled;$scaled model.vocab_size=8000}
sim=scripts/cluster-sim
work=$(mktemp -d)
sampler=""
cleanup() {
  [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true
  "$sim" down --name "$name" >/dev/null 2>&1 || true
  if [ -n "${KEEP:-}" ]; then echo "bench: run directories kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# Bytes HOST's interface has sent and received: "TX RX".
counters() {
  "$sim" exec "$1" "cat /sys/class/net/eth0/statistics/tx_bytes /sys/class/net/eth0/statistics/rx_bytes" | tr '\n' ' '
}

# Samples utime + stime (clock ticks) of every psformer role process into $work/cpu.PID (the
# last sample stays: the process's CPU time until shortly before it ended).
sample_cpu() {
  while true; do
    for stat in /proc/[0-9]*/stat; do
      pid=${stat#/proc/}; pid=${pid%/stat}
      cmd=$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null) || continue  # it may have ended
      case "$cmd" in
        *"$work"*) ;;  # this benchmark's jobs only: their run directories are under $work
        *) continue ;;
      esac
      case "$cmd" in
        *psformer\ worker*) kind=worker ;;
        *psformer\ pserver*) kind=pserver ;;
        *psformer\ aggregator*) kind=aggregator ;;
        *) continue ;;
      esac
      read -r -a f <"$stat" 2>/dev/null || continue
      # Fields after the command: utime is the 14th field, stime the 15th (1-based).
      echo "$kind $((f[13] + f[14]))" >"$work/cpu.$pid"
    done
    sleep 0.5
  done
}

median() { sort -g | awk '{v[NR] = $1} END { if (NR == 0) { print "nan"; exit } print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

if [[ ${CEILING:-1} != 0 ]]; then  # CEILING=0 leaves the loopback ceiling out
  echo "== ZeroMQ on loopback through psformer's Van, 1, 2 and 4 connections, with and without CURVE (the ceiling)"
  "$build/bench/streams_bench" 2>&1 || echo "(streams_bench not built)"
fi

ticks=$(getconf CLK_TCK)
# "PARAMETERS D_MODEL VOCABULARY" of the base model changed by "--set field=value" arguments.
shape() {
  "$build/psformer" train --config configs/base.pbtxt --set cluster.backend=EMULATED "$@" --dry-run 2>&1 |
    awk '/^# parameters:/ { p = $3 } /^  d_model:/ { d = $2 } /^  vocab_size:/ { v = $2 } END { print p, d, v }'
}
read -r base_parameters _ _ <<<"$(shape)"

echo
echo "| model | hosts | link (base equivalent) | host summing | encryption | embedding | median step | compute / push / wait / pull (ms) | efficiency | sent per host per step | received per host per step | CPU s per step: server, aggregator, worker (each) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
IFS=';' read -r -a model_list <<<"$models"
model_index=0
for model in "${model_list[@]}"; do
model_index=$((model_index + 1))
model_sets=()
[[ $model == base ]] || for setting in $model; do model_sets+=(--set "$setting"); done
read -r params d_model vocab <<<"$(shape ${model_sets[@]+"${model_sets[@]}"})"
[[ -n $vocab ]] || { echo "bench: the model \"$model\" does not load: see psformer train --dry-run" >&2; exit 1; }
label="$(awk -v p="$params" -v d="$d_model" -v v="$vocab" 'BEGIN {
  printf "d %d, %d pieces (%.1f MB, embedding %.0f%%)", d, v, p * 4 / 1e6, 100 * v * d / p }')"
# Settings beside the shape (cluster.send_window=0, ...) are named in the row.
extras=$(tr ' ' '\n' <<<"$model" | grep -v -e '^model\.' -e '^base$' -e '^$' | paste -sd ' ' || true)
[[ -z $extras ]] || label="$label, $extras"
for hosts in $host_counts; do
  for rate in $rates; do
  for stretch in ${STRETCH:-1}; do
    [[ $stretch =~ ^[1-9][0-9]?$ ]] || { echo "bench: STRETCH takes whole factors from 1 to 99, not \"$stretch\"" >&2; exit 1; }
    step_ms=$((1000 * stretch))
    # The link that gives this model's bytes the time the base model's take at $rate, times the stretch.
    kbit=$(awk -v r="$rate" -v p="$params" -v b="$base_parameters" -v x="$stretch" 'BEGIN {
      n = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u)
      k = (u == "gbit") ? n * 1e6 : (u == "mbit") ? n * 1e3 : (u == "kbit") ? n : -1
      if (k < 0) exit 1
      printf "%d", k * p / b / x }') || { echo "bench: a rate is N followed by gbit, mbit or kbit, not \"$rate\"" >&2; exit 1; }
    link="${kbit}kbit"
    shown="$(awk -v k="$kbit" 'BEGIN { printf "%.0f Mbit/s", k / 1e3 }') ($rate)"
    [[ $stretch == 1 ]] || shown="$shown, steps of $step_ms ms"
    up=$("$sim" up "$hosts" --slots 3 --rate "$link" --name "$name")
    field() { sed -n "s/^$1=//p" <<<"$up"; }
    IFS=, read -r -a names <<<"$(field hosts)"
    for summing in ${SUMMING:-true}; do
      for security in $securities; do
      for split in ${SPLIT:-false late true}; do
      for links in ${LINKS:-fair}; do
        blocks=8
        if [[ $split == *:* ]]; then blocks=${split#*:} split=${split%%:*}; fi
        embedding=whole name_rows=true
        [[ $split == true ]] && embedding=named
        [[ $split == late ]] && embedding=split name_rows=false split=true
        [[ $embedding != whole && $blocks != 8 ]] && embedding="$embedding, dE in $blocks"
        # Each job its own ports (64 from a multiple of 64): the last job's may not be free yet.
        jobs_run=$((${jobs_run:-0} + 1))
        ports=$((29952 + 64 * (jobs_run % 16)))
        case "$links" in
          fair) ranking=() ;;
          pushes-first) ranking=(--sport-last "$ports") ;;  # the role processes' answers leave last
          *) echo "bench: LINKS takes fair and pushes-first, not \"$links\"" >&2; exit 1 ;;
        esac
        for h in "${names[@]}"; do "$sim" rate "$h" "$link" ${ranking[@]+"${ranking[@]}"} >/dev/null; done
        rate_shown="$shown"
        [[ $links == fair ]] || rate_shown="$shown, $links"
        case "$security" in
          curve) secure=(--set cluster.authenticate=true --set cluster.encryption=CURVE) ;;
          aes) secure=(--set cluster.authenticate=true --set cluster.encryption=AES_256_GCM) ;;
          *) secure=(--set cluster.authenticate=false) ;;
        esac
        run="$work/run-m$model_index-$vocab-$d_model-$hosts-$rate-x$stretch-$summing-$security-${embedding//[ ,]/}-${links:0:1}"
        declare -A before=()
        for h in "${names[@]}"; do before[$h]=$(counters "$h"); done
        rm -f "$work"/cpu.*
        sample_cpu &
        sampler=$!
        if ! "$build/psformer" launch --hostfile "$(field hostfile)" -np $((3 * hosts)) --rsh-agent "$(field agent)" \
          --network "$(field subnet)" -- train --config configs/base.pbtxt --set cluster.backend=EMULATED \
          --set cluster.emulated_step_ms="$step_ms" --set cluster.workers=$((2 * hosts)) --set cluster.servers="$hosts" \
          --set cluster.host_summing="$summing" "${secure[@]}" ${model_sets[@]+"${model_sets[@]}"} \
          --set cluster.split_embedding="$split" --set cluster.name_rows="$name_rows" \
          --set cluster.output_projection_blocks="$blocks" \
          --set cluster.emulated_lookup_rows="${LOOKUP_ROWS:-3000}" \
          --set training.max_steps="$steps" --set training.valid_every=0 --set logging.every_steps=1 \
          --set checkpoint.every_steps=0 --set checkpoint.every_minutes=0 --set cluster.bind_host=0.0.0.0 --set cluster.base_port=$ports \
          --run-dir "$run" >"$run.out" 2>&1; then
          echo "| $label | $hosts | $rate_shown | $summing | $security | $embedding | failed: see below | | | | | |"
          tail -20 "$run.out" >&2
          kill "$sampler"; wait "$sampler" 2>/dev/null || true; sampler=""
          continue
        fi
        kill "$sampler"; wait "$sampler" 2>/dev/null || true; sampler=""
        sent=0 received=0
        for h in "${names[@]}"; do
          read -r tx0 rx0 <<<"${before[$h]}"
          read -r tx1 rx1 <<<"$(counters "$h")"
          sent=$((sent + tx1 - tx0)); received=$((received + rx1 - rx0))
        done
        # Worker 0's steps 3 .. STEPS-1: each phase's median (ms), then the median of their sums.
        phases=$(grep '"loss"' "$run/metrics.jsonl" | awk -v last="$steps" '{
            match($0, /"step": [0-9]+/); s = substr($0, RSTART + 8, RLENGTH - 8) + 0
            if (s < 3 || s >= last) next
            t = 0
            n = split("compute_s push_s wait_s pull_s", keys, " ")
            for (i = 1; i <= n; ++i) {
              v = 0
              if (match($0, "\"" keys[i] "\": [0-9.eE+-]+")) v = substr($0, RSTART + length(keys[i]) + 4, RLENGTH - length(keys[i]) - 4)
              printf "%s %.6f\n", keys[i], v; t += v
            }
            printf "step %.6f\n", t }')
        phase() { awk -v k="$1" '$1 == k { print $2 }' <<<"$phases" | median; }
        step=$(phase step)
        phase_split=$(awk -v c="$(phase compute_s)" -v p="$(phase push_s)" -v w="$(phase wait_s)" -v l="$(phase pull_s)" \
          'BEGIN { printf "%.0f / %.0f / %.0f / %.0f", c * 1000, p * 1000, w * 1000, l * 1000 }')
        cpu() { cat "$work"/cpu.* 2>/dev/null | awk -v k="$1" -v hz="$ticks" -v steps="$steps" '$1 == k { t += $2; n++ } END { if (n == 0) print "-"; else printf "%.2f", t / hz / n / steps }'; }
        awk -v ms="$step_ms" -v model="$label" -v hosts="$hosts" -v rate="$rate_shown" -v summing="$summing" -v curve="$security" -v emb="$embedding" -v step="$step" -v phases="$phase_split" \
          -v sent="$sent" -v received="$received" -v steps="$steps" -v s="$(cpu pserver)" -v a="$(cpu aggregator)" \
          -v w="$(cpu worker)" 'BEGIN {
            printf "| %s | %d | %s | %s | %s | %s | %.0f ms | %s | %.2f | %.0f MB | %.0f MB | %s, %s, %s |\n", model, hosts, rate, summing,
              curve, emb, step * 1000, phases, ms / 1000 / step, sent / hosts / steps / 1e6, received / hosts / steps / 1e6, s, a, w }'
        [ -n "${KEEP:-}" ] && rm -f "$run/model.bin" || rm -rf "$run"  # model.bin alone is 252 MB
      done
      done
      done
    done
  done
  done
  "$sim" down --name "$name" >/dev/null
done
done
echo
echo "fp32 bytes: base model $(awk -v b="$base_parameters" 'BEGIN { printf "%.1f MB", b * 4 / 1e6 }'). With host summing and one server per host, a host's sum crosses to"
echo "the other hosts' servers ((H-1)/H of it) and their parameters come back: (H-1)/H of a model each way."
