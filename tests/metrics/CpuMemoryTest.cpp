// Purpose: the tracking CPU allocator counts the bytes of live tensors exactly — up by a tensor's
// storage when it is made, down when it is freed — and its peak resets to the current figure;
// the trainer records it per epoch as peak_allocated_bytes (tests/cli/live_test.sh).
#include "runner/metrics/CpuMemory.h"
#include "runner/metrics/Meters.h"

#include "tests/TestUtil.h"

using namespace exprun;

TEST_SUITE("cpu_memory") {
  TEST_CASE("live tensor bytes, current and peak") {
    installCpuAllocationTracking();
    installCpuAllocationTracking();  // once per process
    REQUIRE(cpuAllocationTracked());
    const std::int64_t before = cpuAllocatedBytes();
    resetCpuPeakAllocated();
    CHECK(cpuPeakAllocatedBytes() == before);
    {
      torch::Tensor a = torch::empty({1 << 20}, torch::kFloat);  // 4 MiB
      CHECK(cpuAllocatedBytes() - before == 4 << 20);
      {
        torch::Tensor b = torch::zeros({1 << 18}, torch::kDouble);  // 2 MiB more
        CHECK(cpuAllocatedBytes() - before == 6 << 20);
        torch::Tensor view = b.narrow(0, 0, 10);  // a view allocates nothing
        CHECK(cpuAllocatedBytes() - before == 6 << 20);
      }
      CHECK(cpuAllocatedBytes() - before == 4 << 20);
      CHECK(cpuPeakAllocatedBytes() - before == 6 << 20);
      resetCpuPeakAllocated();
      CHECK(cpuPeakAllocatedBytes() - before == 4 << 20);
      CHECK(peakAllocatedBytes(torch::Device(torch::kCPU)) == cpuPeakAllocatedBytes());
      torch::Tensor c = a * 2;  // an operator's output is counted too
      CHECK(cpuAllocatedBytes() - before == 8 << 20);
    }
    CHECK(cpuAllocatedBytes() == before);
    CHECK(cpuPeakAllocatedBytes() - before >= 8 << 20);  // (and the scalar 2 wrapped in a tensor)
    CHECK(cpuPeakAllocatedBytes() - before < (8 << 20) + 4096);
  }
}
