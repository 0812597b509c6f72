// Purpose: comm plugin `powersgd` — PyTorch's PowerSGD DDP comm hook (Vogels et al., 2019): each
// gradient matrix M is sent as two thin matrices of `rank` columns, P = M Q and Q = Mᵀ P (both
// allreduced), and rebuilt as P Qᵀ, with error feedback and warm start; plain allreduce for the
// first start_iter steps. Its state is saved in checkpoints, so a resumed run continues exactly.
// Rule: every rank issues the same collectives in bucket order — the uncompressed part and P when
// the bucket is complete (during backward), Q when the step finishes.
#include <map>
#include <random>

#include "runner/api/CommHook.h"

namespace exprun {
namespace {

struct PowerSgdSettings {
  std::int64_t rank = 1;
  std::int64_t startIter = 1000;
  double minCompressionRate = 2.0;
  bool errorFeedback = true;
  bool warmStart = true;
  double epsilon = 0.0;
  std::int64_t seed = 0;
};
using S = PowerSgdSettings;
const OptionTable<S> kOptions{{
    field("rank", &S::rank, "columns of the low-rank factors P and Q (matrix_approximation_rank)", {1}),
    field("start_iter", &S::startIter, "optimizer steps of plain allreduce before compressing (start_powerSGD_iter)",
          {0}),
    field("min_compression_rate", &S::minCompressionRate,
          "compress a matrix only when (rows + cols) x rank x this < rows x cols", {0.0}),
    field("error_feedback", &S::errorFeedback, "add what compression lost to the next step's gradient"),
    field("warm_start", &S::warmStart, "start each step's power iteration from the last step's Q"),
    field("epsilon", &S::epsilon, "added to column norms when orthogonalising (0: none)", {0.0}),
    field("seed", &S::seed, "seed of the random initial Q (the same on every rank)", {0}),
}};

// Orthonormal columns for `m`, in place: Gram-Schmidt up to 2 columns (or in half precision), a QR
// factorisation beyond, as PyTorch's _orthogonalize decides.
void orthogonalize(torch::Tensor m, double epsilon) {
  const std::int64_t cols = m.size(1);
  if (cols > 2 && m.scalar_type() != torch::kHalf && m.scalar_type() != torch::kBFloat16) {
    m.copy_(std::get<0>(torch::linalg_qr(m)));
    return;
  }
  for (std::int64_t i = 0; i < cols; ++i) {
    torch::Tensor col = m.narrow(1, i, 1);
    col.div_(epsilon == 0 ? col.norm() : col.norm() + epsilon);
    if (i + 1 < cols) {
      torch::Tensor rest = m.narrow(1, i + 1, cols - i - 1);
      rest.sub_((col * rest).sum(0) * col);
    }
  }
}

// M is a weight's gradient viewed as rows x rest; P is orthogonalised after its allreduce, Q
// averaged; vectors and matrices too small to gain min_compression_rate are allreduced whole. Error
// feedback adds what compression lost to the next step's gradient, in the units of the gradients
// the hook sees (with fp16 loss-scaled, as in PyTorch); warm start reuses the last step's Q (one
// power iteration per step). Differences from PyTorch: Q is drawn from a torch generator seeded
// from `seed` (PyTorch draws the seeds with numpy), start_iter may be below 2 (exprun never
// rebuilds buckets), and a step whose gradients are not finite (an fp16 overflow, on_nonfinite:
// skip) leaves the error feedback and P, Q as they were rather than filling them with NaN for good.
// Saved in checkpoints: the step count, errors, P, Q and draws.
class PowerSgd : public CommHook {
 public:
  PowerSgd(const PowerSgdSettings& s, double bucketMb)
      : s_(s), bucketMb_(bucketMb), seeds_(static_cast<std::uint64_t>(s.seed)) {}
  Bucketing bucketing() const override { return {bucketMb_, true}; }
  void steadyState() override { iter_ = std::max(iter_, s_.startIter); }

  BucketFuture operator()(GradBucket& bucket, Dist& dist) override {
    const bool compress = iter_ >= s_.startIter;
    if (bucket.last) ++iter_;  // every bucket of this step has been handed over
    if (!compress) return allreduceAverage(bucket.buffer, dist);
    return compressAndSend(bucket, dist);
  }

