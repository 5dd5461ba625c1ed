#!/usr/bin/env bash
# Makes a Python virtual environment with TensorBoard (from PyPI) for the tests that read
# psformer's event files with TensorBoard's own reader. Usage: make_venv.sh DIR. Reuses DIR when
# it already has TensorBoard.
set -euo pipefail
dir=${1:?usage: make_venv.sh DIR}
if [ -x "$dir/bin/python" ] && "$dir/bin/python" -c "import tensorboard" 2>/dev/null; then
  exit 0
fi
rm -rf "$dir"
python3 -m venv "$dir"
"$dir/bin/pip" install --quiet --disable-pip-version-check tensorboard
"$dir/bin/python" -c "import tensorboard; print('tensorboard', tensorboard.__version__, 'in $dir')"
