#!/usr/bin/env bash
# Makes the Python virtual environment the export tests load exports with (transformers, torch,
# CTranslate2: requirements.txt, from PyPI). Usage: make_venv.sh DIR. Reuses DIR when it was made
# from the same requirements.txt, so a build tree installs them once (about 2 minutes and 5.7 GB,
# torch's CUDA libraries included). When they cannot be installed (no network, no python3-venv),
# says why, leaves DIR absent and the reason in DIR.unavailable, and exits 0: the tests then skip
# and print that reason.
# With PSFORMER_VENV_CACHE set to a directory (.ci/run sets it), the environment is made there
# once, named by a hash of requirements.txt, and DIR is a link to it: every clone on the machine
# shares it (one at a time makes it, under a lock).
set -uo pipefail
dir=${1:?usage: make_venv.sh DIR}
requirements=$(dirname "$0")/requirements.txt
if [ -x "$dir/bin/python" ] && cmp -s "$requirements" "$dir/requirements.txt"; then
  exit 0
fi
rm -rf "$dir" "$dir.unavailable"
if [ -n "${PSFORMER_VENV_CACHE:-}" ] && [ -z "${PSFORMER_VENV_CACHE_HELD:-}" ]; then
  mkdir -p "$PSFORMER_VENV_CACHE" || { echo "export venv: cannot make $PSFORMER_VENV_CACHE" >&2; exit 1; }
  cached=$PSFORMER_VENV_CACHE/export-venv-$(sha256sum "$requirements" | cut -c1-16)
  # Made under the lock, by this script itself; a cache that could not be made is not linked.
  PSFORMER_VENV_CACHE_HELD=1 flock "$PSFORMER_VENV_CACHE/.lock" "$0" "$cached"
  if [ -x "$cached/bin/python" ] && cmp -s "$requirements" "$cached/requirements.txt"; then
    ln -s "$cached" "$dir"
    echo "export venv: $dir is $cached"
  else
    cp "$cached.unavailable" "$dir.unavailable" 2>/dev/null
  fi
  exit 0
fi
fail() {
  echo "export venv: $1; the tests that load exports will be skipped" | tee "$dir.unavailable" >&2
  rm -rf "$dir"
  exit 0
}
start=$(date +%s)
python3 -m venv "$dir" || fail "python3 -m venv failed (is python3-venv installed?)"
log=$dir.pip.log
"$dir/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" >"$log" 2>&1 ||
  fail "pip install -r $requirements failed: $(tail -1 "$log")"
"$dir/bin/python" -c "import torch, transformers, ctranslate2, sentencepiece, safetensors" ||
  fail "the installed packages do not import"
cp "$requirements" "$dir/requirements.txt"
echo "export venv: installed in $(($(date +%s) - start)) s in $dir"
