// Purpose: data.decode: gpu (plugins/data/image/GpuJpeg.h) on the CPU side, on the fixture tree of real
// photographs: which files the device's decoder takes, the host version of the device's resampling
// against the CPU pipeline (bit for bit), batches whose rows the device work finishes equal to the
// CPU pipeline's (every file kind, repeated augmentation's reordering, resumed epochs), the
// refusals; on a GPU, nvJPEG and the kernels against the host's decode.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>

#include "runner/api/Data.h"
#include "plugins/data/image/Augment.h"
#include "plugins/data/image/GpuJpeg.h"
#include "plugins/data/image/Image.h"
#include "runner/spec/Spec.h"

#include "tests/ImageUtil.h"

using namespace exprun;
namespace fs = std::filesystem;

namespace {
std::string images() { return test::images() + "/good"; }
// The plugin over the good photographs, 48 x 48 crops.
std::unique_ptr<Dataset> makeData(std::vector<std::string> sets) {
  sets.push_back("data.size=48");
  return test::makeImageData(images(), std::move(sets));
}
std::vector<std::uint8_t> fileOf(const std::string& path) {
  std::vector<std::uint8_t> b;
  readImageFile(path, b);
  return b;
}
std::vector<std::string> trainJpegs() {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(images() + "/train")) {
    const std::string ext = e.path().extension().string();
    if (ext == ".jpg" || ext == ".JPEG" || ext == ".jpeg") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}
// The CPU pipeline's and the device path's training batches of `indices`, both made with
// dct_scaling off (the device decodes whole images); the device work run on the host.
std::pair<Batch, Batch> bothWays(const std::vector<std::int64_t>& indices, std::uint64_t seed, std::size_t* decodedOnDevice,
                                 bool roi = true, const std::string& policy = "none") {
  auto cpu = makeData({"data.dct_scaling=false", "data.auto_augment=" + policy});
  cpu->makeBytes();
  auto dev = makeData({"data.dct_scaling=false", "data.decode=gpu", roi ? "data.decode_roi=true" : "data.decode_roi=false",
                       "data.auto_augment=" + policy});
  dev->placeOn(torch::Device(torch::kCUDA, 0));  // only flags the plugin: nothing runs on a device here
  dev->makeBytes();
  Batch a = cpu->makeBatch(Split::Train, indices, seed);
  Batch b = dev->makeBatch(Split::Train, indices, seed);
  *decodedOnDevice = 0;
  for (const auto& w : b.onDevice) *decodedOnDevice += dynamic_cast<DeviceJpegDecode&>(*w).size();
  finishOnDevice(b);
  return {std::move(a), std::move(b)};
}
}  // namespace

