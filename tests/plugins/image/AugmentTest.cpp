// Purpose: the augmentation policies of the image pipeline (plugins/data/image/Augment.h) against
// torchvision.transforms.v2 (0.26, the set-up's venv): every operation, at magnitudes across its
// range and both interpolations, on a real photograph (RGB, 64x48: rotations take the affine path)
// and a greyscale crop, within 1 level of 8-bit mean absolute difference of torchvision's tensor
// kernels (run through the policies' own _apply_image_or_video_transform); every policy's magnitude
// bins equal torchvision's (to float32 rounding); the policies draw from their own spaces; the draws depend only on the
// sample's seed; fashion_mnist and imagefolder apply them to training images only; random erasing
// blanks one rectangle; bad policy options exit 2 naming the key.
#include <cstring>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "runner/api/Data.h"
#include "plugins/data/image/Augment.h"
#include "plugins/data/image/Image.h"

#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::TempDir;
using nlohmann::json;

namespace {

// chelsea.jpg's centre, resized to 64 x 48 by the pipeline's own decoder, as 8-bit planes.
Image8 photo() {
  std::vector<std::uint8_t> bytes;
  readImageFile(std::string(EXPRUN_SOURCE_DIR) + "/tests/fixtures/photos/chelsea.jpg", bytes);
  Image8 img{3, 48, 64, std::vector<std::uint8_t>(3 * 48 * 64)};
  TransformSpec tf;
  tf.outWidth = 64;
  tf.outHeight = 48;
  tf.bytesOut = img.data.data();
  decodeTransformed(bytes.data(), bytes.size(), "chelsea.jpg",
                    [](int w, int h) { return CropBox{w * 0.2, h * 0.2, w * 0.8, h * 0.8}; }, tf, nullptr);
  return img;
}

// A 1-channel 28 x 28 image with structure: its luma.
Image8 grey() {
  const Image8 p = photo();
  Image8 g{1, 28, 28, std::vector<std::uint8_t>(784)};
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 28; ++x) {
      const std::size_t i = static_cast<std::size_t>(y + 10) * 64 + x + 18;
      g.data[static_cast<std::size_t>(y) * 28 + x] =
          static_cast<std::uint8_t>((p.plane(0)[i] * 3 + p.plane(1)[i] * 6 + p.plane(2)[i]) / 10);
    }
  return g;
}

const char* kTorchvisionOps = R"(
import json, sys, torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import InterpolationMode
cases = json.load(open(sys.argv[1]))
t = v2.TrivialAugmentWide()
out = open(sys.argv[2], "wb")
for c in cases:
    raw = open(c["image"], "rb").read()
    img = torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(c["c"], c["h"], c["w"])
    mode = InterpolationMode.NEAREST if c["interp"] == "nearest" else InterpolationMode.BILINEAR
    res = t._apply_image_or_video_transform(img, c["op"], c["magnitude"], interpolation=mode, fill=t._fill)
    out.write(res.contiguous().numpy().tobytes())
)";

const char* kTorchvisionBins = R"(
import json, sys
from torchvision.transforms import v2
spaces = {"ta_wide": (v2.TrivialAugmentWide._AUGMENTATION_SPACE, 31), "ra": (v2.RandAugment._AUGMENTATION_SPACE, 31),
          "imagenet": (v2.AutoAugment._AUGMENTATION_SPACE, 10), "augmix": (v2.AugMix._AUGMENTATION_SPACE, 10)}
out = {}
for name, (space, bins) in spaces.items():
    out[name] = {}
    for op, (fn, signed) in space.items():
        m = fn(bins, 48, 64)
        out[name][op] = None if m is None else [float(x) for x in m]
print(json.dumps(out))
)";

