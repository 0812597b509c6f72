// Purpose: JPEG decoding on the card (GpuJpeg.h).
#include "runner/data/GpuJpeg.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <stdexcept>

#include "runner/data/ResampleKernel.h"
#include "runner/util/Log.h"

#if defined(EXPRUN_WITH_NVJPEG)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <dlfcn.h>
#include <nvjpeg.h>

#include "runner/data/GpuJpegKernels.h"
#endif

namespace exprun {
namespace {

std::atomic<std::int64_t> hostFallbacks{0};

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
    return n;
  }();
  return lib;
}

// The process's decoder: one handle (the hardware backend where the card has JPEG engines, else
// nvJPEG's default), one state; used from the feed's thread (a mutex keeps it to one at a time).
// Batches' files and tables are kept until the card has used them (an event per batch).
struct Decoder {
  std::mutex mu;
  nvjpegHandle_t handle = nullptr;
  nvjpegJpegState_t state = nullptr;
  int batch = 0;
  bool hardware = false;
  std::deque<std::pair<at::cuda::CUDAEvent, std::shared_ptr<void>>> inUse;

  void open() {
    if (handle) return;
    const NvJpeg& n = nvjpeg();
    if (!n.why.empty()) throw std::runtime_error("data.decode: gpu: " + n.why);
    hardware = n.createEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &handle) == NVJPEG_STATUS_SUCCESS;
    if (!hardware && n.createSimple(&handle) != NVJPEG_STATUS_SUCCESS)
      throw std::runtime_error("data.decode: gpu: nvJPEG's handle could not be made");
    if (n.stateCreate(handle, &state) != NVJPEG_STATUS_SUCCESS)
      throw std::runtime_error("data.decode: gpu: nvJPEG's decoder state could not be made");
    log::info(std::string("data.decode: gpu: nvJPEG with ") +
              (hardware ? "the card's hardware JPEG decoder" : "its CUDA decoder (no hardware decoder found)"));
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

std::int64_t gpuJpegHostFallbacks() { return hostFallbacks.load(); }

void resampleCropHost(const std::uint8_t* rgb, int width, const ResampleAxis& ax, const ResampleAxis& ay, bool flip,
                      int outW, int outH, std::uint8_t* planes) {
  const int rows = ay.hi - ay.lo;
  std::vector<float> tmp(static_cast<std::size_t>(rows) * outW * 3);
  const resample::AxisView vx = view(ax), vy = view(ay);
  for (int r = 0; r < rows; ++r)
    for (int x = 0; x < outW; ++x)
      for (int c = 0; c < 3; ++c)
        tmp[(static_cast<std::size_t>(r) * outW + x) * 3 + c] =
            resample::horizontal(rgb + static_cast<std::size_t>(ay.lo + r) * width * 3, 0, vx, x, c);
  const std::size_t plane = static_cast<std::size_t>(outW) * outH;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < outH; ++y)
      for (int x = 0; x < outW; ++x)
        planes[c * plane + static_cast<std::size_t>(y) * outW + (flip ? outW - 1 - x : x)] =
            resample::vertical(tmp.data(), 3LL * outW, ay.lo, vy, y, x, c);
}

JpegWork::JpegWork(std::vector<DeviceJpeg> images, int outWidth, int outHeight, HostDecode onHost)
    : images_(std::move(images)), outW_(outWidth), outH_(outHeight), onHost_(std::move(onHost)) {}

void JpegWork::moveRows(const std::vector<std::int64_t>& rows) {
  for (auto& im : images_) im.row = rows.at(static_cast<std::size_t>(im.row));
}

void JpegWork::runOnHost(torch::Tensor& x) {
  std::vector<std::uint8_t> rgb;
  const std::int64_t per = 3LL * outH_ * outW_;
  for (const DeviceJpeg& im : images_) {
    int w = 0, h = 0;
    decodeJpegRgb(im.file.data(), im.file.size(), im.name, rgb, &w, &h);
    resampleCropHost(rgb.data(), w, im.ax, im.ay, im.flip, outW_, outH_, x.data_ptr<std::uint8_t>() + im.row * per);
  }
}

void JpegWork::runWithHostDecode(torch::Tensor& x) {
  const std::int64_t per = 3LL * outH_ * outW_;
  torch::Tensor host = torch::empty({per}, torch::kUInt8);
  for (std::size_t i = 0; i < images_.size(); ++i) {
    onHost_(i, host.data_ptr<std::uint8_t>());
    x.view({-1}).narrow(0, images_[i].row * per, per).copy_(host);  // waits: a rare path
    ++hostFallbacks;
  }
}

