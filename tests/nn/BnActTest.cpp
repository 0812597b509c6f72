// Tests of the fused batch norm + residual add + activation (runner/nn/BnAct.h): on the CPU its
// ATen formulas against libtorch's BatchNorm2d + add + ReLU/ReLU6 (values, every gradient, the
// running statistics), synchronized over two ranks against SyncBatchNorm2d, and the models with
// `fused: true` unchanged on the CPU; on a device (GPU only) the CUDA kernels against the same
// modules in float64 at every batch-norm shape of ResNet-50, with no device-to-host synchronisation.
#include <doctest/doctest.h>

#include "runner/api/Model.h"
#include "runner/api/Kinds.h"
#include "runner/nn/BnAct.h"
#include "runner/nn/SyncBatchNorm.h"
#include "runner/spec/Spec.h"
#include "tests/HostReads.h"
#include "tests/TwoRanks.h"
#include "tests/nn/BnActUtil.h"

#if defined(EXPRUN_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace exprun {

TEST_SUITE("bn_act") {
  using namespace bntest;

  TEST_CASE("the fused function computes act(batch_norm(x) + z), its gradients and running statistics as the modules do") {
    for (BnActivation act : {BnActivation::None, BnActivation::Relu, BnActivation::Relu6})
      for (bool withZ : {false, true})
        for (bool channelsLast : {false, true})
          for (torch::ScalarType type : {torch::kDouble, torch::kFloat}) {
            CAPTURE(actName(act));
            CAPTURE(withZ);
            CAPTURE(channelsLast);
            CAPTURE(c10::toString(type));
            torch::manual_seed(7);
            // Scaled so that a share of the outputs lands above 6 and below 0.
            const torch::Tensor x = inFormat(torch::randn({3, 5, 6, 4}, type) * 3 + 1, channelsLast);
            const torch::Tensor z = withZ ? inFormat(torch::randn({3, 5, 6, 4}, type) * 2, channelsLast) : torch::Tensor();
            const torch::Tensor dy = inFormat(torch::randn({3, 5, 6, 4}, type), channelsLast);
            auto bn = seededBn(5, 11);
            bn->to(type);
            const Outcome want = reference(bn, x, z, dy, act, type);
            const Outcome got = fused(bn, x, z, dy, act);
            checkClose(got, want, type == torch::kDouble ? 1e-12 : 2e-5);
            CHECK((got.y.scalar_type() == type));
            CHECK((got.dx.scalar_type() == type));
          }
  }

  TEST_CASE("bf16 activations keep float32 statistics and parameters, within 1e-2 of float64") {
    torch::manual_seed(3);
    const torch::Tensor x = (torch::randn({4, 16, 5, 5}) * 2 + 3).to(torch::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
    const torch::Tensor z = torch::randn({4, 16, 5, 5}).to(torch::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
    const torch::Tensor dy = torch::randn({4, 16, 5, 5}).to(torch::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
    auto bn = seededBn(16, 5);
    const Outcome want = reference(bn, x, z, dy, BnActivation::Relu, torch::kDouble);
    const Outcome got = fused(bn, x, z, dy, BnActivation::Relu);
    CHECK((got.y.scalar_type() == torch::kBFloat16));
    CHECK((got.dw.scalar_type() == torch::kFloat));
    checkClose(got, want, 1e-2);
  }

  TEST_CASE("a double backward through the fused function is refused") {
    auto bn = seededBn(3, 2);
    const torch::Tensor x = torch::randn({2, 3, 4, 4}).requires_grad_(true);
    const torch::Tensor out = fusedBnAct(x, torch::Tensor(), *bn, BnActivation::Relu);
    CHECK_THROWS_WITH(torch::autograd::grad({out.square().sum()}, {x}, {}, std::nullopt, /*create_graph=*/true),
                      doctest::Contains("no double backward"));
  }

  TEST_CASE("evaluation uses the running statistics and leaves them alone") {
    torch::manual_seed(4);
    const torch::Tensor x = torch::randn({2, 8, 3, 3}, torch::kDouble), z = torch::randn({2, 8, 3, 3}, torch::kDouble);
    auto bn = seededBn(8, 9);
    bn->to(torch::kDouble);
    bn->eval();
    const torch::Tensor meanBefore = bn->running_mean.clone();
    torch::NoGradGuard noGrad;
    const torch::Tensor want = torch::relu(bn->forward(x) + z);
    const torch::Tensor got = fusedBnAct(x, z, *bn, BnActivation::Relu);
    CHECK(rel(got, want) <= 1e-12);
    CHECK(torch::equal(bn->running_mean, meanBefore));
  }

  TEST_CASE("synchronized over two ranks, the fused function matches SyncBatchNorm2d") {
    // Each rank normalises its own half of one batch with the statistics of the whole.
    torch::manual_seed(21);
    const torch::Tensor whole = torch::randn({6, 4, 3, 5}, torch::kDouble) * 2 + 0.5;
    const torch::Tensor wholeZ = torch::randn({6, 4, 3, 5}, torch::kDouble);
    const torch::Tensor wholeDy = torch::randn({6, 4, 3, 5}, torch::kDouble);
    Outcome got[2], want[2];
    int hostReads[2] = {-1, -1}, syncReads[2] = {-1, -1};
    test::onTwoRanks([&](int rank, Dist& dist) {
      const torch::Tensor x = whole.narrow(0, rank * 3, 3), z = wholeZ.narrow(0, rank * 3, 3),
                          dy = wholeDy.narrow(0, rank * 3, 3);
      {
        const test::HostReads reads;
        want[rank] = syncedReference(dist, x, z, dy);
        syncReads[rank] = reads.seen();
      }
      auto plain = plainBnFor(x);
      const test::HostReads reads;
      got[rank] = fused(plain, x, z, dy, BnActivation::Relu, &dist);
      hostReads[rank] = reads.seen();
    });
    // Neither reads a tensor on the host in the step: the all-rank count stays on the device.
    for (int r = 0; r < 2; ++r) {
      CHECK(hostReads[r] == 0);
      CHECK(syncReads[r] == 0);
    }
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      checkClose(got[r], want[r], 1e-10);
    }
    // Global statistics: both ranks' running means agree.
    CHECK(rel(got[0].runningMean, got[1].runningMean) <= 1e-12);
  }

  TEST_CASE("on the CPU the kernels are never chosen, and models with fused: true compute what they did") {
    auto bn = seededBn(4, 1);
    const torch::Tensor x = torch::randn({2, 4, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast);
    CHECK_FALSE(bnActFusable(x, torch::Tensor(), *bn));
    for (const char* model : {"resnet18", "mobilenet_v2"}) {
      CAPTURE(model);
      auto outputOf = [&](bool fuse) {
        auto m = seededModel(model, fuse, 16);
        torch::manual_seed(6);
        const torch::Tensor in = torch::randn({4, 3, 16, 16});
        torch::Tensor out = m->forward(in);
        out.square().mean().backward();
        std::vector<torch::Tensor> all{out.detach()};
        for (const auto& p : m->parameters()) all.push_back(p.grad());
        for (const auto& b : m->buffers()) all.push_back(b.clone());
        return all;
      };
      const auto plain = outputOf(false), withFused = outputOf(true);
      REQUIRE(plain.size() == withFused.size());
      bool identical = true;
      for (std::size_t i = 0; i < plain.size(); ++i) identical = identical && torch::equal(plain[i], withFused[i]);
      CHECK(identical);
    }
  }

#if defined(EXPRUN_WITH_CUDA)
  TEST_CASE("the fused CUDA kernels agree with the modules in float64 at ResNet-50's batch-norm shapes (GPU only)") {
    if (!torch::cuda::is_available() || !bnActKernelsBuilt()) {
      MESSAGE("skipped: no CUDA device (or a build without the kernels)");
      return;
    }
    struct Case {
      std::int64_t channels, size;
      BnActivation act;
      bool withZ;
    };
    // ResNet-50 at 224²: the stem, each stage's bn1/bn2 (ReLU), bn3 (+ identity, ReLU) and downsample (no activation).
    const Case cases[] = {{64, 112, BnActivation::Relu, false},   {64, 56, BnActivation::Relu, false},
                          {256, 56, BnActivation::Relu, true},    {256, 56, BnActivation::None, false},
                          {128, 56, BnActivation::Relu, false},   {128, 28, BnActivation::Relu, false},
                          {512, 28, BnActivation::Relu, true},    {512, 28, BnActivation::None, false},
                          {256, 28, BnActivation::Relu, false},   {256, 14, BnActivation::Relu, false},
                          {1024, 14, BnActivation::Relu, true},   {1024, 14, BnActivation::None, false},
                          {512, 14, BnActivation::Relu, false},   {512, 7, BnActivation::Relu, false},
                          {2048, 7, BnActivation::Relu, true},    {2048, 7, BnActivation::None, false},
                          {96, 14, BnActivation::Relu6, false},   {24, 56, BnActivation::None, true},
                          // one value a load (C not a multiple of the 16-byte vector)
                          {3, 9, BnActivation::Relu, true},        {13, 5, BnActivation::Relu6, false},
                          {20, 6, BnActivation::None, true}};
    const torch::Device cuda(torch::kCUDA);
    for (std::int64_t batch : {1, 7, 256})
      for (torch::ScalarType type : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
        if (batch == 256 && type != torch::kBFloat16) continue;  // the full batch once, in the training dtype
        for (const Case& c : cases) {
          CAPTURE(batch);
          CAPTURE(c10::toString(type));
          CAPTURE(c.channels);
          CAPTURE(c.size);
          CAPTURE(actName(c.act));
          const std::vector<std::int64_t> shape{batch, c.channels, c.size, c.size};
          const auto opts = torch::TensorOptions().device(cuda).dtype(type);
          torch::manual_seed(1000 + batch + c.channels + c.size);
          const torch::Tensor x = (torch::randn(shape, opts) * 2 + 0.5).contiguous(at::MemoryFormat::ChannelsLast);
          const torch::Tensor z = c.withZ ? torch::randn(shape, opts).contiguous(at::MemoryFormat::ChannelsLast) : torch::Tensor();
          const torch::Tensor dy = torch::randn(shape, opts).contiguous(at::MemoryFormat::ChannelsLast);
          auto bn = seededBn(c.channels, 17);
          if (c.act == BnActivation::Relu6) {  // outputs on both sides of 6 as well as of 0
            torch::NoGradGuard noGrad;
            bn->weight.mul_(4);
            bn->bias.add_(2);
          }
          bn->to(cuda);
          REQUIRE(bnActFusable(x, z, *bn));
          const Outcome want = reference(bn, x, z, dy, c.act, torch::kDouble, maskedAt(type));
          {
            // Poison what the outputs will be allocated in: an unwritten element shows as NaN.
            torch::Tensor poison = torch::full({4 * x.numel() + (1 << 20)}, std::nan(""), opts);
          }
          const Outcome got = fused(bn, x, z, dy, c.act);
          const double tol = type == torch::kFloat ? 1e-4 : 1e-2;
          CHECK(got.y.isfinite().all().item<bool>());
          CHECK(got.dx.isfinite().all().item<bool>());
          checkClose(got, want, tol);
        }
      }
  }

  TEST_CASE("the fused CUDA kernels take unaligned views, gradients in another layout and evaluation mode (GPU only)") {
    if (!torch::cuda::is_available() || !bnActKernelsBuilt()) {
      MESSAGE("skipped: no CUDA device (or a build without the kernels)");
      return;
    }
    const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
    torch::manual_seed(8);
    // (A narrowed batch would not do: with C a multiple of 8, a sample is a multiple of 16 bytes.)
    const torch::Tensor x = unalignedView(torch::randn({3, 16, 3, 3}, opts.dtype(torch::kFloat)) * 2, torch::kBFloat16);
    REQUIRE(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 != 0);
    REQUIRE(x.is_contiguous(at::MemoryFormat::ChannelsLast));
    const torch::Tensor z = torch::randn({3, 16, 3, 3}, opts).contiguous(at::MemoryFormat::ChannelsLast);
    const torch::Tensor dy = torch::randn({3, 16, 3, 3}, opts).contiguous();  // NCHW: not the output's layout
    auto bn = seededBn(16, 3);
    bn->to(torch::kCUDA);
    REQUIRE(bnActFusable(x, z, *bn));
    const Outcome want = reference(bn, x, z, dy, BnActivation::Relu, torch::kDouble, torch::kBFloat16);
    checkClose(fused(bn, x, z, dy, BnActivation::Relu), want, 1e-2);
    bn->eval();
    torch::NoGradGuard noGrad;
    REQUIRE(bnActFusable(x, z, *bn));
    const torch::Tensor evalWant = torch::relu(bn->forward(x.to(torch::kFloat)) + z.to(torch::kFloat));
    CHECK(rel(fusedBnAct(x, z, *bn, BnActivation::Relu), evalWant) <= 1e-2);
  }

  TEST_CASE("a fused training forward and backward makes no device-to-host synchronisation (GPU only)") {
    if (!torch::cuda::is_available() || !bnActKernelsBuilt()) {
      MESSAGE("skipped: no CUDA device (or a build without the kernels)");
      return;
    }
    const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
    const torch::Tensor x = torch::randn({8, 64, 14, 14}, opts).contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true);
    const torch::Tensor z = torch::randn({8, 64, 14, 14}, opts).contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true);
    const torch::Tensor dy = torch::randn({8, 64, 14, 14}, opts).contiguous(at::MemoryFormat::ChannelsLast);
    auto bn = seededBn(64, 2);
    bn->to(torch::kCUDA);
    fusedBnAct(x, z, *bn, BnActivation::Relu).backward(dy);  // warm-up: first-use allocations
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    bool threw = false;
    try {
      fusedBnAct(x, z, *bn, BnActivation::Relu).backward(dy);
    } catch (const std::exception& e) {
      threw = true;
      MESSAGE(e.what());
    }
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    CHECK_FALSE(threw);
  }
#endif
}

}  // namespace exprun
