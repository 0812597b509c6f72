// Purpose: a CUDA emulator on the CPU for exprun's own kernels (runner/nn/BnActKernels.cu,
// plugins/data/image/GpuJpegKernels.cu), so that the CPU suite runs their code — indexing, grids, shared
// memory, barriers, warp shuffles, atomics — against the host references, where no GPU is lent.
//
// How: tests/cudaemu/translate.py rewrites a .cu file into C++ (launches `k<<<cfg>>>(args)` become
// `cudaemu::bind(k, cudaemu::Cfg(cfg))(args)`, `extern __shared__` arrays dynamicShared()), and
// Prelude.h maps CUDA's keywords and built-ins onto this header. A launch runs the grid's blocks one
// after another; a block's threads are fibers (ucontext) that run until a barrier: __syncthreads()
// waits for every thread of the block that has not returned, a shuffle for every lane of its warp
// (32 consecutive linear thread indices). Between barriers the threads run one at a time, in index
// order or, with setOrder(seed), in a shuffled order each round, so that a read of another thread's
// write without a barrier between them gives a different result. Static __shared__ arrays are
// static locals (blocks run one at a time); dynamic shared memory is filled with 0xFF bytes (NaN)
// at each block's start. Launch-configuration limits are CUDA's (1,024 threads a block, grid y and z
// at most 65,535, 48 KiB of dynamic shared memory): a launch beyond them runs nothing and
// getLastError() returns cudaErrorInvalidConfiguration, as cudaGetLastError would.
//
// What it is not: the device's arithmetic. Without __CUDA_ARCH__ the kernels' host branches run
// (plugins/data/image/ResampleKernel.h and AugmentKernel.h round as the device does; the batch norm's
// float sums are not contracted into FMAs as nvcc may), memory is the host's, warps do not run in
// lock step, and timing means nothing. A thread that waits at a barrier its warp or block never
// reaches together (a divergent __syncthreads or shuffle) fails the launch with the block named.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

namespace cudaemu {

struct Cfg {
  dim3 grid, block;
  std::size_t shared = 0;
  cudaStream_t stream = nullptr;
  Cfg(dim3 g, dim3 b, std::size_t s = 0, cudaStream_t st = nullptr) : grid(g), block(b), shared(s), stream(st) {}
};

// Runs body() as every thread of cfg's grid (see above); throws std::runtime_error for a divergent
// barrier or what a thread threw.
void launch(const Cfg& cfg, const std::function<void()>& body);

template <class K>
struct Bound {
  K kernel;
  Cfg cfg;
  template <class... A>
  void operator()(const A&... args) const {
    launch(cfg, [&] { kernel(args...); });
  }
};
template <class K>
Bound<K> bind(K kernel, const Cfg& cfg) {
  return Bound<K>{kernel, cfg};
}

// The running thread's built-ins.
const uint3& threadIndex();
const uint3& blockIndex();
const dim3& blockDimension();
const dim3& gridDimension();
// __syncthreads() at `file`:`line` (Prelude.h passes them): a round whose threads wait at different
// calls is a divergent barrier.
void syncthreads(const char* file = nullptr, int line = 0);
void* dynamicSharedBytes();
template <class T>
T* dynamicShared() {
  return static_cast<T*>(dynamicSharedBytes());
}

// Publishes this lane's `bits`, waits for its warp, and returns lane `src`'s (own when !valid).
std::uint64_t warpExchange(std::uint64_t bits, int srcLane, bool valid);
int laneId();

template <class T>
T exchange(T v, int src, bool valid) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t) && std::is_trivially_copyable<T>::value, "shuffle of a large type");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warpExchange(bits, src, valid);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
template <class T>
T shflDown(unsigned, T v, unsigned delta, int width = 32) {
  const int lane = laneId(), src = lane + static_cast<int>(delta);
  return exchange(v, src, src / width == lane / width && src < 32);
}
template <class T>
T shflUp(unsigned, T v, unsigned delta, int width = 32) {
  const int lane = laneId(), src = lane - static_cast<int>(delta);
  return exchange(v, src, src >= 0 && src / width == lane / width);
}
template <class T>
T shflXor(unsigned, T v, int mask, int width = 32) {
  const int lane = laneId(), src = lane ^ mask;
  return exchange(v, src, src / width == lane / width && src < 32);
}
template <class T>
T shfl(unsigned, T v, int srcLane, int width = 32) {
  const int lane = laneId();
  return exchange(v, (lane / width) * width + srcLane % width, true);
}

// Atomics: the threads of a launch never run at once, so a read-modify-write is atomic.
template <class T, class U>
T atomicAdd(T* p, U v) {
  const T old = *p;
  *p = static_cast<T>(old + static_cast<T>(v));
  return old;
}
template <class T, class U>
T atomicMin(T* p, U v) {
  const T old = *p;
  if (static_cast<T>(v) < old) *p = static_cast<T>(v);
  return old;
}
template <class T, class U>
T atomicMax(T* p, U v) {
  const T old = *p;
  if (old < static_cast<T>(v)) *p = static_cast<T>(v);
  return old;
}

// The last launch's configuration error, then cleared (cudaGetLastError's contract).
cudaError_t getLastError();

// Between barriers: threads in index order (0) or in an order shuffled each round from `seed`.
void setOrder(unsigned seed);

// What the launches so far ran: kernels, blocks, threads, and the rounds their barriers made.
struct Counts {
  std::int64_t launches = 0, blocks = 0, threads = 0, barriers = 0;
};
Counts counts();

}  // namespace cudaemu
