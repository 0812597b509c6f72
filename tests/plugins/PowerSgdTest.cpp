// Purpose: comm plugin `powersgd` on real 2-rank Gloo groups: PyTorch's defaults; plain averaging
// for start_iter steps; once compressing, both ranks get the same gradients, vectors stay exact
// averages, an average of rank 2 is rebuilt exactly at rank 2, and error feedback makes the mean
// of the steps converge to the true average (without it, rank 1 stays off); small_cnn's
// gradients cost >= 4x fewer bytes than allreduce's, in the result file of a real `exprun launch`
// run, which a kill and --resume continue to the same weights (the hook's state is checkpointed).
#include <cstdlib>
#include <limits>

#include "runner/spec/Spec.h"
#include "runner/step/GradReducer.h"
#include "tests/TestUtil.h"
#include "tests/TwoRanks.h"

using namespace exprun;
using exprun::test::readText;
using exprun::test::runQuiet;
using exprun::test::TempDir;
using exprun::test::writeText;

namespace {

// One 32x64 weight and a 32-vector, whose gradients are given per rank: loss = <w, C> + <b, c>.
struct PowerSgdPair : Model {
  torch::Tensor w = register_parameter("w", torch::zeros({32, 64}));
  torch::Tensor b = register_parameter("b", torch::zeros({32}));
  torch::Tensor forward(torch::Tensor x) override { return x; }
};

struct Grads {
  torch::Tensor w, b;
};

Spec commSpec(const std::vector<std::string>& sets) {
  std::vector<std::string> all{"distributed.comm.type=powersgd"};
  all.insert(all.end(), sets.begin(), sets.end());
  return loadSpecFromString("name: t\nmodel: {type: small_cnn}\ndata: {type: synthetic}\n", "s.yaml", all);
}

// `steps` steps on two ranks whose gradients are (cw(rank, step), cb[rank]); what each rank
// holds after each step.
void twoRankSteps(const Spec& spec, const std::function<torch::Tensor(int, int)>& cw, const torch::Tensor cb[2],
                  int steps, std::vector<Grads> (&out)[2]) {
  test::onTwoRanks([&](int rank, Dist& dist) {
    auto m = std::make_shared<PowerSgdPair>();
    GradReducer comm(build<CommKind>(spec.distributed.comm), dist);
    comm.attach(*m);
    for (int s = 0; s < steps; ++s) {
      {
        torch::NoGradGuard g;
        m->w.mutable_grad().zero_();
        m->b.mutable_grad().zero_();
      }
      ((m->w * cw(rank, s)).sum() + (m->b * cb[rank]).sum()).backward();
      comm.finish();
      out[rank].push_back(Grads{m->w.grad().clone(), m->b.grad().clone()});
    }
  });
}
void twoRankSteps(const Spec& spec, const torch::Tensor cw[2], const torch::Tensor cb[2], int steps,
                  std::vector<Grads> (&out)[2]) {
  twoRankSteps(
      spec, [&](int rank, int) { return cw[rank]; }, cb, steps, out);
}

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / b.norm().item<double>();
}

torch::Tensor outer(std::uint64_t seed, double scale) {
  torch::Generator g = torch::make_generator<torch::CPUGeneratorImpl>(seed);
  return scale * torch::outer(torch::randn({32}, g), torch::randn({64}, g));
}

}  // namespace

