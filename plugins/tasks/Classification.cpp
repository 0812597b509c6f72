// Purpose: task `classification` — an image (or any sample) to one of N classes: cross-entropy on
// the labels or a method's soft targets, label smoothing, Top-1/Top-5, throughput in images.
// Rule: what the runner computed before tasks were plugins, operation for operation (result files
// of every classification spec are unchanged).
#include "runner/api/Task.h"
#include "runner/metrics/Meters.h"
#include "runner/step/Step.h"

namespace exprun {
namespace {

class Classification final : public Task {
 public:
  std::string unit() const override { return "images"; }
  std::int64_t units(const torch::Tensor& y) const override { return y.size(0); }
  torch::Tensor loss(const torch::Tensor& out, const torch::Tensor& y, const torch::Tensor& soft,
                     double labelSmoothing) const override {
    return classificationLoss(out, soft.defined() ? soft : y, labelSmoothing);
  }
  torch::Tensor correct(const torch::Tensor& out, const torch::Tensor& labels) const override {
    return out.argmax(1).eq(labels).sum();
  }
  EvalSums evalSums(const torch::Tensor& out, const torch::Tensor& y) const override {
    EvalSums s;
    s.lossSum = torch::nn::functional::cross_entropy(out, y,
                                                     torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .to(torch::kDouble);
    s.hits = topkCorrectCounts(out, y, {1, 5});
    s.units = y.size(0);
    return s;
  }
  Batch probe(const DataInfo& info, std::int64_t n) const override {
    torch::Tensor x = torch::randn({n, info.channels, info.height, info.width});
    return Batch{x, torch::randint(info.numClasses, {n}, torch::TensorOptions().dtype(torch::kInt64))};
  }
};

const Register<TaskKind> kRegistered{"classification",
                                     "one class per sample: cross-entropy (label smoothing, soft targets), Top-1/Top-5, images/s",
                                     {}, [](const Options&) { return std::make_unique<Classification>(); }};

}  // namespace
}  // namespace exprun
