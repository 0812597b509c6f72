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
}  // namespace specKey

enum class Precision { Fp32, Bf16, Fp16 };
const char* precisionName(Precision p);  // "fp32", "bf16", "fp16"

enum class DeviceChoice { Auto, Cpu, Cuda };
enum class NonFinitePolicy { Abort, Skip };

struct TrainConfig {
  std::int64_t epochs = 10;
  std::int64_t maxSteps = 0;                    // 0: no limit
  std::optional<std::int64_t> batchSize = 128;  // per micro-batch and process; nullopt: auto (planned)
  std::int64_t globalBatch = 0;                 // for batch_size: auto
  std::string memoryBudget;                     // for batch_size: auto, e.g. "20GiB"
  std::int64_t accumulate = 1;
  Precision precision = Precision::Fp32;
  double labelSmoothing = 0.0;
  double clipGradNorm = 0.0;
  double clipGradValue = 0.0;
  bool channelsLast = false;
  std::vector<std::string> activationCheckpointing;  // model stages recomputed in backward
  double emaDecay = 0.0;
  std::int64_t emaEvery = 1;
  std::int64_t evalBatchSize = 1000;
  bool eval = true;
  std::int64_t evalEverySteps = 0;  // 0: at epoch ends only
  double targetTop1 = 0.0;          // stop at the first evaluation reaching it (0: off), percent
  double targetTop5 = 0.0;          // the same for Top-5 (0: off)
  double targetValLoss = 0.0;       // the same for a validation loss at or below it (0: off)
  bool stopAtTarget = true;         // false: record the time to target and train on
  std::int64_t threads = 0;
  std::int64_t workers = 2;
  std::int64_t prefetch = 4;
  std::int64_t logEvery = 50;
  DeviceChoice device = DeviceChoice::Auto;
  NonFinitePolicy onNonFinite = NonFinitePolicy::Abort;
};

struct CheckpointConfig {
  std::int64_t everySteps = 0;
  std::int64_t everyEpochs = 0;
  std::int64_t keep = 3;
  std::string dir;  // empty: <output dir>/<name>.ckpt
};

struct OutputConfig {
  std::string dir = "results";
  bool saveWeights = false;
  bool tensorboard = true;  // TensorBoard event files beside the result file
  bool stepsCsv = true;     // the per-step metrics file beside the result file
  CheckpointConfig checkpoint;  // output.checkpoint
};

struct DistributedConfig {
  std::string backend = "auto";  // auto, gloo, nccl
  double timeoutS = 300.0;
  Options comm;  // distributed.comm: the comm plugin node
};

const OptionTable<TrainConfig>& trainOptions();
const OptionTable<OutputConfig>& outputOptions();
const OptionTable<CheckpointConfig>& checkpointOptions();
const OptionTable<DistributedConfig>& distributedOptions();

}  // namespace exprun
