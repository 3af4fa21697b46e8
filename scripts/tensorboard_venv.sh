#!/usr/bin/env bash
# Installs TensorBoard into a virtual environment in the build folder,
# ${BUILD_DIR:-build}/tensorboard-venv, where test_summary_tensorboard finds it
# (tests/CMakeLists.txt, ACTORFLOW_TENSORBOARD_PYTHON): TensorBoard's own
# reader checks the event files actorflow writes. TensorBoard is a reference
# for that test only, never a dependency of the product. Needs Debian's
# python3-venv (scripts/setup.sh) and PyPI. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${BUILD_DIR:-build}/tensorboard-venv"
version=2.21.0
if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c 'import tensorboard' 2>/dev/null; then
  echo "tensorboard_venv: $venv has tensorboard"
  exit 0
fi
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "tensorboard==$version"
"$venv/bin/python3" -c 'import tensorboard; print("tensorboard_venv: tensorboard", tensorboard.__version__, "in '"$venv"'")'
