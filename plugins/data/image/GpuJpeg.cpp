// Purpose: JPEG decoding on the device (GpuJpeg.h).
#include "plugins/data/image/GpuJpeg.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "plugins/data/image/Augment.h"
#include "plugins/data/image/ResampleKernel.h"
#include "runner/util/Log.h"

#if defined(EXPRUN_WITH_NVJPEG)
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <dlfcn.h>
#include <nvjpeg.h>

#include "plugins/data/image/GpuJpegKernels.h"
#include "runner/nn/CudaArch.h"
#endif

namespace exprun {
namespace {

std::atomic<std::int64_t> hostFallbacks{0};
std::atomic<std::int64_t> decodedPixels{0}, wholePixels{0};

DecodeRegion wholeImage(const DeviceJpeg& im) { return {0, 0, im.width, im.height}; }
// The region to decode of `im` (width 0: the whole image).
DecodeRegion regionOf(const DeviceJpeg& im) { return im.region.width > 0 ? im.region : wholeImage(im); }
bool isWhole(const DecodeRegion& r, const DeviceJpeg& im) {
  return r.x0 == 0 && r.y0 == 0 && r.width == im.width && r.height == im.height;
}

resample::AxisView view(const ResampleAxis& a) { return {a.first.data(), a.count.data(), a.w.data(), a.taps}; }

#if defined(EXPRUN_WITH_NVJPEG)
// nvJPEG's entry points, loaded once.
struct NvJpeg {
  void* lib = nullptr;
  std::string why;  // "" when loaded
  decltype(&::nvjpegCreateEx) createEx = nullptr;
  decltype(&::nvjpegCreateSimple) createSimple = nullptr;
  decltype(&::nvjpegJpegStateCreate) stateCreate = nullptr;
  decltype(&::nvjpegDecodeBatchedInitialize) batchedInit = nullptr;
  decltype(&::nvjpegDecodeBatched) batched = nullptr;
  decltype(&::nvjpegJpegStreamCreate) streamCreate = nullptr;
  decltype(&::nvjpegJpegStreamParse) parse = nullptr;
  decltype(&::nvjpegDecodeBatchedSupported) batchedSupported = nullptr;
  decltype(&::nvjpegSetDeviceMemoryPadding) devicePadding = nullptr;
  decltype(&::nvjpegSetPinnedMemoryPadding) pinnedPadding = nullptr;
  // Region-of-interest decoding (the hardware backend's batched decoder); optional.
  decltype(&::nvjpegDecodeBatchedEx) batchedEx = nullptr;
  decltype(&::nvjpegDecodeBatchedSupportedEx) batchedSupportedEx = nullptr;
  decltype(&::nvjpegDecodeParamsCreate) paramsCreate = nullptr;
  decltype(&::nvjpegDecodeParamsSetROI) paramsSetRoi = nullptr;
  decltype(&::nvjpegDecodeParamsSetOutputFormat) paramsSetFormat = nullptr;
  bool regions() const { return batchedEx && batchedSupportedEx && paramsCreate && paramsSetRoi && paramsSetFormat; }
};

// Where libnvjpeg.so.13 may be: EXPRUN_NVJPEG, the library path, beside the torch wheel's CUDA
// libraries (nvidia/cu13/lib, pip's nvidia-nvjpeg), torchvision's bundled copy.
std::vector<std::string> nvjpegCandidates() {
  std::vector<std::string> c;
  if (const char* env = std::getenv("EXPRUN_NVJPEG")) c.emplace_back(env);
  c.emplace_back("libnvjpeg.so.13");
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&c10::cuda::device_count), &info) && info.dli_fname) {
    namespace fs = std::filesystem;
    const fs::path site = fs::path(info.dli_fname).parent_path().parent_path().parent_path();  // torch/lib -> site-packages
    c.push_back((site / "nvidia" / "cu13" / "lib" / "libnvjpeg.so.13").string());
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(site / "torchvision.libs", ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("libnvjpeg", 0) == 0 && n.find(".so.13") != std::string::npos) c.push_back(e.path().string());
    }
  }
  return c;
}

