// Purpose: the comm hooks and the bucket engine on a real 2-rank Gloo process group (two threads of
// this process, each its own rank): every registered hook gives both ranks the same gradients,
// the average of the ranks' (bf16/fp16 within their rounding; `none` keeps each rank's own), the
// bytes each hook sends are counted, buckets follow reverse registration order, no_sync reduces
// nothing, parameters and small vectors are broadcast / reduced, and a spec mismatch is caught
// on all ranks.
#include "runner/api/CommHook.h"
#include "runner/dist/Dist.h"
#include "runner/spec/Spec.h"
#include "runner/step/GradReducer.h"
#include "tests/TestUtil.h"
#include "tests/TwoRanks.h"

using namespace exprun;
using exprun::test::onTwoRanks;

namespace {

Spec tinySpec(const std::vector<std::string>& sets = {}) {
  return loadSpecFromString(
      "name: t\nmodel: {type: small_cnn, width: 4, hidden: 8, dropout: 0.0, batch_norm: false}\ndata: {type: "
      "fashion_mnist}\n",
      "s.yaml", sets);
}

std::shared_ptr<Model> tinyModel(std::uint64_t seed) {
  torch::manual_seed(seed);
  Spec s = tinySpec();
  return registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
}

torch::Tensor inputFor(int rank) {
  torch::Generator g = torch::make_generator<torch::CPUGeneratorImpl>(100 + rank);
  return torch::randn({3, 1, 28, 28}, g);
}
torch::Tensor targetsFor(int rank) { return torch::tensor({rank, 2, 7}, torch::kInt64); }

std::vector<torch::Tensor> gradsOf(Model& m) {
  std::vector<torch::Tensor> g;
  for (auto& p : m.parameters()) g.push_back(p.grad().clone());
  return g;
}

double maxRelDiff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double scale = std::max(1e-3, b[i].abs().max().item<double>());
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

// The reference: each rank's gradient computed alone, averaged.
std::vector<torch::Tensor> referenceAverage() {
  std::vector<torch::Tensor> sum;
  for (int r = 0; r < 2; ++r) {
    auto m = tinyModel(1);
    torch::nn::functional::cross_entropy(m->forward(inputFor(r)), targetsFor(r)).backward();
    auto g = gradsOf(*m);
    if (sum.empty())
      sum = g;
    else
      for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
  }
  for (auto& t : sum) t /= 2;
  return sum;
}

// Runs two steps of `comm` on two ranks (rank 1's model starts elsewhere: the broadcast fixes
// it) and returns each rank's gradients after the second, and the bytes each rank allreduced.
struct TwoRankRun {
  std::vector<torch::Tensor> grads[2];
  std::int64_t bytes[2] = {0, 0};
};
TwoRankRun runTwoSteps(const Spec& spec) {
  TwoRankRun out;
  // Models are made before the threads: initialisation draws from torch's global generator.
  std::shared_ptr<Model> models[2] = {tinyModel(1), tinyModel(2)};
  onTwoRanks([&](int rank, Dist& dist) {
    auto& m = models[rank];
    dist.broadcastModel(*m);
    GradReducer comm(build<CommKind>(spec.distributed.comm), dist);
    comm.attach(*m);
    CHECK(comm.gradsAreViews());
    for (int step = 0; step < 2; ++step) {  // twice: buffers and counters are reset between steps
      {
        torch::NoGradGuard g;
        for (auto& p : m->parameters()) p.mutable_grad().zero_();
      }
      torch::nn::functional::cross_entropy(m->forward(inputFor(rank)), targetsFor(rank)).backward();
      comm.finish();
    }
    out.grads[rank] = gradsOf(*m);
    out.bytes[rank] = dist.allreducedBytes();
  });
  return out;
}

std::int64_t gradientBytes() {
  std::int64_t n = 0;
  for (auto& p : tinyModel(1)->parameters()) n += p.numel() * 4;
  return n;
}

}  // namespace