TEST_SUITE("gpu_jpeg") {
  TEST_CASE("which JPEGs the device's batched decoder takes, from their headers") {
    const std::string root = images() + "/train";
    auto measures = [&](const std::string& rel) {
      const auto f = fileOf(root + "/" + rel);
      return readJpegFacts(f.data(), f.size(), rel);
    };
    CHECK(measures("coffee/grey.JPEG").whyNotGpu() == "");  // greyscale baseline
    CHECK(measures("rocket/progressive.jpeg").whyNotGpu() == "progressive");
    CHECK(measures("chelsea/cmyk.jpg").whyNotGpu().find("CMYK") != std::string::npos);
    const JpegFacts plain = measures("chelsea/cmyk.jpg");
    CHECK(plain.components == 4);
    // A file cut short: its header reads, its end-of-image marker is missing.
    const std::string first = trainJpegs().front();
    auto bytes = fileOf(first);
    CHECK(readJpegFacts(bytes.data(), bytes.size(), first).whyNotGpu() == "");
    bytes.resize(bytes.size() * 2 / 3);
    CHECK(readJpegFacts(bytes.data(), bytes.size(), first).whyNotGpu().find("truncated") != std::string::npos);
  }

  TEST_CASE("the device's resampling, run on the host, is the CPU pipeline's crop bit for bit") {
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    int checked = 0;
    for (const std::string& path : trainJpegs()) {
      const auto file = fileOf(path);
      const JpegFacts f = readJpegFacts(file.data(), file.size(), path);
      if (!f.whyNotGpu().empty()) continue;
      std::vector<std::uint8_t> rgb;
      int w = 0, h = 0;
      decodeJpegRgb(file.data(), file.size(), path, rgb, &w, &h);
      REQUIRE(w == f.width);
      for (int trial = 0; trial < 3; ++trial) {
        auto u = [&] { return uni(rng); };
        const CropBox box = randomResizedCrop(w, h, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, u);
        const bool flip = trial == 1;
        const int out = trial == 2 ? 224 : 40;  // upscaling and downscaling
        ResampleAxis ax, ay;
        cropAxes(box, w, h, out, out, ax, ay);
        std::vector<std::uint8_t> dev(3 * out * out), cpu(3 * out * out), fromRegion(3 * out * out);
        resampleCropHost(rgb.data(), DecodeRegion{0, 0, w, h}, ax, ay, flip, out, out, dev.data());
        // The same from the crop's region only, as nvJPEG decodes it (data.decode_roi).
        const DecodeRegion r = decodeRegion(ax, ay, w, h);
        std::vector<std::uint8_t> part(3ULL * r.width * r.height);
        for (int row = 0; row < r.height; ++row)
          std::copy_n(rgb.begin() + 3LL * ((r.y0 + row) * w + r.x0), 3 * r.width, part.begin() + 3LL * row * r.width);
        resampleCropHost(part.data(), r, ax, ay, flip, out, out, fromRegion.data());
        TransformSpec tf;
        tf.outWidth = tf.outHeight = out;
        tf.dctScaling = false;
        tf.flip = flip;
        tf.bytesOut = cpu.data();
        std::vector<float> unused(3 * out * out);
        decodeTransformed(file.data(), file.size(), path, [&](int, int) { return box; }, tf, unused.data());
        CAPTURE(path);
        CHECK(dev == cpu);
        CHECK(fromRegion == cpu);
        ++checked;
      }
    }
    CHECK(checked >= 30);
  }

  TEST_CASE("the region decoded for a crop: the pixels it reads, a 16-pixel margin, whole MCUs, inside the image") {
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    auto u = [&] { return uni(rng); };
    std::int64_t regionArea = 0, wholeArea = 0;
    for (auto [w, h] : {std::pair{500, 375}, std::pair{333, 500}, std::pair{17, 23}, std::pair{4000, 3000}}) {
      std::int64_t sizeRegions = 0;
      for (int trial = 0; trial < 200; ++trial) {
        const CropBox box = randomResizedCrop(w, h, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, u);
        ResampleAxis ax, ay;
        cropAxes(box, w, h, trial % 2 ? 224 : 32, trial % 2 ? 224 : 32, ax, ay);
        const DecodeRegion r = decodeRegion(ax, ay, w, h);
        CAPTURE(w);
        CAPTURE(trial);
        REQUIRE(r.x0 >= 0);
        REQUIRE(r.y0 >= 0);
        REQUIRE(r.x0 + r.width <= w);
        REQUIRE(r.y0 + r.height <= h);
        CHECK(r.x0 % kRegionMargin == 0);
        CHECK(r.y0 % kRegionMargin == 0);
        CHECK(((r.x0 + r.width) % kRegionMargin == 0 || r.x0 + r.width == w));
        CHECK(((r.y0 + r.height) % kRegionMargin == 0 || r.y0 + r.height == h));
        CHECK(ax.lo - r.x0 >= std::min(ax.lo, kRegionMargin));  // the margin, where the image has it
        CHECK(ay.lo - r.y0 >= std::min(ay.lo, kRegionMargin));
        CHECK(r.x0 + r.width - ax.hi >= std::min(w - ax.hi, kRegionMargin));
        CHECK(r.y0 + r.height - ay.hi >= std::min(h - ay.hi, kRegionMargin));
        regionArea += static_cast<std::int64_t>(r.width) * r.height;
        sizeRegions += static_cast<std::int64_t>(r.width) * r.height;
        wholeArea += static_cast<std::int64_t>(w) * h;
      }
      MESSAGE(w << " x " << h << ": regions hold "
                << static_cast<double>(sizeRegions) / (200.0 * static_cast<double>(w) * h) << " of the pixels");
    }
    // RandomResizedCrop's crops cover about half of an image on average: so do the regions, nearly.
    MESSAGE("regions: " << static_cast<double>(regionArea) / static_cast<double>(wholeArea) << " of the images' pixels");
    CHECK(regionArea < wholeArea * 3 / 4);
  }

  TEST_CASE("data.decode: gpu batches, their device rows finished on the host, are the CPU pipeline's") {
    if (const std::string why = whyNoGpuJpeg(); !why.empty()) {
      MESSAGE("skipped: " << why);
      return;
    }
    auto probe = makeData({});
    const std::int64_t n = probe->size(Split::Train);
    std::vector<std::int64_t> all(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), 0);  // every file kind: grey, CMYK, progressive, PNG, large
    for (std::uint64_t seed : {1ULL, 99ULL}) {
      std::size_t decodedOnDevice = 0;
      auto [a, b] = bothWays(all, seed, &decodedOnDevice, /*roi=*/seed == 1);
      CHECK(decodedOnDevice >= static_cast<std::size_t>(n) - 4);  // all but CMYK, progressive, PNG (and none else)
      CHECK(decodedOnDevice < static_cast<std::size_t>(n));
      CHECK(torch::equal(a.x, b.x));
      CHECK(torch::equal(a.y, b.y));
      CHECK(a.scale == b.scale);
      CHECK(b.onDevice.empty());
    }
    // With an augmentation policy: its program, drawn by the workers as the CPU path draws it, run
    // after the resampling (here on the host, with the device's arithmetic).
    for (const std::string policy : {"ta_wide", "ra", "imagenet", "augmix"}) {
      std::size_t decodedOnDevice = 0;
      auto [a, b] = bothWays(all, 3, &decodedOnDevice, true, policy);
      CAPTURE(policy);
      CHECK(decodedOnDevice >= static_cast<std::size_t>(n) - 4);
      CHECK(torch::equal(a.x, b.x));
      CHECK(torch::equal(a.y, b.y));
    }
    // Repeated augmentation puts a part's rows at their places in the batch (BatchLoader::build's
    // index_copy_): the device work follows its rows.
    auto dev = makeData({"data.dct_scaling=false", "data.decode=gpu"});
    dev->placeOn(torch::Device(torch::kCUDA, 0));
    dev->makeBytes();
    auto cpu = makeData({"data.dct_scaling=false"});
    cpu->makeBytes();
    const std::vector<std::int64_t> mine{3, 0, 7, 12, 20, 5};
    const std::vector<std::int64_t> at{9, 1, 4, 0, 7, 2};  // where the part's rows go in a batch of 10
    Batch p = dev->makeBatch(Split::Train, mine, 11);
    Batch want = cpu->makeBatch(Split::Train, mine, 11);
    torch::Tensor x = torch::zeros({10, 3, 48, 48}, torch::kUInt8);
    x.index_copy_(0, torch::tensor(at, torch::kInt64), p.x);
    REQUIRE_FALSE(p.onDevice.empty());
    torch::Tensor y = torch::zeros({10}, torch::kInt64);
    y.index_copy_(0, torch::tensor(at, torch::kInt64), p.y);
    for (auto& w : p.onDevice) {
      w->moveRows(at);
      w->run(x, y);
    }
    CHECK(torch::equal(y.index_select(0, torch::tensor(at, torch::kInt64)), want.y));
    CHECK(torch::equal(x.index_select(0, torch::tensor(at, torch::kInt64)), want.x));
  }

  TEST_CASE("the planners' estimate of the device's decode buffers is what a batch's work allocates") {
    if (const std::string why = whyNoGpuJpeg(); !why.empty()) {
      MESSAGE("skipped: " << why);
      return;
    }
    for (const std::string roi : {"true", "false"}) {
      auto dev = makeData({"data.dct_scaling=false", "data.decode=gpu", "data.decode_roi=" + roi});
      const std::int64_t n = dev->size(Split::Train);
      const std::int64_t estimate = dev->deviceHoldings(n).work;  // before placeOn: as the device would decode
      CHECK(estimate > 0);
      CHECK(dev->deviceHoldings(n).resident == 0);
      dev->placeOn(torch::Device(torch::kCUDA, 0));
      dev->makeBytes();
      std::vector<std::int64_t> all(static_cast<std::size_t>(n));
      std::iota(all.begin(), all.end(), 0);
      // The estimate reads every file of this small split, with the crops of epoch seed 0.
      Batch b = dev->makeBatch(Split::Train, all, 0);
      std::int64_t allocated = 0;
      for (const auto& w : b.onDevice) allocated += dynamic_cast<DeviceJpegDecode&>(*w).deviceBytes();
      CAPTURE(roi);
      CHECK(std::abs(estimate - allocated) <= 1);  // the mean times n, rounded up
      // Other crops, other bytes: within a factor of two for this batch of 26.
      Batch other = dev->makeBatch(Split::Train, all, 5);
      std::int64_t otherBytes = 0;
      for (const auto& w : other.onDevice) otherBytes += dynamic_cast<DeviceJpegDecode&>(*w).deviceBytes();
      CHECK(otherBytes < 2 * estimate);
      CHECK(2 * otherBytes > estimate);
    }
    // An augmentation policy adds its scratch (AugMix: its chain and mixture too); decoded by the
    // CPU, nothing is on the device.
    const std::int64_t plain = makeData({"data.decode=gpu"})->deviceHoldings(64).work;
    const std::int64_t ta = makeData({"data.decode=gpu", "data.auto_augment=ta_wide"})->deviceHoldings(64).work;
    const std::int64_t mix = makeData({"data.decode=gpu", "data.auto_augment=augmix"})->deviceHoldings(64).work;
    const std::int64_t row = 3 * 48 * 48;
    CHECK(ta - plain <= 64 * row);  // Identity draws leave no program
    CHECK(ta - plain > 32 * row);
    std::vector<std::int64_t> every(static_cast<std::size_t>(makeData({})->size(Split::Train)));
    std::iota(every.begin(), every.end(), 0);
    std::size_t decodedOnDevice = 0;  // the files the device decodes (the others count nothing)
    bothWays(every, 0, &decodedOnDevice);
    const double perDeviceFile = 64.0 * row * 6 * static_cast<double>(decodedOnDevice) / static_cast<double>(every.size());
    CHECK(std::abs(static_cast<double>(mix - plain) - perDeviceFile) <= 2.0);  // each rounded up
    CHECK(makeData({"data.decode=cpu"})->deviceHoldings(64).work == 0);
    CHECK(makeData({"data.decode=auto", "data.random_erasing=0.5"})->deviceHoldings(64).work == 0);
  }

  TEST_CASE("data.decode: gpu is refused where it cannot run, naming the option") {
    auto message = [](std::vector<std::string> sets, const torch::Device& device) {
      try {
        makeData(std::move(sets))->placeOn(device);
      } catch (const DataError& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    const torch::Device cuda(torch::kCUDA, 0), cpu(torch::kCPU);
    CHECK(message({"data.decode=gpu"}, cpu).find("data.decode: gpu: the run trains on cpu") == 0);
    CHECK(message({"data.decode=gpu", "data.auto_augment=ta_wide"}, cuda) == "");  // the policy runs on the device
    CHECK(message({"data.decode=gpu", "data.random_erasing=0.25"}, cuda).find("random_erasing") != std::string::npos);
    CHECK(message({"data.decode=auto"}, cpu) == "");                            // auto: the CPU's decode
    CHECK(message({"data.decode=auto", "data.auto_augment=ta_wide"}, cuda) == "");  // auto: the CPU's decode
    // Float batches asked of a plugin that decodes on the device.
    if (whyNoGpuJpeg().empty()) {
      auto d = makeData({"data.decode=gpu"});
      d->placeOn(cuda);
      CHECK_THROWS_AS(d->makeBatch(Split::Train, {0, 1}, 1), DataError);
    }
  }

#if defined(EXPRUN_WITH_CUDA)
  TEST_CASE("nvJPEG and the resampling kernels against the host's decode (GPU only)") {
    if (!torch::cuda::is_available()) {
      MESSAGE("skipped: no CUDA device");
      return;
    }
    REQUIRE(whyNoGpuJpeg() == "");
    auto dev = makeData({"data.dct_scaling=false", "data.decode=gpu"});
    dev->placeOn(torch::Device(torch::kCUDA, 0));
    dev->makeBytes();
    std::vector<std::int64_t> all(static_cast<std::size_t>(dev->size(Split::Train)));
    std::iota(all.begin(), all.end(), 0);
    for (std::uint64_t seed : {1ULL, 7ULL}) {
      Batch host = dev->makeBatch(Split::Train, all, seed);
      finishOnDevice(host);
      Batch fresh = dev->makeBatch(Split::Train, all, seed);
      torch::Tensor x = fresh.x.to(torch::Device(torch::kCUDA, 0));
      torch::Tensor y = fresh.y.to(torch::Device(torch::kCUDA, 0));
      for (auto& w : fresh.onDevice) w->run(x, y);
      CHECK(torch::equal(y.cpu(), host.y));
      const torch::Tensor diff = (x.cpu().to(torch::kFloat32) - host.x.to(torch::kFloat32)).abs();
      const double mean = diff.mean().item<double>(), worst = diff.max().item<double>();
      MESSAGE("seed " << seed << ": mean |device - host| " << mean << " levels, max " << worst
                      << " (IDCT and chroma upsampling differ)");
      CHECK(mean <= 2.0);
      MESSAGE("images nvJPEG's batched decoder refused (decoded on the host): " << gpuJpegHostFallbacks());
      // The same batch with whole images decoded: the regions' margin keeps the crops' pixels as a
      // whole decode gives them.
      auto whole = makeData({"data.dct_scaling=false", "data.decode=gpu", "data.decode_roi=false"});
      whole->placeOn(torch::Device(torch::kCUDA, 0));
      whole->makeBytes();
      Batch w = whole->makeBatch(Split::Train, all, seed);
      torch::Tensor xw = w.x.to(torch::Device(torch::kCUDA, 0));
      torch::Tensor yw = w.y.to(torch::Device(torch::kCUDA, 0));
      for (auto& work : w.onDevice) work->run(xw, yw);
      const GpuJpegPixels px = gpuJpegPixels();
      // Regions were decoded (nvJPEG's hardware decoder took them): fails, but goes on to compare the
      // batches, where this machine's nvJPEG refused them (the product then decodes whole images).
      CHECK(px.decoded < px.whole);
      MESSAGE("nvJPEG decoded " << px.decoded << " of " << px.whole << " pixels ("
                                << static_cast<double>(px.decoded) / static_cast<double>(std::max<std::int64_t>(px.whole, 1))
                                << "); region vs whole decode: max |diff| "
                                << (x.to(torch::kFloat32) - xw.to(torch::kFloat32)).abs().max().item<double>() << " levels");
      CHECK(torch::equal(x.cpu(), xw.cpu()));
    }
  }

  TEST_CASE("the augmentation kernel against the host's run of the same programs, bit for bit (GPU only)") {
    if (!torch::cuda::is_available()) {
      MESSAGE("skipped: no CUDA device");
      return;
    }
    // Photographs' crops as rows (48 x 48 and 64 x 48: both rotation paths), every policy.
    auto cpu = makeData({"data.dct_scaling=false"});
    cpu->makeBytes();
    std::vector<std::int64_t> all(static_cast<std::size_t>(cpu->size(Split::Train)));
    std::iota(all.begin(), all.end(), 0);
    const torch::Tensor rows = cpu->makeBatch(Split::Train, all, 1).x;
    int compared = 0;
    for (const std::string name : {"ta_wide", "ra", "imagenet", "augmix"})
      for (std::int64_t width : {48, 64}) {
        AugPolicy p;
        p.kind = augPolicyKind(name);
        const torch::Tensor base = width == 48 ? rows : torch::cat({rows, rows.narrow(3, 0, 16)}, 3).contiguous();
        std::vector<std::vector<augk::Instr>> programs;
        std::vector<const std::vector<augk::Instr>*> pointers;
        std::vector<std::int64_t> at;
        torch::Tensor want = base.clone();
        for (std::int64_t r = 0; r < base.size(0); ++r) {
          std::mt19937_64 rng(static_cast<std::uint64_t>(r * 7 + width));
          programs.push_back(augProgram(p, rng, 48, static_cast<int>(width)));
          Image8 img{3, 48, static_cast<int>(width), std::vector<std::uint8_t>(base[r].data_ptr<std::uint8_t>(),
                                                                                base[r].data_ptr<std::uint8_t>() + base[r].numel())};
          runAugProgram(programs.back(), img);
          std::copy(img.data.begin(), img.data.end(), want[r].data_ptr<std::uint8_t>());
          at.push_back(r);
        }
        for (const auto& prog : programs) pointers.push_back(&prog);
        torch::Tensor x = base.to(torch::Device(torch::kCUDA, 0));
        augmentOnDevice(x, at, pointers);
        CAPTURE(name);
        CAPTURE(width);
        CHECK(torch::equal(x.cpu(), want));
        ++compared;
      }
    CHECK(compared == 8);
  }
#endif
}
