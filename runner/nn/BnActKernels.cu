// Purpose: the fused batch norm's CUDA kernels (interface and semantics in BnActKernels.h).
// Layout: x is [rows, C] row-major (channels_last). Threads read V consecutive channels as one
// 16-byte vector where C and every pointer allow (8 bf16/fp16 or 4 fp32 values), else one value.
// Reductions: a block of BX channel groups × BY rows; each thread walks its rows with a stride of
// gridDim.y·BY, accumulating in float (Welford for the statistics), the block merges over its rows
// in shared memory, one partial per (block row, channel) goes to scratch, and a one-thread-per-channel
// kernel merges the partials in double.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "runner/nn/BnActKernels.h"

namespace exprun::bnact {
namespace {

constexpr int kThreads = 256;

template <class T>
__device__ __forceinline__ float toFloat(T v);
template <>
__device__ __forceinline__ float toFloat<float>(float v) { return v; }
template <>
__device__ __forceinline__ float toFloat<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float toFloat<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T fromFloat(float v);
template <>
__device__ __forceinline__ float fromFloat<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half fromFloat<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};
template <class T, int V>
__device__ __forceinline__ Vec<T, V> load(const T* p, std::int64_t i) {
  return *reinterpret_cast<const Vec<T, V>*>(p + i);
}
template <class T, int V>
__device__ __forceinline__ void store(T* p, std::int64_t i, const Vec<T, V>& v) {
  *reinterpret_cast<Vec<T, V>*>(p + i) = v;
}

// NaN passes (a comparison with NaN is false), as ATen's relu (clamp_min) and hardtanh.
template <int A>
__device__ __forceinline__ float activate(float v) {
  if (A == static_cast<int>(Act::Relu)) return v <= 0.f ? 0.f : v;
  if (A == static_cast<int>(Act::Relu6)) return v <= 0.f ? 0.f : (v >= 6.f ? 6.f : v);
  return v;
}
// Whether the gradient passes at output y (ATen's threshold_backward and hardtanh_backward).
template <int A>
__device__ __forceinline__ bool passes(float y) {
  if (A == static_cast<int>(Act::Relu)) return !(y <= 0.f);
  if (A == static_cast<int>(Act::Relu6)) return !(y <= 0.f || y >= 6.f);
  return true;
}

// Chan et al.'s merge of (count, mean, M2) b into a.
template <class F>
__device__ __forceinline__ void merge(F& n, F& mean, F& m2, F nb, F meanb, F m2b) {
  const F total = n + nb;
  if (nb == F(0)) return;
  const F delta = meanb - mean;
  const F w = nb / total;
  mean += delta * w;
  m2 += m2b + delta * delta * n * w;
  n = total;
}

struct Grid {
  int vec, groups, bx, by, gx, gy;
};
// The reduction grid for `s` with vectors of `vec`: gy depends only on rows and the SM count.
Grid reductionGrid(const Shape& s, int vec) {
  Grid g{};
  g.vec = vec;
  g.groups = s.channels / vec;
  g.bx = g.groups < 32 ? g.groups : 32;
  g.by = kThreads / g.bx;
  g.gx = (g.groups + g.bx - 1) / g.bx;
  const std::int64_t wanted = (s.rows + 127) / 128, cap = 8LL * (s.sms > 0 ? s.sms : 1);
  g.gy = static_cast<int>(wanted < 1 ? 1 : (wanted > cap ? cap : wanted));
  return g;
}
int elementwiseBlocks(std::int64_t vecs, int sms) {
  const std::int64_t wanted = (vecs + kThreads - 1) / kThreads, cap = 16LL * (sms > 0 ? sms : 1);
  return static_cast<int>(wanted < 1 ? 1 : (wanted > cap ? cap : wanted));
}

// Statistics partials: pMean, pM2 [gridDim.y, C], pCount [gridDim.y].
template <class T, int V>
__global__ void statsPartial(const T* __restrict__ x, std::int64_t rows, int C, float* __restrict__ pMean,
                             float* __restrict__ pM2, float* __restrict__ pCount) {
  extern __shared__ float shared[];
  const int groups = C / V, g = blockIdx.x * blockDim.x + threadIdx.x;
  const int tx = threadIdx.x, ty = threadIdx.y, width = blockDim.x * V;
  float mean[V], m2[V], n = 0.f;
#pragma unroll
  for (int v = 0; v < V; ++v) mean[v] = m2[v] = 0.f;
  if (g < groups) {
    for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + ty; r < rows;
         r += static_cast<std::int64_t>(gridDim.y) * blockDim.y) {
      const Vec<T, V> in = load<T, V>(x, r * C + static_cast<std::int64_t>(g) * V);
      n += 1.f;
      const float inv = 1.f / n;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float xv = toFloat(in.v[v]), d = xv - mean[v];
        mean[v] += d * inv;
        m2[v] += d * (xv - mean[v]);
      }
    }
  }
  float* sMean = shared;                              // [by][width]
  float* sM2 = shared + blockDim.y * width;           // [by][width]
  float* sCount = shared + 2 * blockDim.y * width;    // [by]