const NvJpeg& nvjpeg() {
  static const NvJpeg lib = [] {
    NvJpeg n;
    std::string tried;
    for (const std::string& path : nvjpegCandidates()) {
      n.lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (n.lib) break;
      tried += (tried.empty() ? "" : ", ") + path;
    }
    if (!n.lib) {
      n.why = "nvJPEG (libnvjpeg.so.13) not found (tried " + tried + "; pip install nvidia-nvjpeg, or set EXPRUN_NVJPEG)";
      return n;
    }
    auto load = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(n.lib, name));
      if (!fn && n.why.empty()) n.why = std::string("nvJPEG lacks ") + name;
    };
    load(n.createEx, "nvjpegCreateEx");
    load(n.createSimple, "nvjpegCreateSimple");
    load(n.stateCreate, "nvjpegJpegStateCreate");
    load(n.batchedInit, "nvjpegDecodeBatchedInitialize");
    load(n.batched, "nvjpegDecodeBatched");
    load(n.streamCreate, "nvjpegJpegStreamCreate");
    load(n.parse, "nvjpegJpegStreamParse");
    load(n.batchedSupported, "nvjpegDecodeBatchedSupported");
    load(n.devicePadding, "nvjpegSetDeviceMemoryPadding");
    load(n.pinnedPadding, "nvjpegSetPinnedMemoryPadding");
    auto optional = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(n.lib, name));
    };
    optional(n.batchedEx, "nvjpegDecodeBatchedEx");
    optional(n.batchedSupportedEx, "nvjpegDecodeBatchedSupportedEx");
    optional(n.paramsCreate, "nvjpegDecodeParamsCreate");
    optional(n.paramsSetRoi, "nvjpegDecodeParamsSetROI");
    optional(n.paramsSetFormat, "nvjpegDecodeParamsSetOutputFormat");
    return n;
  }();
  return lib;
}

