// Purpose: the fused batch norm's CUDA kernels (interface and semantics in BnActKernels.h).
// Layout: x is [rows, C] row-major (channels_last). Every kernel but the merges runs blocks of BX
// channel groups × BY rows: a thread owns V consecutive channels (one 16-byte vector, 8 bf16/fp16
// or 4 fp32 values, where C and every pointer allow; else one value), keeps their parameters in
// registers and walks its rows with a stride of gridDim.y·BY, four rows' loads issued together.
// Reductions accumulate in float (Welford for the statistics), merge the block's rows in shared
// memory and leave one partial per (block row, channel) in scratch; one warp per channel then
// merges the partials in double (lanes over the partials, then shuffles).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "runner/nn/BnActKernels.h"

namespace exprun::bnact {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // rows whose loads a thread issues before using them

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
  if (nb == F(0)) return;
  const F total = n + nb;
  const F delta = meanb - mean;
  const F w = nb / total;
  mean += delta * w;
  m2 += m2b + delta * delta * n * w;
  n = total;
}

// Blocks of bx channel groups × by rows; gx blocks across the groups, gy down the rows.
struct Grid {
  int groups, bx, by, gx, gy;
};
// At most 8 blocks of 256 threads per multiprocessor (a full one), at least kUnroll rows a thread.
Grid gridFor(const Shape& s, int vec) {
  Grid g{};
  g.groups = s.channels / vec;
  g.bx = g.groups < 32 ? g.groups : 32;
  g.by = kThreads / g.bx;
  g.gx = (g.groups + g.bx - 1) / g.bx;
  const std::int64_t wanted = (s.rows + static_cast<std::int64_t>(g.by) * kUnroll - 1) / (static_cast<std::int64_t>(g.by) * kUnroll);
  std::int64_t cap = 8LL * (s.sms > 0 ? s.sms : 1) / g.gx;
  if (cap < 1) cap = 1;
  if (cap > 65535) cap = 65535;
  g.gy = static_cast<int>(wanted < 1 ? 1 : (wanted > cap ? cap : wanted));
  return g;
}
// Partials a reduction may leave for `s` whatever its vector width (gy is at most this).
std::int64_t maxPartials(const Shape& s) {
  const std::int64_t byRows = (s.rows + 8LL * kUnroll - 1) / (8LL * kUnroll);  // by >= 8
  const std::int64_t bySms = 8LL * (s.sms > 0 ? s.sms : 1);
  const std::int64_t m = byRows < bySms ? byRows : bySms;
  return m < 1 ? 1 : m;
}

// Loads V floats of a per-channel array at channel c0 (16-byte loads where V allows).
template <int V>
__device__ __forceinline__ void loadParams(const float* __restrict__ p, int c0, float (&out)[V]) {
  if (V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V; i += 4) {
      const float4 q = *reinterpret_cast<const float4*>(p + c0 + i);
      out[i] = q.x;
      out[i + 1] = q.y;
      out[i + 2] = q.z;
      out[i + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = p[c0 + i];
  }
}

// The rows a thread walks: r0, r0 + step, ... below rows; `body(r)` per row, kUnroll rows' `load`
// first when that many are left.
template <class Load, class Use>
__device__ __forceinline__ void walkRows(std::int64_t rows, Load&& loadRow, Use&& useRow) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.y) * blockDim.y;
  std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  for (; r + (kUnroll - 1) * step < rows; r += kUnroll * step) {
    decltype(loadRow(r)) in[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) in[u] = loadRow(r + u * step);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) useRow(r + u * step, in[u]);
  }
  for (; r < rows; r += step) useRow(r, loadRow(r));
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
    const std::int64_t col = static_cast<std::int64_t>(g) * V;
    walkRows(
        rows, [&](std::int64_t r) { return load<T, V>(x, r * C + col); },
        [&](std::int64_t, const Vec<T, V>& in) {
          n += 1.f;
          const float inv = 1.f / n;
#pragma unroll
          for (int v = 0; v < V; ++v) {
            const float xv = toFloat(in.v[v]), d = xv - mean[v];
            mean[v] += d * inv;
            m2[v] += d * (xv - mean[v]);
          }
        });
  }
  float* sMean = shared;                            // [by][width]
  float* sM2 = shared + blockDim.y * width;         // [by][width]
  float* sCount = shared + 2 * blockDim.y * width;  // [by]
