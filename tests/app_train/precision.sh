#!/usr/bin/env bash
# actorflow-train --precision bf16 (mixed precision: bfloat16 products, float32
# weights) against --precision fp32 on the real Fashion-MNIST: the same 300
# steps of the MLP from the same seed reach about the same loss and accuracy.
# Arg: the actorflow-train binary.
set -euo pipefail
train=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

run() {  # precision -> "mean_train_loss test_acc"
  "$train" --precision "$1" --epochs 1 --max-steps 300 --batch 128 --seed 3 \
    --out "$scratch/$1" > "$scratch/$1.txt" || fail "--precision $1 exited with $?"
  local loss acc
  loss=$(tail -n 1 "$scratch/$1/metrics.csv" | cut -d, -f3)
  acc=$(sed -nE 's/^test_acc=(0\.[0-9]{4}) .*/\1/p' "$scratch/$1.txt")
  [ -n "$loss" ] && [ -n "$acc" ] || fail "--precision $1: no result in $(cat "$scratch/$1.txt")"
  echo "$loss $acc"
}
read -r loss32 acc32 <<< "$(run fp32)"
read -r loss16 acc16 <<< "$(run bf16)"
echo "fp32: train loss $loss32, test accuracy $acc32; bf16: train loss $loss16, test accuracy $acc16"
awk -v l="$loss16" 'BEGIN { exit !(l < 0.75) }' || fail "bf16 mean train loss $loss16 (>= 0.75)"
awk -v a="$loss16" -v b="$loss32" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 0.05) }' ||
  fail "bf16 loss $loss16 is not within 0.05 of fp32's $loss32"
awk -v a="$acc16" -v b="$acc32" 'BEGIN { exit !(a > 0.78 && a > b - 0.02) }' ||
  fail "bf16 test accuracy $acc16 (fp32: $acc32)"

# Bad input: clear errors, non-zero exits.
if "$train" --precision fp16 > /dev/null 2> "$scratch/err.txt"; then fail "--precision fp16 accepted"; fi
grep -q 'fp16' "$scratch/err.txt" || fail "--precision fp16 error: $(cat "$scratch/err.txt")"
if "$train" --model lstm_lm --precision bf16 > /dev/null 2> "$scratch/err.txt"; then
  fail "lstm_lm with bf16 accepted"
fi
grep -q 'precision bf16 is for mlp and cnn' "$scratch/err.txt" ||
  fail "lstm_lm bf16 error: $(cat "$scratch/err.txt")"
echo "actorflow-train --precision: all checks passed"
