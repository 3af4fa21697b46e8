#!/usr/bin/env bash
# Installs the Debian packages actorflow builds and tests with (the input
# tests and training read dataset-fashion-mnist, the language model's corpus
# is fortunes). Safe to run again: it only calls apt-get when something is
# missing.
set -euo pipefail
packages=(
  g++ cmake ninja-build pkg-config
  libcaf-dev libssl-dev libtbb-dev libeigen3-dev libcapnp-dev capnproto doctest-dev
  libdnnl-dev                                # CPU float GEMM (oneDNN)
  libopenblas-serial-dev libblis-serial-dev  # measured beside it by actorflow-bench
  libcli11-dev nlohmann-json3-dev zlib1g-dev libfmt-dev libspdlog-dev
  libcpp-httplib-dev                         # actorflow-serve's REST API
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # its gRPC API
  openssl
  iproute2                                   # cluster-sim: network namespaces, tc (test_cluster_sim_netns)
  clang-format                               # test_clang_format
  python3 python3-venv                       # test_bench_launch; TensorBoard's venv (tensorboard_venv.sh)
  dataset-fashion-mnist fortunes
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