TEST_SUITE("powersgd") {
  TEST_CASE("registered with PyTorch's defaults") {
    REQUIRE(Catalog::instance().find("comm", "powersgd") != nullptr);
    const Options o = commSpec({}).distributed.comm;
    CHECK(test::optionValue<std::int64_t>(o, "rank") == 1);
    CHECK(test::optionValue<std::int64_t>(o, "start_iter") == 1000);
    CHECK(test::optionValue<double>(o, "min_compression_rate") == 2.0);
    CHECK(test::optionValue<bool>(o, "error_feedback"));
    CHECK(test::optionValue<bool>(o, "warm_start"));
    CHECK_THROWS_CONTAINING(SpecError, commSpec({"distributed.comm.rank=0"}), "distributed.comm.rank", "at least 1");
  }

  TEST_CASE("plain averages before start_iter; then the same on both ranks, vectors exact, matrices low-rank") {
    const torch::Tensor cw[2] = {outer(1, 1.0) + outer(2, 0.5), outer(3, 1.0)};
    const torch::Tensor cb[2] = {torch::randn({32}), torch::randn({32})};
    std::vector<Grads> got[2];
    twoRankSteps(commSpec({"distributed.comm.start_iter=2"}), cw, cb, 5, got);
    const torch::Tensor avgW = (cw[0] + cw[1]) / 2, avgB = (cb[0] + cb[1]) / 2;
    for (int s = 0; s < 5; ++s) {
      CAPTURE(s);
      CHECK(torch::equal(got[0][s].w, got[1][s].w));
      CHECK(torch::equal(got[0][s].b, got[1][s].b));
      CHECK(rel(got[0][s].b, avgB) <= 1e-6);  // vectors are never compressed
      if (s < 2)
        CHECK(rel(got[0][s].w, avgW) <= 1e-6);
      else
        CHECK(rel(got[0][s].w, avgW) > 1e-2);  // rank 1 of a rank-3 average
    }
  }

  TEST_CASE("an average of rank 2 is rebuilt exactly at rank 2 (one power iteration)") {
    const torch::Tensor cw[2] = {outer(4, 1.0), outer(5, 2.0)};
    const torch::Tensor cb[2] = {torch::zeros({32}), torch::zeros({32})};
    std::vector<Grads> got[2];
    twoRankSteps(
        commSpec({"distributed.comm.start_iter=0", "distributed.comm.rank=2", "distributed.comm.error_feedback=false"}),
        cw, cb, 1, got);
    CHECK(rel(got[0][0].w, (cw[0] + cw[1]) / 2) <= 1e-5);
  }

  TEST_CASE("error feedback: the mean over steps converges to the true average; without it rank 1 stays off") {
    const torch::Tensor cw[2] = {outer(6, 1.0), outer(7, 0.8)};
    const torch::Tensor cb[2] = {torch::zeros({32}), torch::zeros({32})};
    const torch::Tensor avg = (cw[0] + cw[1]) / 2;
    auto meanError = [&](bool feedback) {
      std::vector<Grads> got[2];
      twoRankSteps(commSpec({"distributed.comm.start_iter=0",
                             std::string("distributed.comm.error_feedback=") + (feedback ? "true" : "false")}),
                   cw, cb, 40, got);
      torch::Tensor sum = torch::zeros_like(avg);
      for (const auto& g : got[0]) sum += g.w;
      return rel(sum / 40, avg);
    };
    const double with = meanError(true), without = meanError(false);
    MESSAGE("relative error of the mean of 40 steps: " << with << " with error feedback, " << without << " without");
    CHECK(with < 0.1);
    CHECK(without > 0.3);
  }

  TEST_CASE("a step with non-finite gradients leaves the error feedback and P, Q as they were") {
    const torch::Tensor cw[2] = {outer(8, 1.0) + outer(9, 0.3), outer(10, 0.7)};
    const torch::Tensor cb[2] = {torch::zeros({32}), torch::zeros({32})};
    const Spec spec = commSpec({"distributed.comm.start_iter=0"});
    std::vector<Grads> clean[2], hit[2];
    twoRankSteps(spec, cw, cb, 3, clean);
    // The same, with an inf in rank 1's gradient at step 1 (an fp16 overflow): that step is
    // non-finite everywhere, and the steps after it are the clean run's, bit for bit.
    twoRankSteps(
        spec,
        [&](int rank, int step) {
          torch::Tensor g = cw[rank].clone();
          if (rank == 1 && step == 1) g[3][5] = std::numeric_limits<float>::infinity();
          return g;
        },
        cb, 4, hit);
    CHECK(torch::equal(hit[0][0].w, clean[0][0].w));
    CHECK_FALSE(torch::isfinite(hit[0][1].w).all().item<bool>());
    CHECK(torch::equal(hit[0][2].w, clean[0][1].w));
    CHECK(torch::equal(hit[1][3].w, clean[1][2].w));
  }

  TEST_CASE("the planner's probes see the compressing steps (steady state)") {
    const torch::Tensor cw[2] = {outer(11, 1.0), outer(12, 1.0)};
    const torch::Tensor cb[2] = {torch::zeros({32}), torch::zeros({32})};
    std::int64_t bytes[2] = {0, 0};
    test::onTwoRanks([&](int rank, Dist& dist) {
      auto m = std::make_shared<PowerSgdPair>();
      auto h = build<CommKind>(commSpec({}).distributed.comm);  // start_iter 1000
      h->steadyState();
      GradReducer comm(std::move(h), dist);
      comm.attach(*m);
      ((m->w * cw[rank]).sum() + (m->b * cb[rank]).sum()).backward();
      comm.finish();
      bytes[rank] = dist.allreducedBytes();
    });
    CHECK(bytes[0] < 32 * 64 * 4 / 4);  // P and Q (and the vector), not the whole matrix
  }

  TEST_CASE(
      "a real 2-rank run: >= 4x fewer bytes than allreduce in the result file; killed and resumed to the same "
      "weights") {
    TempDir dir;
    writeText(dir.file("p.yaml"), R"(name: p
seed: 5
model: {type: small_cnn, width: 8, hidden: 32, dropout: 0.0}
data: {type: fashion_mnist, train_limit: 512, test_limit: 200}
optimizer: {type: sgd, lr: 0.1, base_batch: 64, momentum: 0.9}
train: {epochs: 1, max_steps: 6, batch_size: 32, threads: 1, workers: 1, log_every: 0}
output: {save_weights: true, checkpoint: {every_steps: 3}}
distributed: {timeout_s: 60, comm: {type: powersgd, start_iter: 1}}
)");
    const std::string launch = std::string(EXPRUN_BINARY) + " launch --nproc-per-node 2 " + dir.file("p.yaml");
    REQUIRE(runQuiet(launch + " --out " + dir.file("ref")) == 0);
    const auto j = nlohmann::json::parse(readText(dir.file("ref/p.json")));
    const auto& e = j["epochs"][0];
    const double allreduceBytes = 4.0 * j["provenance"]["parameters"].get<double>();  // every gradient, float32
    MESSAGE("bytes per step: powersgd " << e["comm_bytes_per_step"].get<double>() << ", allreduce " << allreduceBytes);
    CHECK(j["provenance"]["comm"] == "powersgd");
    CHECK(e["comm_bytes_per_step"].get<double>() * 4 <= allreduceBytes);
    CHECK(e["comm_bytes"].get<double>() > 0);
    CHECK(std::isfinite(e["train_loss"].get<double>()));
    // Killed after step 4 (the checkpoint of step 3 holds the hook's errors and Q), then resumed.
    CHECK(runQuiet("EXPRUN_FAULT=step@4 " + launch + " --out " + dir.file("cut")) != 0);
    REQUIRE(runQuiet(launch + " --out " + dir.file("cut") + " --resume") == 0);
    CHECK(readText(dir.file("cut/p.weights.pt")) == readText(dir.file("ref/p.weights.pt")));
  }
}
