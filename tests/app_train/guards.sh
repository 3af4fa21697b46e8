#!/usr/bin/env bash
# actorflow-train's guards, end to end: flag ranges, output directories
# checked at start, another run's checkpoints refused, a full --out that does
# not stop training, a diverged run stopped, and SIGTERM/SIGINT in every
# phase. Args: the actorflow-train binary, the actorflow-node binary.
set -euo pipefail
train=$1
node=$2
scratch=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2> /dev/null || true; done
  rm -rf "$scratch"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
nowhere="$scratch/no-data"  # a data load would fail, naming dataset-fashion-mnist

# expect_error WHAT PATTERN ARGS...: the command fails, printing PATTERN (ERE)
# on stderr in at most 30 s; no line of its output is a 309-digit monster.
expect_error() {
  local what=$1 pattern=$2
  shift 2
  local rc=0
  timeout 30 "$@" > "$scratch/out.txt" 2> "$scratch/err.txt" || rc=$?
  [ "$rc" -ne 0 ] || fail "$what: accepted"
  [ "$rc" -ne 124 ] || fail "$what: still running after 30 s"
  grep -Eq -- "$pattern" "$scratch/err.txt" || fail "$what: no '$pattern' in: $(cat "$scratch/err.txt")"
  if awk 'length > 300 { found = 1 } END { exit !found }' "$scratch/err.txt"; then
    fail "$what: unreadable message: $(cat "$scratch/err.txt")"
  fi
}

# --- Flag ranges, with messages a user can read.
expect_error "--epochs 0" '--epochs: must be at least 1 \(got 0\)' "$train" --epochs 0
expect_error "--epochs too big" '--epochs: must be at most 2147483647 \(got 99999999999\)' "$train" --epochs 99999999999
expect_error "--batch 0" '--batch: must be from 1 to 60000 \(got 0\)' "$train" --batch 0
expect_error "--batch 60001" '--batch: must be from 1 to 60000' "$train" --batch 60001
expect_error "--threads 100000" '--threads: must be from 0 to 1024 \(got 100000\)' "$train" --threads 100000
expect_error "--threads -5" '--threads: must be from 0 to 1024 \(got -5\)' "$train" --threads -5
expect_error "--threads x" "--threads: must be a whole number from 0 to 1024 \(got 'x'\)" "$train" --threads x
expect_error "--keep-checkpoints 0" '--keep-checkpoints: must be at least 1' "$train" --keep-checkpoints 0
expect_error "--checkpoint-every -1" '--checkpoint-every: must be at least 0' "$train" --checkpoint-every -1
expect_error "--max-steps -1" '--max-steps: must be at least 0' "$train" --max-steps -1
expect_error "--backup-workers -1" '--backup-workers: must be from 0 to 1024' "$train" --backup-workers -1
expect_error "--recovery-seconds 0" '--recovery-seconds: must be at least 1 and at most 86400' "$train" --recovery-seconds 0
expect_error "--recovery-seconds 1e300" '--recovery-seconds: must be at least 1 and at most 86400' "$train" --recovery-seconds 1e300
expect_error "--lr 0" '--lr: must be greater than 0 \(got 0\)' "$train" --lr 0
expect_error "--lr nan" "--lr: must be a finite number greater than 0 \(got 'nan'\)" "$train" --lr nan
expect_error "node --threads 100000" '--threads: Value 100000 not in range 0 to 1024' "$node" --threads 100000
expect_error "--task -1" '--task: Value -1 not in range' "$train" --task -1
config='{"cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "task": {"type": "worker", "index": -3}}'
expect_error "ACTORFLOW_CONFIG index -3" '\[cluster\] the task index in the cluster description must be a whole number, 0 or more, not -3' \
  env ACTORFLOW_CONFIG="$config" "$train" --recovery-seconds 1 --data-dir "$nowhere"
