// Purpose: JPEG decoding on the device (data.decode: gpu), to take the input pipeline's decoding off
// the CPU as DALI does. The loader's workers read each file, parse its header, draw its crop and
// compute the crop's resampling tables; the feed then decodes the batch's files with nvJPEG's
// batched decoder into RGB on the device, and kernels apply the tables and the mirror.
// Rule: the crop is drawn from (seed, epoch, sample) exactly as the CPU path draws it, and the
// resampling is the CPU path's own arithmetic (plugins/data/image/ResampleKernel.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runner/api/Data.h"
#include "plugins/data/image/AugmentKernel.h"
#include "plugins/data/image/Image.h"

namespace exprun {

// Why JPEGs cannot be decoded on a CUDA device by this process ("" when they can): the build, or
// the library not found. Loads nvJPEG the first time, at run time (dlopen): libnvjpeg.so.13 from
// the library path, the torch wheel's nvidia/cu13/lib, or torchvision's bundled copy;
// EXPRUN_NVJPEG names another.
std::string whyNoGpuJpeg();
// Why `device` cannot run the crop's resampling and augmentation kernels: its compute capability is
// outside the architectures this exprun was built for ("" when it can, or when this machine has no
// CUDA device to ask: the device work then runs on the host).
std::string whyNoKernelsOn(const torch::Device& device);

// Whether nvJPEG decodes on `device`'s hardware JPEG engines (those of A100/H100/H200, where the
// handle gets them; else nvJPEG's CUDA decoder runs) ("" when it does, else why not): makes
// the process's decoder there (data.decode: auto wants the engines; nvJPEG's CUDA decoder does the
// Huffman decoding on the calling thread, the CPU work this path exists to move).
std::string whyNoJpegEngines(const torch::Device& device);

// Images decoded on the host instead of the device so far (files nvJPEG's batched decoder refused),
// this process.
std::int64_t gpuJpegHostFallbacks();

// Pixels nvJPEG decoded on the device so far, this process, and the pixels of the images they came
// from: their ratio is what region-of-interest decoding saved (1: none).
struct GpuJpegPixels {
  std::int64_t decoded = 0, whole = 0;
};
GpuJpegPixels gpuJpegPixels();

// A rectangle of an image's pixels: [x0, x0 + width) x [y0, y0 + height).
struct DecodeRegion {
  int x0 = 0, y0 = 0, width = 0, height = 0;
};

// The region nvJPEG decodes for a crop read by `ax` x `ay` (cropAxes) of a width x height image
// (data.decode_roi): the pixels the tables read, widened by kRegionMargin on every side and then to
// multiples of kRegionMargin, within the image. The margin keeps the crop's pixels one whole MCU
// (at most 16 x 16 in the sampling factors the batched decoder takes) from the region's edges, so
// the decoder's chroma interpolation sees there the same neighbours as in a whole decode.
constexpr int kRegionMargin = 16;
DecodeRegion decodeRegion(const ResampleAxis& ax, const ResampleAxis& ay, int width, int height);

// One image of a batch for the device: its file, where the crop goes and how it is resampled.
struct DeviceJpeg {
  std::vector<std::uint8_t> file;
  std::string name;  // for errors
  int width = 0, height = 0;
  ResampleAxis ax, ay;  // the crop's tables at full resolution (cropAxes)
  // The part of the image decoded where nvJPEG decodes regions (the hardware decoder); the whole
  // image where it does not, or with data.decode_roi off (width 0: the whole image).
  DecodeRegion region;
  bool flip = false;
  // The augmentation policy's program for the crop (augProgram; empty: none), run after the
  // resampling on the batch row.
  std::vector<augk::Instr> program;
  std::int64_t row = 0;  // of the batch
};

// Device memory DeviceJpegDecode::run allocates for `im` (through PyTorch's allocator) with an output of
// outW x outH, at most: the whole decoded image (RGB, 8 bits; a region takes less), the
// horizontal pass's rows (the crop's rows x outW x 3 floats), and with an augmentation program its
// scratch copy of the row (AugMix: a chain image and the float mixture too).
std::int64_t deviceJpegBytes(const DeviceJpeg& im, int outW, int outH);

// A batch's device-decoded images (a DeviceWork): on CUDA nvJPEG and the resampling kernels, on
// the CPU the same steps on the host (libjpeg's full decode cut to each image's region,
// ResampleKernel.h) — what tests compare with the CPU pipeline. Files nvJPEG's batched decoder does
// not take (progressive, CMYK, 12-bit; JpegFacts::whyNotGpu) are decoded by the loader's workers;
// a batch nvJPEG refuses is decoded on the host, image by image, and counted
// (gpuJpegHostFallbacks). `onHost(i, planes)` decodes image i the CPU pipeline's way into 8-bit
// planes and returns the label of the sample it used (a file nvJPEG refused; it throws or
// substitutes the next sample as the plugin's on_bad_image says).
class DeviceJpegDecode final : public DeviceWork {
 public:
  using HostDecode = std::function<std::int64_t(std::size_t, std::uint8_t*)>;
  DeviceJpegDecode(std::vector<DeviceJpeg> images, std::vector<std::int64_t> labels, int outWidth, int outHeight,
           HostDecode onHost);
  void run(torch::Tensor& x, torch::Tensor& y) override;
  void moveRows(const std::vector<std::int64_t>& rows) override;
  std::size_t size() const { return images_.size(); }
  // What run() allocates on the device for this batch, at most (deviceJpegBytes).
  std::int64_t deviceBytes() const;

 private:
  void runOnHost(torch::Tensor& x);
  // Image i through onHost_, its row (and label, when another sample replaced it) copied in
  // without waiting (page-locked).
  void hostDecodeInto(std::size_t i, torch::Tensor& x, torch::Tensor& y);
  std::vector<DeviceJpeg> images_;
  std::vector<std::int64_t> labels_;  // each image's label as the batch has it
  int outW_, outH_;
  HostDecode onHost_;
};

// The augmentation programs (plugins/data/image/AugmentKernel.h) run on the device, in place, on rows
// `rows` of `x` (uint8 [N, 3, H, W] on a CUDA device), a block per row, on the current stream
// (what DeviceJpegDecode::run does after the resampling; tests compare it with runAugProgram).
void augmentOnDevice(torch::Tensor& x, const std::vector<std::int64_t>& rows,
                   const std::vector<const std::vector<augk::Instr>*>& programs);

// The host version of the device's resampling: crop `rgb` (RGB interleaved: region `at` of the
// image, at.width x at.height) by `ax`/`ay` (image coordinates) into 8-bit planes (3 x outH x
// outW), mirrored if `flip`.
void resampleCropHost(const std::uint8_t* rgb, const DecodeRegion& at, const ResampleAxis& ax, const ResampleAxis& ay,
                      bool flip, int outW, int outH, std::uint8_t* planes);

}  // namespace exprun
