// Tests of the fused batch norm -> ReLU -> max-pool kernel against libtorch's three modules.
#include <doctest/doctest.h>

#include <cstdlib>

#include "plugins/models/BnReluPool.h"

namespace {

namespace tnn = torch::nn;

double relDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-12, b.abs().max().item<double>());
}

// Element by element: |a - b| <= 1e-4 |b| + 1e-6 max|b| (small entries, e.g. the gradient of a
// pooled-away row, are compared too).
bool close(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = std::max(1e-12, b.abs().max().item<double>());
  return ((a - b).abs() <= b.abs() * 1e-4 + scale * 1e-6).all().item<bool>();
}

// x copied into `layout` (also a one-channel tensor, which contiguous(ChannelsLast) leaves alone).
torch::Tensor inLayout(const torch::Tensor& x, torch::MemoryFormat layout) {
  return torch::empty_like(x, x.options(), layout).copy_(x);
}

// A conv-like input with ties and all-negative windows: a quarter of it constant, some repeated
// values, an odd size when asked.
torch::Tensor input(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::uint64_t seed) {
  torch::manual_seed(seed);
  auto x = torch::randn({n, c, h, w});
  x.index_put_({torch::indexing::Slice(), torch::indexing::Slice(), torch::indexing::Slice(0, h / 2),
                torch::indexing::Slice(0, w / 2)},
               -0.5);
  x.index_put_({torch::indexing::Slice(), torch::indexing::Slice(), torch::indexing::Slice(h / 2, h / 2 + 1)}, 1.25);
  return x;
}

struct BatchNormPair {
  tnn::BatchNorm2d fused, plain;
  explicit BatchNormPair(std::int64_t c, tnn::BatchNorm2dOptions o = tnn::BatchNorm2dOptions(0)) : fused(nullptr), plain(nullptr) {
    o.num_features(c);
    fused = tnn::BatchNorm2d(o);
    plain = tnn::BatchNorm2d(o);
    torch::NoGradGuard g;
    fused->weight.uniform_(0.5, 1.5);
    fused->bias.uniform_(-0.3, 0.3);
    plain->weight.copy_(fused->weight);
    plain->bias.copy_(fused->bias);
  }
};

void checkTraining(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, tnn::BatchNorm2dOptions o,
                   torch::MemoryFormat layout = torch::MemoryFormat::Contiguous) {
  CAPTURE(layout);
  CAPTURE(n);
  CAPTURE(c);
  CAPTURE(h);
  CAPTURE(w);
  BatchNormPair p(c, o);
  for (int step = 0; step < 3; ++step) {
    auto x = inLayout(input(n, c, h, w, 7 + step), layout);
    REQUIRE(exprun::bnReluPoolFuses(x, *p.fused));
    auto xf = x.clone().requires_grad_(true);
    auto xp = x.clone().requires_grad_(true);
    auto yf = exprun::bnReluPool(xf, *p.fused);
    auto yp = torch::max_pool2d(torch::relu(p.plain->forward(xp)), 2);
    REQUIRE(yf.sizes() == yp.sizes());
    CHECK(yf.is_contiguous(layout));
    CHECK(close(yf, yp));
    auto go = torch::randn_like(yp).contiguous();  // the layout a flatten's backward hands back
    yf.backward(go);
    yp.backward(go);
    CHECK(close(xf.grad(), xp.grad()));
    CHECK(xf.grad().is_contiguous(layout));
    CHECK(close(p.fused->weight.grad(), p.plain->weight.grad()));
    CHECK(close(p.fused->bias.grad(), p.plain->bias.grad()));
    CHECK(relDiff(p.fused->running_mean, p.plain->running_mean) < 1e-5);
    CHECK(relDiff(p.fused->running_var, p.plain->running_var) < 1e-5);
    CHECK(p.fused->num_batches_tracked.item<std::int64_t>() == p.plain->num_batches_tracked.item<std::int64_t>());
    p.fused->weight.mutable_grad().reset();
    p.fused->bias.mutable_grad().reset();
    p.plain->weight.mutable_grad().reset();
    p.plain->bias.mutable_grad().reset();
  }
  // Evaluation with the running statistics.
  p.fused->eval();
  p.plain->eval();
  auto x = inLayout(input(n, c, h, w, 99), layout);
  torch::NoGradGuard noGrad;
  REQUIRE(exprun::bnReluPoolFuses(x, *p.fused));
  // 1e-5: float32 rounding; ATen's batch norm sums per thread, so one intra-op thread (taskset -c 0)
  // rounds differently from two (1.6e-6 seen there in channels_last).
  CHECK(relDiff(exprun::bnReluPool(x, *p.fused), torch::max_pool2d(torch::relu(p.plain->forward(x)), 2)) < 1e-5);
}

}  // namespace

