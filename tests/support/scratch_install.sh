# Sourced by the tests that install this tree into a scratch prefix
# (install_consumer, docs_examples): the scratch directory, removed on exit
# with any ps task still running, `fail`, and a ps task of the installed
# actorflow-node on free ports.
scratch=$(mktemp -d)
node_pid=""
stop_ps_task() {
  if [ -n "$node_pid" ]; then
    kill -9 "$node_pid" 2>/dev/null || true
    wait "$node_pid" 2>/dev/null || true
    node_pid=""
  fi
}
cleanup() {
  stop_ps_task
  rm -rf "$scratch"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Starts /job:ps/task:0 of the installed actorflow-node; sets ps_port,
# worker_port and node_pid. Three tries on random ports (one may be taken).
start_ps_task() {
  for _attempt in 1 2 3; do
    ps_port=$((20000 + RANDOM % 20000))
    worker_port=$((20000 + RANDOM % 20000))
    "$scratch/prefix/bin/actorflow-node" --job ps --task 0 --ps-hosts "127.0.0.1:$ps_port" \
      --worker-hosts "127.0.0.1:$worker_port" --threads 1 > "$scratch/node.txt" 2>&1 &
    node_pid=$!
    for _ in $(seq 1 100); do
      grep -q 'serving on' "$scratch/node.txt" && return 0
      kill -0 "$node_pid" 2>/dev/null || break
      sleep 0.1
    done
    stop_ps_task
  done
  fail "the installed actorflow-node did not start: $(cat "$scratch/node.txt")"
}
