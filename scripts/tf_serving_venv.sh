#!/usr/bin/env bash
# Installs TensorFlow Serving's Python client (PyPI's tensorflow-serving-api)
# into a virtual environment in the build folder,
# ${BUILD_DIR:-build}/tf-serving-venv, where test_serve_grpc_tf_serving_client
# finds it (tests/CMakeLists.txt, ACTORFLOW_TF_SERVING_PYTHON): TF Serving's
# own client drives actorflow's gRPC front end, as a TF Serving user would.
# The client is a reference for that test only, never a dependency of the
# product. tensorflow-serving-api requires the full `tensorflow` wheel; the
# CPU-only build (tensorflow-cpu, the same `tensorflow` module) is installed
# instead and the client without its requirements, which are listed here:
# grpcio and protobuf, the ranges its metadata names. Needs Debian's
# python3-venv (scripts/setup.sh) and PyPI. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${BUILD_DIR:-build}/tf-serving-venv"
version=2.21.0  # tensorflow-serving-api and tensorflow-cpu release together
export TF_CPP_MIN_LOG_LEVEL=3  # the check says what it found, not what TensorFlow loads
check='import tensorflow, grpc; from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc'
if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c "$check" 2>/dev/null; then
  echo "tf_serving_venv: $venv has tensorflow-serving-api"
  exit 0
fi
/usr/bin/python3 -m venv "$venv"
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check)
"${pip[@]}" "tensorflow-cpu==$version" "grpcio>=1.24.3,<2.0" "protobuf>=6.31.1,<8.0.0"
"${pip[@]}" --no-deps "tensorflow-serving-api==$version"
"$venv/bin/python3" -c "$check"'; print("tf_serving_venv: tensorflow-serving-api", "'"$version"'", "with tensorflow", tensorflow.__version__, "in '"$venv"'")'