TEST_SUITE("bn_relu_pool") {
  TEST_CASE("fused batch norm, ReLU and max-pool equal libtorch's three modules") {
    checkTraining(8, 3, 6, 6, tnn::BatchNorm2dOptions(0));
    checkTraining(5, 4, 7, 9, tnn::BatchNorm2dOptions(0).momentum(0.3).eps(1e-3));  // odd: trailing row/col
    checkTraining(4, 3, 9, 13, tnn::BatchNorm2dOptions(0));  // 6 windows a row: a group and an overlapping tail
    checkTraining(4, 2, 5, 4, tnn::BatchNorm2dOptions(0).momentum(std::nullopt));     // cumulative average
    checkTraining(32, 16, 28, 28, tnn::BatchNorm2dOptions(0));                        // small_cnn's first stage
  }

  TEST_CASE("the same in channels_last, where channels are the vector lanes") {
    const auto cl = torch::MemoryFormat::ChannelsLast;
    checkTraining(8, 3, 6, 6, tnn::BatchNorm2dOptions(0), cl);  // fewer channels than a vector
    checkTraining(5, 6, 7, 9, tnn::BatchNorm2dOptions(0).momentum(0.3).eps(1e-3), cl);
    checkTraining(4, 1, 9, 13, tnn::BatchNorm2dOptions(0), cl);  // one channel: channels_last strides all the same
    checkTraining(4, 2, 5, 4, tnn::BatchNorm2dOptions(0).momentum(std::nullopt), cl);
    checkTraining(32, 32, 14, 14, tnn::BatchNorm2dOptions(0), cl);  // small_cnn's second stage
  }

  TEST_CASE("the first maximum of a window wins; windows without a positive value pass no gradient") {
    BatchNormPair p(1);
    // One image, one 2x4 plane: window 0 ties at its maximum, window 1 all equal (negative after BN).
    auto x = torch::tensor({3.0f, 3.0f, -1.0f, -1.0f, 1.0f, 3.0f, -1.0f, -1.0f}).view({1, 1, 2, 4});
    auto xf = x.clone().requires_grad_(true);
    auto xp = x.clone().requires_grad_(true);
    exprun::bnReluPool(xf, *p.fused).sum().backward();
    torch::max_pool2d(torch::relu(p.plain->forward(xp)), 2).sum().backward();
    CHECK(relDiff(xf.grad(), xp.grad()) < 1e-6);
  }

  TEST_CASE("results do not depend on the number of threads") {
    const int threads = at::get_num_threads();
    for (auto layout : {torch::MemoryFormat::Contiguous, torch::MemoryFormat::ChannelsLast}) {
      std::vector<torch::Tensor> results[2];
      for (int t : {1, 2}) {
        at::set_num_threads(t);
        torch::manual_seed(3);
        BatchNormPair p(8);
        auto x = inLayout(input(16, 8, 12, 12, 4), layout).requires_grad_(true);
        auto y = exprun::bnReluPool(x, *p.fused);
        y.backward(torch::ones_like(y));
        results[t - 1] = {y, x.grad(), p.fused->weight.grad(), p.fused->bias.grad(), p.fused->running_var};
      }
      for (std::size_t i = 0; i < results[0].size(); ++i) CHECK(torch::equal(results[0][i], results[1][i]));
    }
    at::set_num_threads(threads);
  }

  TEST_CASE("a NaN wins its window, as in libtorch") {
    BatchNormPair p(1);
    auto x = torch::tensor({1.0f, 2.0f, 0.5f, -1.0f, NAN, 0.0f, 3.0f, -2.0f}).view({1, 1, 2, 4});
    p.fused->eval();
    p.plain->eval();
    torch::NoGradGuard noGrad;
    auto yf = exprun::bnReluPool(x, *p.fused), yp = torch::max_pool2d(torch::relu(p.plain->forward(x)), 2);
    CHECK(std::isnan(yf[0][0][0][0].item<float>()));  // the window holding the NaN
    CHECK(torch::allclose(yf, yp, 1e-5, 1e-6, /*equal_nan=*/true));
  }

  TEST_CASE("double backward is refused") {
    BatchNormPair p(2);
    auto x = input(2, 2, 4, 4, 1).requires_grad_(true);
    auto y = exprun::bnReluPool(x, *p.fused);
    CHECK_THROWS_WITH(torch::autograd::grad({y.sum()}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true),
                      doctest::Contains("no double backward"));
  }

  TEST_CASE("inputs the kernel does not take run libtorch's modules") {
    BatchNormPair p(4);
    auto x = input(2, 4, 6, 6, 3);
    CHECK_FALSE(exprun::bnReluPoolFuses(x.to(torch::kDouble), *p.fused));
    CHECK_FALSE(exprun::bnReluPoolFuses(x.slice(2, 0, 4), *p.fused));  // neither layout's strides
    CHECK_FALSE(exprun::bnReluPoolFuses(x.slice(3, 0, 1), *p.fused));  // a single column
    p.fused->eval();
    auto wanted = x.clone().requires_grad_(true);
    CHECK_FALSE(exprun::bnReluPoolFuses(wanted, *p.fused));  // eval with gradients
    p.plain->eval();
    auto plain = x.clone().requires_grad_(true);
    exprun::bnReluPool(wanted, *p.fused).sum().backward();
    torch::max_pool2d(torch::relu(p.plain->forward(plain)), 2).sum().backward();
    CHECK(relDiff(wanted.grad(), plain.grad()) == 0.0);  // the same modules ran
  }
}
