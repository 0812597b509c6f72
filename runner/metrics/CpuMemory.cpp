// Purpose: the tracking CPU allocator (see CpuMemory.h).
#include "runner/metrics/CpuMemory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <mutex>

namespace exprun {
namespace {

std::atomic<std::int64_t> gCurrent{0}, gPeak{0};
std::atomic<bool> gInstalled{false};

void raisePeak(std::int64_t now) {
  std::int64_t peak = gPeak.load(std::memory_order_relaxed);
  while (now > peak && !gPeak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// A tracked allocation is the base allocator's block with a 64-byte header in front (the block's
// alignment is kept) holding its size; the pointer handed out is its own context, as c10's
// raw_allocate() and copy-on-write storage expect of CPU allocations.
constexpr std::size_t kHeader = 64;
c10::DeleterFnPtr gBaseDeleter = nullptr;

void freeTracked(void* data) {
  if (data == nullptr) return;
  char* block = static_cast<char*>(data) - kHeader;
  gCurrent.fetch_sub(*reinterpret_cast<std::int64_t*>(block), std::memory_order_relaxed);
  gBaseDeleter(block);
}

class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &freeTracked, cpu);
    char* block = static_cast<char*>(base_->raw_allocate(n + kHeader));
    *reinterpret_cast<std::int64_t*>(block) = static_cast<std::int64_t>(n);
    raisePeak(gCurrent.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed) + static_cast<std::int64_t>(n));
    void* data = block + kHeader;
    return c10::DataPtr(data, data, &freeTracked, cpu);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &freeTracked; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

}  // namespace

void installCpuAllocationTracking() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (const char* off = std::getenv("EXPRUN_CPU_ALLOC_TRACKING"); off && std::string(off) == "0") return;
    c10::Allocator* base = c10::GetCPUAllocator();
    gBaseDeleter = base->raw_deleter();
    if (gBaseDeleter == nullptr) return;  // a base allocator without raw blocks: not tracked
    static TrackingAllocator tracking(base);
    c10::SetCPUAllocator(&tracking, /*priority=*/255);
    gInstalled = c10::GetCPUAllocator() == &tracking;
  });
}

bool cpuAllocationTracked() { return gInstalled.load(); }
std::int64_t cpuAllocatedBytes() { return gCurrent.load(); }
std::int64_t cpuPeakAllocatedBytes() { return gPeak.load(); }
void resetCpuPeakAllocated() { gPeak.store(gCurrent.load()); }

}  // namespace exprun
