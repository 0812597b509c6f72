// Purpose: the imagefolder data plugin on a tree of real photographs that the CTest fixture builds
// (tests/fixtures/make_image_tree.py; its folder comes in EXPRUN_TEST_IMAGES): class indexing and
// the file-list cache, list files, the decoder against Pillow's crop + resize, DCT scaling,
// transforms' shapes and ranges, RandomResizedCrop statistics against torchvision's, determinism,
// bad files in both modes, sharding over ranks, and a short training run.
#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "runner/api/Data.h"
#include "runner/data/BatchLoader.h"
#include "plugins/data/image/Image.h"
#include "plugins/data/image/ImageIndex.h"
#include "runner/spec/Spec.h"
#include "runner/step/Feed.h"
#include "runner/train/Trainer.h"

#include "tests/ImageUtil.h"
#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::readText;
using exprun::test::TempDir;
using exprun::test::writeText;
namespace fs = std::filesystem;

namespace {
using test::images;
std::unique_ptr<Dataset> makeData(const std::string& root, std::vector<std::string> sets = {}) {
  return test::makeImageData(root, std::move(sets));
}

std::vector<std::uint8_t> bytesOf(const std::string& path) {
  std::vector<std::uint8_t> b;
  readImageFile(path, b);
  return b;
}

// Decodes `path` with the box into out (float planes), identity normalisation (values 0..255).
std::vector<float> decodeRaw(const std::string& path, CropBox box, int w, int h, bool dct = false,
                             DecodeInfo* info = nullptr) {
  auto b = bytesOf(path);
  TransformSpec tf;
  tf.outWidth = w;
  tf.outHeight = h;
  tf.dctScaling = dct;
  for (int c = 0; c < 3; ++c) {
    tf.mean[c] = 0.0f;
    tf.std[c] = 1.0f / 255.0f;
  }
  std::vector<float> out(3 * static_cast<std::size_t>(w) * h);
  DecodeInfo i = decodeTransformed(b.data(), b.size(), path, [&](int, int) { return box; }, tf, out.data());
  if (info) *info = i;
  return out;
}
}  // namespace