// nvJPEG's buffers from PyTorch's caching allocators instead of its default cudaMalloc/cudaFree
// (each of which waits for the whole device): device memory from the CUDA caching allocator on the
// current stream, page-locked memory from the caching host allocator, a freed page-locked block
// kept from reuse until the current stream is past it.
int deviceAlloc(void** p, std::size_t size) {
  try {
    *p = c10::cuda::CUDACachingAllocator::raw_alloc(size);
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}
int deviceFree(void* p) {
  c10::cuda::CUDACachingAllocator::raw_delete(p);
  return 0;
}
struct PinnedBlocks {
  std::mutex mu;
  std::unordered_map<void*, at::DataPtr> held;
};
PinnedBlocks& pinnedBlocks() {
  static PinnedBlocks b;
  return b;
}
int pinnedAlloc(void** p, std::size_t size, unsigned int /*flags*/) {
  try {
    at::DataPtr block = at::getHostAllocator(at::kCUDA)->allocate(size);
    *p = block.get();
    std::lock_guard<std::mutex> lock(pinnedBlocks().mu);
    pinnedBlocks().held.emplace(*p, std::move(block));
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}
int pinnedFree(void* p) {
  PinnedBlocks& b = pinnedBlocks();
  std::lock_guard<std::mutex> lock(b.mu);
  const auto it = b.held.find(p);
  if (it == b.held.end()) return 1;
  at::getHostAllocator(at::kCUDA)->record_event(p, it->second.get_context(), c10::cuda::getCurrentCUDAStream().unwrap());
  b.held.erase(it);
  return 0;
}
nvjpegDevAllocator_t kDeviceAllocator{&deviceAlloc, &deviceFree};
nvjpegPinnedAllocator_t kPinnedAllocator{&pinnedAlloc, &pinnedFree};

// The process's decoder: one handle (the hardware backend where the device has JPEG engines, else
// nvJPEG's default), one state and one header parser, made on the device that is current when it
// is opened (nvJPEG binds them to it); used from the feed's thread (a mutex keeps it to one at a
// time). Chroma is upsampled by interpolation, as libjpeg's default does. Its buffers grow with
// 16 MB of padding, so that they are not made anew for every larger image. Batches' files are
// kept until the device has used them (an event per batch). The hardware decoder decodes regions
// (nvjpegDecodeBatchedEx, a parameter set per image of the batch) unless nvJPEG lacks the calls or
// refused them once.
struct Decoder {
  std::mutex mu;
  nvjpegHandle_t handle = nullptr;
  nvjpegJpegState_t state = nullptr;
  nvjpegJpegStream_t parsed = nullptr;
  int batch = 0;
  bool hardware = false;
  std::string failed;     // why it could not be opened ("" when it could)
  std::string noRegions;  // why regions are not decoded ("" when they are)
  std::vector<nvjpegDecodeParams_t> params;
  std::deque<std::pair<at::cuda::CUDAEvent, std::shared_ptr<void>>> inUse;

  bool open() {
    if (state || !failed.empty()) return failed.empty();
    const NvJpeg& n = nvjpeg();
    if (!n.why.empty()) {
      failed = n.why;
      return false;
    }
    const unsigned flags = NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION;
    hardware = n.createEx(NVJPEG_BACKEND_HARDWARE, &kDeviceAllocator, &kPinnedAllocator, flags, &handle) ==
               NVJPEG_STATUS_SUCCESS;
    if (!hardware &&
        n.createEx(NVJPEG_BACKEND_DEFAULT, &kDeviceAllocator, &kPinnedAllocator, flags, &handle) != NVJPEG_STATUS_SUCCESS &&
        n.createSimple(&handle) != NVJPEG_STATUS_SUCCESS) {
      failed = "nvJPEG's handle could not be made on this device";
      return false;
    }
    if (n.stateCreate(handle, &state) != NVJPEG_STATUS_SUCCESS || n.streamCreate(handle, &parsed) != NVJPEG_STATUS_SUCCESS) {
      state = nullptr;
      failed = "nvJPEG's decoder state could not be made";
      return false;
    }
    n.devicePadding(16 << 20, handle);
    n.pinnedPadding(16 << 20, handle);
    if (!hardware) noRegions = "nvJPEG's CUDA decoder decodes whole images";
    else if (!n.regions()) noRegions = "this nvJPEG lacks nvjpegDecodeBatchedEx";
    log::info(std::string("data.decode: gpu: nvJPEG with ") +
              (hardware ? "the device's hardware JPEG decoder" : "its CUDA decoder (no hardware JPEG decoder found)") +
              (noRegions.empty() ? ", decoding the crops' regions" : ""));
    return true;
  }
  // The parameter set of the batch's k-th decoded image, for region `r` of its image (null: the
  // whole image, (0, 0, -1, -1)); `*region` says whether it holds the region (a region nvJPEG
  // refuses to set leaves the whole image). Null where regions are not decoded.
  nvjpegDecodeParams_t regionParams(std::size_t k, const DecodeRegion* r, bool* region) {
    *region = false;
    if (!noRegions.empty()) return nullptr;
    const NvJpeg& n = nvjpeg();
    while (params.size() <= k) {
      nvjpegDecodeParams_t p = nullptr;
      if (n.paramsCreate(handle, &p) != NVJPEG_STATUS_SUCCESS ||
          n.paramsSetFormat(p, NVJPEG_OUTPUT_RGBI) != NVJPEG_STATUS_SUCCESS) {
        refuseRegions("nvjpegDecodeParamsCreate failed");
        return nullptr;
      }
      params.push_back(p);
    }
    if (r && n.paramsSetRoi(params[k], r->x0, r->y0, r->width, r->height) == NVJPEG_STATUS_SUCCESS) {
      *region = true;
      return params[k];
    }
    if (n.paramsSetRoi(params[k], 0, 0, -1, -1) == NVJPEG_STATUS_SUCCESS) return params[k];
    refuseRegions("nvjpegDecodeParamsSetROI failed");
    return nullptr;
  }
  void refuseRegions(const std::string& why) {
    noRegions = why;
    log::warn("data.decode: gpu: nvJPEG does not decode regions here (" + why + "): whole images from now on");
  }
  // Whether the batched decoder takes `file` (the hardware decoder's own check of the header), with
  // `p`'s region where it is given.
  bool batchedDecoderTakes(const std::vector<std::uint8_t>& file, nvjpegDecodeParams_t p) {
    const NvJpeg& n = nvjpeg();
    int unsupported = 1;
    if (n.parse(handle, file.data(), file.size(), /*save_metadata=*/0, /*save_stream=*/0, parsed) != NVJPEG_STATUS_SUCCESS)
      return false;
    if (!hardware) return true;
    const nvjpegStatus_t st = p ? n.batchedSupportedEx(handle, parsed, p, &unsupported)
                                : n.batchedSupported(handle, parsed, &unsupported);
    return st == NVJPEG_STATUS_SUCCESS && unsupported == 0;
  }
  // Waits until the device is past every batch decoded so far and `stream`'s work: before the
  // decoder state is initialised for another batch size (initialising may free buffers that a
  // batch still decoding reads). Rare: a batch size changes at an epoch's end or after a refusal.
  void waitForQueued(const c10::cuda::CUDAStream& stream) {
    for (auto& [event, hold] : inUse) event.synchronize();
    inUse.clear();
    stream.synchronize();
  }
  // Keeps `hold` until the work queued on `stream` so far is done.
  void keepUntilDone(std::shared_ptr<void> hold, const c10::cuda::CUDAStream& stream) {
    while (!inUse.empty() && inUse.front().first.query()) inUse.pop_front();
    inUse.emplace_back(at::cuda::CUDAEvent(), std::move(hold));
    inUse.back().first.record(stream);
  }
};
Decoder& decoder() {
  static Decoder d;
  return d;
}
#endif

}  // namespace

std::string whyNoGpuJpeg() {
#if defined(EXPRUN_WITH_NVJPEG)
  return nvjpeg().why;
#elif defined(EXPRUN_WITH_CUDA)
  return "this exprun was built without nvJPEG's header (pip install nvidia-nvjpeg, then configure again)";
#else
  return "this exprun was built without CUDA";
#endif
}

std::string whyNoKernelsOn(const torch::Device& device) {
#if defined(EXPRUN_WITH_NVJPEG)
  if (!device.is_cuda()) return "not a CUDA device";
  if (c10::cuda::device_count() == 0) return "";  // no device here to ask: planned for one (the batches' work runs on the host)
  if (ownKernelsRunOn(device.index() < 0 ? c10::cuda::current_device() : device.index())) return "";
  return "exprun's kernels were not built for this device's compute capability (EXPRUN_CUDA_ARCHITECTURES)";
#else
  (void)device;
  return whyNoGpuJpeg();
#endif
}

std::string whyNoJpegEngines(const torch::Device& device) {
#if defined(EXPRUN_WITH_NVJPEG)
  if (!device.is_cuda()) return "not a CUDA device";
  Decoder& d = decoder();
  std::lock_guard<std::mutex> lock(d.mu);
  try {
    const c10::cuda::CUDAGuard onDevice(device);
    if (!d.open()) return d.failed;
  } catch (const std::exception& e) {
    return std::string("the CUDA device cannot be used: ") + e.what();
  }
  return d.hardware ? "" : "the device has no hardware JPEG decoder (nvJPEG's CUDA decoder would decode on the CPU's thread)";
#else
  (void)device;
  return whyNoGpuJpeg();
#endif
}

std::int64_t gpuJpegHostFallbacks() { return hostFallbacks.load(); }

GpuJpegPixels gpuJpegPixels() { return {decodedPixels.load(), wholePixels.load()}; }

DecodeRegion decodeRegion(const ResampleAxis& ax, const ResampleAxis& ay, int width, int height) {
  constexpr int m = kRegionMargin;
  auto span = [](int lo, int hi, int size, int* start, int* length) {
    const int a = std::max(0, lo - m) / m * m;
    const int b = std::min(size, (std::min(size, hi + m) + m - 1) / m * m);
    *start = a;
    *length = b - a;
  };
  DecodeRegion r;
  span(ax.lo, ax.hi, width, &r.x0, &r.width);
  span(ay.lo, ay.hi, height, &r.y0, &r.height);
  return r;
}

void resampleCropHost(const std::uint8_t* rgb, const DecodeRegion& at, const ResampleAxis& ax, const ResampleAxis& ay,
                      bool flip, int outW, int outH, std::uint8_t* planes) {
  if (ax.lo < at.x0 || ax.hi > at.x0 + at.width || ay.lo < at.y0 || ay.hi > at.y0 + at.height)
    throw std::logic_error("resampleCropHost: the crop reads pixels outside the decoded region");
  const int rows = ay.hi - ay.lo;
  std::vector<float> tmp(static_cast<std::size_t>(rows) * outW * 3);
  const resample::AxisView vx = view(ax), vy = view(ay);
  for (int r = 0; r < rows; ++r)
    for (int x = 0; x < outW; ++x)
      for (int c = 0; c < 3; ++c)
        tmp[(static_cast<std::size_t>(r) * outW + x) * 3 + c] = resample::horizontal(
            rgb + static_cast<std::size_t>(ay.lo + r - at.y0) * at.width * 3, at.x0, vx, x, c);
  const std::size_t plane = static_cast<std::size_t>(outW) * outH;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < outH; ++y)
      for (int x = 0; x < outW; ++x)
        planes[c * plane + static_cast<std::size_t>(y) * outW + (flip ? outW - 1 - x : x)] =
            resample::vertical(tmp.data(), 3LL * outW, ay.lo, vy, y, x, c);
}