#pragma unroll
  for (int v = 0; v < V; ++v) {
    sMean[ty * width + tx * V + v] = mean[v];
    sM2[ty * width + tx * V + v] = m2[v];
  }
  if (tx == 0) sCount[ty] = n;  // every lane of a row walked the same rows (tx 0 always has a group)
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

__device__ void finalizeChannel(int c, double n, double mean, double var, float* invstd, double eps, double momentum,
                                float* runningMean, float* runningVar) {
  if (invstd) invstd[c] = static_cast<float>(1.0 / sqrt(var + eps));
  if (runningMean) {
    const double unbiased = n > 1 ? var * n / (n - 1) : var;
    runningMean[c] = static_cast<float>((1.0 - momentum) * runningMean[c] + momentum * mean);
    runningVar[c] = static_cast<float>((1.0 - momentum) * runningVar[c] + momentum * unbiased);
  }
}

constexpr unsigned kFullMask = 0xffffffffu;
// One warp per channel: channel (global thread / 32), lane (thread % 32). Launch with warpBlocks(C).
__device__ __forceinline__ int warpChannel() { return static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32); }
int warpBlocks(int channels) { return (channels * 32 + kThreads - 1) / kThreads; }

__global__ void statsMerge(int C, int parts, const float* __restrict__ pMean, const float* __restrict__ pM2,
                           const float* __restrict__ pCount, float* mean, float* var, float* invstd, double eps,
                           double momentum, float* runningMean, float* runningVar) {
  const int c = warpChannel(), lane = threadIdx.x % 32;
  if (c >= C) return;  // whole warps: C is a warp boundary
  double n = 0, m = 0, q = 0;
  for (int p = lane; p < parts; p += 32)
    merge<double>(n, m, q, pCount[p], pMean[static_cast<std::int64_t>(p) * C + c], pM2[static_cast<std::int64_t>(p) * C + c]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const double nb = __shfl_down_sync(kFullMask, n, off), mb = __shfl_down_sync(kFullMask, m, off),
                 qb = __shfl_down_sync(kFullMask, q, off);
    merge<double>(n, m, q, nb, mb, qb);
  }
  if (lane != 0) return;
  const double v = n > 0 ? q / n : 0.0;
  mean[c] = static_cast<float>(m);
  var[c] = static_cast<float>(v);
  finalizeChannel(c, n, m, v, invstd, eps, momentum, runningMean, runningVar);
}

__global__ void finalizeKernel(int C, const float* __restrict__ mean, const float* __restrict__ var, double count,
                               const double* __restrict__ countOnDevice, float* invstd, double eps, double momentum,
                               float* runningMean, float* runningVar) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const double n = countOnDevice ? *countOnDevice : count;
  if (c < C) finalizeChannel(c, n, mean[c], var[c], invstd, eps, momentum, runningMean, runningVar);
}

template <class T, int V, int A, bool Z>
__global__ void applyKernel(const T* __restrict__ x, const T* __restrict__ z, T* __restrict__ y, std::int64_t rows,
                            int C, const float* __restrict__ mean, const float* __restrict__ invstd,
                            const float* __restrict__ weight, const float* __restrict__ bias) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= C / V) return;
  const int c0 = g * V;
  float mu[V], scale[V], shift[V];
  loadParams<V>(mean, c0, mu);
  loadParams<V>(invstd, c0, scale);
  loadParams<V>(weight, c0, shift);
