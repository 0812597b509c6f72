// Purpose: the fixed sections of a spec as typed structs — train, distributed, output and
// output.checkpoint — each bound to its option declarations by an OptionTable (the one place
// their names, defaults, ranges and help are written). Spec loading builds them once; everything
// after runner/spec/ reads fields (`spec.train.accumulate`), never option names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runner/spec/OptionTable.h"

namespace exprun {

// The names of the options that other folders find in a stored spec (runner/spec/StoredSpec.h):
// the option tables declare them with these same constants.
namespace specKey {
inline constexpr char kTrain[] = "train";
inline constexpr char kBatchSize[] = "batch_size";
inline constexpr char kAccumulate[] = "accumulate";
inline constexpr char kPrecision[] = "precision";
inline constexpr char kActivationCheckpointing[] = "activation_checkpointing";
inline constexpr char kMethods[] = "methods";
}  // namespace specKey

enum class Precision { Fp32, Bf16, Fp16 };
const char* precisionName(Precision p);  // "fp32", "bf16", "fp16"

enum class DeviceChoice { Auto, Cpu, Cuda };
enum class NonFinitePolicy { Abort, Skip };

// The train section, one struct per concern (the spec's keys stay flat: train.batch_size, ...).
// How long.
struct TrainLength {
  std::int64_t epochs = 10;
  std::int64_t maxSteps = 0;  // 0: no limit
};

// How the global batch is made: micro-batch x processes x accumulation, or planned.
struct Batching {
  std::optional<std::int64_t> batchSize = 128;  // per micro-batch and process; nullopt: auto (planned)
  std::int64_t globalBatch = 0;                 // for batch_size: auto
  std::string memoryBudget;                     // for batch_size: auto, e.g. "20GiB"
  std::int64_t accumulate = 1;
  std::int64_t repeatedAugmentation = 1;  // each sample this many times per epoch, across ranks (1: off)
};

// What the arithmetic and the activations cost: precision, memory format, recomputation.
struct Numerics {
  Precision precision = Precision::Fp32;
  bool channelsLast = false;
  std::vector<std::string> activationCheckpointing;  // model stages recomputed in backward
  std::int64_t activationCheckpointingEvery = 0;     // blocks per recomputed segment (0: the whole stage)
};

// What an optimizer step does besides the optimizer: the loss, clipping, EMA, non-finite values.
struct StepRules {
  double labelSmoothing = 0.0;
  double clipGradNorm = 0.0;
  double clipGradValue = 0.0;
  double emaDecay = 0.0;
  std::int64_t emaEvery = 1;
  NonFinitePolicy onNonFinite = NonFinitePolicy::Abort;
};

// Evaluation on the test split, and the target that can stop the run.
struct Evaluation {
  bool eval = true;
  std::int64_t evalBatchSize = 1000;
  std::int64_t evalEverySteps = 0;  // 0: at epoch ends only
  double targetTop1 = 0.0;          // stop at the first evaluation reaching it (0: off), percent
  double targetTop5 = 0.0;          // the same for Top-5 (0: off)
  double targetValLoss = 0.0;       // the same for a validation loss at or below it (0: off)
  bool stopAtTarget = true;         // false: record the time to target and train on
};

// How batches cross to the device: auto (uint8 when training on CUDA and the data plugin can make
// 8-bit batches with its options), float (normalised on the CPU), uint8 (8-bit pixels, normalised
// where they are used: a quarter of float's bytes).
enum class InputFormat { Auto, Float, Uint8 };

// Where and how it runs: the device, the threads, the input pipeline, the progress line.
struct Execution {
  DeviceChoice device = DeviceChoice::Auto;
  std::int64_t threads = 0;
  std::int64_t workers = 2;
  std::int64_t prefetch = 4;
  InputFormat input = InputFormat::Float;  // uint8 and auto: not yet run on a GPU
  std::int64_t copyAhead = 0;  // CUDA: batches copied to the device ahead of the step, on a copy stream (not yet run on a GPU)
  bool cudaGraph = false;      // CUDA: the step captured once in a CUDA graph and replayed (runner/step/StepGraph.h)
  std::int64_t logEvery = 50;
  bool largestResolution = false;  // methods that change the resolution hold the largest (exprun tune's trials)
};

// train.profile: a profiled window of `steps` optimizer steps from step `start_step` (0-based,
// counted from the run's start; steps 0: off) — LibTorch's profiler trace, the per-module table and
// one step's memory timeline (runner/train/Profile.h).
struct ProfileConfig {
  std::int64_t startStep = 5;
  std::int64_t steps = 0;
  bool gzip = false;
};

struct TrainConfig {
  TrainLength length;
  Batching batching;
  Numerics numerics;
  StepRules rules;
  Evaluation evaluation;
  Execution execution;
  ProfileConfig profile;  // train.profile (a section of its own)
};

struct CheckpointConfig {
  std::int64_t everySteps = 0;
  std::int64_t everyEpochs = 0;
  std::int64_t keep = 3;
  std::string dir;  // empty: <output dir>/<name>.ckpt
};

// output.mlflow: the run sent to an MLflow tracking server (runner/live/Mlflow.h); off without a URI.
struct MlflowConfig {
  std::string trackingUri;  // http(s)://host:port of `mlflow server`; empty: off
  std::string experiment = "exprun";
  std::string runName;      // empty: the spec's name
  std::int64_t logEvery = 1;  // per-step metrics every N optimizer steps
};

struct OutputConfig {
  std::string dir = "results";
  bool saveWeights = false;
  bool tensorboard = true;  // TensorBoard event files beside the result file
  bool stepsCsv = true;     // the per-step metrics file beside the result file
  bool stepBreakdown = false;  // the per-step CSV also has the step breakdown's phases, one column each
  CheckpointConfig checkpoint;  // output.checkpoint
  MlflowConfig mlflow;          // output.mlflow
};

struct DistributedConfig {
  std::string backend = "auto";  // auto, gloo, nccl
  double timeoutS = 300.0;
  std::string interface;  // Gloo's network interface; empty: from the route to MASTER_ADDR
  std::string shard = "none";  // none, optimizer, gradients (ZeRO stages 0-2: runner/step/GradReducer.h)
  Options comm;  // distributed.comm: the comm plugin node
};

const OptionTable<TrainConfig>& trainOptions();
const OptionTable<OutputConfig>& outputOptions();
const OptionTable<CheckpointConfig>& checkpointOptions();
const OptionTable<MlflowConfig>& mlflowOptions();
const OptionTable<ProfileConfig>& profileOptions();
const OptionTable<DistributedConfig>& distributedOptions();

}  // namespace exprun
