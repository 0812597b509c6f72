#!/usr/bin/env bash
# Purpose: the training methods end to end, through the binary: a 2-rank run (exprun launch) with
# mixup + CutMix, TrivialAugmentWide, random erasing, repeated augmentation, progressive resizing
# and synchronized batch norm, killed inside an epoch and resumed, ends with the weights of the
# uninterrupted run bit for bit and its methods' sections; the report shows the methods each run
# used; bad input exits 2 naming the key (alpha < 0, an unknown policy, a magnitude out of range, a
# resize schedule outside the data plugin's sizes, repetitions < 1); synchronized batch norm on one
# process is a warning.
# Usage: methods_test.sh EXPRUN_BINARY SOURCE_DIR VENV_PYTHON
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"

S="$TMP/m.yaml"
cat >"$S" <<YAML
name: m
seed: 4
model: {type: resnet18}
data: {type: fashion_mnist, train_limit: 256, test_limit: 64, random_crop_padding: 2, hflip: true,
       auto_augment: ta_wide, random_erasing: 0.25}
optimizer: {type: sgd, lr: 0.1, base_batch: 64, momentum: 0.9}
scheduler: {type: cosine}
train: {epochs: 3, batch_size: 16, threads: 1, workers: 1, log_every: 0, eval_batch_size: 64,
        label_smoothing: 0.1, repeated_augmentation: 2, ema_decay: 0.9}
output: {save_weights: true, tensorboard: false, checkpoint: {every_steps: 5, keep: 2}}
distributed: {timeout_s: 60}
methods:
  - {type: mixup, mixup_alpha: 0.2, cutmix_alpha: 1.0}
  - {type: progressive_resize, start_size: 20, end_size: 28, start_epoch: 1, end_epoch: 3, step: 4}
  - {type: sync_batchnorm}
YAML

# 2 ranks: uninterrupted, and killed at step 12 (inside epoch 2, at 24 px) then resumed from step 10.
"$EXPRUN" launch --nproc-per-node 2 "$S" --out "$TMP/ref" >/dev/null 2>"$TMP/ref.err"
check "[[ $? == 0 ]]" "2 ranks with every method: $(tail -3 "$TMP/ref.err")"
check "[[ \$(json $TMP/ref/m.json 'sorted(j[\"methods\"])') == \"['mixup', 'progressive_resize', 'sync_batchnorm']\" ]]" \
  "each method has its section"
check "[[ \$(json $TMP/ref/m.json 'j[\"methods\"][\"progressive_resize\"][\"sizes\"]') == \"{'1': 20, '2': 24, '3': 28}\" ]]" \
  "the sizes of progressive resizing"
check "[[ \$(json $TMP/ref/m.json 'j[\"methods\"][\"sync_batchnorm\"][\"allreduces\"] > 0') == True ]]" "sync BN's allreduces counted"
# 256 samples, repeated twice, keep 256 positions: 8 steps of 2 x 16 an epoch.
check "[[ \$(json $TMP/ref/m.json 'j[\"provenance\"][\"steps_per_epoch\"]') == 8 ]]" "repeated augmentation keeps the epoch's length"
EXPRUN_FAULT=step@12 "$EXPRUN" launch --nproc-per-node 2 "$S" --out "$TMP/k" >/dev/null 2>&1
"$EXPRUN" launch --nproc-per-node 2 "$S" --out "$TMP/k" --resume >/dev/null 2>"$TMP/kr.err"
check "[[ $? == 0 ]]" "resumed: $(tail -3 "$TMP/kr.err")"
expect_grep "$TMP/kr.err" "resumed from .*step-000000010" "resumed inside epoch 2"
same=$("$PY" - "$TMP/ref/m.json" "$TMP/k/m.json" <<'PYEOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
keys = ["train_loss", "train_top1", "val_loss", "val_top1", "val_top1_ema"]
print(all(x.get(k) == y.get(k) for x, y in zip(a["epochs"], b["epochs"]) for k in keys)
      and len(a["epochs"]) == len(b["epochs"]) and a["methods"]["mixup"] == b["methods"]["mixup"]
      and a["methods"]["progressive_resize"] == b["methods"]["progressive_resize"])
PYEOF
)
check "[[ $same == True ]] && cmp -s $TMP/ref/m.weights.pt $TMP/k/m.weights.pt" "killed, resumed: the uninterrupted run's epochs and weights"

# The report: a Methods column, each method's columns.
"$EXPRUN" report "$TMP/ref/m.json" >"$TMP/report.md" 2>&1
expect_grep "$TMP/report.md" "| Methods |" "the report's Methods column"
expect_grep "$TMP/report.md" "mixup, progressive_resize, sync_batchnorm" "the methods the run used"
expect_grep "$TMP/report.md" "20→28 px, epochs 1→3" "progressive resizing's column"

# One process: synchronized batch norm warns and trains.
"$EXPRUN" run "$S" --out "$TMP/one" --set train.max_steps=2 --set output.checkpoint.every_steps=0 >/dev/null 2>"$TMP/one.err"
check "[[ $? == 0 ]]" "one process with sync_batchnorm: $(tail -3 "$TMP/one.err")"
expect_grep "$TMP/one.err" "sync_batchnorm: a run on one process" "a warning on one process"

# Bad input: exit 2 and the key path.
expect_code 2 "alpha < 0" -- "$EXPRUN" validate "$S" --set 'methods[0].mixup_alpha=-0.2'
expect_grep "$TMP/err" "methods\[0\].mixup_alpha" "alpha's key path"
expect_code 2 "an unknown policy" -- "$EXPRUN" validate "$S" --set data.auto_augment=trivial_wide
expect_grep "$TMP/err" "data.auto_augment" "the policy's key path"
expect_code 2 "a magnitude out of range" -- "$EXPRUN" validate "$S" --set data.auto_augment=ra --set data.ra_magnitude=40
expect_grep "$TMP/err" "data.ra_magnitude" "the magnitude's key path"
expect_code 2 "a resize schedule outside the data's sizes" -- "$EXPRUN" validate "$S" --set 'methods[1].end_size=32'
expect_grep "$TMP/err" "methods\[1\].end_size" "the schedule's key path"
expect_code 2 "repetitions < 1" -- "$EXPRUN" validate "$S" --set train.repeated_augmentation=0
expect_grep "$TMP/err" "train.repeated_augmentation" "the repetitions' key path"
finish methods
