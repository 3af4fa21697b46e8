#!/usr/bin/env bash
# actorflow-train end to end on the real Fashion-MNIST files: one epoch, a
# resumed second epoch from its checkpoint, the files it writes, and its
# errors for bad input. Arg: the actorflow-train binary.
set -euo pipefail
train=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# One epoch with a checkpoint, then a resumed run that adds the second epoch.
"$train" --epochs 1 --batch 256 --out "$scratch/out" --checkpoint-dir "$scratch/ckpt" \
  > "$scratch/first.txt" || fail "first run exited with $?"
grep -Eq '^test_acc=0\.[0-9]{4} step_ms=[0-9.]+ examples_per_s=[0-9]+$' "$scratch/first.txt" ||
  fail "no final line in: $(cat "$scratch/first.txt")"
ls "$scratch/ckpt"/ckpt-234.afck > /dev/null || fail "no checkpoint after epoch 1"
"$train" --epochs 2 --batch 256 --out "$scratch/out" --checkpoint-dir "$scratch/ckpt" --resume \
  > "$scratch/second.txt" || fail "resumed run exited with $?"
grep -q 'resumed from .*ckpt-234.afck (step 234)' "$scratch/second.txt" ||
  fail "did not resume: $(cat "$scratch/second.txt")"
acc=$(sed -nE 's/^test_acc=(0\.[0-9]{4}) .*/\1/p' "$scratch/second.txt")
awk -v a="$acc" 'BEGIN { exit !(a > 0.80) }' || fail "test accuracy $acc after 2 epochs"

# metrics.csv keeps epoch 1 from the first run and adds epoch 2; the plot exists.
[ "$(head -1 "$scratch/out/metrics.csv")" = "epoch,step,train_loss,test_acc,seconds,examples_per_s" ] ||
  fail "bad CSV header"
[ "$(tail -n +2 "$scratch/out/metrics.csv" | cut -d, -f1 | tr '\n' ' ')" = "1 2 " ] ||
  fail "CSV rows: $(cat "$scratch/out/metrics.csv")"
grep -q '<svg' "$scratch/out/metrics.svg" || fail "no SVG plot"

# Bad input: clear errors, non-zero exits, no crash.
if "$train" --data-dir "$scratch/nowhere" > /dev/null 2> "$scratch/err.txt"; then fail "missing data accepted"; fi
grep -q 'dataset-fashion-mnist' "$scratch/err.txt" || fail "missing-data error: $(cat "$scratch/err.txt")"
if "$train" --model resnet > /dev/null 2> "$scratch/err.txt"; then fail "unknown model accepted"; fi
grep -q 'resnet' "$scratch/err.txt" || fail "unknown-model error: $(cat "$scratch/err.txt")"
if "$train" --resume > /dev/null 2> "$scratch/err.txt"; then fail "--resume without a directory accepted"; fi
grep -q 'checkpoint-dir' "$scratch/err.txt" || fail "resume error: $(cat "$scratch/err.txt")"

# The model on an accelerator: the stand-in runs the GPU's protocol anywhere;
# --device gpu on a machine without one says why, before any training.
"$train" --device stand_in --epochs 1 --max-steps 30 --batch 128 --out "$scratch/stand_in" \
  > "$scratch/stand_in.txt" || fail "--device stand_in exited with $?"
grep -Eq '^test_acc=0\.[0-9]{4} ' "$scratch/stand_in.txt" ||
  fail "--device stand_in: $(cat "$scratch/stand_in.txt")"
grep -q '^soft placement: 0 nodes moved' "$scratch/stand_in.txt" ||
  fail "--device stand_in moved nodes off it: $(cat "$scratch/stand_in.txt")"
# Trained on the stand-in, exported for any device: twice, versions 1 and 2.
for version in 1 2; do
  "$train" --model cnn --device stand_in --epochs 1 --max-steps 5 --batch 32 \
    --out "$scratch/stand_in_cnn" --export "$scratch/export" > "$scratch/stand_in_cnn.txt" ||
    fail "cnn on the stand-in exited with $?"
  grep -q "^exported the model to $scratch/export/$version\$" "$scratch/stand_in_cnn.txt" ||
    fail "--export did not write version $version: $(cat "$scratch/stand_in_cnn.txt")"
  [ -s "$scratch/export/$version/MODEL" ] || fail "no MODEL in export version $version"
done
touch "$scratch/plain_file"
if "$train" --epochs 1 --max-steps 2 --export "$scratch/plain_file/export" > /dev/null \
  2> "$scratch/err.txt"; then fail "--export into a file accepted"; fi