namespace {
bool mixes(const std::vector<augk::Instr>& program) {
  return std::any_of(program.begin(), program.end(), [](const augk::Instr& in) { return in.code == augk::kMixBegin; });
}
}  // namespace

std::int64_t deviceJpegBytes(const DeviceJpeg& im, int outW, int outH) {
  const std::int64_t row = 3LL * outW * outH;
  std::int64_t n = 3LL * im.width * im.height +
                   static_cast<std::int64_t>(im.ay.hi - im.ay.lo) * outW * 3 * static_cast<std::int64_t>(sizeof(float));
  if (!im.program.empty()) n += row;                                                     // scratch
  if (mixes(im.program)) n += row + row * static_cast<std::int64_t>(sizeof(float));  // chain, mixture
  return n;
}

std::int64_t DeviceJpegDecode::deviceBytes() const {
  std::int64_t n = 0;
  for (const DeviceJpeg& im : images_) n += deviceJpegBytes(im, outW_, outH_);
  return n;
}

DeviceJpegDecode::DeviceJpegDecode(std::vector<DeviceJpeg> images, std::vector<std::int64_t> labels, int outWidth, int outHeight,
                   HostDecode onHost)
    : images_(std::move(images)), labels_(std::move(labels)), outW_(outWidth), outH_(outHeight), onHost_(std::move(onHost)) {}

