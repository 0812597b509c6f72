// Purpose: method `mixup` — Mixup and CutMix at the batch level, as torchvision's MixUp / CutMix and
// timm's Mixup (mode "batch") do them: one λ per micro-batch drawn from Beta(α, α), each image mixed
// with its partner in the batch — the previous one (torchvision's roll) or the mirrored one (timm's
// flip) — the targets mixed alike. Training Top-1 counts against the most weighted label.
// Rule: the draws come from (seed, optimizer step, micro-batch of the step): every rank draws the
// same λ, box and choice at a step, and a resumed run draws what the uninterrupted one did.
#include <random>

#include "runner/api/Method.h"

namespace exprun {
namespace {

struct MixupSettings {
  double mixupAlpha = 0.8;
  double cutmixAlpha = 0.0;
  double prob = 1.0;
  double switchProb = 0.5;
  bool correctLam = true;
  std::string partner = "flip";
};
const OptionTable<MixupSettings> kOptions{{
    field("mixup_alpha", &MixupSettings::mixupAlpha, "Mixup's Beta(alpha, alpha) (0: no Mixup)", {0.0, 100.0}),
    field("cutmix_alpha", &MixupSettings::cutmixAlpha, "CutMix's Beta(alpha, alpha) (0: no CutMix)", {0.0, 100.0}),
    field("prob", &MixupSettings::prob, "probability that a micro-batch is mixed at all", {0.0, 1.0}),
    field("switch_prob", &MixupSettings::switchProb, "with both alphas: probability of CutMix rather than Mixup", {0.0, 1.0}),
    field("correct_lam", &MixupSettings::correctLam, "CutMix: lambda from the pasted area after clipping the box"),
    oneOf("partner", &MixupSettings::partner, {"flip", "roll"},
          "the image each one is mixed with: flip (the mirrored position, timm's) or roll (the previous one, "
          "cyclically: torchvision's reference script and transforms.v2)"),
}};

// Beta(a, a) from two gamma draws.
double betaDraw(std::mt19937_64& rng, double a) {
  std::gamma_distribution<double> g(a, 1.0);
  const double x = g(rng), y = g(rng);
  return x + y > 0 ? x / (x + y) : 0.5;
}

class Mixup : public Method {
 public:
  explicit Mixup(const Options& o) : s_(kOptions.read(o)) {}

  void setUp(RunContext& run) override {
    seed_ = static_cast<std::uint64_t>(run.spec().seed);
    classes_ = run.dataInfo().numClasses;
  }

  void restore(RunContext&, const nlohmann::json& state) override {
    const JsonFields f(state, "methods.mixup");
    mixed_ = f.integer("mixed");
    cutmix_ = f.integer("cutmix");
    untouched_ = f.integer("untouched");
    lamSum_ = f.number("lam_sum");
  }

