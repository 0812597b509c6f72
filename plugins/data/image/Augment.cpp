// Purpose: per-sample augmentation policies on 8-bit images (see Augment.h). Each operation follows
// torchvision.transforms.v2.functional's tensor kernel for uint8 images (torchvision 0.26), noted
// beside it; arithmetic is in float32 where the kernel's is.
#include "plugins/data/image/Augment.h"

#include <algorithm>
#include <cmath>

#include "plugins/data/image/AugmentKernel.h"

namespace exprun {
namespace {

constexpr double kPi = 3.14159265358979323846;

std::uint8_t toByte(float v) {  // .clamp_(0, 255).to(torch.uint8): truncation
  return static_cast<std::uint8_t>(std::clamp(v, 0.0f, 255.0f));
}

// _get_inverse_affine_matrix(center, angle, translate, scale=1, shear).
std::vector<double> inverseAffine(double cx, double cy, double angle, double tx, double ty, double shearX, double shearY) {
  const double rot = angle * kPi / 180, sx = shearX * kPi / 180, sy = shearY * kPi / 180;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -(a * std::tan(sx) + std::sin(rot));
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = std::cos(rot) - c * std::tan(sx);
  std::vector<double> m{d, -b, 0.0, -c, a, 0.0};
  m[2] += cx - m[0] * (cx + tx) - m[1] * (cy + ty);
  m[5] += cy - m[3] * (cx + tx) - m[4] * (cy + ty);
  return m;
}

// _affine_grid's float matrix for the inverse matrix `m` of an h x w image (warp's, and the device's
// kWarp instruction's).
void gridMatrix(const std::vector<double>& m, int h, int w, float* t) {
  const float hw = 0.5f * static_cast<float>(w), hh = 0.5f * static_cast<float>(h);
  for (int k = 0; k < 3; ++k) t[k] = static_cast<float>(m[k]) / hw;
  for (int k = 3; k < 6; ++k) t[k] = static_cast<float>(m[k]) / hh;
}

// _affine_grid + grid_sample(mode, padding zeros, align_corners=False) + round: every output pixel
// reads the source at the inverse-mapped point, outside the image 0.
void warp(Image8& img, const std::vector<double>& m, Interpolation interp) {
  const int h = img.h, w = img.w;
  float t[6];
  gridMatrix(m, h, w, t);
  Image8 out = img;
  for (int i = 0; i < h; ++i) {
    const float yo = static_cast<float>(i) - 0.5f * static_cast<float>(h - 1);
    for (int j = 0; j < w; ++j) {
      const float xo = static_cast<float>(j) - 0.5f * static_cast<float>(w - 1);
      const float gx = xo * t[0] + yo * t[1] + t[2], gy = xo * t[3] + yo * t[4] + t[5];
      const float ix = ((gx + 1.0f) * static_cast<float>(w) - 1.0f) / 2.0f;
      const float iy = ((gy + 1.0f) * static_cast<float>(h) - 1.0f) / 2.0f;
      for (int k = 0; k < img.c; ++k) {
        const std::uint8_t* src = img.plane(k);
        float v = 0;
        if (interp == Interpolation::Nearest) {
          const int x = static_cast<int>(std::nearbyint(ix)), y = static_cast<int>(std::nearbyint(iy));
          if (x >= 0 && x < w && y >= 0 && y < h) v = src[y * w + x];
        } else {
          const float fx = std::floor(ix), fy = std::floor(iy);
          const int x0 = static_cast<int>(fx), y0 = static_cast<int>(fy);
          const float ax = ix - fx, ay = iy - fy;
          const auto at = [&](int x, int y) -> float { return x >= 0 && x < w && y >= 0 && y < h ? src[y * w + x] : 0.0f; };
          v = at(x0, y0) * (1 - ax) * (1 - ay) + at(x0 + 1, y0) * ax * (1 - ay) + at(x0, y0 + 1) * (1 - ax) * ay +
              at(x0 + 1, y0 + 1) * ax * ay;
        }
        out.plane(k)[i * w + j] = static_cast<std::uint8_t>(std::clamp(std::nearbyint(v), 0.0f, 255.0f));
      }
    }
  }
  img = std::move(out);
}

// torch.rot90(image, k, dims=(-2, -1)): k = 2 for any image, k = 1 and 3 for a square one.
void rot90(Image8& img, int k) {
  const int h = img.h, w = img.w;
  Image8 out = img;
  for (int c = 0; c < img.c; ++c) {
    const std::uint8_t* s = img.plane(c);
    std::uint8_t* d = out.plane(c);
    for (int i = 0; i < h; ++i)
      for (int j = 0; j < w; ++j) {
        const int si = k == 1 ? j : k == 2 ? h - 1 - i : w - 1 - j;
        const int sj = k == 1 ? w - 1 - i : k == 2 ? w - 1 - j : i;
        d[i * w + j] = s[si * w + sj];
      }
  }
  img = std::move(out);
}

// A geometric operation on an h x w image, as torchvision computes it: torch.rot90 by `rot90`
// (rotate_image's fast paths), or the affine warp by the inverse matrix `affine`; neither: the
// image stays as it is. Shears are about the top-left corner (affine(shear=[degrees(atan(m)), 0],
// center=[0, 0])), translations in whole pixels (translate=[int(m), 0]), rotations
// (rotate_image(angle, expand=False, center=None)) about the centre, by -angle in the warp.
struct Geometry {
  int rot90 = 0;
  std::vector<double> affine;
};
Geometry geometryOf(AugOp op, double magnitude, int h, int w) {
  switch (op) {
    case AugOp::ShearX:
      return {0, inverseAffine(-0.5 * w, -0.5 * h, 0, 0, 0, std::atan(magnitude) * 180 / kPi, 0)};
    case AugOp::ShearY:
      return {0, inverseAffine(-0.5 * w, -0.5 * h, 0, 0, 0, 0, std::atan(magnitude) * 180 / kPi)};
    case AugOp::TranslateX:
      return {0, inverseAffine(0, 0, 0, static_cast<double>(static_cast<int>(magnitude)), 0, 0, 0)};
    case AugOp::TranslateY:
      return {0, inverseAffine(0, 0, 0, 0, static_cast<double>(static_cast<int>(magnitude)), 0, 0)};
    case AugOp::Rotate: {
      double angle = std::fmod(magnitude, 360.0);
      if (angle < 0) angle += 360.0;
      if (angle == 0) return {};
      if (angle == 180) return {2, {}};
      if (h == w && angle == 90) return {1, {}};
      if (h == w && angle == 270) return {3, {}};
      return {0, inverseAffine(0, 0, -angle, 0, 0, 0, 0)};
    }
    default:
      return {};
  }
}

// _rgb_to_grayscale_image(preserve_dtype=False) then floor_: the luma of every pixel.
std::vector<float> luma(const Image8& img) {
  const std::size_t n = static_cast<std::size_t>(img.h) * img.w;
  std::vector<float> g(n);
  const std::uint8_t *r = img.plane(0), *gr = img.plane(1), *b = img.plane(2);
  for (std::size_t i = 0; i < n; ++i) g[i] = std::floor(r[i] * 0.2989f + gr[i] * 0.587f + b[i] * 0.114f);
  return g;
}

// _blend(image, other, ratio): image * ratio + other * (1 - ratio), clamped and truncated.
void blend(Image8& img, const std::vector<float>& other, bool perPixel, float constant, double ratio) {
  const float r = static_cast<float>(ratio), q = static_cast<float>(1.0 - ratio);
  const std::size_t n = static_cast<std::size_t>(img.h) * img.w;
  for (int c = 0; c < img.c; ++c) {
    std::uint8_t* p = img.plane(c);
    for (std::size_t i = 0; i < n; ++i) p[i] = toByte(p[i] * r + (perPixel ? other[i] : constant) * q);
  }
}

// adjust_sharpness_image: the 3x3 kernel (1 around, 5 in the middle, / 13) on the interior, rounded,
// blended with the image by the factor; the border rows and columns are kept.
void sharpness(Image8& img, double factor) {
  const int h = img.h, w = img.w;
  if (h <= 2 || w <= 2) return;
  const float a = 1.0f / 13.0f, b = 5.0f / 13.0f, keep = static_cast<float>(1.0 - factor);
  for (int c = 0; c < img.c; ++c) {
    std::uint8_t* p = img.plane(c);
    std::vector<float> blurred(static_cast<std::size_t>(h - 2) * (w - 2));
    for (int i = 1; i < h - 1; ++i)
      for (int j = 1; j < w - 1; ++j) {
        float s = 0;
        for (int di = -1; di <= 1; ++di)
          for (int dj = -1; dj <= 1; ++dj) s += p[(i + di) * w + j + dj] * (di == 0 && dj == 0 ? b : a);
        blurred[static_cast<std::size_t>(i - 1) * (w - 2) + j - 1] = std::nearbyint(s);
      }
    for (int i = 1; i < h - 1; ++i)
      for (int j = 1; j < w - 1; ++j) {
        const float x = p[i * w + j];
        p[i * w + j] = toByte(x + keep * (blurred[static_cast<std::size_t>(i - 1) * (w - 2) + j - 1] - x));
      }
  }
}

// autocontrast_image: each channel stretched from its [min, max] to [0, 255].
void autocontrast(Image8& img) {
  const std::size_t n = static_cast<std::size_t>(img.h) * img.w;
  for (int c = 0; c < img.c; ++c) {
    std::uint8_t* p = img.plane(c);
    float lo = *std::min_element(p, p + n), hi = *std::max_element(p, p + n);
    float invScale = (hi - lo) * (1.0f / 255.0f);
    if (hi == lo) lo = 0, invScale = 1;
    for (std::size_t i = 0; i < n; ++i) p[i] = toByte((p[i] - lo) / invScale);
  }
}

// equalize_image: PIL's histogram equalisation, per channel.
void equalize(Image8& img) {
  const std::size_t n = static_cast<std::size_t>(img.h) * img.w;
  for (int c = 0; c < img.c; ++c) {
    std::uint8_t* p = img.plane(c);
    std::int64_t hist[256] = {0};
    for (std::size_t i = 0; i < n; ++i) ++hist[p[i]];
    int last = 255;
    while (last > 0 && hist[last] == 0) --last;
    const std::int64_t step = (static_cast<std::int64_t>(n) - hist[last]) / 255;
    if (step == 0) continue;
    std::uint8_t lut[256];
    lut[0] = 0;
    std::int64_t cum = 0;
    for (int k = 1; k < 256; ++k) {
      cum += hist[k - 1];
      lut[k] = static_cast<std::uint8_t>(std::clamp<std::int64_t>((cum + step / 2) / step, 0, 255));
    }
    for (std::size_t i = 0; i < n; ++i) p[i] = lut[p[i]];
  }
}

// torch.linspace(start, end, steps) in float32, element k.
double linspaceAt(double start, double end, int steps, int k) {
  if (steps == 1) return static_cast<float>(start);
  const float s = static_cast<float>(start), e = static_cast<float>(end);
  const float step = (e - s) / static_cast<float>(steps - 1);
  return k < steps / 2 ? s + step * static_cast<float>(k) : e - step * static_cast<float>(steps - k - 1);
}

std::vector<double> linspace(double start, double end, int steps) {
  std::vector<double> v;
  for (int k = 0; k < steps; ++k) v.push_back(linspaceAt(start, end, steps, k));
  return v;
}

// (8 - arange(n) / ((n - 1) / span)).round().int(): the bits Posterize keeps at each bin.
std::vector<double> posterizeBins(int top, double span, int n) {
  std::vector<double> v;
  for (int k = 0; k < n; ++k) {
    const float x = static_cast<float>(top) - static_cast<float>(k) / static_cast<float>((n - 1) / span);
    v.push_back(std::nearbyint(x));
  }
  return v;
}

bool signedOp(AugOp op) {
  switch (op) {
    case AugOp::ShearX: case AugOp::ShearY: case AugOp::TranslateX: case AugOp::TranslateY: case AugOp::Rotate:
    case AugOp::Brightness: case AugOp::Color: case AugOp::Contrast: case AugOp::Sharpness:
      return true;
    default:
      return false;
  }
}

// A magnitude drawn as torchvision draws it: the bin's value, negated with probability 1/2 for
// the signed operations (torch.rand(()) <= 0.5).
double signedMagnitude(AugOp op, double value, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  return signedOp(op) && u(rng) <= 0.5 ? -value : value;
}

int randomIndex(std::mt19937_64& rng, std::size_t n) {
  return static_cast<int>(std::uniform_int_distribution<std::size_t>(0, n - 1)(rng));
}

// AutoAugment's ImageNet policy: 25 sub-policies of two (operation, probability, magnitude bin).
struct SubStep {
  AugOp op;
  double p;
  int bin;  // -1: the operation takes no magnitude
};
const std::vector<std::pair<SubStep, SubStep>>& imagenetPolicy() {
  using O = AugOp;
  static const std::vector<std::pair<SubStep, SubStep>> p{
      {{O::Posterize, 0.4, 8}, {O::Rotate, 0.6, 9}},       {{O::Solarize, 0.6, 5}, {O::AutoContrast, 0.6, -1}},
      {{O::Equalize, 0.8, -1}, {O::Equalize, 0.6, -1}},    {{O::Posterize, 0.6, 7}, {O::Posterize, 0.6, 6}},
      {{O::Equalize, 0.4, -1}, {O::Solarize, 0.2, 4}},     {{O::Equalize, 0.4, -1}, {O::Rotate, 0.8, 8}},
      {{O::Solarize, 0.6, 3}, {O::Equalize, 0.6, -1}},     {{O::Posterize, 0.8, 5}, {O::Equalize, 1.0, -1}},
      {{O::Rotate, 0.2, 3}, {O::Solarize, 0.6, 8}},        {{O::Equalize, 0.6, -1}, {O::Posterize, 0.4, 6}},
      {{O::Rotate, 0.8, 8}, {O::Color, 0.4, 0}},           {{O::Rotate, 0.4, 9}, {O::Equalize, 0.6, -1}},
      {{O::Equalize, 0.0, -1}, {O::Equalize, 0.8, -1}},    {{O::Invert, 0.6, -1}, {O::Equalize, 1.0, -1}},
      {{O::Color, 0.6, 4}, {O::Contrast, 1.0, 8}},         {{O::Rotate, 0.8, 8}, {O::Color, 1.0, 2}},
      {{O::Color, 0.8, 8}, {O::Solarize, 0.8, 7}},         {{O::Sharpness, 0.4, 7}, {O::Invert, 0.6, -1}},
      {{O::ShearX, 0.6, 5}, {O::Equalize, 1.0, -1}},       {{O::Color, 0.4, 0}, {O::Equalize, 0.6, -1}},
      {{O::Equalize, 0.4, -1}, {O::Solarize, 0.2, 4}},     {{O::Solarize, 0.6, 5}, {O::AutoContrast, 0.6, -1}},
      {{O::Invert, 0.6, -1}, {O::Equalize, 1.0, -1}},      {{O::Color, 0.6, 4}, {O::Contrast, 1.0, 8}},
      {{O::Equalize, 0.8, -1}, {O::Equalize, 0.6, -1}},
  };
  return p;
}

// Gamma draws normalised: a Dirichlet sample (torch._sample_dirichlet's distribution).
std::vector<double> dirichlet(std::mt19937_64& rng, double alpha, int n) {
  std::gamma_distribution<double> g(alpha, 1.0);
  std::vector<double> v(static_cast<std::size_t>(n));
  double sum = 0;
  for (auto& x : v) sum += x = g(rng);
  for (auto& x : v) x = sum > 0 ? x / sum : 1.0 / n;
  return v;
}

// What a policy draws for one image, in the order applyAugPolicy draws it (no draw depends on the
// pixels): the steps, or AugMix's weights and chains.
struct Drawn {
  std::vector<AugStep> steps;  // every policy but AugMix
  bool mix = false;
  double original = 0;                     // AugMix: the original image's weight
  std::vector<double> weights;             // AugMix: each chain's
  std::vector<std::vector<AugStep>> chains;
};

Drawn drawPolicy(const AugPolicy& p, std::mt19937_64& rng, int height, int width) {
  using K = AugPolicy::Kind;
  Drawn d;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  switch (p.kind) {
    case K::None:
      break;
    case K::TrivialAugmentWide: {
      const auto& space = augSpace(p.kind);
      const AugOp op = space[static_cast<std::size_t>(randomIndex(rng, space.size()))];
      const std::vector<double> mags = augMagnitudes(p.kind, op, p.numBins, height, width);
      d.steps.push_back(
          AugStep{op, mags.empty() ? 0.0 : signedMagnitude(op, mags[static_cast<std::size_t>(randomIndex(rng, mags.size()))], rng)});
      break;
    }
    case K::RandAugment:
      for (int k = 0; k < p.numOps; ++k) {
        const auto& space = augSpace(p.kind);
        const AugOp op = space[static_cast<std::size_t>(randomIndex(rng, space.size()))];
        const std::vector<double> mags = augMagnitudes(p.kind, op, p.numBins, height, width);
        d.steps.push_back(AugStep{op, mags.empty() ? 0.0 : signedMagnitude(op, mags[static_cast<std::size_t>(p.magnitude)], rng)});
      }
      break;
    case K::AutoAugmentImageNet: {
      const auto& policy = imagenetPolicy();
      const auto& [first, second] = policy[static_cast<std::size_t>(randomIndex(rng, policy.size()))];
      for (const SubStep& s : {first, second}) {
        if (!(u(rng) <= s.p)) continue;
        const std::vector<double> mags = augMagnitudes(p.kind, s.op, 10, height, width);
        d.steps.push_back(AugStep{s.op, mags.empty() ? 0.0 : signedMagnitude(s.op, mags[static_cast<std::size_t>(s.bin)], rng)});
      }
      break;
    }
    case K::AugMix: {
      d.mix = true;
      const std::vector<double> m = dirichlet(rng, p.alpha, 2);  // the original's and the mixture's weights
      d.original = m[0];
      d.weights = dirichlet(rng, p.alpha, p.mixtureWidth);
      for (auto& x : d.weights) x *= m[1];
      const std::vector<AugOp>& space = augSpace(AugPolicy::Kind::AugMix);
      for (int chain = 0; chain < p.mixtureWidth; ++chain) {
        std::vector<AugStep> steps;
        const int depth = p.chainDepth > 0 ? p.chainDepth : std::uniform_int_distribution<int>(1, 3)(rng);
        for (int k = 0; k < depth; ++k) {
          const AugOp op = space[static_cast<std::size_t>(randomIndex(rng, space.size()))];
          const std::vector<double> mags = augMagnitudes(AugPolicy::Kind::AugMix, op, 10, height, width);
          double magnitude = 0;
          if (!mags.empty()) magnitude = signedMagnitude(op, mags[static_cast<std::size_t>(randomIndex(rng, p.severity))], rng);
          steps.push_back(AugStep{op, magnitude});
        }
        d.chains.push_back(std::move(steps));
      }
      break;
    }
  }
  return d;
}

// AugMix's chains applied to copies of `img` and mixed with it.
void augMix(const Drawn& d, Interpolation interp, Image8& img) {
  const std::size_t n = img.data.size();
  std::vector<float> mix(n);
  const float m0 = static_cast<float>(d.original);
  for (std::size_t i = 0; i < n; ++i) mix[i] = m0 * img.data[i];
  for (std::size_t chain = 0; chain < d.chains.size(); ++chain) {
    Image8 aug = img;
    for (const AugStep& s : d.chains[chain]) applyAugOp(s.op, s.magnitude, aug, interp);
    const float wk = static_cast<float>(d.weights[chain]);
    for (std::size_t i = 0; i < n; ++i) mix[i] += wk * aug.data[i];
  }
  for (std::size_t i = 0; i < n; ++i) img.data[i] = static_cast<std::uint8_t>(std::clamp(mix[i], 0.0f, 255.0f));
}

// One operation as an instruction for the device, its parameters computed as applyAugOp computes them.
augk::Instr instrOf(AugOp op, double magnitude, int h, int w, Interpolation interp) {
  augk::Instr in;
  switch (op) {
    case AugOp::Identity:
      break;
    case AugOp::ShearX:
    case AugOp::ShearY:
    case AugOp::TranslateX:
    case AugOp::TranslateY:
    case AugOp::Rotate: {
      const Geometry g = geometryOf(op, magnitude, h, w);
      if (g.rot90) {
        in.code = augk::kRot90;
        in.i0 = g.rot90;
      } else if (!g.affine.empty()) {
        in.code = augk::kWarp;
        in.i0 = interp == Interpolation::Nearest ? 1 : 0;
        gridMatrix(g.affine, h, w, in.f);
      }
      break;
    }
    case AugOp::Brightness:
      in.code = augk::kScale;
      in.f[0] = static_cast<float>(1.0 + magnitude);
      break;
    case AugOp::Color:
    case AugOp::Contrast:
      in.code = op == AugOp::Color ? augk::kBlendLuma : augk::kBlendMean;
      in.f[0] = static_cast<float>(1.0 + magnitude);
      in.f[1] = static_cast<float>(1.0 - (1.0 + magnitude));
      break;
    case AugOp::Sharpness:
      in.code = augk::kSharpness;
      in.f[0] = static_cast<float>(1.0 - (1.0 + magnitude));
      break;
    case AugOp::Posterize: {
      const int bits = static_cast<int>(magnitude);
      if (bits >= 8) break;
      in.code = augk::kMask;
      in.i0 = static_cast<std::uint8_t>(((1 << bits) - 1) << (8 - bits));
      break;
    }
    case AugOp::Solarize:
      in.code = augk::kSolarize;
      in.f[0] = static_cast<float>(255.0 * magnitude);
      break;
    case AugOp::AutoContrast:
      in.code = augk::kAutoContrast;
      break;
    case AugOp::Equalize:
      in.code = augk::kEqualize;
      break;
    case AugOp::Invert:
      in.code = augk::kInvert;
      break;
  }
  return in;
}

// One instruction on the host, on the planar RGB image `im` (the sample, or inside an AugMix chain
// the chain's copy of it; the device's kernel does the same with a thread per value).
void runInstr(const augk::Instr& in, Image8& im, const Image8& sample, std::vector<float>& mix, Image8& chain) {
  const int h = im.h, w = im.w;
  const std::int64_t plane = static_cast<std::int64_t>(h) * w;
  switch (in.code) {
    case augk::kIdentity:
      return;
    case augk::kWarp: {
      const Image8 src = im;
      for (int k = 0; k < 3; ++k)
        for (int i = 0; i < h; ++i)
          for (int j = 0; j < w; ++j) im.plane(k)[i * w + j] = augk::warpAt(src.data.data(), h, w, in.f, in.i0, i, j, k);
      return;
    }
    case augk::kRot90: {
      const Image8 src = im;
      for (int k = 0; k < 3; ++k)
        for (int i = 0; i < h; ++i)
          for (int j = 0; j < w; ++j) im.plane(k)[i * w + j] = src.plane(k)[augk::rot90From(h, w, in.i0, i, j)];
      return;
    }
    case augk::kScale:
      for (auto& v : im.data) v = augk::toByte(augk::mul(static_cast<float>(v), in.f[0]));
      return;
    case augk::kBlendLuma: {
      const Image8 src = im;
      for (int k = 0; k < 3; ++k)
        for (std::int64_t at = 0; at < plane; ++at)
          im.plane(k)[at] = augk::blendOf(src.plane(k)[at], augk::lumaAt(src.data.data(), plane, at), in.f[0], in.f[1]);
      return;
    }
    case augk::kBlendMean: {
      std::int64_t sum = 0;
      for (std::int64_t at = 0; at < plane; ++at) sum += static_cast<std::int64_t>(augk::lumaAt(im.data.data(), plane, at));
      const float mean = augk::meanOf(sum, plane);
      for (auto& v : im.data) v = augk::blendOf(v, mean, in.f[0], in.f[1]);
      return;
    }
    case augk::kSharpness: {
      if (h <= 2 || w <= 2) return;
      const Image8 src = im;
      for (int k = 0; k < 3; ++k)
        for (int i = 1; i < h - 1; ++i)
          for (int j = 1; j < w - 1; ++j) im.plane(k)[i * w + j] = augk::sharpnessAt(src.plane(k), w, in.f[0], i, j);
      return;
    }
    case augk::kMask:
      for (auto& v : im.data) v = static_cast<std::uint8_t>(v & in.i0);
      return;
    case augk::kSolarize:
      for (auto& v : im.data)
        if (static_cast<float>(v) >= in.f[0]) v = static_cast<std::uint8_t>(255 - v);
      return;
    case augk::kAutoContrast:
      for (int k = 0; k < 3; ++k) {
        std::uint8_t* p = im.plane(k);
        const int lo = *std::min_element(p, p + plane), hi = *std::max_element(p, p + plane);
        for (std::int64_t at = 0; at < plane; ++at) p[at] = augk::stretchOf(p[at], lo, hi);
      }
      return;
    case augk::kEqualize:
      for (int k = 0; k < 3; ++k) {
        std::uint8_t* p = im.plane(k);
        std::int64_t hist[256] = {0};
        for (std::int64_t at = 0; at < plane; ++at) ++hist[p[at]];
        std::uint8_t lut[256];
        if (!augk::equalizeTable(hist, plane, lut)) continue;
        for (std::int64_t at = 0; at < plane; ++at) p[at] = lut[p[at]];
      }
      return;
    case augk::kInvert:
      for (auto& v : im.data) v = static_cast<std::uint8_t>(255 - v);
      return;
    case augk::kMixBegin:
      mix.resize(sample.data.size());
      for (std::size_t i = 0; i < mix.size(); ++i) mix[i] = augk::mul(in.f[0], static_cast<float>(sample.data[i]));
      return;
    case augk::kChainBegin:
      chain = sample;
      return;
    case augk::kChainEnd:
      for (std::size_t i = 0; i < mix.size(); ++i) mix[i] = augk::add(mix[i], augk::mul(in.f[0], static_cast<float>(chain.data[i])));
      return;
    case augk::kMixEnd:
      return;  // the caller writes the mix back
  }
}

}  // namespace

const char* augOpName(AugOp op) {
  static const char* names[] = {"Identity", "ShearX",    "ShearY",     "TranslateX", "TranslateY",
                                "Rotate",   "Brightness", "Color",     "Contrast",   "Sharpness",
                                "Posterize", "Solarize",  "AutoContrast", "Equalize", "Invert"};
  return names[static_cast<int>(op)];
}

void applyAugOp(AugOp op, double magnitude, Image8& img, Interpolation interp) {
  const std::size_t n = static_cast<std::size_t>(img.h) * img.w;
  switch (op) {
    case AugOp::Identity:
      return;
    case AugOp::ShearX:
    case AugOp::ShearY:
    case AugOp::TranslateX:
    case AugOp::TranslateY:
    case AugOp::Rotate: {
      const Geometry g = geometryOf(op, magnitude, img.h, img.w);
      if (g.rot90) rot90(img, g.rot90);
      else if (!g.affine.empty()) warp(img, g.affine, interp);
      return;
    }
    case AugOp::Brightness: {  // image * (1 + m)
      const float f = static_cast<float>(1.0 + magnitude);
      for (auto& v : img.data) v = toByte(v * f);
      return;
    }
    case AugOp::Color:  // saturation: blended with its luma (a 1-channel image is left as it is)
      if (img.c == 3) blend(img, luma(img), true, 0, 1.0 + magnitude);
      return;
    case AugOp::Contrast: {  // blended with the mean of its luma (of the image itself for 1 channel)
      double sum = 0;
      if (img.c == 3) {
        for (float g : luma(img)) sum += g;
      } else {
        for (auto v : img.data) sum += v;
      }
      return blend(img, {}, false, static_cast<float>(sum / static_cast<double>(n)), 1.0 + magnitude);
    }
    case AugOp::Sharpness:
      return sharpness(img, 1.0 + magnitude);
    case AugOp::Posterize: {
      const int bits = static_cast<int>(magnitude);
      if (bits >= 8) return;
      const auto mask = static_cast<std::uint8_t>(((1 << bits) - 1) << (8 - bits));
      for (auto& v : img.data) v &= mask;
      return;
    }
    case AugOp::Solarize: {  // threshold 255 * m (compared in float32): inverted at or above it
      const float threshold = static_cast<float>(255.0 * magnitude);
      for (auto& v : img.data)
        if (static_cast<float>(v) >= threshold) v = static_cast<std::uint8_t>(255 - v);
      return;
    }
    case AugOp::AutoContrast:
      return autocontrast(img);
    case AugOp::Equalize:
      return equalize(img);
    case AugOp::Invert:
      for (auto& v : img.data) v = static_cast<std::uint8_t>(255 - v);
      return;
  }
}

const std::vector<std::string>& augPolicyNames() {
  static const std::vector<std::string> names{"none", "ta_wide", "ra", "imagenet", "augmix"};
  return names;
}

AugPolicy::Kind augPolicyKind(const std::string& name) {
  using K = AugPolicy::Kind;
  if (name == "none") return K::None;
  if (name == "ta_wide") return K::TrivialAugmentWide;
  if (name == "ra") return K::RandAugment;
  if (name == "imagenet") return K::AutoAugmentImageNet;
  if (name == "augmix") return K::AugMix;
  throw std::invalid_argument("unknown augmentation policy '" + name + "'");
}

const std::vector<AugOp>& augSpace(AugPolicy::Kind kind) {
  using O = AugOp;
  static const std::vector<AugOp> wide{O::Identity,   O::ShearX, O::ShearY,    O::TranslateX, O::TranslateY,
                                       O::Rotate,     O::Brightness, O::Color, O::Contrast,   O::Sharpness,
                                       O::Posterize,  O::Solarize, O::AutoContrast, O::Equalize};
  static const std::vector<AugOp> autoAugment{O::ShearX,    O::ShearY,   O::TranslateX, O::TranslateY, O::Rotate,
                                              O::Brightness, O::Color,   O::Contrast,   O::Sharpness,  O::Posterize,
                                              O::Solarize,  O::AutoContrast, O::Equalize, O::Invert};
  static const std::vector<AugOp> augmix{O::ShearX,   O::ShearY,   O::TranslateX,   O::TranslateY, O::Rotate,
                                         O::Posterize, O::Solarize, O::AutoContrast, O::Equalize,  O::Brightness,
                                         O::Color,    O::Contrast, O::Sharpness};
  static const std::vector<AugOp> none;
  switch (kind) {
    case AugPolicy::Kind::TrivialAugmentWide:
    case AugPolicy::Kind::RandAugment:
      return wide;
    case AugPolicy::Kind::AutoAugmentImageNet:
      return autoAugment;
    case AugPolicy::Kind::AugMix:
      return augmix;
    case AugPolicy::Kind::None:
      break;
  }
  return none;
}

std::vector<double> augMagnitudes(AugPolicy::Kind kind, AugOp op, int bins, int height, int width) {
  using O = AugOp;
  const bool wide = kind == AugPolicy::Kind::TrivialAugmentWide;
  const bool augmix = kind == AugPolicy::Kind::AugMix;
  switch (op) {
    case O::ShearX: case O::ShearY: return linspace(0.0, wide ? 0.99 : 0.3, bins);
    case O::TranslateX: return linspace(0.0, wide ? 32.0 : augmix ? width / 3.0 : 150.0 / 331.0 * width, bins);
    case O::TranslateY: return linspace(0.0, wide ? 32.0 : augmix ? height / 3.0 : 150.0 / 331.0 * height, bins);
    case O::Rotate: return linspace(0.0, wide ? 135.0 : 30.0, bins);
    case O::Brightness: case O::Color: case O::Contrast: case O::Sharpness: return linspace(0.0, wide ? 0.99 : 0.9, bins);
    case O::Posterize: return posterizeBins(augmix ? 4 : 8, wide ? 6.0 : 4.0, bins);
    case O::Solarize: return linspace(1.0, 0.0, bins);
    default: return {};
  }
}

std::vector<AugStep> applyAugPolicy(const AugPolicy& p, std::mt19937_64& rng, Image8& img) {
  const Drawn d = drawPolicy(p, rng, img.h, img.w);
  if (d.mix) {
    augMix(d, p.interpolation, img);
    std::vector<AugStep> steps;
    for (const auto& chain : d.chains) steps.insert(steps.end(), chain.begin(), chain.end());
    return steps;
  }
  for (const AugStep& s : d.steps) applyAugOp(s.op, s.magnitude, img, p.interpolation);
  return d.steps;
}

std::vector<augk::Instr> augProgram(const AugPolicy& p, std::mt19937_64& rng, int height, int width) {
  const Drawn d = drawPolicy(p, rng, height, width);
  std::vector<augk::Instr> program;
  auto emit = [&](const AugStep& s) {
    const augk::Instr in = instrOf(s.op, s.magnitude, height, width, p.interpolation);
    if (in.code != augk::kIdentity) program.push_back(in);
  };
  if (!d.mix) {
    for (const AugStep& s : d.steps) emit(s);
    return program;
  }
  augk::Instr begin;
  begin.code = augk::kMixBegin;
  begin.f[0] = static_cast<float>(d.original);
  program.push_back(begin);
  for (std::size_t chain = 0; chain < d.chains.size(); ++chain) {
    augk::Instr b;
    b.code = augk::kChainBegin;
    program.push_back(b);
    for (const AugStep& s : d.chains[chain]) emit(s);
    augk::Instr e;
    e.code = augk::kChainEnd;
    e.f[0] = static_cast<float>(d.weights[chain]);
    program.push_back(e);
  }
  augk::Instr end;
  end.code = augk::kMixEnd;
  program.push_back(end);
  return program;
}

void runAugProgram(const std::vector<augk::Instr>& program, Image8& img) {
  if (img.c != 3) throw std::invalid_argument("runAugProgram: the device's program takes RGB images");
  std::vector<float> mix;
  Image8 chain;
  bool inChain = false;
  for (const augk::Instr& in : program) {
    runInstr(in, inChain ? chain : img, img, mix, chain);
    if (in.code == augk::kChainBegin) inChain = true;
    if (in.code == augk::kChainEnd) inChain = false;
    if (in.code == augk::kMixEnd)
      for (std::size_t i = 0; i < mix.size(); ++i) img.data[i] = static_cast<std::uint8_t>(augk::clamp255(mix[i]));
  }
}

bool eraseRandomRectangle(std::mt19937_64& rng, double p, float* img, int c, int h, int w) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (u(rng) >= p) return false;
  const double area = static_cast<double>(h) * w;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase = area * (0.02 + u(rng) * (0.33 - 0.02));
    const double aspect = std::exp(std::log(0.3) + u(rng) * (std::log(3.3) - std::log(0.3)));
    const auto eh = static_cast<std::int64_t>(std::llround(std::sqrt(erase * aspect)));
    const auto ew = static_cast<std::int64_t>(std::llround(std::sqrt(erase / aspect)));
    if (eh < 1 || ew < 1 || eh >= h || ew >= w) continue;
    const std::int64_t top = std::uniform_int_distribution<std::int64_t>(0, h - eh)(rng);
    const std::int64_t left = std::uniform_int_distribution<std::int64_t>(0, w - ew)(rng);
    for (int k = 0; k < c; ++k)
      for (std::int64_t r = top; r < top + eh; ++r)
        for (std::int64_t col = left; col < left + ew; ++col) img[(static_cast<std::int64_t>(k) * h + r) * w + col] = 0.0f;
    return true;
  }
  return false;
}

}  // namespace exprun