TEST_SUITE("comm") {
  TEST_CASE("every registered comm hook: both ranks end with the same gradients, the ranks' average") {
    const auto reference = referenceAverage();
    for (const auto& name : Catalog::instance().names("comm")) {
      CAPTURE(name);
      const TwoRankRun r = runTwoSteps(tinySpec({"distributed.comm.type=" + name}));
      if (name == "none") {  // the documented exception: no exchange, each rank keeps its own
        CHECK(maxRelDiff(r.grads[0], r.grads[1]) > 1e-3);
        CHECK(r.bytes[0] == 0);
        continue;
      }
      CHECK(maxRelDiff(r.grads[0], r.grads[1]) == 0.0);
      CHECK(maxRelDiff(r.grads[0], reference) <= 2e-2);  // bf16's rounding at worst
      CHECK(r.bytes[0] > 0);
      CHECK(r.bytes[0] == r.bytes[1]);
    }
  }

  TEST_CASE("each averaging hook within its wire precision; bytes on the wire counted") {
    const auto reference = referenceAverage();
    const std::int64_t fp32Bytes = gradientBytes();
    struct Case {
      std::string type;
      std::vector<std::string> sets;
      double tolerance;
      std::int64_t bytesPerStep;
    };
    for (const Case& c : {Case{"allreduce", {"distributed.comm.bucket_mb=0.002"}, 1e-6, fp32Bytes},
                          Case{"allreduce", {}, 1e-6, fp32Bytes}, Case{"allreduce_after_backward", {}, 1e-6, fp32Bytes},
                          Case{"bf16_compress", {"distributed.comm.bucket_mb=0.002"}, 2e-2, fp32Bytes / 2},
                          Case{"fp16_compress", {}, 2e-3, fp32Bytes / 2}}) {
      CAPTURE(c.type);
      std::vector<std::string> sets = c.sets;
      sets.push_back("distributed.comm.type=" + c.type);
      const TwoRankRun r = runTwoSteps(tinySpec(sets));
      CHECK(maxRelDiff(r.grads[0], reference) <= c.tolerance);
      CHECK(maxRelDiff(r.grads[1], reference) <= c.tolerance);
      CHECK(maxRelDiff(r.grads[0], r.grads[1]) == 0.0);
      CHECK(r.bytes[0] == 2 * c.bytesPerStep);
    }
  }

  TEST_CASE("no_sync keeps local gradients; the next synced step reduces the accumulated ones") {
    Spec spec = tinySpec();
    std::vector<torch::Tensor> local[2], accumulated[2];
    double noSyncWait[2] = {-1, -1};
    std::shared_ptr<Model> models[2] = {tinyModel(1), tinyModel(1)};
    onTwoRanks([&](int rank, Dist& dist) {
      auto& m = models[rank];
      GradReducer comm(build<CommKind>(spec.distributed.comm), dist);
      comm.attach(*m);
      comm.setSync(false);
      torch::nn::functional::cross_entropy(m->forward(inputFor(rank)), targetsFor(rank)).backward();
      noSyncWait[rank] = comm.finish();
      local[rank] = gradsOf(*m);
      comm.setSync(true);
      torch::nn::functional::cross_entropy(m->forward(inputFor(rank)), targetsFor(rank)).backward();
      comm.finish();
      accumulated[rank] = gradsOf(*m);
    });
    CHECK(noSyncWait[0] == 0.0);
    CHECK(noSyncWait[1] == 0.0);
    CHECK(maxRelDiff(local[0], local[1]) > 1e-3);  // not reduced
    // after the synced step: the average over ranks of (2 x each rank's gradient)
    std::vector<torch::Tensor> expected;
    for (size_t i = 0; i < local[0].size(); ++i) expected.push_back(local[0][i] + local[1][i]);
    CHECK(maxRelDiff(accumulated[0], expected) <= 1e-6);
  }

  TEST_CASE("buckets: reverse registration order, bounded size; nothing for a single process") {
    auto m = tinyModel(1);
    auto layout = GradReducer::layout(m->parameters(), 0.002);
    CHECK(layout.size() > 2);
    for (const auto& bucket : layout) {
      std::int64_t bytes = 0;
      for (size_t k : bucket) bytes += m->parameters()[k].numel() * 4;
      CHECK((bucket.size() == 1 || bytes <= 0.002 * 1048576));
    }
    Dist single;
    Spec spec = tinySpec();
    GradReducer idle(build<CommKind>(spec.distributed.comm), single);
    idle.attach(*m);
    CHECK_FALSE(idle.gradsAreViews());
    CHECK(idle.bucketLayout().empty());
    CHECK(idle.finish() == 0.0);
    std::vector<size_t> flat;
    for (auto& bucket : layout) flat.insert(flat.end(), bucket.begin(), bucket.end());
    const size_t n = m->parameters().size();
    REQUIRE(flat.size() == n);
    for (size_t i = 0; i < n; ++i) CHECK(flat[i] == n - 1 - i);
  }

  TEST_CASE("collectives of the trainer: sum, max, gather; spec hashes compared on every rank") {
    std::vector<double> sums[2], maxes[2], gathered[2];
    std::string errors[2];
    onTwoRanks([&](int rank, Dist& dist) {
      sums[rank] = dist.sum({1.0, rank * 10.0});
      maxes[rank] = dist.max({static_cast<double>(rank), -1.0 * rank});
      gathered[rank] = dist.gather(100.0 + rank);
      dist.checkSameSpec(42);  // same: fine
      try {
        dist.checkSameSpec(rank == 0 ? 7 : 8);
      } catch (const DistError& e) {
        errors[rank] = e.what();
      }
    });
    for (int r = 0; r < 2; ++r) {
      CHECK(sums[r] == std::vector<double>{2.0, 10.0});
      CHECK(maxes[r] == std::vector<double>{1.0, 0.0});
      CHECK(gathered[r] == std::vector<double>{100.0, 101.0});
      CHECK(errors[r].find("rank(s) 1 resolved another spec") != std::string::npos);
    }
  }
}