void DeviceJpegDecode::moveRows(const std::vector<std::int64_t>& rows) {
  for (auto& im : images_) im.row = rows.at(static_cast<std::size_t>(im.row));
}

void DeviceJpegDecode::runOnHost(torch::Tensor& x) {
  std::vector<std::uint8_t> rgb, part;
  const std::int64_t per = 3LL * outH_ * outW_;
  for (const DeviceJpeg& im : images_) {
    int w = 0, h = 0;
    decodeJpegRgb(im.file.data(), im.file.size(), im.name, rgb, &w, &h);
    // The image's region, as the device's decoder hands it over.
    const DecodeRegion r = regionOf(im);
    if (r.x0 < 0 || r.y0 < 0 || r.x0 + r.width > w || r.y0 + r.height > h)
      throw std::logic_error("data.decode: gpu: " + im.name + ": the decoded region lies outside the image");
    part.resize(3ULL * r.width * r.height);
    for (int row = 0; row < r.height; ++row)
      std::memcpy(part.data() + 3ULL * row * r.width, rgb.data() + (3ULL * (r.y0 + row) * w + 3ULL * r.x0),
                  3ULL * r.width);
    std::uint8_t* row = x.data_ptr<std::uint8_t>() + im.row * per;
    resampleCropHost(part.data(), r, im.ax, im.ay, im.flip, outW_, outH_, row);
    if (!im.program.empty()) {  // the policy, with the device's arithmetic
      Image8 img{3, outH_, outW_, std::vector<std::uint8_t>(row, row + per)};
      runAugProgram(im.program, img);
      std::copy(img.data.begin(), img.data.end(), row);
    }
  }
}

void DeviceJpegDecode::hostDecodeInto(std::size_t i, torch::Tensor& x, torch::Tensor& y) {
  const std::int64_t per = 3LL * outH_ * outW_;
  torch::Tensor planes = torch::empty({per}, torch::TensorOptions(torch::kUInt8).pinned_memory(x.is_cuda()));
  const std::int64_t label = onHost_(i, planes.data_ptr<std::uint8_t>());
  const std::int64_t row = images_[i].row;
  x.view({-1}).narrow(0, row * per, per).copy_(planes, /*non_blocking=*/true);
  if (label != labels_[i]) y.narrow(0, row, 1).fill_(label);  // the next sample replaced a bad file
  ++hostFallbacks;
}

#if defined(EXPRUN_WITH_NVJPEG)
namespace {
// `bytes` of host memory on `device`, through page-locked memory (no wait).
torch::Tensor bytesToDevice(const void* p, std::int64_t bytes, const torch::Device& device) {
  torch::Tensor h = torch::empty({std::max<std::int64_t>(bytes, 1)}, torch::TensorOptions(torch::kUInt8).pinned_memory(true));
  if (bytes > 0) std::memcpy(h.data_ptr(), p, static_cast<std::size_t>(bytes));
  return h.to(device, /*non_blocking=*/true);
}
}  // namespace
#endif

