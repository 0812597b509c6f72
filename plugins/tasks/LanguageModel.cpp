// Purpose: task `language_model` — next-token prediction: the model's logits [B, T, V] against the
// next tokens [B, T], cross-entropy averaged over the tokens (so micro-batches, accumulation and
// ranks weight every token alike), token accuracy as Top-1/Top-5, perplexity exp(val loss),
// throughput in tokens. Rule: no soft targets (mixing tokens has no meaning here).
#include "runner/api/Task.h"
#include "runner/metrics/Meters.h"

namespace exprun {
namespace {

namespace F = torch::nn::functional;

class LanguageModel final : public Task {
 public:
  std::string unit() const override { return "tokens"; }
  std::int64_t units(const torch::Tensor& y) const override { return y.numel(); }
  std::int64_t unitsPerSample(const DataInfo& info) const override { return info.sequenceLength; }
  torch::Tensor loss(const torch::Tensor& out, const torch::Tensor& y, const torch::Tensor& soft,
                     double labelSmoothing) const override {
    TORCH_CHECK(!soft.defined(), "task language_model: a method made soft targets (mixup?), which tokens do not take");
    return F::cross_entropy(out.reshape({-1, out.size(-1)}).to(torch::kFloat32), y.reshape({-1}),
                            F::CrossEntropyFuncOptions().label_smoothing(labelSmoothing));
  }
  torch::Tensor correct(const torch::Tensor& out, const torch::Tensor& labels) const override {
    return out.argmax(-1).eq(labels).sum();
  }
  EvalSums evalSums(const torch::Tensor& out, const torch::Tensor& y) const override {
    const torch::Tensor logits = out.reshape({-1, out.size(-1)}), targets = y.reshape({-1});
    EvalSums s;
    s.lossSum = F::cross_entropy(logits.to(torch::kFloat32), targets, F::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .to(torch::kDouble);
    s.hits = topkCorrectCounts(logits, targets, {1, 5});
    s.units = targets.numel();
    return s;
  }
  Batch probe(const DataInfo& info, std::int64_t n) const override {
    TORCH_CHECK(info.vocabSize > 0 && info.sequenceLength > 0,
                "task language_model: the data plugin gives no vocabulary and sequence length (use data: {type: tokens})");
    const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
    return Batch{torch::randint(info.vocabSize, {n, info.sequenceLength}, i64),
                 torch::randint(info.vocabSize, {n, info.sequenceLength}, i64)};
  }
};

const Register<TaskKind> kRegistered{"language_model",
                                     "next-token prediction: cross-entropy over tokens, perplexity, token accuracy, tokens/s",
                                     {}, [](const Options&) { return std::make_unique<LanguageModel>(); }};

}  // namespace
}  // namespace exprun
