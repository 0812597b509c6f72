// Purpose: per-sample augmentation policies on 8-bit images, in the C++ image pipeline of the data
// plugins (imagefolder, fashion_mnist): TrivialAugmentWide, RandAugment (N ops at magnitude M), the
// AutoAugment ImageNet policy and AugMix, with torchvision.transforms.v2's operation set, magnitude
// ranges and bins, each operation computed as torchvision's tensor kernels compute it on a uint8
// image; and random erasing on the normalised image (torchvision's RandomErasing with value 0).
// Rule: random choices come from the sample's own generator (seeded from (seed, epoch, sample)), so
// they depend on nothing else. Images are planar: `c` planes (1 or 3) of h x w bytes. Torch-free.
#pragma once

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "plugins/data/image/AugmentKernel.h"

namespace exprun {

enum class AugOp {
  Identity, ShearX, ShearY, TranslateX, TranslateY, Rotate, Brightness, Color, Contrast, Sharpness,
  Posterize, Solarize, AutoContrast, Equalize, Invert
};
const char* augOpName(AugOp op);  // torchvision's name: "ShearX", ...

enum class Interpolation { Nearest, Bilinear };

// A planar 8-bit image.
struct Image8 {
  int c = 3, h = 0, w = 0;
  std::vector<std::uint8_t> data;  // c * h * w
  std::uint8_t* plane(int k) { return data.data() + static_cast<std::size_t>(k) * h * w; }
  const std::uint8_t* plane(int k) const { return data.data() + static_cast<std::size_t>(k) * h * w; }
};

// One operation at `magnitude`, as torchvision's _AutoAugmentBase._apply_image_or_video_transform
// applies it (shears about the top-left corner, translations in whole pixels, rotations about the
// centre, Brightness / Color / Contrast / Sharpness by a factor 1 + magnitude, Posterize to
// int(magnitude) bits, Solarize above 255 * magnitude): affine warps by grid sampling with zero
// fill, the colour operations in float32, their results truncated to 8 bits as `.to(torch.uint8)`
// truncates.
void applyAugOp(AugOp op, double magnitude, Image8& img, Interpolation interpolation);

// What a policy draws for one image: (operation, magnitude) in the order applied.
struct AugStep {
  AugOp op;
  double magnitude;
};

struct AugPolicy {
  enum class Kind { None, TrivialAugmentWide, RandAugment, AutoAugmentImageNet, AugMix };
  Kind kind = Kind::None;
  int numOps = 2;           // RandAugment's N
  int magnitude = 9;        // RandAugment's M, a bin of numBins
  int numBins = 31;         // TrivialAugmentWide's and RandAugment's magnitude bins
  int severity = 3;         // AugMix: magnitudes from the first `severity` of 10 bins
  int mixtureWidth = 3;     // AugMix: chains mixed
  int chainDepth = -1;      // AugMix: operations per chain (-1: 1 to 3 at random)
  double alpha = 1.0;       // AugMix: Dirichlet / Beta parameter
  Interpolation interpolation = Interpolation::Bilinear;
  bool active() const { return kind != Kind::None; }
};

// The policy names a data plugin's `auto_augment` takes (torchvision's reference script's):
// none, ta_wide, ra, imagenet, augmix.
const std::vector<std::string>& augPolicyNames();
AugPolicy::Kind augPolicyKind(const std::string& name);  // throws std::invalid_argument

// The magnitude bins of an operation in a policy's augmentation space, torchvision's (its
// linspace values in float32); empty for an operation without a magnitude.
std::vector<double> augMagnitudes(AugPolicy::Kind kind, AugOp op, int numBins, int height, int width);
// The operations of a policy's augmentation space, in torchvision's order.
const std::vector<AugOp>& augSpace(AugPolicy::Kind kind);

// Draws and applies the policy to `img` (in place) with the sample's generator. Returns the steps
// it applied (AugMix: those of every chain).
std::vector<AugStep> applyAugPolicy(const AugPolicy& policy, std::mt19937_64& rng, Image8& img);

// The same draws as applyAugPolicy's for an image of height x width, as a program for the device
// (plugins/data/image/AugmentKernel.h): each operation an instruction with its parameters computed here;
// AugMix's mixing as instructions around its chains. Identity steps are left out.
std::vector<augk::Instr> augProgram(const AugPolicy& policy, std::mt19937_64& rng, int height, int width);
// The program run on the host, with the device's arithmetic (what tests compare with
// applyAugPolicy; the device's kernel runs the same instruction functions). RGB images only.
void runAugProgram(const std::vector<augk::Instr>& program, Image8& img);

// torchvision's RandomErasing(p, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0) on a normalised
// planar float image: with probability p, up to 10 tries for a rectangle that fits, set to 0 in
// every channel. Returns whether it erased.
bool eraseRandomRectangle(std::mt19937_64& rng, double p, float* img, int c, int h, int w);

}  // namespace exprun