void augmentOnDevice(torch::Tensor& x, const std::vector<std::int64_t>& rows,
                   const std::vector<const std::vector<augk::Instr>*>& programs) {
  if (rows.size() != programs.size()) throw std::logic_error("augmentOnDevice: a program per row");
  if (rows.empty()) return;
  if (x.scalar_type() != torch::kUInt8 || x.dim() != 4 || x.size(1) != 3 || !x.is_contiguous())
    throw std::logic_error("augmentOnDevice: x is not contiguous uint8 [N, 3, H, W]");
  if (!x.is_cuda()) throw std::logic_error("augmentOnDevice: x is not on a CUDA device");
#if !defined(EXPRUN_WITH_NVJPEG)
  throw std::runtime_error("data.decode: gpu: " + whyNoGpuJpeg());
#else
  const int h = static_cast<int>(x.size(2)), w = static_cast<int>(x.size(3));
  const std::int64_t per = 3LL * h * w;
  const c10::cuda::CUDAGuard onDevice(x.device());
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(x.device().index());
  std::vector<kernels::AugJob> jobs;
  std::vector<augk::Instr> instrs;
  bool anyMix = false;
  for (std::size_t k = 0; k < rows.size(); ++k) {
    kernels::AugJob j{};
    j.first = static_cast<std::int32_t>(instrs.size());
    j.count = static_cast<std::int32_t>(programs[k]->size());
    instrs.insert(instrs.end(), programs[k]->begin(), programs[k]->end());
    j.img = x.data_ptr<std::uint8_t>() + rows[k] * per;
    anyMix = anyMix || mixes(*programs[k]);
    jobs.push_back(j);
  }
  const auto m = static_cast<std::int64_t>(jobs.size());
  // Scratch for every image (AugMix: a chain image and the mixture too), on the stream's pool.
  const torch::Tensor scratch = torch::empty({m * per}, x.options());
  const torch::Tensor chain = anyMix ? torch::empty({m * per}, x.options()) : torch::Tensor();
  const torch::Tensor mixture = anyMix ? torch::empty({m * per}, x.options().dtype(torch::kFloat32)) : torch::Tensor();
  for (std::int64_t a = 0; a < m; ++a) {
    kernels::AugJob& j = jobs[static_cast<std::size_t>(a)];
    j.scratch = scratch.data_ptr<std::uint8_t>() + a * per;
    j.chain = anyMix ? chain.data_ptr<std::uint8_t>() + a * per : nullptr;
    j.mix = anyMix ? mixture.data_ptr<float>() + a * per : nullptr;
  }
  const torch::Tensor jobsOnDevice =
      bytesToDevice(jobs.data(), static_cast<std::int64_t>(jobs.size() * sizeof(kernels::AugJob)), x.device());
  const torch::Tensor instrsOnDevice =
      bytesToDevice(instrs.data(), static_cast<std::int64_t>(instrs.size() * sizeof(augk::Instr)), x.device());
  const cudaError_t err = kernels::launchAugment(reinterpret_cast<const kernels::AugJob*>(jobsOnDevice.data_ptr()),
                                                 static_cast<int>(m), h, w,
                                                 reinterpret_cast<const augk::Instr*>(instrsOnDevice.data_ptr()), stream.stream());
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("data.decode: gpu: the augmentation kernel failed: ") + cudaGetErrorString(err));
#endif
}

#if defined(EXPRUN_WITH_NVJPEG)
namespace {

// A batch's images that nvJPEG's batched decoder takes, and what is decoded of each.
struct DeviceBatch {
  std::vector<std::size_t> of;                // the work's images
  std::vector<DecodeRegion> at;               // the part of each that is decoded
  std::vector<nvjpegDecodeParams_t> params;   // each one's parameter set (regions)
  bool regions = false;                       // decoded with nvjpegDecodeBatchedEx
};

// The images the batched decoder takes (nvJPEG's own check of each header, with the image's region
// where regions are decoded); `toHost(i)` decodes the others on the host, the CPU pipeline's way.
// Regions are decoded (nvjpegDecodeBatchedEx, a parameter set per image) where nvJPEG can and some
// image of the batch asks for less than its whole; else nvjpegDecodeBatched, as before.
DeviceBatch chooseForDevice(Decoder& d, const std::vector<DeviceJpeg>& images, const std::function<void(std::size_t)>& toHost) {
  const bool wantRegions = d.noRegions.empty() && std::any_of(images.begin(), images.end(), [](const DeviceJpeg& im) {
                             return !isWhole(regionOf(im), im);
                           });
  DeviceBatch b;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const DeviceJpeg& im = images[i];
    const std::size_t k = b.of.size();
    const DecodeRegion want = regionOf(im);
    bool region = false;
    nvjpegDecodeParams_t p = wantRegions ? d.regionParams(k, &want, &region) : nullptr;
    bool ok = d.batchedDecoderTakes(im.file, p);
    if (!ok && region) {  // not this region: the whole image, then (the plain check if regions went)
      p = d.regionParams(k, nullptr, &region);
      ok = d.batchedDecoderTakes(im.file, p);
    }
    if (!ok) {
      toHost(i);
      continue;
    }
    b.of.push_back(i);
    b.at.push_back(region ? want : wholeImage(im));
    b.params.push_back(p);
  }
  b.regions = wantRegions && d.noRegions.empty();
  if (!b.regions)  // refused while the batch was being checked
    for (std::size_t k = 0; k < b.of.size(); ++k) b.at[k] = wholeImage(images[b.of[k]]);
  return b;
}