std::vector<std::pair<AugOp, std::vector<double>>> opMagnitudes() {
  using O = AugOp;
  return {{O::Identity, {0}},
          {O::ShearX, {0.3, -0.3, 0.99, -0.75}},
          {O::ShearY, {0.3, -0.5, 0.99}},
          {O::TranslateX, {5.0, -9.7, 32.0}},
          {O::TranslateY, {4.0, -20.0, 32.0}},
          {O::Rotate, {30.0, -13.5, 90.0, -90.0, 135.0, 180.0, 4.5}},
          {O::Brightness, {0.5, -0.4, 0.99, -0.99}},
          {O::Color, {0.7, -0.6, 0.99}},
          {O::Contrast, {0.66, -0.9, 0.99}},
          {O::Sharpness, {0.9, -0.9, 0.33}},
          {O::Posterize, {8, 6, 4, 2}},
          {O::Solarize, {1.0, 0.6, 0.2666666716337204, 0.0}},
          {O::AutoContrast, {0}},
          {O::Equalize, {0}},
          {O::Invert, {0}}};
}

std::unique_ptr<Dataset> fashion(const std::vector<std::string>& sets) {
  auto d = test::fashionMnistData(sets);
  d->load();
  return d;
}

}  // namespace

TEST_SUITE("augment") {
  TEST_CASE("every operation equals torchvision's tensor kernel within 1 level of mean absolute difference") {
    TempDir dir;
    json cases = json::array();
    std::vector<Image8> ours;
    const Image8 images[] = {photo(), grey()};
    for (std::size_t which = 0; which < 2; ++which) {
      const std::string path = dir.file("image" + std::to_string(which) + ".raw");
      test::writeText(path, std::string(images[which].data.begin(), images[which].data.end()));
      for (const auto& [op, mags] : opMagnitudes())
        for (double m : mags)
          for (Interpolation interp : {Interpolation::Nearest, Interpolation::Bilinear}) {
            Image8 img = images[which];
            applyAugOp(op, m, img, interp);
            ours.push_back(img);
            cases.push_back(json{{"image", path}, {"c", img.c}, {"h", img.h}, {"w", img.w}, {"op", augOpName(op)},
                                 {"magnitude", m}, {"interp", interp == Interpolation::Nearest ? "nearest" : "bilinear"}});
          }
    }
    test::writeText(dir.file("cases.json"), cases.dump());
    test::runPython(kTorchvisionOps, {dir.file("cases.json"), dir.file("out.raw")});
    const std::string ref = test::readText(dir.file("out.raw"));
    std::size_t at = 0, exact = 0;
    double worst = 0;
    for (std::size_t i = 0; i < ours.size(); ++i) {
      const Image8& o = ours[i];
      CAPTURE(cases[i].dump());
      REQUIRE(at + o.data.size() <= ref.size());
      double sum = 0;
      for (std::size_t k = 0; k < o.data.size(); ++k)
        sum += std::abs(static_cast<double>(o.data[k]) - static_cast<unsigned char>(ref[at + k]));
      at += o.data.size();
      const double mad = sum / static_cast<double>(o.data.size());
      CHECK(mad <= 1.0);
      worst = std::max(worst, mad);
      exact += sum == 0;
    }
    CHECK(at == ref.size());
    MESSAGE("operations equal to torchvision's: " << exact << " of " << ours.size() << " exactly; largest mean absolute "
                                                  "difference " << worst);
    CHECK(exact * 10 >= ours.size() * 8);  // most bit for bit
  }

  TEST_CASE("every policy's magnitude bins are torchvision's") {
    const json tv = json::parse(test::runPython(kTorchvisionBins));
    const std::map<std::string, std::pair<AugPolicy::Kind, int>> kinds{
        {"ta_wide", {AugPolicy::Kind::TrivialAugmentWide, 31}},
        {"ra", {AugPolicy::Kind::RandAugment, 31}},
        {"imagenet", {AugPolicy::Kind::AutoAugmentImageNet, 10}},
        {"augmix", {AugPolicy::Kind::AugMix, 10}}};
    for (const auto& [name, kb] : kinds) {
      CAPTURE(name);
      std::set<std::string> ops;
      for (AugOp op : augSpace(kb.first)) {
        const std::string opName = augOpName(op);
        CAPTURE(opName);
        ops.insert(augOpName(op));
        REQUIRE(tv[name].contains(augOpName(op)));
        const json& want = tv[name][augOpName(op)];
        const std::vector<double> got = augMagnitudes(kb.first, op, kb.second, 48, 64);
        if (want.is_null()) {
          CHECK(got.empty());
          continue;
        }
        // torch.linspace's float32 values depend on the CPU's vector width (its vectorised loop
        // computes start + i * step where the scalar one counts back from the end): to rounding.
        const auto w = want.get<std::vector<double>>();
        REQUIRE(got.size() == w.size());
        for (std::size_t k = 0; k < w.size(); ++k) CHECK(got[k] == doctest::Approx(w[k]).epsilon(1e-6));
      }
      CHECK(ops.size() == tv[name].size());  // the same operations, none missing
    }
  }

  TEST_CASE("the policies draw from their spaces; the draws depend on the sample's seed only") {
    const Image8 base = photo();
    const auto run = [&](AugPolicy p, std::uint64_t seed) {
      std::mt19937_64 rng(seed);
      Image8 img = base;
      auto steps = applyAugPolicy(p, rng, img);
      return std::make_pair(steps, img);
    };
    AugPolicy ta;
    ta.kind = AugPolicy::Kind::TrivialAugmentWide;
    std::set<int> seen;
    for (std::uint64_t s = 0; s < 300; ++s) {
      const auto [steps, img] = run(ta, s);
      REQUIRE(steps.size() == 1);
      seen.insert(static_cast<int>(steps[0].op));
      const auto bins = augMagnitudes(ta.kind, steps[0].op, 31, 48, 64);
      if (!bins.empty())
        CHECK(std::find(bins.begin(), bins.end(), std::abs(steps[0].magnitude)) != bins.end());
    }
    CHECK(seen.size() == 14);
    AugPolicy ra;
    ra.kind = AugPolicy::Kind::RandAugment;
    ra.numOps = 3;
    ra.magnitude = 12;
    for (std::uint64_t s = 0; s < 50; ++s) {
      const auto [steps, img] = run(ra, s);
      REQUIRE(steps.size() == 3);
      for (const auto& st : steps) {
        const auto bins = augMagnitudes(ra.kind, st.op, 31, 48, 64);
        if (!bins.empty()) CHECK(std::abs(st.magnitude) == bins[12]);
      }
    }
    AugPolicy aa;
    aa.kind = AugPolicy::Kind::AutoAugmentImageNet;
    for (std::uint64_t s = 0; s < 50; ++s) CHECK(run(aa, s).first.size() <= 2);
    AugPolicy mix;
    mix.kind = AugPolicy::Kind::AugMix;
    for (std::uint64_t s = 0; s < 20; ++s) {
      const auto [steps, img] = run(mix, s);
      CHECK(steps.size() >= 3);
      CHECK(steps.size() <= 9);
    }
    const auto a = run(ta, 77), b = run(ta, 77);
    CHECK(a.second.data == b.second.data);
    CHECK(run(mix, 5).second.data == run(mix, 5).second.data);
  }

  TEST_CASE("the device's program of a policy, run on the host, is the CPU path's image bit for bit") {
    // The photograph at 64 x 48 (rotations take the affine path) and a square crop of it (90 and
    // 270 degrees take rot90's); a flat image (AutoContrast's and Equalize's degenerate cases).
    const Image8 wide = photo();
    Image8 square{3, 48, 48, std::vector<std::uint8_t>(3 * 48 * 48)};
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < 48; ++i)
        for (int j = 0; j < 48; ++j) square.plane(k)[i * 48 + j] = wide.plane(k)[i * 64 + j + 8];
    Image8 flat{3, 16, 16, std::vector<std::uint8_t>(3 * 16 * 16, 77)};
    std::map<int, int> ops;
    int programs = 0;
    for (const std::string name : {"ta_wide", "ra", "imagenet", "augmix"})
      for (Interpolation interp : {Interpolation::Bilinear, Interpolation::Nearest}) {
        AugPolicy p;
        p.kind = augPolicyKind(name);
        p.interpolation = interp;
        p.numOps = 3;
        for (const Image8* base : std::vector<const Image8*>{&wide, &square, &flat})
          for (std::uint64_t seed = 0; seed < (name == "augmix" ? 40u : 150u); ++seed) {
            std::mt19937_64 cpuRng(seed), deviceRng(seed);
            if (name == "ra") p.magnitude = static_cast<int>(seed % 31);
            Image8 cpu = *base, device = *base;
            for (const AugStep& st : applyAugPolicy(p, cpuRng, cpu)) ++ops[static_cast<int>(st.op)];
            runAugProgram(augProgram(p, deviceRng, base->h, base->w), device);
            CAPTURE(name);
            CAPTURE(seed);
            CAPTURE(base->w);
            REQUIRE(cpu.data == device.data);
            REQUIRE(cpuRng() == deviceRng());  // the same draws
            ++programs;
          }
      }
    CHECK(ops.size() == 15);  // every operation, Invert (AutoAugment's) included
    CHECK(programs == 2 * 3 * (3 * 150 + 40));
  }

  TEST_CASE("fashion_mnist applies a policy to training images only, the same for the same sample") {
    auto plain = fashion({"data.train_limit=64", "data.test_limit=8"});
    auto ta = fashion({"data.train_limit=64", "data.test_limit=8", "data.auto_augment=ta_wide"});
    auto aug = fashion({"data.train_limit=64", "data.test_limit=8", "data.auto_augment=augmix"});
    const std::vector<std::int64_t> idx{0, 1, 2, 3, 4, 5, 6, 7};
    CHECK(torch::equal(plain->makeBatch(Split::Test, idx, 3).x, ta->makeBatch(Split::Test, idx, 3).x));
    const torch::Tensor x = ta->makeBatch(Split::Train, idx, 3).x;
    CHECK_FALSE(torch::equal(plain->makeBatch(Split::Train, idx, 3).x, x));
    CHECK(torch::equal(x.narrow(0, 2, 3), ta->makeBatch(Split::Train, {2, 3, 4}, 3).x));  // per sample, not per batch
    CHECK_FALSE(torch::equal(x, ta->makeBatch(Split::Train, idx, 4).x));                  // another epoch's seed
    CHECK_FALSE(torch::equal(plain->makeBatch(Split::Train, idx, 3).x, aug->makeBatch(Split::Train, idx, 3).x));
    auto erased = fashion({"data.train_limit=64", "data.test_limit=8", "data.random_erasing=1.0", "data.auto_augment=ra"});
    const torch::Tensor e = erased->makeBatch(Split::Train, idx, 3).x;
    CHECK(e.eq(0).sum().item<std::int64_t>() >= 8 * 10);  // a rectangle of about 2 % or more of each image
  }

  TEST_CASE("random erasing blanks one rectangle of 2-33 % of the image in every channel") {
    std::vector<float> img(3 * 20 * 30, 1.0f);
    int erased = 0;
    for (std::uint64_t s = 0; s < 50; ++s) {
      std::fill(img.begin(), img.end(), 1.0f);
      std::mt19937_64 rng(s);
      if (!eraseRandomRectangle(rng, 0.5, img.data(), 3, 20, 30)) {
        CHECK(std::count(img.begin(), img.end(), 0.0f) == 0);
        continue;
      }
      ++erased;
      const auto zeros = std::count(img.begin(), img.end(), 0.0f);
      CHECK(zeros % 3 == 0);
      CHECK(zeros / 3 >= 0.01 * 600);  // 2-33 % of the area, the sides rounded
      CHECK(zeros / 3 <= 0.4 * 600);
      for (int k = 0; k < 600; ++k) CHECK((img[k] == 0) == (img[600 + k] == 0));
    }
    CHECK(erased > 10);
    CHECK(erased < 40);
  }

  TEST_CASE("bad policy options exit 2 naming the key") {
    CHECK_THROWS_CONTAINING(SpecError, test::fashionMnistData({"data.auto_augment=trivial"}), "data.auto_augment",
                            "valid: none, ta_wide, ra, imagenet, augmix");
    CHECK_THROWS_CONTAINING(SpecError, test::fashionMnistData({"data.ra_magnitude=31"}), "data.ra_magnitude", "out of range");
    CHECK_THROWS_CONTAINING(SpecError, test::fashionMnistData({"data.augmix_severity=0"}), "data.augmix_severity");
  }
}