  // Mixup blends every image with its partner (x·λ + partner(x)·(1−λ)); with flip the batch falls
  // into mirrored pairs made of the same two images, with roll every image's partner is another.
  // CutMix pastes a box of the partner image whose area is 1−λ of the image (timm's box: sides
  // √(1−λ)·H×W around a uniform centre, clipped; λ then corrected to the pasted area, as both
  // libraries do). With both α > 0,
  // CutMix is chosen with probability `switch_prob`; a micro-batch is mixed at all with probability
  // `prob`. The soft targets are smoothed by train.label_smoothing as PyTorch's cross_entropy smooths
  // soft targets (timm's mixup_target with label_smoothing gives the same values). Each rank pairs
  // the images of its own micro-batch.
  void onBatch(StepBatch& b) override {
    std::mt19937_64 rng(splitmix64(seed_ ^ splitmix64(0x6d697875ull + static_cast<std::uint64_t>(b.step)) ^
                                   (static_cast<std::uint64_t>(b.micro) << 40)));
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (u(rng) >= s_.prob || (s_.mixupAlpha <= 0 && s_.cutmixAlpha <= 0)) {
      ++untouched_;
      return;
    }
    const bool cut = s_.cutmixAlpha > 0 && (s_.mixupAlpha <= 0 || u(rng) < s_.switchProb);
    double lam = betaDraw(rng, cut ? s_.cutmixAlpha : s_.mixupAlpha);
    const torch::Tensor partner = partnerOf(b.x);
    if (cut) {
      const std::int64_t h = b.x.size(2), w = b.x.size(3);
      const double ratio = std::sqrt(1.0 - lam);
      const auto cutH = static_cast<std::int64_t>(static_cast<double>(h) * ratio);
      const auto cutW = static_cast<std::int64_t>(static_cast<double>(w) * ratio);
      const std::int64_t cy = std::uniform_int_distribution<std::int64_t>(0, h - 1)(rng);
      const std::int64_t cx = std::uniform_int_distribution<std::int64_t>(0, w - 1)(rng);
      const std::int64_t y0 = std::clamp<std::int64_t>(cy - cutH / 2, 0, h), y1 = std::clamp<std::int64_t>(cy + cutH / 2, 0, h);
      const std::int64_t x0 = std::clamp<std::int64_t>(cx - cutW / 2, 0, w), x1 = std::clamp<std::int64_t>(cx + cutW / 2, 0, w);
      torch::Tensor x = b.x.clone();
      if (y1 > y0 && x1 > x0)
        x.narrow(2, y0, y1 - y0).narrow(3, x0, x1 - x0).copy_(partner.narrow(2, y0, y1 - y0).narrow(3, x0, x1 - x0));
      if (s_.correctLam) lam = 1.0 - static_cast<double>((y1 - y0) * (x1 - x0)) / static_cast<double>(h * w);
      b.x = x;
      ++cutmix_;
    } else {
      b.x = b.x * lam + partner * (1.0 - lam);
      ++mixed_;
    }
    const torch::Tensor onehot = torch::one_hot(b.y, classes_).to(torch::kFloat);
    b.soft = onehot * lam + partnerOf(onehot) * (1.0 - lam);
    lamSum_ += lam;
  }

  // Row i's partner: row i-1 (row n-1 for row 0) with roll, row n-1-i with flip.
  torch::Tensor partnerOf(const torch::Tensor& t) const { return s_.partner == "roll" ? t.roll(1, 0) : t.flip(0); }

  nlohmann::json state() const override {
    return {{"mixed", mixed_}, {"cutmix", cutmix_}, {"untouched", untouched_}, {"lam_sum", lamSum_}};
  }

  nlohmann::json figures() const override {
    const std::int64_t mixedAll = mixed_ + cutmix_;
    return {{"mixup_batches", mixed_},
            {"cutmix_batches", cutmix_},
            {"unmixed_batches", untouched_},
            {"mean_lambda", mixedAll > 0 ? lamSum_ / static_cast<double>(mixedAll) : 1.0}};
  }

 private:
  MixupSettings s_;
  std::uint64_t seed_ = 0;
  std::int64_t classes_ = 0;
  std::int64_t mixed_ = 0, cutmix_ = 0, untouched_ = 0;  // this rank's micro-batches
  double lamSum_ = 0;
};

void check(const Spec& spec, std::size_t index) {
  const MixupSettings s = kOptions.read(spec.methods[index]);
  if (s.mixupAlpha <= 0 && s.cutmixAlpha <= 0)
    throw SpecProblem("mixup_alpha", "mixup_alpha and cutmix_alpha are both 0: the method would mix nothing (give one "
                                     "of them, e.g. mixup_alpha: 0.2)");
}

PluginInfo info() {
  PluginInfo i;
  i.name = "mixup";
  i.help = "Mixup and CutMix at the batch level (timm's Mixup, torchvision's MixUp/CutMix): soft targets";
  i.options = kOptions.decls();
  i.tasks = {"classification"};  // soft class targets
  i.check = check;
  i.columns = {ResultColumn{"Mixup mean λ", "mixup_mean_lambda", "/mean_lambda", "%.3f"}};
  return i;
}

const Register<MethodKind> kRegistered{info(), [](const Options& o) -> std::unique_ptr<Method> {
                                         return std::make_unique<Mixup>(o);
                                       }};

}  // namespace
}  // namespace exprun