  std::vector<std::pair<std::string, torch::Tensor>> state() const override {
    std::vector<std::pair<std::string, torch::Tensor>> out{{"iter", torch::tensor(iter_, torch::kInt64)},
                                                           {"draws", torch::tensor(draws_, torch::kInt64)}};
    for (const auto& [b, t] : error_) out.emplace_back("error/" + std::to_string(b), t);
    for (const auto& [b, t] : p_) out.emplace_back("p/" + std::to_string(b), t);
    for (const auto& [b, t] : q_) out.emplace_back("q/" + std::to_string(b), t);
    return out;
  }
  void loadState(const std::vector<std::pair<std::string, torch::Tensor>>& state) override {
    for (const auto& [name, t] : state) {
      const auto slash = name.find('/');
      const std::string kind = name.substr(0, slash);
      if (kind == "iter") iter_ = t.item<std::int64_t>();
      if (kind == "draws") {
        seeds_.seed(static_cast<std::uint64_t>(s_.seed));
        draws_ = t.item<std::int64_t>();
        seeds_.discard(static_cast<unsigned long long>(draws_));
      }
      if (slash == std::string::npos) continue;
      const std::size_t b = std::stoul(name.substr(slash + 1));
      if (kind == "error") error_[b] = t.clone();
      if (kind == "p") p_[b] = t.clone();
      if (kind == "q") q_[b] = t.clone();
    }
  }

 private:
  // The bucket's matrices worth compressing, as (rows x rest) views, and the rest.
  struct Split {
    std::vector<torch::Tensor> matrices, whole;
    std::int64_t pSize = 0, qSize = 0;
  };
  Split split(const GradBucket& bucket) const {
    Split s;
    for (const auto& g : bucket.gradients) {
      if (g.numel() == 0) continue;
      // rows x rest, aliasing the bucket (a channels_last weight's gradient: rows x (kh, kw, c))
      torch::Tensor m = g.is_contiguous() || g.dim() != 4 ? g.view({g.size(0), -1})
                                                           : g.permute({0, 2, 3, 1}).view({g.size(0), -1});
      const std::int64_t n = m.size(0), k = m.size(1), r = std::min({n, k, s_.rank});
      if (static_cast<double>((n + k) * r) * s_.minCompressionRate < static_cast<double>(n * k)) {
        s.matrices.push_back(m);
        s.pSize += n * r;
        s.qSize += k * r;
      } else {
        s.whole.push_back(g);
      }
    }
    return s;
  }

  std::uint64_t nextSeed() {
    ++draws_;
    return seeds_();
  }

  // Views of `memory` shaped (rows or cols) x rank for each matrix.
  std::vector<torch::Tensor> factors(const torch::Tensor& memory, const std::vector<torch::Tensor>& matrices,
                                     int dim) const {
    std::vector<torch::Tensor> out;
    std::int64_t offset = 0;
    for (const auto& m : matrices) {
      const std::int64_t len = m.size(dim), r = std::min({m.size(0), m.size(1), s_.rank});
      out.push_back(memory.narrow(0, offset, len * r).view({len, r}));
      offset += len * r;
    }
    return out;
  }

  // What a bucket's second half (finish) needs from its first (compressAndSend).
  struct InFlight {
    std::size_t b = 0;
    torch::Tensor input, before, lastError, lastP, lastQ, whole;
    Split parts;
    std::vector<torch::Tensor> ps, qs;
    c10::intrusive_ptr<c10d::Work> wholeWork, pWork;
  };
  BucketFuture compressAndSend(GradBucket& bucket, Dist& dist);
  torch::Tensor finish(InFlight& f, Dist& dist);

  // State restored for another bucket layout (a --force'd bucket_mb or model) is dropped.
  void dropMismatchedState(std::size_t b, std::int64_t numel, const Split& parts) {
    if ((error_.count(b) && error_[b].numel() != numel) || (p_.count(b) && p_[b].numel() != parts.pSize) ||
        (q_.count(b) && q_[b].numel() != parts.qSize)) {
      error_.erase(b);
      p_.erase(b);
      q_.erase(b);
    }
  }