#pragma unroll
  for (int v = 0; v < V; ++v) {
    sMean[ty * width + tx * V + v] = mean[v];
    sM2[ty * width + tx * V + v] = m2[v];
  }
  if (tx == 0) sCount[ty] = n;
  __syncthreads();
  int top = 1;
  while (top < static_cast<int>(blockDim.y)) top <<= 1;
  for (int half = top >> 1; half > 0; half >>= 1) {
    // Row ty merges row ty + half (which this round does not write); the counts change only after
    // every lane of the row has read them.
    const bool merging = ty < half && ty + half < static_cast<int>(blockDim.y);
    float na = 0.f, nb = 0.f;
    if (merging) {
      na = sCount[ty];
      nb = sCount[ty + half];
#pragma unroll
      for (int v = 0; v < V; ++v) {
        float nn = na, mm = sMean[ty * width + tx * V + v], qq = sM2[ty * width + tx * V + v];
        merge(nn, mm, qq, nb, sMean[(ty + half) * width + tx * V + v], sM2[(ty + half) * width + tx * V + v]);
        sMean[ty * width + tx * V + v] = mm;
        sM2[ty * width + tx * V + v] = qq;
      }
    }
    __syncthreads();
    if (merging && tx == 0) sCount[ty] = na + nb;
    __syncthreads();
  }
  if (ty == 0 && g < groups) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      pMean[static_cast<std::int64_t>(blockIdx.y) * C + g * V + v] = sMean[tx * V + v];
      pM2[static_cast<std::int64_t>(blockIdx.y) * C + g * V + v] = sM2[tx * V + v];
    }
  }
  if (ty == 0 && tx == 0 && blockIdx.x == 0) pCount[blockIdx.y] = sCount[0];
}

__device__ void finalizeChannel(int c, double n, double mean, double var, float* invstd, float eps, float momentum,
                                float* runningMean, float* runningVar) {
  if (invstd) invstd[c] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  if (runningMean) {
    const double unbiased = n > 1 ? var * n / (n - 1) : var;
    runningMean[c] = static_cast<float>((1.0 - momentum) * runningMean[c] + momentum * mean);
    runningVar[c] = static_cast<float>((1.0 - momentum) * runningVar[c] + momentum * unbiased);
  }
}

__global__ void statsMerge(int C, int parts, const float* __restrict__ pMean, const float* __restrict__ pM2,
                           const float* __restrict__ pCount, float* mean, float* var, float* invstd, float eps,
                           float momentum, float* runningMean, float* runningVar) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double n = 0, m = 0, q = 0;
  for (int p = 0; p < parts; ++p)
    merge<double>(n, m, q, pCount[p], pMean[static_cast<std::int64_t>(p) * C + c], pM2[static_cast<std::int64_t>(p) * C + c]);
  const double v = n > 0 ? q / n : 0.0;
  mean[c] = static_cast<float>(m);
  var[c] = static_cast<float>(v);
  finalizeChannel(c, n, m, v, invstd, eps, momentum, runningMean, runningVar);
}

__global__ void finalizeKernel(int C, const float* __restrict__ mean, const float* __restrict__ var, double count,
                               float* invstd, float eps, float momentum, float* runningMean, float* runningVar) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < C) finalizeChannel(c, count, mean[c], var[c], invstd, eps, momentum, runningMean, runningVar);
}

template <class T, int V, int A, bool Z>
__global__ void applyKernel(const T* __restrict__ x, const T* __restrict__ z, T* __restrict__ y, std::int64_t vecs,
                            int groups, const float* __restrict__ mean, const float* __restrict__ invstd,
                            const float* __restrict__ weight, const float* __restrict__ bias) {
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                     stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  // The channel group of vector i, advanced by the stride without a 64-bit division per vector.
  int group = static_cast<int>(first % groups);
  const int groupStep = static_cast<int>(stride % groups);
  for (std::int64_t i = first; i < vecs; i += stride) {
    const int c0 = group * V;
    group += groupStep;
    if (group >= groups) group -= groups;
    const Vec<T, V> in = load<T, V>(x, i * V);
    Vec<T, V> add;
    if (Z) add = load<T, V>(z, i * V);
    Vec<T, V> out;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int c = c0 + v;
      float o = (toFloat(in.v[v]) - mean[c]) * (invstd[c] * weight[c]) + bias[c];
      if (Z) o += toFloat(add.v[v]);
      out.v[v] = fromFloat<T>(activate<A>(o));
    }
    store<T, V>(y, i * V, out);
  }
}

