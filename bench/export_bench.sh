#!/usr/bin/env bash
# Translation speed and BLEU of one model in psformer, transformers and CTranslate2 (fp32, int8):
# the same sentences, the same thread count, batches of about the same size (docs/export.md).
# Usage: bench/export_bench.sh MODEL SPM SOURCES REFERENCES [THREADS] [PYTHON] [REPEAT]
#   PYTHON: a python with torch, transformers, ctranslate2 (default build/export-venv/bin/python,
#   which `ctest -L export` installs). REPEAT (default 1): translate the sentences that many times
#   over, so that fixed costs weigh less (corpus BLEU is the same over repeated pairs).
#   Prints one Markdown table row per system.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/export_bench.sh MODEL SPM SOURCES REFERENCES [THREADS] [PYTHON]}
spm=${2:?} threads=${5:-1} python=${6:-build/export-venv/bin/python} repeat=${7:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for ((i = 0; i < repeat; i++)); do cat "$3" >>"$work/sources"; cat "$4" >>"$work/references"; done
sources=$work/sources references=$work/references
sentences=$(wc -l <"$sources")

build/psformer export --model "$model" --spm "$spm" --out "$work/hf" >/dev/null
"$python" scripts/ctranslate2-from-export.py "$work/hf" "$work/ct2" >/dev/null
"$python" scripts/ctranslate2-from-export.py "$work/hf" "$work/ct2-int8" --quantization int8 >/dev/null
# psformer's and transformers' cap on a translation's length; CTranslate2 must be told.
max_len=$(("$("$python" -c "import json; print(json.load(open('$work/hf/config.json'))['max_position_embeddings'])")" - 1))

# psformer's figure is its whole command's; its start-up (loading the model, no sentence) is
# measured apart and taken off, to compare with the libraries' figures, which exclude loading.
start=$(date +%s.%N)
build/psformer translate --model "$model" --spm "$spm" --threads "$threads" </dev/null >/dev/null 2>&1
startup=$(echo "$(date +%s.%N) - $start" | bc -l)

bleu() { build/psformer bleu --hyp "$1" --ref "$references" | grep -o 'BLEU = [0-9.]*' | cut -d' ' -f3; }
row() {  # NAME BEAM SECONDS FILE
  printf '| %s | %s | %s | %.1f | %s |\n' "$1" "$2" "$threads" "$(echo "$sentences / $3" | bc -l)" "$(bleu "$4")"
}
echo "| system | beam | threads | sentences/s | BLEU |"
echo "|---|---|---|---|---|"
for beam in 1 4; do
  start=$(date +%s.%N)
  build/psformer translate --model "$model" --spm "$spm" --beam "$beam" --threads "$threads" \
    <"$sources" >"$work/psformer.txt" 2>/dev/null
  row "psformer translate" "$beam" "$(echo "$(date +%s.%N) - $start - $startup" | bc -l)" "$work/psformer.txt"
  "$python" bench/export_translate.py hf "$work/hf" "$beam" "$threads" 32 <"$sources" >"$work/hf.txt" 2>"$work/t"
  row "transformers (torch, fp32)" "$beam" "$(sed -n 's/^seconds //p' "$work/t")" "$work/hf.txt"
  for type in float32 int8; do
    dir=$work/ct2$([ "$type" = int8 ] && echo -int8 || true)
    "$python" bench/export_translate.py ct2 "$dir" "$spm" "$beam" "$threads" 32 "$type" "$max_len" <"$sources" \
      >"$work/ct2.txt" 2>"$work/t"
    row "CTranslate2 $type" "$beam" "$(sed -n 's/^seconds //p' "$work/t")" "$work/ct2.txt"
  done
done
