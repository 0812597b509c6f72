// Purpose: image decoding and the crop-resize-flip-normalise transform of the imagefolder data
// plugin, in one pass and without torch: JPEG through libjpeg-turbo (only the rows and the
// iMCU-aligned columns of the crop are decoded, and DCT-domain downscaling by M/8 is used when the
// crop is larger than the output), PNG through libpng. The crop is resampled with a bilinear
// (triangle) filter that widens when downscaling, as Pillow's BILINEAR resize does, and written
// as normalised float planes (CHW).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace exprun {

class ImageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ImageFormat { Jpeg, Png, Unknown };
ImageFormat detectImageFormat(const std::uint8_t* data, std::size_t size);

// A region of the source image in pixel coordinates: [x0, x1) x [y0, y1), fractional allowed.
struct CropBox {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  // The resampling filter reads only pixels inside the box (crop, then resize: RandomResizedCrop),
  // or also the pixels around it (resize, then crop: Resize + CenterCrop).
  bool clampToBox = true;
  double width() const { return x1 - x0; }
  double height() const { return y1 - y0; }
};

struct TransformSpec {
  int outWidth = 224, outHeight = 224;
  bool flip = false;             // mirror horizontally
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
  bool dctScaling = true;        // JPEG: let the decoder downscale by M/8 while keeping >= output size
  // When set, the crop is written here as 8-bit planes (rounded half up, as Pillow's 8-bit resize
  // rounds) instead of normalised into `out` (an augmentation policy works on them, then they are
  // normalised: normaliseBytes).
  std::uint8_t* bytesOut = nullptr;
};

struct DecodeInfo {
  int width = 0, height = 0;     // of the stored image
  int scaleNum = 8;              // JPEG DCT scaling used: scaleNum/8
  int decodedRows = 0, decodedCols = 0;  // of the (scaled) image actually decoded
};

// Decodes `data` (named `name` in errors), asks `chooseBox(width, height)` for the crop, and writes
// the transformed crop to `out` (3 * outHeight * outWidth floats, channel planes): out = (v/255 -
// mean) / std. Greyscale and CMYK JPEGs and every PNG colour type become RGB. Throws ImageError
// naming the file for an unsupported format, a corrupt or truncated image.
DecodeInfo decodeTransformed(const std::uint8_t* data, std::size_t size, const std::string& name,
                             const std::function<CropBox(int, int)>& chooseBox, const TransformSpec& spec,
                             float* out);

// Resizes `c` float planes of sh x sw to dh x dw with the bilinear filter that widens when
// downscaling (Pillow's BILINEAR resize, torchvision's Resize(antialias=True)); no clamping.
void resizePlanes(const float* src, int c, int sh, int sw, float* dst, int dh, int dw);

// 8-bit planes (3 x outHeight x outWidth) normalised into `out` as decodeTransformed writes them.
void normaliseBytes(const std::uint8_t* planes, const TransformSpec& spec, float* out);

// What a JPEG's header says about where it can be decoded: nvJPEG's hardware decoder (A100, H100,
// H200) takes baseline files of one scan, 8 bits, greyscale or YCbCr with luma sampled 1 or 2 times
// the chroma's (4:4:4, 4:2:2, 4:2:0, 4:4:0); progressive, CMYK/YCCK, 12-bit and 4:1:1 files are
// decoded on the CPU (data.decode: gpu).
struct JpegFacts {
  int width = 0, height = 0, components = 0;
  bool progressive = false, eightBit = true, greyOrYcbcr = true, commonSampling = true, complete = true;
  bool interleaved = true;  // one scan holds every component
  // Empty when nvJPEG's batched decoder takes the file, else why not.
  std::string whyNotGpu() const;
};
// The header of JPEG `data` (named `name` in errors); throws ImageError for a corrupt header.
// `complete`: the file ends with its end-of-image marker.
JpegFacts readJpegFacts(const std::uint8_t* data, std::size_t size, const std::string& name);

// One axis of the crop's resampling (Pillow's bilinear filter, widened when downscaling): output o
// reads inputs [first[o], first[o] + count[o]) with weights w[o * taps + k], input coordinates
// absolute; [lo, hi) is the input range all outputs read.
struct ResampleAxis {
  std::vector<std::int32_t> first, count;
  std::vector<float> w;
  std::int32_t taps = 0;
  std::int32_t lo = 0, hi = 0;
};
// The axes that resample crop `box` of a `width` x `height` image, decoded whole (no DCT scaling),
// to outW x outH: what decodeTransformed computes with dctScaling off, for the GPU path to apply
// to its own decode (plugins/data/image/ResampleKernel.h).
void cropAxes(const CropBox& box, int width, int height, int outW, int outH, ResampleAxis& ax, ResampleAxis& ay);

// JPEG `data` decoded whole at full resolution into RGB interleaved `rgb` (width x height x 3);
// greyscale becomes RGB. Throws ImageError naming the file for a corrupt or truncated one.
void decodeJpegRgb(const std::uint8_t* data, std::size_t size, const std::string& name, std::vector<std::uint8_t>& rgb,
                   int* width, int* height);

// The whole file as bytes into `buf`; throws ImageError naming the file.
void readImageFile(const std::string& path, std::vector<std::uint8_t>& buf);

// torchvision's RandomResizedCrop.get_params with uniform draws u() in [0, 1): up to ten tries of
// area fraction in [scaleMin, scaleMax] and log-uniform aspect ratio in [ratioMin, ratioMax], else
// the centre crop with the ratio clamped. Integer box.
CropBox randomResizedCrop(int width, int height, double scaleMin, double scaleMax, double ratioMin, double ratioMax,
                          const std::function<double()>& u);

// torchvision's Resize(resize) (shorter side to `resize`) followed by CenterCrop(size), expressed
// as the box of the original image that ends up in the output.
CropBox resizeCenterCrop(int width, int height, int resize, int size);

}  // namespace exprun