  PowerSgdSettings s_;
  double bucketMb_;
  std::int64_t iter_ = 0;
  std::mt19937_64 seeds_;
  std::int64_t draws_ = 0;
  std::map<std::size_t, torch::Tensor> error_, p_, q_;  // by bucket index
};

BucketFuture PowerSgd::compressAndSend(GradBucket& bucket, Dist& dist) {
  InFlight f;
  f.input = bucket.buffer;
  const std::size_t b = f.b = bucket.index;
  f.parts = split(bucket);
  dropMismatchedState(b, f.input.numel(), f.parts);
  if (s_.errorFeedback) {  // the input with the last error added, to compute the new error
    if (error_.count(b)) f.input.add_(error_[b]);
    f.before = f.input.clone();
  }
  const bool fresh = !s_.warmStart || !p_.count(b);
  f.lastError = !s_.errorFeedback ? torch::Tensor() : error_.count(b) ? error_[b] : torch::zeros_like(f.input);
  if (!fresh) f.lastP = p_[b].clone(), f.lastQ = q_[b].clone();
  if (fresh) {
    p_[b] = torch::empty({f.parts.pSize}, f.input.options());
    q_[b] = torch::empty({f.parts.qSize}, f.input.options());
  }
  f.ps = factors(p_[b], f.parts.matrices, 0), f.qs = factors(q_[b], f.parts.matrices, 1);
  if (fresh) {  // the same random Q on every rank
    torch::Generator gen = torch::make_generator<torch::CPUGeneratorImpl>(nextSeed());
    for (auto& q : f.qs) q.copy_(torch::randn(q.sizes(), gen, torch::kFloat32));
  }
  for (auto& q : f.qs) orthogonalize(q, s_.epsilon);
  for (std::size_t i = 0; i < f.parts.matrices.size(); ++i) torch::matmul_out(f.ps[i], f.parts.matrices[i], f.qs[i]);
  if (!f.parts.whole.empty()) {
    std::vector<torch::Tensor> flat;
    for (const auto& t : f.parts.whole) flat.push_back(t.reshape({-1}));
    f.whole = torch::cat(flat);
    f.wholeWork = dist.allreduceAsync(f.whole);
  }
  if (!f.parts.matrices.empty()) f.pWork = dist.allreduceAsync(p_[b]);
  // The rest runs when the step finishes, in bucket order: Q's allreduce is issued from there.
  return BucketFuture(c10::intrusive_ptr<c10d::Work>(), [this, f, &dist]() mutable { return finish(f, dist); });
}

torch::Tensor PowerSgd::finish(InFlight& f, Dist& dist) {
  const std::size_t b = f.b;
  if (f.wholeWork) {
    f.wholeWork->wait();
    f.whole.div_(dist.worldSize());
    std::int64_t offset = 0;
    for (auto& t : f.parts.whole) {
      t.copy_(f.whole.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
  if (f.pWork) {
    f.pWork->wait();
    for (auto& p : f.ps) orthogonalize(p, s_.epsilon);  // no division: orthogonalised anyway
    auto& m = f.parts.matrices;
    for (std::size_t i = 0; i < m.size(); ++i) torch::matmul_out(f.qs[i], m[i].t(), f.ps[i]);
    dist.allreduceAsync(q_[b])->wait();
    q_[b].div_(dist.worldSize());
    for (std::size_t i = 0; i < m.size(); ++i) torch::matmul_out(m[i], f.ps[i], f.qs[i].t());
  }
  // A step that is not finite on some rank (the sums carry it to every rank) keeps the last state.
  const torch::Tensor finite = torch::isfinite(f.input).all();
  if (s_.errorFeedback) error_[b] = torch::where(finite, f.before - f.input, f.lastError);
  if (f.lastP.defined()) {
    p_[b] = torch::where(finite, p_[b], f.lastP);
    q_[b] = torch::where(finite, q_[b], f.lastQ);
  }
  if (!s_.warmStart) {
    p_.erase(b);
    q_.erase(b);
  }
  return f.input;
}

const Register<CommKind> kRegistered{
    "powersgd", "low-rank gradient compression with error feedback (PyTorch's PowerSGD hook)",
    kOptions.with(bucketOptions()), [](const Options& o) -> std::unique_ptr<CommHook> {
      return std::make_unique<PowerSgd>(kOptions.read(o), bucketOptions().read(o).bucketMb);
    }};

}  // namespace
}  // namespace exprun