void JpegWork::run(torch::Tensor& x) {
  if (images_.empty()) return;
  if (x.scalar_type() != torch::kUInt8 || x.dim() != 4 || x.size(1) != 3 || x.size(2) != outH_ || x.size(3) != outW_ ||
      !x.is_contiguous())
    throw std::logic_error("data.decode: gpu: the batch is not contiguous uint8 [N, 3, H, W] of the crop's size");
  if (!x.is_cuda()) return runOnHost(x);
#if !defined(EXPRUN_WITH_NVJPEG)
  throw std::runtime_error("data.decode: gpu: " + whyNoGpuJpeg());
#else
  Decoder& d = decoder();
  std::lock_guard<std::mutex> lock(d.mu);
  d.open();
  const c10::cuda::CUDAGuard onDevice(x.device());
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(x.device().index());
  const int n = static_cast<int>(images_.size());
  // Full-resolution RGB of every image, one buffer.
  std::vector<std::int64_t> offset(images_.size() + 1, 0);
  for (std::size_t i = 0; i < images_.size(); ++i)
    offset[i + 1] = offset[i] + 3LL * images_[i].width * images_[i].height;
  torch::Tensor decoded = torch::empty({offset.back()}, x.options());
  std::vector<nvjpegImage_t> dest(images_.size());
  std::vector<const unsigned char*> data(images_.size());
  std::vector<std::size_t> lengths(images_.size());
  for (std::size_t i = 0; i < images_.size(); ++i) {
    dest[i] = nvjpegImage_t{};
    dest[i].channel[0] = decoded.data_ptr<std::uint8_t>() + offset[i];
    dest[i].pitch[0] = static_cast<std::size_t>(images_[i].width) * 3;
    data[i] = images_[i].file.data();
    lengths[i] = images_[i].file.size();
  }
  const NvJpeg& lib = nvjpeg();
  nvjpegStatus_t st = NVJPEG_STATUS_SUCCESS;
  if (d.batch != n) {
    st = lib.batchedInit(d.handle, d.state, n, 1, NVJPEG_OUTPUT_RGBI);
    d.batch = st == NVJPEG_STATUS_SUCCESS ? n : 0;
  }
  if (st == NVJPEG_STATUS_SUCCESS) st = lib.batched(d.handle, d.state, data.data(), lengths.data(), dest.data(), stream.stream());
  if (st != NVJPEG_STATUS_SUCCESS) {
    log::warn(strf("data.decode: gpu: nvJPEG refused a batch of %d images (status %d); decoded on the host", n,
                   static_cast<int>(st)));
    d.batch = 0;  // initialise again next time
    return runWithHostDecode(x);
  }
  // The tables, in two arrays, and a job per image, to the card from page-locked memory.
  std::vector<std::int32_t> ints;
  std::vector<float> floats;
  std::vector<kernels::CropJob> jobs(images_.size());
  std::vector<std::int64_t> tmpAt(images_.size() + 1, 0);
  for (std::size_t i = 0; i < images_.size(); ++i)
    tmpAt[i + 1] = tmpAt[i] + static_cast<std::int64_t>(images_[i].ay.hi - images_[i].ay.lo) * outW_ * 3;
  torch::Tensor tmp = torch::empty({std::max<std::int64_t>(tmpAt.back(), 1)}, x.options().dtype(torch::kFloat32));
  const std::int64_t per = 3LL * outH_ * outW_;
  for (std::size_t i = 0; i < images_.size(); ++i) {
    const DeviceJpeg& im = images_[i];
    kernels::CropJob& j = jobs[i];
    j.src = decoded.data_ptr<std::uint8_t>() + offset[i];
    j.pitch = 3LL * im.width;
    j.tmp = tmp.data_ptr<float>() + tmpAt[i];
    j.dst = x.data_ptr<std::uint8_t>() + im.row * per;
    j.lo = im.ay.lo;
    j.rows = im.ay.hi - im.ay.lo;
    auto put = [&](const std::vector<std::int32_t>& v) {
      const auto at = static_cast<std::int32_t>(ints.size());
      ints.insert(ints.end(), v.begin(), v.end());
      return at;
    };
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
  auto toCard = [&](const void* p, std::int64_t bytes) {
    torch::Tensor h = torch::empty({bytes}, torch::kUInt8).pin_memory();
    std::memcpy(h.data_ptr(), p, static_cast<std::size_t>(bytes));
    return h.to(x.device(), /*non_blocking=*/true);
  };
  const torch::Tensor jobsOnCard = toCard(jobs.data(), static_cast<std::int64_t>(jobs.size() * sizeof(kernels::CropJob)));
  const torch::Tensor intsOnCard = toCard(ints.data(), static_cast<std::int64_t>(ints.size() * sizeof(std::int32_t)));
  const torch::Tensor floatsOnCard = toCard(floats.data(), static_cast<std::int64_t>(floats.size() * sizeof(float)));
  const cudaError_t err = kernels::launchCropResample(
      reinterpret_cast<const kernels::CropJob*>(jobsOnCard.data_ptr()), n, outW_, outH_,
      reinterpret_cast<const std::int32_t*>(intsOnCard.data_ptr()), reinterpret_cast<const float*>(floatsOnCard.data_ptr()),
      stream.stream());
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("data.decode: gpu: the resampling kernels failed: ") + cudaGetErrorString(err));
  // The files nvJPEG may still read from, until the card is past this batch.
  auto files = std::make_shared<std::vector<DeviceJpeg>>(std::move(images_));
  d.keepUntilDone(files, stream);
  images_.clear();
#endif
}

}  // namespace exprun
