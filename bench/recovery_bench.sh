#!/usr/bin/env bash
# Time to recover from a killed worker and a killed server, on the copy config with
# 2 workers and 2 servers: each faulty run beside the same run undisturbed, in the same session.
#   bench/recovery_bench.sh [BUILD_DIR] [REPEATS]
# Prints, per case: wall time of the whole run (median), its excess over the undisturbed run, the
# time from the kill to the job computing again (from the logs' timestamps), the steps recomputed,
# and whether the final checksum equals the undisturbed one.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repeats=${2:-3}
psformer="$build/psformer"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
job=(--config configs/copy.pbtxt --set training.max_steps=300 --set training.stop_at_valid_accuracy=0
     --set training.valid_every=100 --set logging.every_steps=50 --set checkpoint.every_steps=50
     --set cluster.workers=2 --set cluster.servers=2)

run_case() {  # name, extra args...
  local name=$1; shift
  for r in $(seq "$repeats"); do
    local dir="$out/$name-$r"
    local start end
    start=$(date +%s.%N)
    "$psformer" train "${job[@]}" --run-dir "$dir" "$@" >"$dir.out" 2>&1 || { echo "$name: run failed"; cat "$dir.out"; exit 1; }
    end=$(date +%s.%N)
    echo "$name $r $(echo "$end - $start" | bc) $("$psformer" checksum "$dir/model.bin" | cut -d' ' -f1) $dir"
  done
}

{
  run_case calm
  run_case worker-kill --set fault.kill=worker:1@175
  run_case server-kill --set fault.kill=server:0@175
} >"$out/runs.txt"

python3 - "$out/runs.txt" <<'PY'
import re, statistics, sys, datetime, pathlib
runs = {}
for line in open(sys.argv[1]):
    name, _, wall, digest, d = line.split()
    runs.setdefault(name, []).append((float(wall), digest, pathlib.Path(d)))
calm_wall = statistics.median(w for w, _, _ in runs["calm"])
calm_digest = runs["calm"][0][1]
ts = re.compile(r"^\w (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) ")
def stamp(line):
    m = ts.match(line)
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f") if m else None
print(f"{'case':12} {'wall s':>7} {'excess s':>9} {'kill->computing s':>18} {'steps redone':>13}  same weights")
for name, rs in runs.items():
    wall = statistics.median(w for w, _, _ in rs)
    gaps, redone = [], []
    for _, _, d in rs:
        lines = [l for f in (d / "logs").glob("*.log") for l in open(f)]
        kill = [stamp(l) for l in lines if "fault injection: killing" in l]
        back = [stamp(l) for l in lines if "rejoining at step" in l or "rolled back: recomputing" in l]
        if kill and back:
            gaps.append((max(back) - min(kill)).total_seconds())
        for l in lines:
            m = re.search(r"rolling back from step (\d+) to step (\d+)", l)
            if m: redone.append(int(m.group(1)) - int(m.group(2)))
    same = all(dg == calm_digest for _, dg, _ in rs)
    gap = f"{statistics.median(gaps):.2f}" if gaps else "-"
    red = str(max(redone)) if redone else ("0" if name != "calm" else "-")
    print(f"{name:12} {wall:7.2f} {wall - calm_wall:9.2f} {gap:>18} {red:>13}  {same}")
PY
