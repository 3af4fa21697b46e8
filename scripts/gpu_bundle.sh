#!/usr/bin/env bash
# Packs actorflow's GPU checks for a GPU machine that has CUDA's libraries and
# PyTorch but not actorflow's dependencies: builds here with CUDA
# (-DACTORFLOW_CUDA=ON, the toolkit and cuDNN in /usr/local/cuda), then puts
# test_cuda, test_ops, actorflow-bench, the libraries they need that CUDA's
# are not, and the PyTorch references of the gpu group (perf/torch_gpu_fmnist.py,
# torch_gpu_lm.py, torch_convnets.py) into .devbundle/b.tar.xz (git ignores
# it). On the GPU machine, from a copy of the repository holding .devbundle:
# scripts/gpu_checks.sh OUT_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
BUILD_DIR=$build scripts/build.sh -DACTORFLOW_CUDA=ON
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" "$stage/perf" .devbundle
programs=("$build/tests/test_cuda" "$build/tests/test_ops" "$build/actorflow-bench")
cp "${programs[@]}" "$stage/"
cp perf/torch_gpu_fmnist.py perf/torch_gpu_lm.py perf/torch_convnets.py "$stage/perf/"
# Everything they link but the C runtime and CUDA's own libraries, which the
# GPU machine has in versions that match its driver.
ldd "${programs[@]}" | awk '/=>/ {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libpthread|libdl|librt)\.so|/libcu(da|dart|blas|blasLt|dnn[a-z_]*)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
strip "$stage"/test_cuda "$stage"/test_ops "$stage"/actorflow-bench
tar -cJf .devbundle/b.tar.xz -C "$stage" .
echo "wrote .devbundle/b.tar.xz ($(du -h .devbundle/b.tar.xz | cut -f1))"
