#!/usr/bin/env bash
# Purpose: the exprun command line end to end: exit codes, messages, result files, SIGINT.
# Usage: commands_test.sh EXPRUN_BINARY SOURCE_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"

expect_code 0 "--version" -- "$EXPRUN" --version
expect_grep "$TMP/out" "exprun 0.1.0" "--version text"
expect_code 2 "no subcommand" -- "$EXPRUN"
expect_code 2 "unknown flag" -- "$EXPRUN" run --bogus x.yaml
expect_code 0 "run --help" -- "$EXPRUN" run --help
expect_grep "$TMP/out" "--overwrite" "run --help lists --overwrite"

expect_code 0 "plugins" -- "$EXPRUN" plugins
expect_grep "$TMP/out" "resnet50" "plugins lists resnet50"
expect_grep "$TMP/out" "zero_init_residual" "plugins lists model options"
expect_grep "$TMP/out" "warmup_epochs" "plugins lists scheduler options"
expect_code 0 "plugins optimizer" -- "$EXPRUN" plugins optimizer
expect_grep "$TMP/out" "nesterov" "plugins optimizer lists sgd options"
expect_code 2 "plugins of an unknown kind" -- "$EXPRUN" plugins modle
expect_grep "$TMP/err" "did you mean 'model'" "unknown kind suggestion"