// Backward partials: pSumDy, pSumDyXc [gridDim.y, C] with xc = x - mean (times invstd at the merge).
template <class T, int V, int A>
__global__ void sumsPartial(const T* __restrict__ dy, const T* __restrict__ y, const T* __restrict__ x,
                            std::int64_t rows, int C, const float* __restrict__ mean, float* __restrict__ pSumDy,
                            float* __restrict__ pSumDyXc) {
  extern __shared__ float shared[];
  const int groups = C / V, g = blockIdx.x * blockDim.x + threadIdx.x;
  const int tx = threadIdx.x, ty = threadIdx.y, width = blockDim.x * V;
  float s1[V], s2[V], mu[V];
#pragma unroll
  for (int v = 0; v < V; ++v) s1[v] = s2[v] = mu[v] = 0.f;
  if (g < groups) {
#pragma unroll
    for (int v = 0; v < V; ++v) mu[v] = mean[g * V + v];
    for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + ty; r < rows;
         r += static_cast<std::int64_t>(gridDim.y) * blockDim.y) {
      const std::int64_t at = r * C + static_cast<std::int64_t>(g) * V;
      const Vec<T, V> d = load<T, V>(dy, at), in = load<T, V>(x, at);
      Vec<T, V> out;
      if (A != static_cast<int>(Act::None)) out = load<T, V>(y, at);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        float gv = toFloat(d.v[v]);
        if (A != static_cast<int>(Act::None) && !passes<A>(toFloat(out.v[v]))) gv = 0.f;
        s1[v] += gv;
        s2[v] += gv * (toFloat(in.v[v]) - mu[v]);
      }
    }
  }
  float* a = shared;                     // [by][width]
  float* b = shared + blockDim.y * width;  // [by][width]
#pragma unroll
  for (int v = 0; v < V; ++v) {
    a[ty * width + tx * V + v] = s1[v];
    b[ty * width + tx * V + v] = s2[v];
  }
  __syncthreads();
  int top = 1;
  while (top < static_cast<int>(blockDim.y)) top <<= 1;
  for (int half = top >> 1; half > 0; half >>= 1) {
    if (ty < half && ty + half < static_cast<int>(blockDim.y)) {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        a[ty * width + tx * V + v] += a[(ty + half) * width + tx * V + v];
        b[ty * width + tx * V + v] += b[(ty + half) * width + tx * V + v];
      }
    }
    __syncthreads();
  }
  if (ty == 0 && g < groups) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      pSumDy[static_cast<std::int64_t>(blockIdx.y) * C + g * V + v] = a[tx * V + v];
      pSumDyXc[static_cast<std::int64_t>(blockIdx.y) * C + g * V + v] = b[tx * V + v];
    }
  }
}

__global__ void sumsMerge(int C, int parts, const float* __restrict__ pSumDy, const float* __restrict__ pSumDyXc,
                          const float* __restrict__ invstd, float* sumDy, float* sumDyXhat) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double s1 = 0, s2 = 0;
  for (int p = 0; p < parts; ++p) {
    s1 += pSumDy[static_cast<std::int64_t>(p) * C + c];
    s2 += pSumDyXc[static_cast<std::int64_t>(p) * C + c];
  }
  sumDy[c] = static_cast<float>(s1);
  sumDyXhat[c] = static_cast<float>(s2 * invstd[c]);
}

template <class T, int V, int A, bool DZ>
__global__ void backwardApplyKernel(const T* __restrict__ dy, const T* __restrict__ y, const T* __restrict__ x,
                                    T* __restrict__ dx, T* __restrict__ dz, std::int64_t vecs, int groups,
                                    const float* __restrict__ mean, const float* __restrict__ invstd,
                                    const float* __restrict__ weight, const float* __restrict__ sumDy,
                                    const float* __restrict__ sumDyXhat, float invCount) {
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                     stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  // The channel group of vector i, advanced by the stride without a 64-bit division per vector.
  int group = static_cast<int>(first % groups);
  const int groupStep = static_cast<int>(stride % groups);
  for (std::int64_t i = first; i < vecs; i += stride) {
    const int c0 = group * V;
    group += groupStep;
    if (group >= groups) group -= groups;
    const Vec<T, V> d = load<T, V>(dy, i * V), in = load<T, V>(x, i * V);
    Vec<T, V> out;
    if (A != static_cast<int>(Act::None)) out = load<T, V>(y, i * V);
    Vec<T, V> gx, gz;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int c = c0 + v;
      float gv = toFloat(d.v[v]);
      if (A != static_cast<int>(Act::None) && !passes<A>(toFloat(out.v[v]))) gv = 0.f;
      const float xhat = (toFloat(in.v[v]) - mean[c]) * invstd[c];
      gx.v[v] = fromFloat<T>(weight[c] * invstd[c] * (gv - sumDy[c] * invCount - xhat * sumDyXhat[c] * invCount));
      if (DZ) gz.v[v] = fromFloat<T>(gv);
    }
    store<T, V>(dx, i * V, gx);
    if (DZ) store<T, V>(dz, i * V, gz);
  }
}