#pragma unroll
  for (int v = 0; v < V; ++v) scale[v] *= shift[v];
  loadParams<V>(bias, c0, shift);
  struct In {
    Vec<T, V> x, z;
  };
  walkRows(
      rows,
      [&](std::int64_t r) {
        In in;
        in.x = load<T, V>(x, r * C + c0);
        if (Z) in.z = load<T, V>(z, r * C + c0);
        return in;
      },
      [&](std::int64_t r, const In& in) {
        Vec<T, V> out;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          float o = (toFloat(in.x.v[v]) - mu[v]) * scale[v] + shift[v];
          if (Z) o += toFloat(in.z.v[v]);
          out.v[v] = fromFloat<T>(activate<A>(o));
        }
        store<T, V>(y, r * C + c0, out);
      });
}

// One row of the backward's inputs at `at`: dy, x and (with an activation) the output y.
template <class T, int V>
struct BackwardRow {
  Vec<T, V> d, x, y;
};
template <class T, int V, int A>
__device__ __forceinline__ BackwardRow<T, V> loadBackwardRow(const T* dy, const T* x, const T* y, std::int64_t at) {
  BackwardRow<T, V> in;
  in.d = load<T, V>(dy, at);
  in.x = load<T, V>(x, at);
  if (A != static_cast<int>(Act::None)) in.y = load<T, V>(y, at);
  return in;
}
// Value v's incoming gradient, zero where the activation passed none (its mask at the output).
template <class T, int V, int A>
__device__ __forceinline__ float maskedGrad(const BackwardRow<T, V>& in, int v) {
  const float g = toFloat(in.d.v[v]);
  return A != static_cast<int>(Act::None) && !passes<A>(toFloat(in.y.v[v])) ? 0.f : g;
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
  for (int v = 0; v < V; ++v) s1[v] = s2[v] = 0.f;
  if (g < groups) {
    const int c0 = g * V;
    loadParams<V>(mean, c0, mu);
    walkRows(
        rows, [&](std::int64_t r) { return loadBackwardRow<T, V, A>(dy, x, y, r * C + c0); },
        [&](std::int64_t, const BackwardRow<T, V>& in) {
#pragma unroll
          for (int v = 0; v < V; ++v) {
            const float gv = maskedGrad<T, V, A>(in, v);
            s1[v] += gv;
            s2[v] += gv * (toFloat(in.x.v[v]) - mu[v]);
          }
        });
  }
  float* a = shared;                       // [by][width]
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
  const int c = warpChannel(), lane = threadIdx.x % 32;
  if (c >= C) return;
  double s1 = 0, s2 = 0;
  for (int p = lane; p < parts; p += 32) {
    s1 += pSumDy[static_cast<std::int64_t>(p) * C + c];
    s2 += pSumDyXc[static_cast<std::int64_t>(p) * C + c];
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    s1 += __shfl_down_sync(kFullMask, s1, off);
    s2 += __shfl_down_sync(kFullMask, s2, off);
  }
  if (lane != 0) return;
  sumDy[c] = static_cast<float>(s1);
  sumDyXhat[c] = static_cast<float>(s2 * invstd[c]);
}

template <class T, int V, int A, bool DZ>
__global__ void backwardApplyKernel(const T* __restrict__ dy, const T* __restrict__ y, const T* __restrict__ x,
                                    T* __restrict__ dx, T* __restrict__ dz, std::int64_t rows, int C,
                                    const float* __restrict__ mean, const float* __restrict__ invstd,
                                    const float* __restrict__ weight, const float* __restrict__ sumDy,
                                    const float* __restrict__ sumDyXhat, float invCountGiven,
                                    const double* __restrict__ countOnDevice) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= C / V) return;
  const float invCount = countOnDevice ? static_cast<float>(1.0 / *countOnDevice) : invCountGiven;
  const int c0 = g * V;
  // dx = k·(g - meanDy - x̂·meanDyXhat), x̂ = (x - mean)·invstd, k = weight·invstd.
  float mu[V], is[V], k[V], md[V], mx[V];
  loadParams<V>(mean, c0, mu);
  loadParams<V>(invstd, c0, is);
  loadParams<V>(weight, c0, k);
  loadParams<V>(sumDy, c0, md);
  loadParams<V>(sumDyXhat, c0, mx);