grep -q -- "--export" "$scratch/err.txt" || fail "bad --export not named: $(cat "$scratch/err.txt")"
grep -q '^soft placement: 0 nodes moved' "$scratch/stand_in_cnn.txt" ||
  fail "cnn on the stand-in: $(cat "$scratch/stand_in_cnn.txt")"
# ResNet-50 with batch normalization: a few steps with a checkpoint, resumed
# (the moving averages come back with it), then exported for serving.
rn=(--model resnet50 --epochs 1 --batch 8 --test-examples 200 --out "$scratch/resnet"
    --checkpoint-dir "$scratch/resnet_ckpt")
"$train" "${rn[@]}" --max-steps 3 > "$scratch/resnet.txt" || fail "resnet50 exited with $?"
grep -Eq '^test_acc=0\.[0-9]{4} ' "$scratch/resnet.txt" || fail "resnet50: $(cat "$scratch/resnet.txt")"
"$train" "${rn[@]}" --max-steps 5 --resume --export "$scratch/resnet_export" \
  > "$scratch/resnet2.txt" || fail "resumed resnet50 exited with $?"
grep -q 'resumed from .*ckpt-3.afck (step 3)' "$scratch/resnet2.txt" ||
  fail "resnet50 did not resume: $(cat "$scratch/resnet2.txt")"
[ -s "$scratch/resnet_export/1/MODEL" ] || fail "resnet50 was not exported"
# The language model (its recurrence a loop on the device), where Debian's
# fortunes are; its checkpoint resumes on the CPU.
if [ -d /usr/share/games/fortunes ]; then
  lm=(--model lstm_lm --epochs 1 --max-train-tokens 20000 --max-valid-tokens 3000
      --checkpoint-dir "$scratch/lm_ckpt")
  "$train" "${lm[@]}" --device stand_in --max-steps 3 --out "$scratch/lm" > "$scratch/lm.txt" ||
    fail "lstm_lm on the stand-in exited with $?"
  grep -q '^soft placement: 0 nodes moved' "$scratch/lm.txt" ||
    fail "lstm_lm on the stand-in: $(cat "$scratch/lm.txt")"
  "$train" "${lm[@]}" --resume --max-steps 5 --out "$scratch/lm" > "$scratch/lm2.txt" ||
    fail "lstm_lm resumed on the CPU exited with $?"
  grep -q 'resumed from .*ckpt-3.afck (step 3)' "$scratch/lm2.txt" ||
    fail "lstm_lm did not resume: $(cat "$scratch/lm2.txt")"
else
  echo "note: no /usr/share/games/fortunes (Debian's fortunes): lstm_lm on the stand-in not run"
fi
if ! "$train" --device gpu --epochs 1 --max-steps 5 --out "$scratch/gpu" > /dev/null 2> "$scratch/err.txt"; then
  grep -q 'no GPU to train on' "$scratch/err.txt" || fail "--device gpu error: $(cat "$scratch/err.txt")"
fi
# Seeing inside the run: a step's timeline, the per-op table, TensorBoard's
# event file. A trace step that never comes and a log directory that cannot
# be written are notes and warnings: training goes on.
"$train" --epochs 1 --max-steps 40 --out "$scratch/obs" --trace-steps 3,9999 --profile \
  --logdir "$scratch/obs/logs" --summary-every 10 > "$scratch/obs.txt" ||
  fail "a traced run exited with $?"
grep -q '"traceEvents"' "$scratch/obs/trace-3.json" || fail "no timeline of step 3"
grep -q 'note: --trace-steps 9999: the run ended at step 40' "$scratch/obs.txt" ||
  fail "no note of the missed trace step: $(cat "$scratch/obs.txt")"
grep -q '^profile of 40 steps' "$scratch/obs.txt" || fail "no profile: $(cat "$scratch/obs.txt")"
grep -Eq '^matmul +[0-9]+ ' "$scratch/obs.txt" || fail "no matmul row: $(cat "$scratch/obs.txt")"
ls "$scratch"/obs/logs/events.out.tfevents.* > /dev/null || fail "no event file in --logdir"
touch "$scratch/plain_file"
"$train" --epochs 1 --max-steps 5 --out "$scratch/obs2" --logdir "$scratch/plain_file/logs" \
  > "$scratch/obs2.txt" 2> "$scratch/err.txt" || fail "an unwritable --logdir stopped training"
grep -q 'training goes on without summaries' "$scratch/err.txt" ||
  fail "unwritable --logdir: $(cat "$scratch/err.txt")"
grep -Eq '^test_acc=0\.[0-9]{4} ' "$scratch/obs2.txt" || fail "no result with a bad --logdir"
echo "actorflow-train: all checks passed"