// Dispatch: the element type, the vector width (16 bytes where C and the pointers allow), the
// activation and whether the residual term is present.
template <class F>
cudaError_t byType(Dtype t, F&& f) {
  switch (t) {
    case Dtype::F32: return f(float{});
    case Dtype::F16: return f(__half{});
    case Dtype::BF16: return f(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}
template <class F>
cudaError_t byAct(Act a, F&& f) {
  switch (a) {
    case Act::None: return f(std::integral_constant<int, 0>{});
    case Act::Relu: return f(std::integral_constant<int, 1>{});
    case Act::Relu6: return f(std::integral_constant<int, 2>{});
  }
  return cudaErrorInvalidValue;
}
bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }
template <class T>
int vectorWidth(int channels, std::initializer_list<const void*> ptrs) {
  constexpr int wide = 16 / sizeof(T);
  if (channels % wide != 0) return 1;
  for (const void* p : ptrs)
    if (!aligned16(p)) return 1;
  return wide;
}
int channelBlocks(int channels) { return (channels + kThreads - 1) / kThreads; }

}  // namespace

std::int64_t scratchFloats(const Shape& s) {
  const Grid g = reductionGrid(s, 1);
  return static_cast<std::int64_t>(g.gy) * (2LL * s.channels + 1);
}

cudaError_t stats(Dtype t, const void* x, const Shape& s, float* scratch, float* mean, float* var, float* invstd,
                  float eps, float momentum, float* runningMean, float* runningVar, cudaStream_t stream) {
  return byType(t, [&](auto tag) {
    using T = decltype(tag);
    const int vec = vectorWidth<T>(s.channels, {x});
    const Grid g = reductionGrid(s, vec);
    float* pMean = scratch;
    float* pM2 = scratch + static_cast<std::int64_t>(g.gy) * s.channels;
    float* pCount = scratch + 2LL * g.gy * s.channels;
    const dim3 block(g.bx, g.by), grid(g.gx, g.gy);
    const std::size_t shared = (2 * static_cast<std::size_t>(g.by) * g.bx * vec + g.by) * sizeof(float);
    if (vec == 1)
      statsPartial<T, 1><<<grid, block, shared, stream>>>(static_cast<const T*>(x), s.rows, s.channels, pMean, pM2, pCount);
    else
      statsPartial<T, 16 / sizeof(T)><<<grid, block, shared, stream>>>(static_cast<const T*>(x), s.rows, s.channels,
                                                                        pMean, pM2, pCount);
    statsMerge<<<channelBlocks(s.channels), kThreads, 0, stream>>>(s.channels, g.gy, pMean, pM2, pCount, mean, var,
                                                                     invstd, eps, momentum, runningMean, runningVar);
    return cudaGetLastError();
  });
}

cudaError_t finalize(int channels, const float* mean, const float* var, double count, float* invstd, float eps,
                     float momentum, float* runningMean, float* runningVar, cudaStream_t stream) {
  finalizeKernel<<<channelBlocks(channels), kThreads, 0, stream>>>(channels, mean, var, count, invstd, eps, momentum,
                                                                     runningMean, runningVar);
  return cudaGetLastError();
}