#pragma unroll
  for (int v = 0; v < V; ++v) {
    k[v] *= is[v];
    md[v] *= invCount;
    mx[v] *= invCount;
  }
  walkRows(
      rows, [&](std::int64_t r) { return loadBackwardRow<T, V, A>(dy, x, y, r * C + c0); },
      [&](std::int64_t r, const BackwardRow<T, V>& in) {
        Vec<T, V> gx, gz;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const float gv = maskedGrad<T, V, A>(in, v);
          const float xhat = (toFloat(in.x.v[v]) - mu[v]) * is[v];
          gx.v[v] = fromFloat<T>(k[v] * (gv - md[v] - xhat * mx[v]));
          if (DZ) gz.v[v] = fromFloat<T>(gv);
        }
        store<T, V>(dx, r * C + c0, gx);
        if (DZ) store<T, V>(dz, r * C + c0, gz);
      });
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
template <class F>
cudaError_t byBool(bool b, F&& f) {
  return b ? f(std::true_type{}) : f(std::false_type{});
}
bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }
// 16 bytes a vector where C and every pointer (the per-channel float arrays too) allow, else 1.
template <class T>
int vectorWidth(int channels, std::initializer_list<const void*> ptrs) {
  constexpr int wide = 16 / sizeof(T);
  if (channels % wide != 0) return 1;
  for (const void* p : ptrs)
    if (!aligned16(p)) return 1;
  return wide;
}
// Runs f(integral_constant<int, V>) with V the vector width chosen.
template <class T, class F>
cudaError_t byWidth(int vec, F&& f) {
  if (vec == 1) return f(std::integral_constant<int, 1>{});
  return f(std::integral_constant<int, 16 / static_cast<int>(sizeof(T))>{});
}
int channelBlocks(int channels) { return (channels + kThreads - 1) / kThreads; }

}  // namespace

std::int64_t scratchFloats(const Shape& s) { return maxPartials(s) * (2LL * s.channels + 1); }

cudaError_t stats(Dtype t, const void* x, const Shape& s, float* scratch, float* mean, float* var, float* invstd,
                  double eps, double momentum, float* runningMean, float* runningVar, cudaStream_t stream) {
  return byType(t, [&](auto tag) {
    using T = decltype(tag);
    const int vec = vectorWidth<T>(s.channels, {x});
    const Grid g = gridFor(s, vec);
    float* pMean = scratch;
    float* pM2 = scratch + static_cast<std::int64_t>(g.gy) * s.channels;
    float* pCount = scratch + 2LL * g.gy * s.channels;
    const dim3 block(g.bx, g.by), grid(g.gx, g.gy);
    const std::size_t shared = (2 * static_cast<std::size_t>(g.by) * g.bx * vec + g.by) * sizeof(float);
    byWidth<T>(vec, [&](auto w) {
      statsPartial<T, decltype(w)::value><<<grid, block, shared, stream>>>(static_cast<const T*>(x), s.rows,
                                                                           s.channels, pMean, pM2, pCount);
      return cudaSuccess;
    });
    statsMerge<<<warpBlocks(s.channels), kThreads, 0, stream>>>(s.channels, g.gy, pMean, pM2, pCount, mean, var,
                                                                  invstd, eps, momentum, runningMean, runningVar);
    return cudaGetLastError();
  });
}

cudaError_t finalize(int channels, const float* mean, const float* var, double count, const double* countOnDevice,
                     float* invstd, double eps, double momentum, float* runningMean, float* runningVar,
                     cudaStream_t stream) {
  finalizeKernel<<<channelBlocks(channels), kThreads, 0, stream>>>(channels, mean, var, count, countOnDevice, invstd,
                                                                     eps, momentum, runningMean, runningVar);
  return cudaGetLastError();
}