for spec in "$ROOT"/experiments/fashion-mnist/*.yaml "$ROOT"/experiments/imagenet/*.yaml; do
  [[ $(basename "$spec") == *base.yaml ]] && continue
  expect_code 0 "validate $(basename "$spec")" -- "$EXPRUN" validate "$spec"
  expect_grep "$TMP/out" "# model parameters: " "validate prints the parameter count"
done
expect_code 0 "validate resnet50 override" -- "$EXPRUN" validate "$ROOT/experiments/fashion-mnist/resnet18.yaml" \
  --set model.type=resnet50 --set model.in_channels=3 --set model.num_classes=1000
expect_grep "$TMP/out" "# model parameters: 25557032" "resnet50 parameter count"
# The ImageNet specs need their folder: a clear error naming it, exit 2.
expect_code 2 "imagefolder without its folder" -- "$EXPRUN" run "$ROOT/experiments/imagenet/resnet50-1gpu.yaml" \
  --out "$TMP/in" --set data.root="$TMP/no-imagenet" --set train.device=cpu --set distributed.backend=auto
expect_grep "$TMP/err" "no-imagenet/train: no such folder" "imagefolder names the missing folder"

# A profiled run on the CPU prints no ERROR line (kineto's failed count of GPUs on a machine without one).
expect_code 0 "a profiled CPU run" -- "$EXPRUN" run "$ROOT/experiments/fashion-mnist/compare-1proc.yaml" --out "$TMP/prof" \
  --set data.train_limit=1024 --set train.max_steps=3 --set train.eval=false --set train.device=cpu \
  --set train.profile.start_step=1 --set train.profile.steps=1
expect_grep "$TMP/err" "traced into" "the profiled window was traced"
check '! grep -q "ERROR" "$TMP/err"' "a profiled CPU run prints no ERROR line"

cat >"$TMP/bad.yaml" <<'YAML'
name: bad
model: {type: small_cnn}
data: {type: fashion_mnist}
train: {batch_size: -3}
YAML
expect_code 2 "out-of-range value" -- "$EXPRUN" validate "$TMP/bad.yaml"
expect_grep "$TMP/err" "bad.yaml:4:21: train.batch_size" "error location"
expect_code 2 "malformed --set" -- "$EXPRUN" run "$ROOT/experiments/fashion-mnist/small-cnn.yaml" --set epochs
expect_code 2 "missing spec" -- "$EXPRUN" run "$TMP/none.yaml"

cat >"$TMP/quick.yaml" <<YAML
base: $ROOT/experiments/fashion-mnist/base.yaml
name: quick
model: {type: small_cnn, width: 8, hidden: 16}
data: {train_limit: 2000, test_limit: 500}
train: {epochs: 1, threads: 1}
YAML
expect_code 0 "run quick" -- "$EXPRUN" run "$TMP/quick.yaml" --out "$TMP/res"
[[ -s "$TMP/res/quick.json" ]] && ok || bad "result file written"
expect_grep "$TMP/out" "val_top1" "per-epoch table printed"
expect_grep "$TMP/res/quick.json" '"status": "completed"' "status completed"
expect_code 2 "existing result without --overwrite" -- "$EXPRUN" run "$TMP/quick.yaml" --out "$TMP/res"
expect_grep "$TMP/err" "already exists" "refusal message"
expect_code 0 "run --overwrite" -- "$EXPRUN" run "$TMP/quick.yaml" --out "$TMP/res" --overwrite --set train.max_steps=3

# exprun plan: a roomy budget takes the whole batch; a hopeless one is refused.
expect_code 0 "plan" -- "$EXPRUN" plan "$TMP/quick.yaml" --memory-budget 64GiB --global-batch 64
expect_grep "$TMP/out" "micro_batch   64" "plan prints the micro-batch"
expect_code 2 "plan: nothing fits" -- "$EXPRUN" plan "$TMP/quick.yaml" --memory-budget 1MiB --global-batch 64
expect_grep "$TMP/err" "no micro-batch fits" "plan refusal message"
expect_code 2 "plan: bad size" -- "$EXPRUN" plan "$TMP/quick.yaml" --memory-budget lots

# exprun plan --for cuda: an estimate for devices this machine lacks, the ImageNet spec without its data
# (a small resnet18 at 32 px stands in for speed; the shape comes from the spec).
expect_code 0 "plan --for cuda" -- "$EXPRUN" plan "$ROOT/experiments/imagenet/resnet50-4gpu-optimized.yaml" \
  --for cuda --device-memory 24GiB --gpus 4 --set model.type=resnet18 --set data.size=32 --set data.root="$TMP/none" \
  --json "$TMP/plan.json"
expect_grep "$TMP/out" "fp16 measured as bf16" "plan --for states the fp16 assumption"
expect_grep "$TMP/out" "x 4 GPUs = global batch 1024" "plan --for keeps the global batch over the devices"
expect_grep "$TMP/out" "not counted: the data plugin's own device memory (its data did not load here" "plan --for says what it could not count"
expect_grep "$TMP/plan.json" '"batches_ahead_bytes": ' "plan --for JSON: the batches copied ahead"
expect_grep "$TMP/plan.json" '^  "micro_batch": 256,' "plan --for JSON: the plan is the whole per-device batch"
expect_grep "$TMP/plan.json" '^  "accumulate": 1,' "plan --for JSON: no accumulation needed"
expect_code 2 "plan --for without --device-memory" -- "$EXPRUN" plan "$TMP/quick.yaml" --for cuda
expect_code 2 "plan --for with --memory-budget" -- "$EXPRUN" plan "$TMP/quick.yaml" --for cuda --device-memory 8GiB --memory-budget 1GiB
expect_code 2 "plan --for rocm" -- "$EXPRUN" plan "$TMP/quick.yaml" --for rocm --device-memory 8GiB
expect_code 2 "plan --for: batch not divisible" -- "$EXPRUN" plan "$TMP/quick.yaml" --for cuda --device-memory 8GiB --gpus 3 --global-batch 64
expect_grep "$TMP/err" "not divisible by 3 GPUs" "plan --for: divisibility message"
expect_code 2 "plan: neither budget nor --for" -- "$EXPRUN" plan "$TMP/quick.yaml"

# exprun project: labelled a projection, sources named; bad device and --gpus counts refused.
expect_code 0 "project" -- "$EXPRUN" project "$TMP/quick.yaml" --gpus 2 --json "$TMP/proj.json" --md "$TMP/proj.md"
expect_grep "$TMP/out" "Projection (not a measurement) for NVIDIA GeForce RTX 3090" "project labels a projection"
expect_grep "$TMP/proj.md" "DeepLearningExamples" "project names the calibration's source"
expect_grep "$TMP/proj.json" '"projection": true' "project JSON says so"
expect_code 2 "project: unknown device" -- "$EXPRUN" project "$TMP/quick.yaml" --device rtx9090
expect_grep "$TMP/err" "unknown device 'rtx9090' (known: h200-nvl, h200, .*rtx3090" "project: device names listed"
expect_code 2 "project: --gpus per spec" -- "$EXPRUN" project "$TMP/quick.yaml" "$TMP/quick.yaml" --gpus 1 2 4

# SIGINT: stop after the current step, keep the completed epochs, exit 130.
"$EXPRUN" run "$TMP/quick.yaml" --out "$TMP/sig" --set train.epochs=1000 --set train.eval=false >"$TMP/sig.out" 2>"$TMP/sig.err" &
pid=$!
for _ in $(seq 1 600); do
  [[ -s "$TMP/sig/quick.json" ]] && break
  sleep 0.2
done
kill -INT "$pid"
wait "$pid"
code=$?
[[ $code == 130 ]] && ok || bad "SIGINT exit code $code, expected 130"
expect_grep "$TMP/sig/quick.json" '"status": "interrupted"' "interrupted status"
ls "$TMP/sig" | grep -q tmp && bad "temp file left behind" || ok

# Text to a trained, sampled character model: prepare-text, a tiny GPT with a checkpoint, sample.
for i in $(seq 60); do echo "It was the best of times, it was the worst of times, it was the age of wisdom."; done >"$TMP/text.txt"
expect_code 0 "prepare-text" -- "$EXPRUN" prepare-text "$TMP/text.txt" "$TMP/tok"
expect_grep "$TMP/out" "vocabulary of" "prepare-text reports the vocabulary"
expect_code 2 "prepare-text of a missing file" -- "$EXPRUN" prepare-text "$TMP/none.txt" "$TMP/tok2"
expect_grep "$TMP/err" "none.txt" "prepare-text names the missing file"
expect_code 0 "validate a tokens spec without its files" -- "$EXPRUN" validate "$ROOT/experiments/text/baby.yaml" \
  --set data.dir="$TMP/no-tokens"
expect_grep "$TMP/out" "not counted" "validate says why it counts no parameters"
expect_code 0 "a tiny GPT trains" -- "$EXPRUN" run "$ROOT/experiments/text/baby.yaml" --out "$TMP/lm" --set data.dir="$TMP/tok" \
  --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set train.max_steps=20 --set train.eval_every_steps=10 \
  --set data.block_size=16 --set model.block_size=16 --set output.checkpoint.every_steps=20
expect_grep "$TMP/lm/baby-gpt.json" '"tokens_per_s"' "the result file counts tokens"
expect_code 0 "sample" -- "$EXPRUN" sample "$TMP/lm/baby-gpt.ckpt" --prompt "It was" --tokens 40 --seed 3
check '[[ $(head -c 6 "$TMP/out") == "It was" ]]' "sample continues the prompt"
check '[[ $(wc -c <"$TMP/out") -ge 46 ]]' "sample writes the tokens asked for"
expect_code 2 "sample with a character outside the vocabulary" -- "$EXPRUN" sample "$TMP/lm/baby-gpt.ckpt" --prompt "Zebra" --tokens 5
expect_grep "$TMP/err" "not in the vocabulary" "sample names the unknown character"

finish cli
