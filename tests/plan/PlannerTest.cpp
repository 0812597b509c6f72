// Purpose: the memory planner on CPU: sizes parse, a roomy budget takes the whole per-process
// batch, a tight one a smaller micro-batch with accumulation reaching the global batch exactly,
// a hopeless one a clear error; batch_size: auto in a training run.
#include "runner/plan/Planner.h"
#include "runner/spec/Spec.h"
#include "runner/train/Trainer.h"

#include "tests/TestUtil.h"
#include "tests/TwoRanks.h"

using namespace exprun;

namespace {
const char* kPlannerSpec = R"(name: plan
seed: 2
model: {type: small_cnn, width: 16, hidden: 32}
data: {type: fashion_mnist, train_limit: 512, test_limit: 200}
train: {epochs: 1, threads: 1, workers: 1, log_every: 0}
)";
}

TEST_SUITE("planner") {
  TEST_CASE("roomy, tight and hopeless budgets") {
    Spec spec = loadSpecFromString(kPlannerSpec, "plan.yaml");
    Dist single;
    const torch::Device cpu(torch::kCPU);
    // Small sizes first: CPU peaks are resident-set peaks, and freed heap is not always returned.
    MemoryPlan roomy = planMemory(spec, parseBytes("64GiB"), 64, single, cpu);
    CHECK(roomy.microBatch == 64);
    CHECK(roomy.accumulate == 1);
    CHECK(roomy.techniques.empty());
    REQUIRE(roomy.probes.size() == 7);  // 1, 2, 4, ..., 64
    const std::int64_t p64 = roomy.probes.back().peakBytes;
    REQUIRE(p64 > 0);
    // 40 MiB above batch 64's peak (after the 10 % margin): batch 512 does not fit, 64 does.
    const std::int64_t budget = static_cast<std::int64_t>((p64 + 40 * 1048576) / 0.9);
    MemoryPlan tight = planMemory(spec, budget, 512, single, cpu);
    CHECK(tight.microBatch < 512);
    CHECK(tight.microBatch >= 64);
    CHECK(tight.accumulate > 1);
    CHECK(tight.microBatch * tight.accumulate == 512);
    CHECK(tight.techniques.empty());
    for (const auto& p : tight.probes)
      if (p.fits) CHECK(static_cast<double>(p.peakBytes) <= budget * 0.9);
    CHECK(tight.toJson()["accumulate"] == tight.accumulate);
    CHECK(tight.table().find("accumulate") != std::string::npos);
    CHECK_THROWS_CONTAINING(std::invalid_argument, planMemory(spec, parseBytes("1MiB"), 512, single, cpu),
                            "no micro-batch fits", "even with bf16 and activation checkpointing");
  }

  TEST_CASE("a known memory curve: the largest fitting batch exactly, techniques in order") {
    Spec spec = loadSpecFromString(kPlannerSpec, "plan.yaml");
    Dist single;
    const torch::Device cpu(torch::kCPU);
    const std::int64_t MiB = 1048576;
    // fp32: 100 MiB + 3 MiB per sample; bf16 halves the per-sample part; checkpointing quarters it.
    auto curve = [&](std::int64_t b, Precision precision, const std::vector<std::string>& ckpt) {
      double perSample = 3.0 * MiB;
      if (precision == Precision::Bf16) perSample /= 2;
      if (!ckpt.empty()) perSample /= 4;
      return static_cast<std::int64_t>(100 * MiB + perSample * b);
    };
    for (std::int64_t budgetMiB : {200, 377, 1000, 4000}) {
      CAPTURE(budgetMiB);
      const double limit = budgetMiB * MiB * 0.9;
      const std::int64_t fitting = std::min<std::int64_t>(1024, static_cast<std::int64_t>((limit - 100 * MiB) / (3.0 * MiB)));
      std::int64_t expected = 1;  // the largest divisor of 1024 that fits
      while (expected * 2 <= fitting) expected *= 2;
      MemoryPlan p = planMemory(spec, budgetMiB * MiB, 1024, single, cpu, curve);
      CHECK(p.largestFitting == expected);
      CHECK(p.microBatch == expected);
      CHECK(p.microBatch * p.accumulate == 1024);
      CHECK(p.techniques.empty());
      for (const auto& probe : p.probes) CHECK(1024 % probe.batch == 0);  // only what the global batch allows
      CHECK(p.probes.size() <= 11);
    }
    {  // global batch 96 on one process: divisors 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96; 40 fit
      auto upTo40 = [&](std::int64_t b, Precision, const std::vector<std::string>&) { return b <= 40 ? MiB : 1000 * MiB; };
      MemoryPlan p = planMemory(spec, 100 * MiB, 96, single, cpu, upTo40);
      CHECK(p.microBatch == 32);
      CHECK(p.accumulate == 3);
      for (const auto& probe : p.probes) CHECK(96 % probe.batch == 0);
    }
    // Batch 1 does not fit in fp32 (103 MiB > 0.9 x 113.5) but does in bf16 (101.5 MiB).
    MemoryPlan bf = planMemory(spec, static_cast<std::int64_t>(113.5 * MiB), 64, single, cpu, curve);
    CHECK(bf.techniques == std::vector<std::string>{"bf16"});
    CHECK(bf.precision == Precision::Bf16);
    // Not even in bf16 (101.5 > 0.9 x 112.5 = 101.25), but with checkpointing too (100.375).
    MemoryPlan ck = planMemory(spec, static_cast<std::int64_t>(112.5 * MiB), 64, single, cpu, curve);
    CHECK(ck.techniques == std::vector<std::string>{"bf16", "activation_checkpointing"});
    CHECK(ck.recomputed == std::vector<std::string>{"features", "classifier"});
    CHECK(ck.recomputeEvery == 1);  // the planner recomputes block by block (the finer choice)
    CHECK(bf.recomputeEvery == 0);
    Spec applied = applyPlan(spec, ck);
    CHECK(applied.train.numerics.precision == Precision::Bf16);
    CHECK(applied.train.numerics.activationCheckpointingEvery == 1);
    CHECK(applied.train.batching.accumulate == ck.accumulate);
  }

  TEST_CASE("batch_size: auto trains with the planned micro-batch") {
    Spec spec = loadSpecFromString(kPlannerSpec, "plan.yaml",
                                   {"train.batch_size=auto", "train.global_batch=64", "train.memory_budget=64GiB"});
    CHECK_FALSE(spec.train.batching.batchSize.has_value());
    auto out = Trainer(spec).run("");
    CHECK(out.result["provenance"]["memory_plan"]["micro_batch"] == 64);
    CHECK(out.result["provenance"]["micro_batch"] == 64);
    CHECK(out.result["epochs"][0]["samples"] == 512);
    Spec bad = loadSpecFromString(kPlannerSpec, "plan.yaml", {"train.batch_size=auto"});
    CHECK_THROWS_CONTAINING(std::invalid_argument, Trainer(bad).run(""), "needs train.memory_budget");
  }

  TEST_CASE("two ranks plan together: probes on each rank's own group, one agreed plan") {
    Spec spec = loadSpecFromString(kPlannerSpec, "plan.yaml", {"distributed.comm.type=powersgd"});
    MemoryPlan plans[2];
    test::onTwoRanks([&](int rank, Dist& dist) { plans[rank] = planMemory(spec, parseBytes("64GiB"), 128, dist, torch::Device(torch::kCPU)); });
    CHECK(plans[0].microBatch == 64);  // 128 over 2 ranks
    CHECK(plans[1].microBatch == plans[0].microBatch);
    CHECK(plans[1].accumulate == plans[0].accumulate);
    CHECK(plans[0].probes.size() == plans[1].probes.size());
  }
}