cudaError_t apply(Dtype t, const void* x, const void* z, void* y, const Shape& s, const float* mean,
                  const float* invstd, const float* weight, const float* bias, Act act, cudaStream_t stream) {
  return byType(t, [&](auto tag) {
    using T = decltype(tag);
    const int vec = vectorWidth<T>(s.channels, {x, z, y, mean, invstd, weight, bias});
    const Grid g = gridFor(s, vec);
    const dim3 block(g.bx, g.by), grid(g.gx, g.gy);
    return byAct(act, [&](auto a) {
      return byBool(z != nullptr, [&](auto withZ) {
        return byWidth<T>(vec, [&](auto w) {
          applyKernel<T, decltype(w)::value, decltype(a)::value, decltype(withZ)::value><<<grid, block, 0, stream>>>(
              static_cast<const T*>(x), static_cast<const T*>(z), static_cast<T*>(y), s.rows, s.channels, mean,
              invstd, weight, bias);
          return cudaGetLastError();
        });
      });
    });
  });
}

cudaError_t backwardSums(Dtype t, const void* dy, const void* y, const void* x, const Shape& s, const float* mean,
                         const float* invstd, Act act, float* scratch, float* sumDy, float* sumDyXhat,
                         cudaStream_t stream) {
  return byType(t, [&](auto tag) {
    using T = decltype(tag);
    const int vec = vectorWidth<T>(s.channels, {dy, y, x, mean});
    const Grid g = gridFor(s, vec);
    float* p1 = scratch;
    float* p2 = scratch + static_cast<std::int64_t>(g.gy) * s.channels;
    const dim3 block(g.bx, g.by), grid(g.gx, g.gy);
    const std::size_t shared = 2 * static_cast<std::size_t>(g.by) * g.bx * vec * sizeof(float);
    byAct(act, [&](auto a) {
      return byWidth<T>(vec, [&](auto w) {
        sumsPartial<T, decltype(w)::value, decltype(a)::value><<<grid, block, shared, stream>>>(
            static_cast<const T*>(dy), static_cast<const T*>(y), static_cast<const T*>(x), s.rows, s.channels, mean,
            p1, p2);
        return cudaSuccess;
      });
    });
    sumsMerge<<<warpBlocks(s.channels), kThreads, 0, stream>>>(s.channels, g.gy, p1, p2, invstd, sumDy, sumDyXhat);
    return cudaGetLastError();
  });
}

cudaError_t backwardApply(Dtype t, const void* dy, const void* y, const void* x, void* dx, void* dz, const Shape& s,
                          const float* mean, const float* invstd, const float* weight, const float* sumDy,
                          const float* sumDyXhat, double count, const double* countOnDevice, Act act,
                          cudaStream_t stream) {
  return byType(t, [&](auto tag) {
    using T = decltype(tag);
    const int vec = vectorWidth<T>(s.channels, {dy, y, x, dx, dz, mean, invstd, weight, sumDy, sumDyXhat});
    const Grid g = gridFor(s, vec);
    const dim3 block(g.bx, g.by), grid(g.gx, g.gy);
    const float invCount = countOnDevice ? 0.0f : static_cast<float>(1.0 / count);
    return byAct(act, [&](auto a) {
      return byBool(dz != nullptr, [&](auto withDz) {
        return byWidth<T>(vec, [&](auto w) {
          backwardApplyKernel<T, decltype(w)::value, decltype(a)::value, decltype(withDz)::value>
              <<<grid, block, 0, stream>>>(static_cast<const T*>(dy), static_cast<const T*>(y),
                                           static_cast<const T*>(x), static_cast<T*>(dx), static_cast<T*>(dz), s.rows,
                                           s.channels, mean, invstd, weight, sumDy, sumDyXhat, invCount,
                                           countOnDevice);
          return cudaGetLastError();
        });
      });
    });
  });
}

}  // namespace exprun::bnact
