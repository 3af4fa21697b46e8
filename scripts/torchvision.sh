#!/usr/bin/env bash
# Installs Debian's python3-torchvision, which test_image_models_torchvision
# checks ResNet-50's and Inception-v3's layers against, and which
# actorflow-bench --only convnets measures them beside. Safe to run again.
set -euo pipefail
if /usr/bin/python3 -c "import torchvision" 2>/dev/null; then
  echo "torchvision: present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-torchvision