// The batch decoded into one buffer `decoded` on `stream`, image k's part (b.at[k], RGB
// interleaved) from offset[k]; where regions are refused, whole images instead, and regions are
// then off for the rest of the run (only if whole images decode: a damaged file is not the
// regions' doing). nvJPEG's status.
nvjpegStatus_t decodeOnDevice(Decoder& d, DeviceBatch& b, const std::vector<DeviceJpeg>& images,
                            const torch::TensorOptions& options, cudaStream_t stream, torch::Tensor& decoded,
                            std::vector<std::int64_t>& offset) {
  const NvJpeg& lib = nvjpeg();
  const int n = static_cast<int>(b.of.size());
  offset.assign(b.of.size() + 1, 0);
  auto decode = [&](bool withRegions) {
    for (std::size_t k = 0; k < b.of.size(); ++k) offset[k + 1] = offset[k] + 3LL * b.at[k].width * b.at[k].height;
    decoded = torch::Tensor();  // the previous try's buffer back to the allocator first
    decoded = torch::empty({offset.back()}, options);
    std::vector<nvjpegImage_t> dest(b.of.size());
    std::vector<const unsigned char*> data(b.of.size());
    std::vector<std::size_t> lengths(b.of.size());
    for (std::size_t k = 0; k < b.of.size(); ++k) {
      const DeviceJpeg& im = images[b.of[k]];
      dest[k] = nvjpegImage_t{};
      dest[k].channel[0] = decoded.data_ptr<std::uint8_t>() + offset[k];
      dest[k].pitch[0] = static_cast<std::size_t>(b.at[k].width) * 3;
      data[k] = im.file.data();
      lengths[k] = im.file.size();
    }
    nvjpegStatus_t st = NVJPEG_STATUS_SUCCESS;
    if (d.batch != n) {
      d.waitForQueued(c10::cuda::getCurrentCUDAStream());
      st = lib.batchedInit(d.handle, d.state, n, 1, NVJPEG_OUTPUT_RGBI);
      d.batch = st == NVJPEG_STATUS_SUCCESS ? n : 0;
    }
    if (st != NVJPEG_STATUS_SUCCESS) return st;
    return withRegions ? lib.batchedEx(d.handle, d.state, data.data(), lengths.data(), dest.data(), b.params.data(), stream)
                       : lib.batched(d.handle, d.state, data.data(), lengths.data(), dest.data(), stream);
  };
  nvjpegStatus_t st = decode(b.regions);
  if (st != NVJPEG_STATUS_SUCCESS && b.regions) {
    const nvjpegStatus_t withRegions = st;
    d.batch = 0;
    for (std::size_t k = 0; k < b.of.size(); ++k) b.at[k] = wholeImage(images[b.of[k]]);
    st = decode(false);
    if (st == NVJPEG_STATUS_SUCCESS) d.refuseRegions(strf("nvjpegDecodeBatchedEx: status %d", static_cast<int>(withRegions)));
  }
  return st;
}