cudaError_t apply(Dtype t, const void* x, const void* z, void* y, const Shape& s, const float* mean,
                  const float* invstd, const float* weight, const float* bias, Act act, cudaStream_t stream) {
  return byType(t, [&](auto tag) {
    using T = decltype(tag);
    return byAct(act, [&](auto a) {
      constexpr int A = decltype(a)::value;
      const int vec = vectorWidth<T>(s.channels, {x, z, y});
      const std::int64_t vecs = s.rows * s.channels / vec;
      const int blocks = elementwiseBlocks(vecs, s.sms), groups = s.channels / vec;
      const T* xt = static_cast<const T*>(x);
      const T* zt = static_cast<const T*>(z);
      T* yt = static_cast<T*>(y);
      constexpr int W = 16 / sizeof(T);
      if (vec == 1 && z)
        applyKernel<T, 1, A, true><<<blocks, kThreads, 0, stream>>>(xt, zt, yt, vecs, groups, mean, invstd, weight, bias);
      else if (vec == 1)
        applyKernel<T, 1, A, false><<<blocks, kThreads, 0, stream>>>(xt, zt, yt, vecs, groups, mean, invstd, weight, bias);
      else if (z)
        applyKernel<T, W, A, true><<<blocks, kThreads, 0, stream>>>(xt, zt, yt, vecs, groups, mean, invstd, weight, bias);
      else
        applyKernel<T, W, A, false><<<blocks, kThreads, 0, stream>>>(xt, zt, yt, vecs, groups, mean, invstd, weight, bias);
      return cudaGetLastError();
    });
  });
}

cudaError_t backwardSums(Dtype t, const void* dy, const void* y, const void* x, const Shape& s, const float* mean,
                         const float* invstd, Act act, float* scratch, float* sumDy, float* sumDyXhat,
                         cudaStream_t stream) {
  return byType(t, [&](auto tag) {
    using T = decltype(tag);
    return byAct(act, [&](auto a) {
      constexpr int A = decltype(a)::value;
      const int vec = vectorWidth<T>(s.channels, {dy, y, x});
      const Grid g = reductionGrid(s, vec);
      float* p1 = scratch;
      float* p2 = scratch + static_cast<std::int64_t>(g.gy) * s.channels;
      const dim3 block(g.bx, g.by), grid(g.gx, g.gy);
      const std::size_t shared = 2 * static_cast<std::size_t>(g.by) * g.bx * vec * sizeof(float);
      const T* d = static_cast<const T*>(dy);
      const T* o = static_cast<const T*>(y);
      const T* in = static_cast<const T*>(x);
      if (vec == 1)
        sumsPartial<T, 1, A><<<grid, block, shared, stream>>>(d, o, in, s.rows, s.channels, mean, p1, p2);
      else
        sumsPartial<T, 16 / sizeof(T), A><<<grid, block, shared, stream>>>(d, o, in, s.rows, s.channels, mean, p1, p2);
      sumsMerge<<<channelBlocks(s.channels), kThreads, 0, stream>>>(s.channels, g.gy, p1, p2, invstd, sumDy, sumDyXhat);
      return cudaGetLastError();
    });
  });
}

cudaError_t backwardApply(Dtype t, const void* dy, const void* y, const void* x, void* dx, void* dz, const Shape& s,
                          const float* mean, const float* invstd, const float* weight, const float* sumDy,
                          const float* sumDyXhat, double count, Act act, cudaStream_t stream) {
  return byType(t, [&](auto tag) {
    using T = decltype(tag);
    return byAct(act, [&](auto a) {
      constexpr int A = decltype(a)::value;
      const int vec = vectorWidth<T>(s.channels, {dy, y, x, dx, dz});
      const std::int64_t vecs = s.rows * s.channels / vec;
      const int blocks = elementwiseBlocks(vecs, s.sms), groups = s.channels / vec;
      const float invCount = static_cast<float>(1.0 / count);
      const T* d = static_cast<const T*>(dy);
      const T* o = static_cast<const T*>(y);
      const T* in = static_cast<const T*>(x);
      T* gx = static_cast<T*>(dx);
      T* gz = static_cast<T*>(dz);
      constexpr int W = 16 / sizeof(T);
      if (vec == 1 && dz)
        backwardApplyKernel<T, 1, A, true><<<blocks, kThreads, 0, stream>>>(d, o, in, gx, gz, vecs, groups, mean, invstd,
                                                                            weight, sumDy, sumDyXhat, invCount);
      else if (vec == 1)
        backwardApplyKernel<T, 1, A, false><<<blocks, kThreads, 0, stream>>>(d, o, in, gx, gz, vecs, groups, mean, invstd,
                                                                             weight, sumDy, sumDyXhat, invCount);
      else if (dz)
        backwardApplyKernel<T, W, A, true><<<blocks, kThreads, 0, stream>>>(d, o, in, gx, gz, vecs, groups, mean, invstd,
                                                                            weight, sumDy, sumDyXhat, invCount);
      else
        backwardApplyKernel<T, W, A, false><<<blocks, kThreads, 0, stream>>>(d, o, in, gx, gz, vecs, groups, mean, invstd,
                                                                             weight, sumDy, sumDyXhat, invCount);
      return cudaGetLastError();
    });
  });
}

}  // namespace exprun::bnact
