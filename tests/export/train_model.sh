#!/usr/bin/env bash
# The export tests' fixture: a small model trained on make_corpus.py's corpus, its held-out test
# sentences, and its export. Usage: train_model.sh PSFORMER DIR [--set K=V ...], the --set
# arguments for psformer train (the PRE_LN model: --set model.norm_position=PRE_LN). Writes
# DIR/{corpus,data,run,hf}; DIR/run/model.bin is the trained model, DIR/hf its export. Trained
# with a server (not --local) so that the run also has checkpoints for psformer average. Starts
# over every time, so that the tests check what this build of psformer trains and exports.
set -euo pipefail
psformer=${1:?usage: train_model.sh PSFORMER DIR}
dir=${2:?usage: train_model.sh PSFORMER DIR}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$dir"
mkdir -p "$dir"
python3 "$here/make_corpus.py" "$dir/corpus"
c=$dir/corpus
"$psformer" prepare --src "$c/train.en" --tgt "$c/train.es" --valid-src "$c/valid.en" --valid-tgt "$c/valid.es" \
  --vocab-size 80 --out "$dir/data"
"$psformer" train --config "$here/model.pbtxt" --set "data.train_dir=$dir/data" --run-dir "$dir/run" "$@"
"$psformer" export --model "$dir/run/model.bin" --spm "$dir/data/spm.model" --out "$dir/hf"