expect_error "--resume with --overwrite-checkpoints" 'excludes' \
  "$train" --checkpoint-dir "$scratch/c" --resume --overwrite-checkpoints

# --- Output directories are checked before the data load.
touch "$scratch/a-file"
expect_error "--out under a file" "^error: \[train\] --out '$scratch/a-file/out': cannot make the directory" \
  "$train" --out "$scratch/a-file/out" --data-dir "$nowhere"
expect_error "--out is a file" "^error: \[train\] --out '$scratch/a-file': (cannot make the directory: )?[Nn]ot a directory" \
  "$train" --out "$scratch/a-file" --data-dir "$nowhere"
expect_error "--checkpoint-dir under a file" "^error: \[train\] --checkpoint-dir '$scratch/a-file/ck'" \
  "$train" --out "$scratch/out" --checkpoint-dir "$scratch/a-file/ck" --data-dir "$nowhere"
mkdir -p "$scratch/dir-ckpt/ckpt-20.afck"
expect_error "a directory named like a checkpoint" "^error: \[checkpoint_manager\] '$scratch/dir-ckpt/ckpt-20.afck' is not a regular file" \
  "$train" --out "$scratch/out" --checkpoint-dir "$scratch/dir-ckpt" --resume --data-dir "$nowhere"

# --- Another run's checkpoints: refused, naming the newest, unless --resume
# or --overwrite-checkpoints (which deletes them, and a killed save's .tmp).
mkdir -p "$scratch/old"
echo junk > "$scratch/old/ckpt-7.afck"
echo junk > "$scratch/old/ckpt-1000.afck"
echo junk > "$scratch/old/ckpt-1001.afck.tmp"
expect_error "a fresh run into old checkpoints" "already holds 2 checkpoint\(s\), the newest $scratch/old/ckpt-1000.afck; pass --resume .* --overwrite-checkpoints" \
  "$train" --out "$scratch/out" --checkpoint-dir "$scratch/old" --data-dir "$nowhere"
[ -f "$scratch/old/ckpt-7.afck" ] || fail "the refused run deleted a checkpoint"
"$train" --max-steps 3 --out "$scratch/out" --checkpoint-dir "$scratch/old" --overwrite-checkpoints \
  > "$scratch/overwrite.txt" 2>&1 || fail "--overwrite-checkpoints: $(cat "$scratch/overwrite.txt")"
[ "$(ls "$scratch/old")" = "ckpt-3.afck" ] || fail "after --overwrite-checkpoints: $(ls "$scratch/old")"

# --- A full --out: the checkpoints are saved, one warning, training goes on.
# metrics.csv.tmp links to /dev/full (the first write fails with ENOSPC and
# deletes the link); metrics.svg.tmp is a directory (every write fails).
mkdir -p "$scratch/full" "$scratch/full/metrics.svg.tmp"
ln -s /dev/full "$scratch/full/metrics.csv.tmp"
"$train" --epochs 2 --batch 10000 --out "$scratch/full" --checkpoint-dir "$scratch/full-ckpt" \
  > "$scratch/full.txt" 2> "$scratch/full-err.txt" || fail "a full --out stopped the run: $(cat "$scratch/full-err.txt")"
grep -Eq '^test_acc=' "$scratch/full.txt" || fail "no final line: $(cat "$scratch/full.txt")"
[ -f "$scratch/full-ckpt/ckpt-6.afck" ] && [ -f "$scratch/full-ckpt/ckpt-12.afck" ] ||
  fail "checkpoints missing: $(ls "$scratch/full-ckpt")"
[ "$(grep -c '^warning: \[train_report\]' "$scratch/full-err.txt")" = 1 ] || fail "not one warning: $(cat "$scratch/full-err.txt")"
grep -q "^warning: \[train_report\] cannot write '$scratch/full/metrics.csv.tmp': No space left on device" \
  "$scratch/full-err.txt" || fail "warning: $(cat "$scratch/full-err.txt")"
