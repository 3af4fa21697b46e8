#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains the MLP on
# Fashion-MNIST with actorflow-train's defaults (extra arguments pass through).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
"${BUILD_DIR:-build}/actorflow-train" "$@"
