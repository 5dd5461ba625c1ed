#!/usr/bin/env bash
# One candidate of the demo-recipe study (bench/RESULTS.md, "Bible demo: the recipe study"):
# trains configs/bible.pbtxt with the given overrides on the prepared Bible data, then scores the
# test split the way scripts/demo does (beam 4, alpha 0.6, average of checkpoint.average_last) and
# also the final weights alone. Prints one line per validation (step, minutes since the first
# step, valid loss, accuracy, greedy BLEU of the first valid verses) and the test BLEU.
#
#   bench/demo_study.sh NAME [--set field=value ...]      # run directory runs/study-NAME
#
# Needs build/psformer, data/bible and data/bible-text (scripts/demo makes both); DATA=DIR trains
# on another `psformer prepare` output of the same corpus (another vocabulary size).
set -euo pipefail
cd "$(dirname "$0")/.."
(($# >= 1)) || { echo "usage: bench/demo_study.sh NAME [--set field=value ...]" >&2; exit 2; }
name=$1; shift
psformer=${PSFORMER:-build/psformer}
text=data/bible-text data=${DATA:-data/bible} run=runs/study-$name
[[ -x $psformer && -s $data/train.bin && -s $text/test.en ]] ||
  { echo "demo_study: needs $psformer, $data and $text (run scripts/demo once)" >&2; exit 1; }
[[ ! -e $run ]] || { echo "demo_study: $run exists; remove it to run $name again" >&2; exit 1; }

mkdir -p runs
start=$SECONDS
# Each metrics line as it appears, stamped with the seconds since training started.
tail -n +1 -F --pid=$$ "$run/metrics.jsonl" 2>/dev/null | while IFS= read -r line; do
  echo "$((SECONDS - start)) $line"
done >"$run.timed" &
"$psformer" train --config configs/bible.pbtxt --run-dir "$run" --set data.train_dir=$data "$@" >"$run.train.log" 2>&1 ||
  { echo "demo_study: training failed, see $run.train.log" >&2; exit 1; }
train_s=$((SECONDS - start))
sleep 1
"$psformer" average --run-dir "$run" --output "$run/average.bin" --allow-fewer >/dev/null
for model in average model; do
  "$psformer" translate --model "$run/$model.bin" --spm $data/spm.model --beam 4 --alpha 0.6 \
    <$text/test.en >"$run/test.$model.es"
  "$psformer" bleu --hyp "$run/test.$model.es" --ref $text/test.es >"$run/test.$model.bleu"
done
python3 - "$run" "$name" "$train_s" <<'PY'
import json, sys
run, name, train_s = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for l in open(run + ".timed"):
    seconds, _, body = l.partition(" ")
    try:
        r = json.loads(body)
    except ValueError:
        continue
    r["seconds"] = int(seconds)
    rows.append(r)
print("candidate %s: trained in %.1f min" % (name, train_s / 60))
for r in rows:
    if "valid_loss" in r:
        minutes = r["seconds"] / 60
        print("  step %5d  %5.1f min  valid loss %.3f  accuracy %.3f  valid BLEU %s" % (
            r["step"], minutes, r["valid_loss"], r.get("valid_accuracy", 0), r.get("valid_bleu")))
for model in ("average", "model"):
    print("  test (%s): %s" % (model, open("%s/test.%s.bleu" % (run, model)).read().strip()))
PY