[ "$(tail -n +2 "$scratch/full/metrics.csv" | cut -d, -f1 | tr '\n' ' ')" = "1 2 " ] ||
  fail "the second epoch's CSV: $(cat "$scratch/full/metrics.csv")"

# --- A diverged run stops at the first non-finite loss, naming the step and
# the loss, and keeps its last checkpoint, which holds finite variables.
rc=0
"$train" --optimizer sgd --lr 1e30 --max-steps 200 --checkpoint-every 1 --out "$scratch/nan" \
  --checkpoint-dir "$scratch/nan-ckpt" > "$scratch/nan.txt" 2> "$scratch/nan-err.txt" || rc=$?
[ "$rc" -ne 0 ] || fail "a diverged run exited 0: $(cat "$scratch/nan.txt")"
grep -Eq '^error: \[train\] (the loss is -?(nan|inf) at step [0-9]+|variable .* is not finite after step [0-9]+): training diverged' \
  "$scratch/nan-err.txt" || fail "divergence error: $(cat "$scratch/nan-err.txt")"
if grep -q 'test_acc=' "$scratch/nan.txt"; then fail "a diverged run went on to the end"; fi
# With --checkpoint-every 1 the first step's checkpoint is always saved.
ls "$scratch/nan-ckpt"/ckpt-*.afck > /dev/null 2>&1 || fail "no checkpoint kept"
kept=$(ls "$scratch/nan-ckpt"/ckpt-*.afck | sort -t- -k2 -n | tail -1)
grep -q "the last checkpoint, $kept, is kept" "$scratch/nan-err.txt" ||
  fail "the kept checkpoint $kept is not named: $(cat "$scratch/nan-err.txt")"

# --- SIGTERM and SIGINT stop it within 5 s in every phase; the last
# checkpoint stays readable. Job control on, so that background jobs keep
# SIGINT (a non-interactive shell makes them ignore it).
set -m
# stop_within_5s PID SIGNAL: the process is gone within 5 s of SIGNAL.
stop_within_5s() {
  local pid=$1 signal=$2
  kill "-$signal" "$pid"
  for _ in $(seq 50); do
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2> /dev/null; then
    kill -KILL "$pid"
    fail "still running 5 s after SIG$signal"
  fi
  local rc=0
  wait "$pid" || rc=$?
  [ "$rc" -ne 0 ] || fail "exited 0 after SIG$signal"
}
for signal in TERM INT; do
  # Start-up and the data load (about a second).
  "$train" --out "$scratch/sig" > "$scratch/sig.txt" 2>&1 &
  pids+=($!)
  sleep 0.3
  stop_within_5s $! "$signal"
  # Training, once a checkpoint is on disk.
  rm -rf "$scratch/sig-ckpt"
  "$train" --epochs 5 --checkpoint-every 20 --out "$scratch/sig" --checkpoint-dir "$scratch/sig-ckpt" \
    > "$scratch/sig.txt" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 600); do
    ls "$scratch/sig-ckpt"/ckpt-*.afck > /dev/null 2>&1 && break
    sleep 0.1
  done
  ls "$scratch/sig-ckpt"/ckpt-*.afck > /dev/null 2>&1 || fail "no checkpoint within 60 s: $(cat "$scratch/sig.txt")"
  sleep 0.5
  stop_within_5s "$pid" "$signal"
  "$train" --epochs 5 --max-steps 41 --out "$scratch/sig" --checkpoint-dir "$scratch/sig-ckpt" \
    --resume > "$scratch/resume.txt" 2>&1 || fail "resume after SIG$signal: $(cat "$scratch/resume.txt")"
  grep -q 'resumed from .*ckpt-[0-9]*.afck' "$scratch/resume.txt" ||
    fail "did not resume after SIG$signal: $(cat "$scratch/resume.txt")"
done
echo "actorflow-train guards: all checks passed"
