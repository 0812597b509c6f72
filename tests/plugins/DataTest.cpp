// Purpose: the fashion_mnist and synthetic data plugins: a damaged file named, batches' shapes,
// normalisation, labels and augmentation, determinism. (The IDX reader and the batch loader they
// use: tests/data/LoaderTest.cpp.)
#include "runner/api/Data.h"
#include "plugins/data/image/Idx.h"
#include "runner/spec/Spec.h"

#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::kFashionMnistRoot;
using exprun::test::fashionMnistData;
using exprun::test::readText;
using exprun::test::TempDir;
using exprun::test::writeText;

namespace {
void copyFashionMnist(const TempDir& dir) {
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                        "t10k-labels-idx1-ubyte.gz"})
    writeText(dir.file(f), readText(std::string(kFashionMnistRoot) + "/" + f));
}
}  // namespace

TEST_SUITE("data") {
  TEST_CASE("fashion_mnist: a damaged file makes load() fail naming it") {
    TempDir dir;
    copyFashionMnist(dir);
    const std::string img = readText(dir.file("train-images-idx3-ubyte.gz"));
    writeText(dir.file("train-images-idx3-ubyte.gz"), img.substr(0, img.size() - 1000));
    auto d = fashionMnistData({"data.root=" + dir.path.string()});
    CHECK_THROWS_CONTAINING(DataError, d->load(), "train-images-idx3-ubyte.gz");
    std::filesystem::remove(dir.file("t10k-labels-idx1-ubyte.gz"));
    writeText(dir.file("train-images-idx3-ubyte.gz"), img);
    auto d2 = fashionMnistData({"data.root=" + dir.path.string()});
    CHECK_THROWS_CONTAINING(DataError, d2->load(), "t10k-labels-idx1-ubyte.gz", "cannot open");
  }

  TEST_CASE("fashion_mnist batches: shapes, normalisation, labels, augmentation") {
    auto d = fashionMnistData({"data.train_limit=512", "data.test_limit=256"});
    d->load();
    CHECK(d->size(Split::Train) == 512);
    CHECK(d->size(Split::Test) == 256);
    Batch b = d->makeBatch(Split::Test, {0, 1, 2, 3}, 0);
    CHECK(b.x.sizes() == torch::IntArrayRef{4, 1, 28, 28});
    CHECK(b.y.dtype() == torch::kInt64);
    CHECK(b.x.min().item<double>() == doctest::Approx(-0.2860 / 0.3530).epsilon(1e-4));  // a black pixel
    CHECK(b.x.max().item<double>() <= (1 - 0.2860) / 0.3530 + 1e-4);
    IdxArray labels = readIdx(std::string(kFashionMnistRoot) + "/t10k-labels-idx1-ubyte.gz", 1);
    for (int i = 0; i < 4; ++i) CHECK(b.y[i].item<std::int64_t>() == labels.data[i]);

    auto aug = fashionMnistData({"data.train_limit=64", "data.random_crop_padding=4", "data.hflip=true"});
    aug->load();
    auto plain = fashionMnistData({"data.train_limit=64"});
    plain->load();
    std::vector<std::int64_t> idx{0, 1, 2, 3, 4, 5, 6, 7};
    CHECK(torch::equal(aug->makeBatch(Split::Train, idx, 42).x, aug->makeBatch(Split::Train, idx, 42).x));
    CHECK_FALSE(torch::equal(aug->makeBatch(Split::Train, idx, 42).x, aug->makeBatch(Split::Train, idx, 43).x));
    CHECK_FALSE(torch::equal(aug->makeBatch(Split::Train, idx, 42).x, plain->makeBatch(Split::Train, idx, 42).x));
    // evaluation is never augmented
    CHECK(torch::equal(aug->makeBatch(Split::Test, idx, 1).x, plain->makeBatch(Split::Test, idx, 2).x));

    // random erasing (p = 1): every image has one zeroed rectangle of 2-33 % of its area (ratio 0.3-3.3),
    // the rest untouched; the crop and flip draws are the same as without it
    auto erased = fashionMnistData({"data.train_limit=64", "data.random_crop_padding=4", "data.hflip=true",
                                    "data.random_erasing=1.0"});
    erased->load();
    const torch::Tensor e = erased->makeBatch(Split::Train, idx, 42).x, a = aug->makeBatch(Split::Train, idx, 42).x;
    for (std::int64_t i = 0; i < 8; ++i) {
      const torch::Tensor changed = e[i][0].ne(a[i][0]);
      CHECK(e[i][0].masked_select(changed).abs().max().item<double>() == 0.0);  // erased pixels are 0
      const torch::Tensor zero = e[i][0].eq(0);
      const auto rows = zero.any(1).nonzero(), cols = zero.any(0).nonzero();
      const std::int64_t h = rows.max().item<std::int64_t>() - rows.min().item<std::int64_t>() + 1;
      const std::int64_t w = cols.max().item<std::int64_t>() - cols.min().item<std::int64_t>() + 1;
      CHECK(zero.sum().item<std::int64_t>() == h * w);  // one rectangle, nothing else is exactly 0
      CHECK(h * w >= 0.02 * 784 * 0.5);
      CHECK(h * w <= 0.33 * 784 * 1.5);
    }
    auto never = fashionMnistData({"data.train_limit=64", "data.random_crop_padding=4", "data.hflip=true",
                                   "data.random_erasing=0.0"});
    never->load();
    CHECK(torch::equal(never->makeBatch(Split::Train, idx, 42).x, a));
  }

  TEST_CASE("synthetic data: shape, classes, determinism") {
    Spec s = loadSpecFromString("name: t\nmodel: {type: small_cnn}\ndata: {type: synthetic, channels: 1, height: 8, width: 8, "
                                "num_classes: 5, train_size: 100, test_size: 20, pool_size: 4}\n",
                                "s.yaml");
    auto d = registry<DataKind>().get("synthetic")(s.data);
    d->load();
    CHECK(d->info().numClasses == 5);
    Batch b = d->makeBatch(Split::Train, {0, 1, 2, 3, 4}, 0);
    CHECK(b.x.sizes() == torch::IntArrayRef{5, 1, 8, 8});
    CHECK(torch::equal(b.x[0], b.x[4]));  // pool of 4
    CHECK(b.y.max().item<std::int64_t>() < 5);
    auto d2 = registry<DataKind>().get("synthetic")(s.data);
    d2->load();
    CHECK(torch::equal(d2->makeBatch(Split::Train, {0, 1, 2, 3, 4}, 0).x, b.x));
    d2->placeOn(torch::Device(torch::kCPU));  // training on the CPU: nothing moves
    CHECK_FALSE(d2->makeBatch(Split::Train, {0}, 0).x.is_cuda());
  }

  TEST_CASE("synthetic data on the GPU: the pool on the device, the same batches as on the CPU (GPU only)") {
    if (!torch::cuda::is_available()) {
      MESSAGE("skipped: no CUDA device");
      return;
    }
    Spec s = loadSpecFromString("name: t\nmodel: {type: small_cnn}\ndata: {type: synthetic, channels: 3, height: 8, width: 8, "
                                "num_classes: 7, train_size: 100, test_size: 20, pool_size: 6}\n",
                                "s.yaml");
    auto cpu = registry<DataKind>().get("synthetic")(s.data);
    auto gpu = registry<DataKind>().get("synthetic")(s.data);
    cpu->load();
    gpu->load();
    gpu->placeOn(torch::Device(torch::kCUDA));
    const std::vector<std::int64_t> idx{3, 17, 0, 99, 42};
    for (Split split : {Split::Train, Split::Test}) {
      const Batch a = cpu->makeBatch(split, idx, 0), b = gpu->makeBatch(split, idx, 0);
      CHECK(b.x.is_cuda());
      CHECK(b.y.is_cuda());
      CHECK(torch::equal(a.x, b.x.cpu()));
      CHECK(torch::equal(a.y, b.y.cpu()));
    }
  }
}
