// Purpose: what the tests of the step's options share (tests/step/PrecisionTest.cpp,
// tests/nn/RecomputeTest.cpp): a small, fast, fixed-seed run of small_cnn on real Fashion-MNIST (no
// batch norm, no dropout: runs that should match, match), and the largest relative difference
// between two models' parameters.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "runner/api/Model.h"
#include "runner/spec/Spec.h"
#include "runner/train/Trainer.h"
#include "tests/TestUtil.h"

namespace exprun::test {

inline const char* kSmallRunSpec = R"(name: p
seed: 5
model: {type: small_cnn, width: 4, hidden: 16, dropout: 0.0, batch_norm: false}
data: {type: fashion_mnist, train_limit: 1024, test_limit: 500, random_crop_padding: 2}
optimizer: {type: sgd, lr: 0.1, base_batch: 64, momentum: 0.9, weight_decay: 0.0}
train: {epochs: 1, max_steps: 6, threads: 1, workers: 1, log_every: 0, eval: false}
)";

// kSmallRunSpec with `sets`, trained on one process, no files written.
inline TrainOutcome trainSmallRun(std::vector<std::string> sets) {
  sets.insert(sets.begin(), "data.root=" + kFashionMnistRoot);  // the package's, or the GPU machine's copy
  return Trainer(loadSpecFromString(kSmallRunSpec, "p.yaml", sets)).run("");
}

// max over parameters of max |a - b| / max |a|.
inline double maxParameterDiff(Model& a, Model& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  double worst = 0;
  for (const auto& item : pa) {
    const auto& t = item.value();
    worst = std::max(worst, (t - pb[item.key()]).abs().max().item<double>() / std::max(1e-6, t.abs().max().item<double>()));
  }
  return worst;
}

}  // namespace exprun::test
