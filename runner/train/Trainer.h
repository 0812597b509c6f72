// Purpose: the training loop, readable top to bottom: spec → plugins → epochs of
// (batch → forward → loss → backward → lr → step) → evaluation → one result record per epoch,
// written atomically after every epoch.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runner/dist/Dist.h"
#include "runner/registry/Plugins.h"
#include "runner/spec/Spec.h"

namespace exprun {

// Set by SIGINT/SIGTERM: the trainer stops after the current step.
std::atomic<bool>& stopRequested();

struct TrainOutcome {
  nlohmann::json result;    // the result file's content
  bool interrupted = false;  // stopped by a signal before the last epoch
  std::shared_ptr<Model> model;
};

// Builds the spec's model for its data plugin's shape (no data is read).
std::shared_ptr<Model> buildModel(const Spec& spec);

nlohmann::json collectProvenance(const torch::Device& device, int threads, int worldSize);

// The training loss: cross-entropy (in float32) with label smoothing.
torch::Tensor classificationLoss(const torch::Tensor& logits, const torch::Tensor& targets, double labelSmoothing);

class GradScaler;
struct StepOutcome {
  bool stepped = false;  // false: inf/NaN gradients, the step was skipped
  double gradNorm = 0;   // before clipping
};
// One optimizer step after the gradients are reduced: unscale -> clip -> step if finite ->
// update the loss scale.
// `knownNorm`: the gradients' L2 norm when the caller computed it already (fp32).
StepOutcome optimizerStep(torch::optim::Optimizer& optimizer, GradScaler& scaler, const std::vector<torch::Tensor>& params,
                          double clipNorm, double clipValue, std::optional<double> knownNorm = std::nullopt);

// Backend for `distributed.backend: auto` and the device a rank trains on.
std::string chooseBackend(const Spec& spec);
torch::Device chooseDevice(const Spec& spec, const DistEnv& env);

// train.on_nonfinite: abort, with the step and the first non-finite tensor.
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where to resume from: "" (start fresh), "auto" (the newest checkpoint of the spec's checkpoint
// root, if any), or a checkpoint folder / root. `force` accepts a spec that differs.
struct ResumeRequest {
  std::string what;
  bool force = false;
};

class Trainer {
 public:
  // Single process.
  explicit Trainer(Spec spec) : spec_(std::move(spec)) {}
  // One rank of a data-parallel run (dist joined already); rank 0 writes the result file.
  Trainer(Spec spec, Dist* dist) : spec_(std::move(spec)), dist_(dist) {}
  // Trains the spec. When resultPath is not empty, rank 0 (re)writes the result file there after
  // every epoch and at the end. Throws DataError / DistError / std::exception on failures.
  TrainOutcome run(const std::string& resultPath);
  void setResume(ResumeRequest r) { resume_ = std::move(r); }

 private:
  Spec spec_;
  ResumeRequest resume_;
  Dist* dist_ = nullptr;
};

}  // namespace exprun