// The resampling kernels on the decoded batch (decodeOnDevice's buffer), into x's rows (outW x outH):
// the tables in two arrays and a job per image, to the device from page-locked memory.
void resampleOnDevice(const DeviceBatch& b, const std::vector<DeviceJpeg>& images, const torch::Tensor& decoded,
                    const std::vector<std::int64_t>& offset, torch::Tensor& x, int outW, int outH, cudaStream_t stream) {
  std::vector<std::int32_t> ints;
  std::vector<float> floats;
  std::vector<kernels::CropJob> jobs(b.of.size());
  std::vector<std::int64_t> tmpAt(b.of.size() + 1, 0);
  for (std::size_t k = 0; k < b.of.size(); ++k)
    tmpAt[k + 1] = tmpAt[k] + static_cast<std::int64_t>(images[b.of[k]].ay.hi - images[b.of[k]].ay.lo) * outW * 3;
  const torch::Tensor tmp = torch::empty({std::max<std::int64_t>(tmpAt.back(), 1)}, x.options().dtype(torch::kFloat32));
  const std::int64_t per = 3LL * outH * outW;
  auto put = [&](const std::vector<std::int32_t>& v) {
    const auto at = static_cast<std::int32_t>(ints.size());
    ints.insert(ints.end(), v.begin(), v.end());
    return at;
  };
  for (std::size_t k = 0; k < b.of.size(); ++k) {
    const DeviceJpeg& im = images[b.of[k]];
    kernels::CropJob& j = jobs[k];
    j.src = decoded.data_ptr<std::uint8_t>() + offset[k];
    j.pitch = 3LL * b.at[k].width;
    j.x0 = b.at[k].x0;
    j.y0 = b.at[k].y0;
    j.tmp = tmp.data_ptr<float>() + tmpAt[k];
    j.dst = x.data_ptr<std::uint8_t>() + im.row * per;
    j.lo = im.ay.lo;
    j.rows = im.ay.hi - im.ay.lo;
    j.xFirst = put(im.ax.first);
    j.xCount = put(im.ax.count);
    j.yFirst = put(im.ay.first);
    j.yCount = put(im.ay.count);
    j.xW = static_cast<std::int32_t>(floats.size());
    floats.insert(floats.end(), im.ax.w.begin(), im.ax.w.end());
    j.yW = static_cast<std::int32_t>(floats.size());
    floats.insert(floats.end(), im.ay.w.begin(), im.ay.w.end());
    j.xTaps = im.ax.taps;
    j.yTaps = im.ay.taps;
    j.flip = im.flip ? 1 : 0;
  }
  auto toDevice = [&](const void* p, std::int64_t bytes) { return bytesToDevice(p, bytes, x.device()); };
  const torch::Tensor jobsOnDevice = toDevice(jobs.data(), static_cast<std::int64_t>(jobs.size() * sizeof(kernels::CropJob)));
  const torch::Tensor intsOnDevice = toDevice(ints.data(), static_cast<std::int64_t>(ints.size() * sizeof(std::int32_t)));
  const torch::Tensor floatsOnDevice = toDevice(floats.data(), static_cast<std::int64_t>(floats.size() * sizeof(float)));
  const cudaError_t err = kernels::launchCropResample(
      reinterpret_cast<const kernels::CropJob*>(jobsOnDevice.data_ptr()), static_cast<int>(b.of.size()), outW, outH,
      reinterpret_cast<const std::int32_t*>(intsOnDevice.data_ptr()), reinterpret_cast<const float*>(floatsOnDevice.data_ptr()),
      stream);
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("data.decode: gpu: the resampling kernels failed: ") + cudaGetErrorString(err));
}

}  // namespace
#endif

void DeviceJpegDecode::run(torch::Tensor& x, torch::Tensor& y) {
  if (images_.empty()) return;
  if (x.scalar_type() != torch::kUInt8 || x.dim() != 4 || x.size(1) != 3 || x.size(2) != outH_ || x.size(3) != outW_ ||
      !x.is_contiguous())
    throw std::logic_error("data.decode: gpu: the batch is not contiguous uint8 [N, 3, H, W] of the crop's size");
  if (!x.is_cuda()) return runOnHost(x);
#if !defined(EXPRUN_WITH_NVJPEG)
  (void)y;
  throw std::runtime_error("data.decode: gpu: " + whyNoGpuJpeg());
#else
  Decoder& d = decoder();
  std::lock_guard<std::mutex> lock(d.mu);
  const c10::cuda::CUDAGuard onDevice(x.device());
  if (!d.open()) throw std::runtime_error("data.decode: gpu: " + d.failed);
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(x.device().index());
  DeviceBatch b = chooseForDevice(d, images_, [&](std::size_t i) { hostDecodeInto(i, x, y); });
  if (b.of.empty()) return;
  torch::Tensor decoded;
  std::vector<std::int64_t> offset;
  if (const nvjpegStatus_t st = decodeOnDevice(d, b, images_, x.options(), stream.stream(), decoded, offset);
      st != NVJPEG_STATUS_SUCCESS) {  // the batch refused: its images decoded on the host, one by one
    log::warn(strf("data.decode: gpu: nvJPEG refused a batch of %zu images (status %d); decoded on the host",
                   b.of.size(), static_cast<int>(st)));
    d.batch = 0;  // initialise again next time
    for (std::size_t i : b.of) hostDecodeInto(i, x, y);
    return;
  }
  resampleOnDevice(b, images_, decoded, offset, x, outW_, outH_, stream.stream());
  // The augmentation policy's programs on the rows (a block per image).
  std::vector<std::int64_t> augRows;
  std::vector<const std::vector<augk::Instr>*> programs;
  for (std::size_t k : b.of)
    if (!images_[k].program.empty()) {
      augRows.push_back(images_[k].row);
      programs.push_back(&images_[k].program);
    }
  augmentOnDevice(x, augRows, programs);
  for (std::size_t k = 0; k < b.of.size(); ++k) {
    decodedPixels += static_cast<std::int64_t>(b.at[k].width) * b.at[k].height;
    wholePixels += static_cast<std::int64_t>(images_[b.of[k]].width) * images_[b.of[k]].height;
  }
  // The files nvJPEG may still read from, until the device is past this batch.
  auto files = std::make_shared<std::vector<DeviceJpeg>>(std::move(images_));
  d.keepUntilDone(files, stream);
  images_.clear();
#endif
}

}  // namespace exprun