TEST_SUITE("imagefolder") {
  TEST_CASE("classes by sorted folder name, files found recursively, non-images ignored") {
    ImageIndex idx = indexImageFolder(images() + "/good/train", "");
    CHECK(idx.classes == std::vector<std::string>{"astronaut", "chelsea", "coffee", "rocket"});
    REQUIRE(idx.paths.size() == 26u);  // 4 x 5 + grey, cmyk, progressive, png, large, nested
    std::map<int, int> perClass;
    for (auto l : idx.labels) perClass[l]++;
    CHECK(perClass[0] == 7);  // astronaut: 5 + png + large
    CHECK(perClass[2] == 7);  // coffee: 5 + grey + nested
    bool nested = false;
    for (std::size_t i = 0; i < idx.paths.size(); ++i) {
      CHECK(idx.paths[i].find("notes.txt") == std::string::npos);
      if (idx.paths[i].find("nested/deeper.jpg") != std::string::npos) {
        nested = true;
        CHECK(idx.labels[i] == 2);
      }
    }
    CHECK(nested);
    CHECK(hasImageExtension("a.JPEG"));
    CHECK_FALSE(hasImageExtension("jpeg"));
  }

  TEST_CASE("the cached file list is reused, and refreshed when a folder changes") {
    TempDir tmp;
    fs::copy(images() + "/good/val", tmp.file("val"), fs::copy_options::recursive);
    const std::string cache = tmp.file("cache");
    ImageIndex a = indexImageFolder(tmp.file("val"), cache);
    CHECK_FALSE(a.fromCache);
    ImageIndex b = indexImageFolder(tmp.file("val"), cache);
    CHECK(b.fromCache);
    CHECK(b.paths == a.paths);
    CHECK(b.labels == a.labels);
    CHECK(b.classes == a.classes);
    fs::copy_file(tmp.file("val/rocket/rocket_0.jpg"), tmp.file("val/rocket/rocket_9.jpg"));
    // Folder mtimes have nanosecond resolution here; make sure the change is visible anyway.
    fs::last_write_time(tmp.file("val/rocket"), fs::last_write_time(tmp.file("val/rocket")) + std::chrono::seconds(2));
    ImageIndex c = indexImageFolder(tmp.file("val"), cache);
    CHECK_FALSE(c.fromCache);
    CHECK(c.paths.size() == a.paths.size() + 1);
  }

  TEST_CASE("missing roots, empty classes and bad list files are errors naming them") {
    TempDir tmp;
    CHECK_THROWS_CONTAINING(IndexError, indexImageFolder(tmp.file("nope"), ""), "nope", "no such folder");
    fs::create_directories(tmp.file("empty"));
    CHECK_THROWS_CONTAINING(IndexError, indexImageFolder(tmp.file("empty"), ""), "no class folders");
    fs::create_directories(tmp.file("t/a"));
    fs::create_directories(tmp.file("t/b"));
    writeText(tmp.file("t/a/x.jpg"), "x");
    writeText(tmp.file("t/b/readme.txt"), "x");
    CHECK_THROWS_CONTAINING(IndexError, indexImageFolder(tmp.file("t"), ""), "without image files", "b");
    writeText(tmp.file("list.txt"), "a/x.jpg 0\n\n# comment\na/y.jpg seven\n");
    CHECK_THROWS_CONTAINING(IndexError, readImageList(tmp.file("list.txt"), tmp.path.string()), "list.txt:4", "seven");
    writeText(tmp.file("list2.txt"), "lonely\n");
    CHECK_THROWS_CONTAINING(IndexError, readImageList(tmp.file("list2.txt"), "/r"), "list2.txt:1", "path label");
    CHECK_THROWS_CONTAINING(DataError, makeData(tmp.file("nope")), "nope");
    CHECK_THROWS_CONTAINING(DataError, makeData(images() + "/good", {"data.std=[1, 2]"}), "data.std", "3 values");
  }

  TEST_CASE("list files: relative paths under root, labels from the file") {
    ImageIndex idx = readImageList(images() + "/train_list.txt", images() + "/good");
    CHECK(idx.paths.size() == 25u);  // the list names the files of the class folders, not nested ones
    CHECK(idx.classes.size() == 4u);
    CHECK(idx.paths[0] == images() + "/good/train/astronaut/astronaut_0.jpg");
    auto d = makeData(images() + "/good", {"data.train_list=" + images() + "/train_list.txt",
                                           "data.val_list=" + images() + "/val_list.txt", "data.size=32"});
    CHECK(d->size(Split::Train) == 25);
    CHECK(d->size(Split::Test) == 8);
    CHECK(d->info().numClasses == 4);
    Batch b = d->makeBatch(Split::Train, {0, 24}, 7);
    CHECK(b.y[0].item<std::int64_t>() == 0);
    CHECK(b.y[1].item<std::int64_t>() == 3);
  }

  TEST_CASE("the decoder matches Pillow's decode and crop + bilinear resize") {
    auto cases = nlohmann::json::parse(readText(images() + "/reference/cases.json"));
    REQUIRE(cases.size() == 5u);
    for (const auto& c : cases) {
      CAPTURE(c["path"].get<std::string>());
      const int w = c["width"], h = c["height"];
      CropBox box{c["box"][0], c["box"][1], c["box"][2], c["box"][3]};
      std::vector<float> ours = decodeRaw(c["path"], box, w, h);
      std::string ref = readText(c["file"]);
      REQUIRE(ref.size() == 3u * w * h);
      double sumDiff = 0, maxDiff = 0;
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
          for (int ch = 0; ch < 3; ++ch) {
            const double p = static_cast<unsigned char>(ref[(static_cast<std::size_t>(y) * w + x) * 3 + ch]);
            const double o = ours[static_cast<std::size_t>(ch) * w * h + static_cast<std::size_t>(y) * w + x];
            sumDiff += std::abs(p - o);
            maxDiff = std::max(maxDiff, std::abs(p - o));
          }
      const double meanDiff = sumDiff / (3.0 * w * h);
      // The same libjpeg-turbo decode (islow IDCT, fancy upsampling); Pillow rounds to 8 bits after
      // each resampling pass, exprun keeps floats.
      CHECK(meanDiff < 0.6);
      CHECK(maxDiff <= 2.5);
    }
  }

  TEST_CASE("a transparent PNG does not depend on what the thread decoded before; long trailing data is fine") {
    const std::string alpha = images() + "/extra/alpha.png";
    auto first = decodeRaw(alpha, CropBox{0, 0, 120, 90}, 60, 45);
    decodeRaw(images() + "/good/train/astronaut/photo.png", CropBox{0, 0, 260, 260}, 60, 45);
    auto again = decodeRaw(alpha, CropBox{0, 0, 120, 90}, 60, 45);
    CHECK(first == again);
    DecodeInfo info;
    decodeRaw(images() + "/extra/trailing.jpg", CropBox{0, 0, 200, 150}, 50, 50, false, &info);
    CHECK(info.width == 200);
  }

  TEST_CASE("DCT-domain downscaling decodes fewer pixels and stays close to the full decode") {
    const std::string large = images() + "/good/train/astronaut/large.jpg";  // 1024x768
    CropBox box{100, 50, 900, 650};                                          // 800x600 -> 224
    DecodeInfo full, scaled;
    auto a = decodeRaw(large, box, 224, 224, false, &full);
    auto b = decodeRaw(large, box, 224, 224, true, &scaled);
    CHECK(full.scaleNum == 8);
    CHECK(scaled.scaleNum == 3);  // 800*3/8 = 300 >= 224, 2/8 would give 200
    CHECK(scaled.decodedRows < full.decodedRows / 2);
    double sum = 0;
    for (std::size_t i = 0; i < a.size(); ++i) sum += std::abs(a[i] - b[i]);
    CHECK(sum / a.size() < 2.0);  // mean absolute difference in 8-bit levels
    // Only the crop's rows are decoded without scaling too.
    DecodeInfo part;
    decodeRaw(large, CropBox{10, 700, 110, 760}, 50, 30, false, &part);
    CHECK(part.decodedRows <= 60 + 2 * 16 + 2);  // the rows, a 16-row margin, filter taps
    CHECK(part.decodedCols < 1024);
  }

  TEST_CASE("greyscale, CMYK, progressive and PNG images become RGB batches") {
    auto d = makeData(images() + "/good", {"data.size=64"});
    ImageIndex idx = indexImageFolder(images() + "/good/train", "");
    for (const char* name : {"grey.JPEG", "cmyk.jpg", "progressive.jpeg", "photo.png"}) {
      CAPTURE(name);
      std::int64_t i = -1;
      for (std::size_t k = 0; k < idx.paths.size(); ++k)
        if (idx.paths[k].size() >= std::strlen(name) &&
            idx.paths[k].compare(idx.paths[k].size() - std::strlen(name), std::strlen(name), name) == 0)
          i = static_cast<std::int64_t>(k);
      REQUIRE(i >= 0);
      Batch b = d->makeBatch(Split::Train, {i}, 3);
      CHECK(b.x.sizes() == torch::IntArrayRef({1, 3, 64, 64}));
      CHECK(b.x.std().item<double>() > 0.1);  // real content, not a flat fill
    }
    // The CMYK photo decodes to the colours of the RGB photo it was made from (not inverted).
    std::vector<float> cmyk = decodeRaw(images() + "/good/train/chelsea/cmyk.jpg", CropBox{0, 0, 256, 192}, 256, 192);
    double mean = 0;
    for (float v : cmyk) mean += v;
    mean /= cmyk.size();
    CHECK(mean > 60);
    CHECK(mean < 200);
  }

  TEST_CASE("transforms: shapes, value ranges, determinism, flips") {
    auto d = makeData(images() + "/good");
    CHECK(d->info().numClasses == 4);
    CHECK(d->info().height == 224);
    const std::int64_t n = d->size(Split::Train);
    std::vector<std::int64_t> all(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) all[i] = i;
    Batch b = d->makeBatch(Split::Train, all, 11);
    CHECK(b.x.sizes() == torch::IntArrayRef({n, 3, 224, 224}));
    // Normalised values lie in [(0 - mean) / std, (1 - mean) / std] per channel.
    const double mean[3] = {0.485, 0.456, 0.406}, sd[3] = {0.229, 0.224, 0.225};
    for (int c = 0; c < 3; ++c) {
      auto ch = b.x.select(1, c);
      CHECK(ch.min().item<double>() >= -mean[c] / sd[c] - 1e-4);
      CHECK(ch.max().item<double>() <= (1 - mean[c]) / sd[c] + 1e-4);
    }
    // Same seed and sample: identical, whatever the batch it is in; another epoch seed: different.
    Batch again = d->makeBatch(Split::Train, {5, 3}, 11);
    CHECK(torch::equal(again.x[1], b.x[3]));
    CHECK(torch::equal(again.x[0], b.x[5]));
    CHECK_FALSE(torch::equal(d->makeBatch(Split::Train, {3}, 12).x[0], b.x[3]));
    // Evaluation ignores the seed.
    CHECK(torch::equal(d->makeBatch(Split::Test, {1}, 1).x, d->makeBatch(Split::Test, {1}, 2).x));
    // With a full-image crop, the flipped sample is the mirror image of the unflipped one.
    auto e = makeData(images() + "/good", {"data.scale_min=1", "data.ratio_min=0.1", "data.ratio_max=10", "data.size=64"});
    int flipped = 0, plain = 0;
    Batch ref = makeData(images() + "/good", {"data.scale_min=1", "data.ratio_min=0.1", "data.ratio_max=10",
                                               "data.size=64", "data.hflip=false"})
                    ->makeBatch(Split::Train, all, 5);
    Batch got = e->makeBatch(Split::Train, all, 5);
    for (std::int64_t i = 0; i < n; ++i) {
      if (torch::equal(got.x[i], ref.x[i]))
        ++plain;
      else if (torch::allclose(got.x[i], ref.x[i].flip({2}), 1e-5, 1e-5))
        ++flipped;
    }
    CHECK(plain + flipped == n);
    CHECK(flipped > n / 5);
    CHECK(plain > n / 5);
  }

  TEST_CASE("an augmentation policy and random erasing act on training images only, per sample") {
    const std::vector<std::string> small{"data.size=48"};
    auto plain = makeData(images() + "/good", small);
    std::vector<std::string> withPolicy = small;
    withPolicy.insert(withPolicy.end(), {"data.auto_augment=ta_wide", "data.random_erasing=1.0"});
    auto aug = makeData(images() + "/good", withPolicy);
    const std::vector<std::int64_t> idx{0, 1, 2, 3, 4, 5};
    CHECK(torch::equal(plain->makeBatch(Split::Test, idx, 2).x, aug->makeBatch(Split::Test, idx, 2).x));
    const torch::Tensor x = aug->makeBatch(Split::Train, idx, 2).x;
    CHECK_FALSE(torch::equal(plain->makeBatch(Split::Train, idx, 2).x, x));
    CHECK(torch::equal(x.narrow(0, 1, 2), aug->makeBatch(Split::Train, {1, 2}, 2).x));
    // Every image has an erased rectangle: a block of exact zeros in all three channels.
    for (std::int64_t i = 0; i < 6; ++i) {
      const torch::Tensor zeros = x[i].eq(0).all(0);
      CHECK(zeros.sum().item<std::int64_t>() >= 0.01 * 48 * 48);
    }
  }

  TEST_CASE("uint8 batches: the float batches' pixels rounded to 8 bits; a policy's bytes exactly; no erasing") {
    const std::vector<std::int64_t> idx{0, 1, 2, 3, 4, 5, 6};
    for (const std::vector<std::string>& sets :
         {std::vector<std::string>{"data.size=48"}, std::vector<std::string>{"data.size=48", "data.auto_augment=ta_wide"}}) {
      auto floats = makeData(images() + "/good", sets), bytes = makeData(images() + "/good", sets);
      REQUIRE(bytes->whyNoBytes().empty());
      bytes->makeBytes();
      const bool policy = sets.size() > 1;
      for (Split split : {Split::Train, Split::Test}) {
        const Batch f = floats->makeBatch(split, idx, 9), b = bytes->makeBatch(split, idx, 9);
        CHECK((b.x.scalar_type() == torch::kUInt8));
        CHECK(b.x.sizes() == f.x.sizes());
        CHECK(torch::equal(b.y, f.y));
        const torch::Tensor x = placedOn(b, torch::kCPU, false).x;
        if (policy && split == Split::Train) {
          CHECK(torch::equal(x, f.x));  // the policy worked on bytes either way
        } else {  // float: the resampled value normalised; uint8: rounded first (at most half a level)
          const double halfLevel = 0.5 / (255.0 * 0.224) + 1e-5;  // the smallest std's
          const double d = (x - f.x).abs().max().item<double>();
          CHECK(d <= halfLevel);
          CHECK(d > 0);
        }
      }
    }
    CHECK(makeData(images() + "/good", {"data.random_erasing=0.25"})->whyNoBytes().find("random_erasing") !=
          std::string::npos);
  }

  TEST_CASE("FixRes: training and evaluation sizes apart; a method can make training images smaller") {
    auto d = makeData(images() + "/good", {"data.size=48", "data.eval_size=64"});
    CHECK(d->makeBatch(Split::Train, {0, 1}, 1).x.sizes() == torch::IntArrayRef({2, 3, 48, 48}));
    CHECK(d->makeBatch(Split::Test, {0, 1}, 1).x.sizes() == torch::IntArrayRef({2, 3, 64, 64}));
    CHECK(d->info().height == 48);  // the model and the planner see the largest training size
    d->setTrainSize(32);
    CHECK(d->makeBatch(Split::Train, {0}, 1).x.sizes() == torch::IntArrayRef({1, 3, 32, 32}));
    CHECK(d->makeBatch(Split::Test, {0}, 1).x.sizes() == torch::IntArrayRef({1, 3, 64, 64}));
    CHECK_THROWS_CONTAINING(DataError, d->setTrainSize(56), "8 to data.size (48)");
    CHECK_THROWS_CONTAINING(DataError, makeData(images() + "/good", {"data.eval_size=64", "data.eval_resize=60"}),
                            "data.eval_resize", "evaluation crop 64");
  }

  TEST_CASE("a 28x28 greyscale PNG: crops and the evaluation resize equal torchvision's PIL transforms within a level") {
    // What torchvision's reference script does to Fashion-MNIST PNGs: ImageFolder's PIL loader
    // (convert to RGB), RandomResizedCrop's crop box resized to 32 (bilinear, mostly upscaling from
    // 28 px), and Resize(36) + CenterCrop(32) for evaluation; Pillow rounds to 8 bits after each
    // pass, exprun keeps floats: at most one level apart.
    TempDir dir;
    const std::vector<std::array<int, 4>> boxes{{0, 0, 28, 28}, {3, 5, 11, 17}, {10, 2, 21, 26}, {0, 12, 9, 16},
                                                {7, 7, 28, 22}, {14, 0, 27, 13}};
    std::string boxArgs;
    for (const auto& b : boxes)
      boxArgs += std::to_string(b[0]) + "," + std::to_string(b[1]) + "," + std::to_string(b[2]) + "," + std::to_string(b[3]) + ";";
    const std::string out = test::runPython(R"(
import gzip, struct, sys
from PIL import Image
import torchvision.transforms.functional as F
from torchvision.transforms import InterpolationMode
root, folder, boxes = sys.argv[1], sys.argv[2], [b for b in sys.argv[3].split(";") if b]
data = gzip.open(root + "/train-images-idx3-ubyte.gz").read()[16:]
for k in range(4):
    path = f"{folder}/{k}.png"
    Image.frombytes("L", (28, 28), data[k * 784:(k + 1) * 784]).save(path)
    img = Image.open(path).convert("RGB")
    outs = []
    for b in boxes:
        x0, y0, x1, y1 = (int(v) for v in b.split(","))
        outs.append(F.resized_crop(img, y0, x0, y1 - y0, x1 - x0, [32, 32], InterpolationMode.BILINEAR, antialias=True))
    outs.append(F.center_crop(F.resize(img, 36, InterpolationMode.BILINEAR, antialias=True), 32))
    print(path, " ".join(o.tobytes().hex() for o in outs))
)",
                                            {test::kFashionMnistRoot, dir.path.string(), boxArgs});
    std::istringstream lines(out);
    int images = 0;
    double worst = 0;
    for (std::string path, line; lines >> path && std::getline(lines, line); ++images) {
      std::istringstream refs(line);
      for (std::size_t k = 0; k <= boxes.size(); ++k) {
        std::string hex;
        REQUIRE(static_cast<bool>(refs >> hex));
        REQUIRE(hex.size() == 2u * 3 * 32 * 32);
        CropBox box = k < boxes.size() ? CropBox{double(boxes[k][0]), double(boxes[k][1]), double(boxes[k][2]), double(boxes[k][3])}
                                       : resizeCenterCrop(28, 28, 36, 32);
        const std::vector<float> ours = decodeRaw(path, box, 32, 32);
        for (int y = 0; y < 32; ++y)
          for (int x = 0; x < 32; ++x)
            for (int ch = 0; ch < 3; ++ch) {
              const std::size_t at = (static_cast<std::size_t>(y) * 32 + x) * 3 + ch;
              const double ref = std::stoi(hex.substr(2 * at, 2), nullptr, 16);
              worst = std::max(worst, std::abs(ref - ours[static_cast<std::size_t>(ch) * 32 * 32 + y * 32 + x]));
            }
      }
    }
    CHECK(images == 4);
    CAPTURE(worst);
    CHECK(worst <= 1.0);
  }

  TEST_CASE("RandomResizedCrop parameters follow torchvision's distribution") {
    std::mt19937_64 rng(99);
    std::uniform_real_distribution<double> uni(0, 1);
    auto u = [&] { return uni(rng); };
    const int W = 500, H = 375, N = 20000;
    double area = 0, area2 = 0, ratio = 0, cx = 0;
    for (int k = 0; k < N; ++k) {
      CropBox b = randomResizedCrop(W, H, 0.08, 1.0, 3.0 / 4, 4.0 / 3, u);
      REQUIRE(b.x0 >= 0);
      REQUIRE(b.y0 >= 0);
      REQUIRE(b.x1 <= W);
      REQUIRE(b.y1 <= H);
      const double a = b.width() * b.height() / (W * H), r = b.width() / b.height();
      CHECK(a >= 0.075);
      CHECK(r >= 0.74);
      CHECK(r <= 1.34);
      area += a;
      area2 += a * a;
      ratio += r;
      cx += (b.x0 + b.x1) / 2 / W;
    }
    area /= N;
    const double sdArea = std::sqrt(area2 / N - area * area);
    // torchvision 0.26 RandomResizedCrop.get_params on a 500x375 image, 20,000 draws:
    // area fraction mean 0.4348 (sd 0.2159), w/h mean 1.0457, centre x mean 0.4995.
    CHECK(area == doctest::Approx(0.4348).epsilon(0.025));
    CHECK(sdArea == doctest::Approx(0.2159).epsilon(0.05));
    CHECK(ratio / N == doctest::Approx(1.0457).epsilon(0.01));
    CHECK(cx / N == doctest::Approx(0.5).epsilon(0.01));
    // A very elongated image falls back to the centre crop with the ratio clamped.
    CropBox f = randomResizedCrop(1000, 10, 0.9, 1.0, 3.0 / 4, 4.0 / 3, [] { return 0.5; });
    CHECK(f.width() == doctest::Approx(13));
    CHECK(f.height() == doctest::Approx(10));
    // Evaluation: Resize(256) + CenterCrop(224) of a 500x375 image.
    CropBox c = resizeCenterCrop(500, 375, 256, 224);
    CHECK(c.height() == doctest::Approx(224 * 375.0 / 256));
    CHECK((c.x0 + c.x1) / 2 == doctest::Approx(250).epsilon(0.01));
  }

  TEST_CASE("bad images: error names the file; skip replaces and counts them") {
    const std::string bad = images() + "/bad";
    auto strict = makeData(bad, {"data.size=32"});
    ImageIndex idx = indexImageFolder(bad + "/train", "");
    std::map<std::string, std::int64_t> at;
    for (std::size_t i = 0; i < idx.paths.size(); ++i) at[fs::path(idx.paths[i]).filename().string()] = static_cast<std::int64_t>(i);
    const std::pair<const char*, const char*> cases[] = {{"truncated.jpg", "truncated"},
                                                          {"corrupt.jpg", "corrupt JPEG"},
                                                          {"empty.jpg", "empty"},
                                                          {"bitmap.bmp", "unsupported image format"}};
    for (auto [file, why] : cases) {
      CAPTURE(file);
      REQUIRE(at.count(file));
      CHECK_THROWS_CONTAINING(DataError, strict->makeBatch(Split::Train, {at[file]}, 1), file, why, "on_bad_image");
    }
    auto lenient = makeData(bad, {"data.size=32", "data.on_bad_image=skip"});
    std::vector<std::int64_t> all;
    for (std::size_t i = 0; i < idx.paths.size(); ++i) all.push_back(static_cast<std::int64_t>(i));
    Batch b = lenient->makeBatch(Split::Train, all, 1);
    CHECK(b.x.size(0) == static_cast<std::int64_t>(all.size()));
    CHECK(lenient->skippedSamples() == 4);
    // The replacement is the next good sample of the split, with its own label: bitmap.bmp is
    // followed by chelsea_0.jpg; corrupt.jpg by empty.jpg (bad too), then rocket_0.jpg.
    const std::int64_t bmp = at["bitmap.bmp"], corrupt = at["corrupt.jpg"];
    Batch next = lenient->makeBatch(Split::Train, {at["chelsea_0.jpg"], at["rocket_0.jpg"]}, 1);
    CHECK(lenient->skippedSamples() == 4);  // good samples only: no change
    CHECK(torch::equal(b.x[bmp], next.x[0]));
    CHECK(b.y[bmp].item<std::int64_t>() == next.y[0].item<std::int64_t>());
    CHECK(torch::equal(b.x[corrupt], next.x[1]));
    CHECK(b.y[corrupt].item<std::int64_t>() == 1);
  }

  TEST_CASE("ranks shard the split and see the same samples as one process") {
    auto d = makeData(images() + "/good", {"data.size=32"});
    LoaderOptions one;
    one.batchSize = 4;
    one.seed = 3;
    one.epoch = 2;
    one.workers = 2;
    std::vector<torch::Tensor> single;
    std::vector<std::int64_t> singleLabels;
    {
      BatchLoader l(*d, Split::Train, one);
      while (auto b = l.next()) {
        for (std::int64_t i = 0; i < b->x.size(0); ++i) single.push_back(b->x[i]);
        for (std::int64_t i = 0; i < b->y.size(0); ++i) singleLabels.push_back(b->y[i].item<std::int64_t>());
      }
    }
    REQUIRE(single.size() == 26u);
    // Two ranks of batch 2 each: step s of rank r holds positions 4s + r, 4s + r + 2 of the epoch order.
    std::size_t covered = 0;
    for (int r = 0; r < 2; ++r) {
      LoaderOptions o = one;
      o.batchSize = 2;
      o.rank = r;
      o.worldSize = 2;
      o.workers = 1;
      BatchLoader l(*d, Split::Train, o);
      std::int64_t pos = r;
      while (auto b = l.next())
        for (std::int64_t i = 0; i < b->x.size(0); ++i, pos += 2) {
          CHECK(torch::equal(b->x[i], single[pos]));
          ++covered;
        }
    }
    CHECK(covered == 26u);
  }

  TEST_CASE("a short training run on the photographs") {
    TempDir tmp;
    Spec spec = loadSpecFromString(
        "name: photos\nseed: 1\nmodel: {type: small_cnn}\n"
        "data: {type: imagefolder, size: 32, cache_dir: off, on_bad_image: skip}\n"
        "optimizer: {type: sgd, lr: 0.05}\ntrain: {epochs: 2, batch_size: 8, workers: 2, threads: 1}\n",
        "photos.yaml", {"data.root=" + images() + "/bad"});
    auto out = Trainer(spec).run(tmp.file("photos.json"));
    auto j = nlohmann::json::parse(readText(tmp.file("photos.json")));
    REQUIRE(j["epochs"].size() == 2u);
    CHECK(j["epochs"][0]["samples"] == 10);  // 6 images + 4 bad ones replaced
    CHECK(j["epochs"][0]["skipped_images"] == 4);
    CHECK(j["epochs"][1]["skipped_images"] == 4);
    CHECK(j["epochs"][0]["data_wait_s"].get<double>() >= 0);
    CHECK(std::isfinite(j["epochs"][1]["train_loss"].get<double>()));
  }
}
