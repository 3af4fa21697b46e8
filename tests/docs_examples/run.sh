#!/usr/bin/env bash
# test_docs_examples: the examples of README.md and docs/*.md (extract.py says
# how they are marked) built against an install of this tree with
# find_package(actorflow), then run: each must exit 0 within 120 s. An
# example marked ps-task runs beside a ps task of the installed
# actorflow-node, started and stopped here. Args: build dir, source dir.
set -euo pipefail
build=$1
src=$2
. "$src/tests/support/scratch_install.sh"
python3 "$src/tests/docs_examples/extract.py" "$src" "$scratch/examples"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
# Compiled without optimization: the examples are small and this is faster.
cmake -S "$scratch/examples" -B "$scratch/build" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" \
      -DCMAKE_CXX_FLAGS=-O0 >/dev/null
if ! cmake --build "$scratch/build" -j 2 > "$scratch/build.log" 2>&1; then
  grep -E "error|FAILED" "$scratch/build.log" | head -20
  fail "an example does not compile (the page and line are the first line of its .cpp)"
fi
export LD_LIBRARY_PATH="$scratch/prefix/lib:${LD_LIBRARY_PATH:-}"

ran=0
compiled=0
while read -r name mode where; do
  case $mode in
    compile) compiled=$((compiled + 1)); continue ;;
    run) args=() ;;
    ps-task) start_ps_task; args=("127.0.0.1:$ps_port" "127.0.0.1:$worker_port") ;;
    *) fail "unknown mode $mode" ;;
  esac
  if ! (cd "$scratch" && timeout 120 "$scratch/build/$name" "${args[@]}" > "$scratch/$name.out" 2>&1); then
    cat "$scratch/$name.out" | tail -20
    fail "the example at $where failed"
  fi
  stop_ps_task
  ran=$((ran + 1))
  echo "ok: $where ($name)"
done < "$scratch/examples/examples.txt"
echo "docs examples: $ran ran, $compiled compiled only"
