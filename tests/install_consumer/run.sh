#!/usr/bin/env bash
# Installs the built tree into a scratch prefix and builds two outside
# applications against it with find_package(actorflow): one through the
# umbrella header (its own op, training, a checkpoint), one a cluster client
# of the installed actorflow-node, started and stopped here. Checks that the
# installed headers include only <actorflow/...> and leave the runtime's
# internals out. Args: build dir, source dir.
set -euo pipefail
build=$1
src=$2
. "$src/tests/support/scratch_install.sh"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
inc="$scratch/prefix/include/actorflow"
[ -f "$inc/actorflow.hpp" ] || fail "no umbrella header"
for internal in actors/run/messages.hpp actors/run/node_plan.hpp actors/run/cancelled_steps.hpp \
                ops/math_detail.hpp ops/cuda/launch.hpp actors/caf_ext/scheduler.hpp; do
  [ ! -e "$inc/$internal" ] || fail "internal header installed: $internal"
done
# libactorflow exports what the public headers mark ACTORFLOW_API (and the SSL
# interposer), nothing of the runtime's internals.
nm -DC --defined-only "$scratch/prefix/lib/libactorflow.so" > "$scratch/exports.txt"
for public in 'actorflow::session::run(' 'actorflow::graph::add_node(' 'typeinfo for actorflow::error' \
              'actorflow::op_registrar::op_registrar(' ' SSL_read'; do
  grep -qF "$public" "$scratch/exports.txt" || fail "libactorflow does not export $public"
done
for internal in 'actorflow::node_plan' 'actorflow::loop_gate' 'actorflow::spinning_multiplexer' \
                'actorflow::step_value' 'actorflow::thread_streams' 'actorflow::executable::'; do
  if grep -F "$internal" "$scratch/exports.txt" | head -2; then
    fail "libactorflow exports an internal: $internal"
  fi
done
# An upper bound on the exports: 594 when it was set (x86-64, a build with the
# CUDA device). Without hidden visibility (the version script alone,
# cmake/actorflow.map) there were 1252, with neither 4438, so losing either
# trips this; the ~18% above today's count is room for public API added on
# purpose, which raises the bound in the same change, saying why: 760 with
# serving's public API (export_model, load_model, model_server and its
# metrics, the model file's readers; about 45 symbols).
max_exports=760
exports=$(wc -l < "$scratch/exports.txt")
echo "libactorflow exports $exports symbols (at most $max_exports)"
[ "$exports" -le "$max_exports" ] ||
  fail "libactorflow exports $exports symbols, more than $max_exports: an internal leaked (hidden visibility, cmake/actorflow.map), or raise the bound for new public API"
if grep -rn '#include "' "$inc" > "$scratch/quoted.txt"; then
  fail "installed headers with quoted includes: $(head -3 "$scratch/quoted.txt")"
fi
if grep -n '#include' "$src"/tests/install_consumer/*.cpp | grep -v '<actorflow/' | grep -Ev '<[a-z_]+>'; then
  fail "a consumer includes something outside <actorflow/...>"
fi
# The graph, session, training and checkpoint headers pull in nothing of CAF
# or TBB (the cluster and runtime-tuning headers do).
cat > "$scratch/graph_api.cpp" <<'CPP'
#include <actorflow/actors/trace/summary_writer.hpp>
#include <actorflow/checkpoint.hpp>
#include <actorflow/core/gradients.hpp>
#include <actorflow/ops/array.hpp>
#include <actorflow/ops/control_flow.hpp>
#include <actorflow/ops/linalg.hpp>
#include <actorflow/ops/math.hpp>
#include <actorflow/ops/queue.hpp>
#include <actorflow/ops/state.hpp>
#include <actorflow/ops/summary.hpp>
#include <actorflow/ops/train.hpp>
#include <actorflow/session.hpp>
int main() {}
CPP
c++ -std=c++20 -I"$scratch/prefix/include" -isystem /usr/include/eigen3 -H -fsyntax-only \
    "$scratch/graph_api.cpp" 2> "$scratch/headers.txt" || fail "the graph API headers do not compile alone"
if grep -E '/caf/|/tbb/|/oneapi/' "$scratch/headers.txt" | head -3; then
  fail "the graph API headers pull in CAF or TBB"
fi
cmake -S "$src/tests/install_consumer" -B "$scratch/build" -G Ninja \
      -DCMAKE_PREFIX_PATH="$scratch/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/build" >/dev/null
export LD_LIBRARY_PATH="$scratch/prefix/lib:${LD_LIBRARY_PATH:-}"
"$scratch/build/consumer"

# The cluster client against a ps task of the installed actorflow-node.
start_ps_task
timeout 60 "$scratch/build/cluster_client" "127.0.0.1:$ps_port" "127.0.0.1:$worker_port" ||
  fail "the cluster client failed; the node said: $(cat "$scratch/node.txt")"
echo "install: both outside applications ran"
