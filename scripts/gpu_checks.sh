#!/usr/bin/env bash
# Runs the GPU checks that scripts/gpu_bundle.sh packed, on a machine with a
# GPU, CUDA's libraries (cuBLAS, cuDNN: a PyTorch install's are found too) and
# a python3 with PyTorch: the GPU test suite (test_cuda --test-suite=gpu), the
# op table's cases on /gpu:0 (test_ops' device runner) and actorflow-bench
# --only gpu beside PyTorch on the same GPU. Logs and bench.json go to OUT_DIR.
# Each part is bounded (about 9 minutes in all) and says how it ended.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_checks.sh OUT_DIR}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xJf .devbundle/b.tar.xz -C "$work" || { echo "no bundle: run scripts/gpu_bundle.sh first"; exit 1; }
cuda_dirs=$(find / -xdev \( -name 'libcublasLt.so.*' -o -name 'libcudnn.so.*' -o -name 'libcudart.so.*' \) \
  2>/dev/null | xargs -r -n1 dirname | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH="$work/lib:$cuda_dirs${LD_LIBRARY_PATH:-}"
nvidia-smi -L
if ldd "$work/test_cuda" | grep "not found"; then echo "missing libraries"; exit 1; fi
cd "$work"
timed() {  # name, seconds, command...: runs it, logs to $out/name.log, says how it ended
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -25 "$out/$name.log"
  echo "== $name: exit $rc after $((SECONDS - start)) s"
}
timed gpu_tests 240 ./test_cuda --test-suite=gpu
timed gpu_ops 120 ./test_ops -tc="every op case computes on every device*,every GPU kernel has cases*"
ACTORFLOW_TORCH_PYTHON=${ACTORFLOW_TORCH_PYTHON:-python3} ACTORFLOW_PERF_DIR="$work/perf" \
  timed gpu_bench 200 sh -c "./actorflow-bench --only gpu --json > '$out/bench.json'"
