// Purpose: the comm plugins on a real 2-rank Gloo process group (two threads of this process,
// each its own rank): every strategy yields the average of the ranks' gradients (bf16/fp16
// within their rounding), buckets follow reverse registration order, no_sync reduces nothing,
// parameters and small vectors are broadcast / reduced, and a spec mismatch is caught on all ranks.
#include <thread>

#include "runner/dist/BucketedAllreduce.h"
#include "runner/dist/CommStrategy.h"
#include "runner/dist/Dist.h"
#include "runner/dist/Launcher.h"
#include "runner/spec/Spec.h"

#include "tests/TestUtil.h"

using namespace exprun;

namespace {

// Two process groups in one process (one per thread) would race in c10d's process-wide flight
// recorder (an unguarded std::map insert): these tests turn the recorder off. Real runs have one
// group per process and keep it.
const int kFlightRecorderOff = (::setenv("TORCH_FR_BUFFER_SIZE", "0", 1), 0);

Spec tinySpec(const std::vector<std::string>& sets = {}) {
  return loadSpecFromString(
      "name: t\nmodel: {type: small_cnn, width: 4, hidden: 8, dropout: 0.0, batch_norm: false}\ndata: {type: fashion_mnist}\n",
      "s.yaml", sets);
}

std::shared_ptr<Model> tinyModel(std::uint64_t seed) {
  torch::manual_seed(seed);
  Spec s = tinySpec();
  return modelRegistry().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
}

// Runs fn(rank, dist) on two ranks of a fresh Gloo group; rethrows the first failure.
void onTwoRanks(const std::function<void(int, Dist&)>& fn) {
  const int port = findFreePort();
  std::exception_ptr errors[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        DistEnv env;
        env.rank = r;
        env.worldSize = 2;
        env.localRank = r;
        env.localWorldSize = 2;
        env.masterPort = port;
        env.launcher = "test";
        auto dist = Dist::join(env, "gloo", 60);
        fn(r, *dist);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
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
    if (sum.empty()) sum = g;
    else
      for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
  }
  for (auto& t : sum) t /= 2;
  return sum;
}

}  // namespace

TEST_SUITE("comm") {
  TEST_CASE("every comm plugin averages the ranks' gradients") {
    const auto reference = referenceAverage();
    struct Case {
      std::string type;
      std::vector<std::string> sets;
      double tolerance;
    };
    for (const Case& c : {Case{"allreduce", {"distributed.comm.bucket_mb=0.002"}, 1e-6}, Case{"allreduce", {}, 1e-6},
                          Case{"allreduce_after_backward", {}, 1e-6},
                          Case{"bf16_compress", {"distributed.comm.bucket_mb=0.002"}, 2e-2},
                          Case{"fp16_compress", {}, 2e-3}}) {
      CAPTURE(c.type);
      std::vector<std::string> sets = c.sets;
      sets.push_back("distributed.comm.type=" + c.type);
      Spec spec = tinySpec(sets);
      std::vector<torch::Tensor> got[2];
      // Models are made before the threads: initialisation draws from torch's global generator.
      std::shared_ptr<Model> models[2] = {tinyModel(1), tinyModel(2)};  // rank 1 differs: the broadcast fixes it
      onTwoRanks([&](int rank, Dist& dist) {
        auto& m = models[rank];
        dist.broadcastModel(*m);
        auto comm = commRegistry().get(c.type)(spec.distributed.comm);
        comm->attach(*m, dist);
        for (int step = 0; step < 2; ++step) {  // twice: buffers and counters are reset between steps
          if (comm->keepsGradStorage()) {
            torch::NoGradGuard g;
            for (auto& p : m->parameters()) p.mutable_grad().zero_();
          } else {
            m->zero_grad();
          }
          torch::nn::functional::cross_entropy(m->forward(inputFor(rank)), targetsFor(rank)).backward();
          comm->finish();
        }
        got[rank] = gradsOf(*m);
      });
      CHECK(maxRelDiff(got[0], reference) <= c.tolerance);
      CHECK(maxRelDiff(got[1], reference) <= c.tolerance);
      CHECK(maxRelDiff(got[0], got[1]) == 0.0);  // identical on both ranks
    }
  }

  TEST_CASE("no_sync keeps local gradients; the next synced step reduces the accumulated ones") {
    Spec spec = tinySpec();
    std::vector<torch::Tensor> local[2], accumulated[2];
    double noSyncWait[2] = {-1, -1};
    std::shared_ptr<Model> models[2] = {tinyModel(1), tinyModel(1)};
    onTwoRanks([&](int rank, Dist& dist) {
      auto& m = models[rank];
      auto comm = commRegistry().get("allreduce")(spec.distributed.comm);
      comm->attach(*m, dist);
      comm->setSync(false);
      torch::nn::functional::cross_entropy(m->forward(inputFor(rank)), targetsFor(rank)).backward();
      noSyncWait[rank] = comm->finish();
      local[rank] = gradsOf(*m);
      comm->setSync(true);
      torch::nn::functional::cross_entropy(m->forward(inputFor(rank)), targetsFor(rank)).backward();
      comm->finish();
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

  TEST_CASE("buckets: reverse registration order, bounded size") {
    Spec spec = tinySpec({"distributed.comm.bucket_mb=0.002"});
    auto m = tinyModel(1);
    BucketedAllreduce b(0.002, torch::kFloat32);
    Dist single;
    b.attach(*m, single);
    auto layout = b.bucketLayout();
    CHECK(layout.size() > 2);
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
