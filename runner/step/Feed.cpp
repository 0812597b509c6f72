// Purpose: batches onto the training device, copied ahead on CUDA (Feed.h).
#include "runner/step/Feed.h"

#include "runner/metrics/Phases.h"

#if defined(EXPRUN_WITH_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace exprun {
namespace {

// Per-channel [1, C, 1, 1] float32 tensor of `v` on `device` (to a GPU from page-locked memory,
// asynchronously: a copy from pageable memory would wait for the device).
torch::Tensor channelVector(const std::vector<float>& v, const torch::Device& device) {
  const auto n = static_cast<std::int64_t>(v.size());
  torch::Tensor host = torch::empty({1, n, 1, 1}, torch::TensorOptions(torch::kFloat32).pinned_memory(device.is_cuda()));
  std::copy(v.begin(), v.end(), host.data_ptr<float>());
  return host.to(device, /*non_blocking=*/true);
}

// x (uint8 pixels) as float32 * scale + shift, in x's memory format: a multiply and an add, each
// rounded to float32, as the data plugins compute v * scale + shift.
torch::Tensor normalised(const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& shift) {
  return x.to(torch::kFloat32).mul_(scale).add_(shift);
}

void checkNormalisation(const Batch& b) {
  if (b.x.dim() != 4 || b.x.scalar_type() != torch::kUInt8 || b.scale.size() != static_cast<std::size_t>(b.x.size(1)) ||
      b.shift.size() != b.scale.size())
    throw std::logic_error("data: a uint8 batch needs [N, C, H, W] pixels and a scale and shift per channel");
}

// placedOn with a uint8 batch's scale and shift as [1, C, 1, 1] tensors on `device` when given
// (the feed's, made once), else made from the batch's.
Batch placedWith(Batch b, const torch::Device& device, bool channelsLast, const torch::Tensor& scale,
                 const torch::Tensor& shift) {
  b.x = b.x.to(device, /*non_blocking=*/true);
  b.y = b.y.to(device, true);
  finishOnDevice(b);  // rows the device writes (data.decode: gpu), before the reorder and normalisation
  if (channelsLast) b.x = b.x.contiguous(at::MemoryFormat::ChannelsLast);
  if (b.bytes()) {
    checkNormalisation(b);
    b.x = normalised(b.x, scale.defined() ? scale : channelVector(b.scale, device),
                     shift.defined() ? shift : channelVector(b.shift, device));
    b.scale.clear();
    b.shift.clear();
  }
  return b;
}

}  // namespace

Batch placedOn(Batch b, const torch::Device& device, bool channelsLast) {
  return placedWith(std::move(b), device, channelsLast, {}, {});
}

struct DeviceFeed::InFlight {
  Batch batch;
#if defined(EXPRUN_WITH_CUDA)
  std::optional<at::cuda::CUDAEvent> copied;  // recorded on the copy stream after the batch's copies
#endif
};

#if defined(EXPRUN_WITH_CUDA)
struct DeviceFeed::Copier {
  explicit Copier(const torch::Device& device) : stream(c10::cuda::getStreamFromPool(false, device.index())) {}
  c10::cuda::CUDAStream stream;
};
#else
struct DeviceFeed::Copier {};
#endif

DeviceFeed::DeviceFeed(BatchLoader& loader, const torch::Device& device, bool channelsLast, int ahead)
    : loader_(loader),
      device_(device),
      channelsLast_(channelsLast),
      ahead_(device.is_cuda() ? static_cast<std::size_t>(std::max(0, ahead)) : 0) {
#if defined(EXPRUN_WITH_CUDA)
  if (ahead_ > 0) copier_ = std::make_unique<Copier>(device_);
#endif
}

DeviceFeed::~DeviceFeed() = default;

bool DeviceFeed::pull() {
  if (done_) return false;
  std::optional<Batch> host = loader_.next();
  if (!host) {
    done_ = true;
    return false;
  }
  auto f = std::make_unique<InFlight>();
  f->batch = std::move(*host);
#if defined(EXPRUN_WITH_CUDA)
  if (copier_ && !f->batch.x.is_cuda()) {  // copy now, on the copy stream; the step waits for it when due
    PhaseScope copying(Phase::Copy);
    const c10::cuda::CUDAGuard onDevice(device_);
    const c10::cuda::CUDAStreamGuard onCopyStream(copier_->stream);
    f->batch.x = f->batch.x.to(device_, /*non_blocking=*/true);
    f->batch.y = f->batch.y.to(device_, true);
    finishOnDevice(f->batch);  // decoded on the copy stream too, ahead of the step
    f->copied.emplace();
    f->copied->record(copier_->stream);
  }
#endif
  queue_.push_back(std::move(f));
  return true;
}

std::optional<Batch> DeviceFeed::next() {
  if (queue_.empty() && !pull()) return std::nullopt;
  std::unique_ptr<InFlight> f = std::move(queue_.front());
  queue_.pop_front();
  while (queue_.size() < ahead_ && !done_ && loader_.ready()) pull();  // top up with what is ready; never wait
  PhaseScope copying(Phase::Copy);
#if defined(EXPRUN_WITH_CUDA)
  if (f->copied) {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_.index());
    f->copied->block(current);
    f->batch.x.record_stream(current);  // made on the copy stream, used (and freed) on this one
    f->batch.y.record_stream(current);
  }
#endif
  return finish(std::move(f->batch));
}

Batch DeviceFeed::finish(Batch b) {
  if (b.bytes() && (b.scale != scaleKey_ || b.shift != shiftKey_)) {  // made once, not at every batch
    scale_ = channelVector(b.scale, device_);
    shift_ = channelVector(b.shift, device_);
    scaleKey_ = b.scale;
    shiftKey_ = b.shift;
  }
  return placedWith(std::move(b), device_, channelsLast_, scale_, shift_);
}

}  // namespace exprun
