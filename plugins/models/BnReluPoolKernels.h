// Purpose: the loops of the fused batch norm -> ReLU -> 2x2 max-pool (BnReluPool.h), on raw float
// planes and without LibTorch, so that bench/ can time them alone. Four pooling windows at a time in
// GCC/Clang vector extensions (SSE on x86-64, NEON on ARM), so that the argmax selections run
// without branches: with branches, random-looking activations cost about ten times as much (a
// mispredicted branch per comparison).
#pragma once

#include <cstdint>
#include <cstring>

namespace exprun::kernels {

// Argmax byte of a pooled output: 0..3 = position in its window (row-major), kInactive = the
// window's maximum is not positive (ReLU passes no gradient).
constexpr std::uint8_t kInactive = 4;

// One plane's shape: input h x w, pooled h/2 x w/2 (floor).
struct PlaneShape {
  std::int64_t h, w;
  std::int64_t oh() const { return h / 2; }
  std::int64_t ow() const { return w / 2; }
};

namespace detail {

typedef float F4 __attribute__((vector_size(16)));
typedef std::int32_t I4 __attribute__((vector_size(16)));
typedef double D2 __attribute__((vector_size(16)));

inline F4 load(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, F4 v) { std::memcpy(p, &v, sizeof v); }
inline F4 select(I4 mask, F4 a, F4 b) { return reinterpret_cast<F4>((reinterpret_cast<I4>(a) & mask) | (reinterpret_cast<I4>(b) & ~mask)); }
inline I4 select(I4 mask, I4 a, I4 b) { return (a & mask) | (b & ~mask); }
#if defined(__clang__)
inline F4 even(F4 a, F4 b) { return __builtin_shufflevector(a, b, 0, 2, 4, 6); }
inline F4 odd(F4 a, F4 b) { return __builtin_shufflevector(a, b, 1, 3, 5, 7); }
inline F4 interleaveLow(F4 a, F4 b) { return __builtin_shufflevector(a, b, 0, 4, 1, 5); }
inline F4 interleaveHigh(F4 a, F4 b) { return __builtin_shufflevector(a, b, 2, 6, 3, 7); }
inline D2 low(F4 a) { return __builtin_convertvector(__builtin_shufflevector(a, a, 0, 1), D2); }
inline D2 high(F4 a) { return __builtin_convertvector(__builtin_shufflevector(a, a, 2, 3), D2); }
#else
inline F4 even(F4 a, F4 b) { return __builtin_shuffle(a, b, I4{0, 2, 4, 6}); }
inline F4 odd(F4 a, F4 b) { return __builtin_shuffle(a, b, I4{1, 3, 5, 7}); }
inline F4 interleaveLow(F4 a, F4 b) { return __builtin_shuffle(a, b, I4{0, 4, 1, 5}); }
inline F4 interleaveHigh(F4 a, F4 b) { return __builtin_shuffle(a, b, I4{2, 6, 3, 7}); }
inline D2 low(F4 a) { return D2{a[0], a[1]}; }
inline D2 high(F4 a) { return D2{a[2], a[3]}; }
#endif

// Four 2x2 windows side by side: v[k] holds window position k (row-major) of each.
struct Windows {
  F4 v[4];
};
inline Windows windowsAt(const float* r0, const float* r1) {
  const F4 a = load(r0), b = load(r0 + 4), c = load(r1), d = load(r1 + 4);
  return {{even(a, b), odd(a, b), even(c, d), odd(c, d)}};
}

// Each lane's value at its argmax position q (0..3; any other q gives position 3's value).
inline F4 picked(Windows x, I4 q) {
  F4 v = x.v[3];
  for (int k = 2; k >= 0; --k) v = select(q == I4{k, k, k, k}, x.v[k], v);
  return v;
}

// The four windows' pooled, rectified outputs and argmax bytes (libtorch's max-pool order: the
// first maximum wins, a NaN wins over numbers and stays).
inline void pool(const Windows& x, F4 scale, F4 shift, F4& out, I4& argmax) {
  F4 m = x.v[0] * scale + shift;
  I4 q = {0, 0, 0, 0};
  for (int k = 1; k < 4; ++k) {
    const F4 v = x.v[k] * scale + shift;
    const I4 t = (v > m) | (v != v);
    m = select(t, v, m);
    q = select(t, I4{k, k, k, k}, q);
  }
  const I4 positive = m > F4{0, 0, 0, 0};
  out = select(positive | (m != m), m, F4{0, 0, 0, 0});
  argmax = select(positive | (m != m), q, I4{kInactive, kInactive, kInactive, kInactive});  // ReLU's backward passes NaN
}

// Runs body(p0, p1, at, first, count) over a row pair's windows four at a time: the windows at..at+3
// start at p0/p1, lanes [first, count) are windows not seen before. A last, partial group re-reads
// the four windows that end the row (lanes below `first` were seen, and the values written for
// them again are the same); a row of fewer than four windows reads zero-padded copies (count < 4:
// only `count` windows may be read or written).
template <typename Body>
void forEachGroup(const float* r0, const float* r1, std::int64_t ow, Body&& body) {
  if (ow < 4) {
    float p0[8] = {0, 0, 0, 0, 0, 0, 0, 0}, p1[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(p0, r0, sizeof(float) * 2 * ow);
    std::memcpy(p1, r1, sizeof(float) * 2 * ow);
    body(p0, p1, std::int64_t{0}, 0, static_cast<int>(ow));
    return;
  }
  std::int64_t o = 0;
  for (; o + 4 <= ow; o += 4) body(r0 + 2 * o, r1 + 2 * o, o, 0, 4);
  if (o < ow) body(r0 + 2 * (ow - 4), r1 + 2 * (ow - 4), ow - 4, static_cast<int>(4 - (ow - o)), 4);
}

inline F4 loadFirst(const float* p, int n) {
  if (n == 4) return load(p);
  F4 v = {0, 0, 0, 0};
  for (int i = 0; i < n; ++i) v[i] = p[i];
  return v;
}

inline I4 loadBytes(const std::uint8_t* p, int n) {
  if (n == 4) {
    std::uint32_t bytes;
    std::memcpy(&bytes, p, 4);
    const auto b = static_cast<std::int32_t>(bytes);
    return (I4{b, b, b, b} >> I4{0, 8, 16, 24}) & I4{0xff, 0xff, 0xff, 0xff};
  }
  I4 q = {kInactive, kInactive, kInactive, kInactive};
  for (int i = 0; i < n; ++i) q[i] = p[i];
  return q;
}

inline bool anyLane(I4 mask) { return (mask[0] | mask[1] | mask[2] | mask[3]) != 0; }

// The pooled gradient and argmax bytes of a group (count < 4: the rest zero / inactive).
inline void loadGroup(const float* gradOut, const std::uint8_t* argmax, int count, F4& g, I4& q) {
  if (count == 4) {
    g = load(gradOut);
    q = loadBytes(argmax, 4);
    return;
  }
  g = F4{0, 0, 0, 0};
  q = I4{kInactive, kInactive, kInactive, kInactive};
  for (int i = 0; i < count; ++i) {
    g[i] = gradOut[i];
    q[i] = argmax[i];
  }
}

inline void storeFirst(float* p, F4 v, int n) {
  if (n == 4) {
    store(p, v);
  } else {
    for (int i = 0; i < n; ++i) p[i] = v[i];
  }
}

inline void storeBytes(std::uint8_t* p, I4 q, int n) {
  if (n == 4) {
    const std::uint32_t bytes = static_cast<std::uint32_t>(q[0] | (q[1] << 8) | (q[2] << 16) | (q[3] << 24));
    std::memcpy(p, &bytes, 4);
  } else {
    for (int i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(q[i]);
  }
}

}  // namespace detail

// Sum of p[0..len) in double (eight accumulators, vectorised).
inline double sumOf(const float* p, std::int64_t len) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= len; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += p[i + l];
  double s = 0;
  for (; i < len; ++i) s += p[i];
  for (double a : acc) s += a;
  return s;
}

// Sum of (p[i] - mean)^2 in double.
inline double squaredDeviationsOf(const float* p, std::int64_t len, double mean) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= len; i += 8)
    for (int l = 0; l < 8; ++l) {
      const double d = static_cast<double>(p[i + l]) - mean;
      acc[l] += d * d;
    }
  double s = 0;
  for (; i < len; ++i) {
    const double d = static_cast<double>(p[i]) - mean;
    s += d * d;
  }
  for (double a : acc) s += a;
  return s;
}

// out = max-pool(relu(x * scale + shift)) of one plane; argmax (may be null) gets the bytes.
inline void poolPlane(const float* x, float* out, std::uint8_t* argmax, PlaneShape s, float scale, float shift) {
  using namespace detail;
  const F4 sc = {scale, scale, scale, scale}, sh = {shift, shift, shift, shift};
  for (std::int64_t oh = 0; oh < s.oh(); ++oh) {
    const float* r0 = x + 2 * oh * s.w;
    float* o = out + oh * s.ow();
    std::uint8_t* a = argmax ? argmax + oh * s.ow() : nullptr;
    forEachGroup(r0, r0 + s.w, s.ow(), [&](const float* p0, const float* p1, std::int64_t at, int, int n) {
      F4 y;
      I4 q;
      pool(windowsAt(p0, p1), sc, sh, y, q);
      storeFirst(o + at, y, n);
      if (a) storeBytes(a + at, q, n);
    });
  }
}

// Batch norm backward's two sums over one plane's gradient-receiving positions: sum of the pooled
// gradient and sum of gradient * (x - mean), accumulated in double.
inline void gradientSums(const float* x, const float* gradOut, const std::uint8_t* argmax, PlaneShape s, double mean,
                         double& sumGrad, double& dot) {
  using namespace detail;
  D2 sg = {0, 0}, dt = {0, 0};
  const D2 mu = {mean, mean};
  for (std::int64_t oh = 0; oh < s.oh(); ++oh) {
    const float* r0 = x + 2 * oh * s.w;
    const float* go = gradOut + oh * s.ow();
    const std::uint8_t* a = argmax + oh * s.ow();
    forEachGroup(r0, r0 + s.w, s.ow(), [&](const float* p0, const float* p1, std::int64_t at, int first, int n) {
      const Windows w = windowsAt(p0, p1);
      F4 g;
      I4 q;
      loadGroup(go + at, a + at, n, g, q);
      if (first > 0) q = select(I4{0, 1, 2, 3} >= I4{first, first, first, first}, q, I4{kInactive, kInactive, kInactive, kInactive});
      const F4 x = picked(w, q);
      g = select(q != I4{kInactive, kInactive, kInactive, kInactive}, g, F4{0, 0, 0, 0});
      const D2 gl = low(g), gh = high(g);
      sg += gl + gh;
      dt += gl * (low(x) - mu) + gh * (high(x) - mu);
    });
  }
  sumGrad += sg[0] + sg[1];
  dot += dt[0] + dt[1];
}

// Batch norm's input gradient of one plane: gradIn = (dy - meanGrad - (x - mean) * k) * w, where
// dy is the pooled gradient at each window's argmax and 0 elsewhere (also on a trailing odd
// row/column, which the pool drops).
inline void inputGradient(const float* x, const float* gradOut, const std::uint8_t* argmax, float* gradIn, PlaneShape s,
                          float meanGrad, float mean, float k, float w) {
  using namespace detail;
  const F4 mg = {meanGrad, meanGrad, meanGrad, meanGrad}, mu = {mean, mean, mean, mean}, kk = {k, k, k, k},
           ww = {w, w, w, w}, zero = {0, 0, 0, 0};
  for (std::int64_t oh = 0; oh < s.oh(); ++oh) {
    const float* r0 = x + 2 * oh * s.w;
    float* d0 = gradIn + 2 * oh * s.w;
    float* d1 = d0 + s.w;
    const float* go = gradOut + oh * s.ow();
    const std::uint8_t* a = argmax + oh * s.ow();
    forEachGroup(r0, r0 + s.w, s.ow(), [&](const float* p0, const float* p1, std::int64_t at, int, int n) {
      const Windows xw = windowsAt(p0, p1);
      F4 g;
      I4 q;
      loadGroup(go + at, a + at, n, g, q);
      F4 d[4];
      for (int k4 = 0; k4 < 4; ++k4) {
        const F4 dy = select(q == I4{k4, k4, k4, k4}, g, zero);
        d[k4] = (dy - mg - (xw.v[k4] - mu) * kk) * ww;
      }
      const F4 row0[2] = {interleaveLow(d[0], d[1]), interleaveHigh(d[0], d[1])};
      const F4 row1[2] = {interleaveLow(d[2], d[3]), interleaveHigh(d[2], d[3])};
      const int values = 2 * n;
      storeFirst(d0 + 2 * at, row0[0], values < 4 ? values : 4);
      storeFirst(d1 + 2 * at, row1[0], values < 4 ? values : 4);
      if (values > 4) {
        storeFirst(d0 + 2 * at + 4, row0[1], values - 4);
        storeFirst(d1 + 2 * at + 4, row1[1], values - 4);
      }
    });
    if (s.w % 2 == 1) {  // the column the pool drops
      d0[s.w - 1] = (-meanGrad - (r0[s.w - 1] - mean) * k) * w;
      d1[s.w - 1] = (-meanGrad - (r0[2 * s.w - 1] - mean) * k) * w;
    }
  }
  if (s.h % 2 == 1) {  // the row the pool drops
    const float* xr = x + (s.h - 1) * s.w;
    float* dr = gradIn + (s.h - 1) * s.w;
    for (std::int64_t i = 0; i < s.w; ++i) dr[i] = (-meanGrad - (xr[i] - mean) * k) * w;
  }
}

// ---- channels_last (NHWC) planes: a sample is h x w positions of c contiguous channels, so four
// channels make a vector and no shuffles are needed. Per-channel figures are arrays of c.

struct NhwcShape {
  std::int64_t h, w, c;
  std::int64_t oh() const { return h / 2; }
  std::int64_t ow() const { return w / 2; }
};

// Adds one sample's per-channel sums of (x - k) and (x - k)^2 to sum/squares (k: a shift per
// channel close to its values, so that one pass in double keeps the variance exact enough).
inline void channelMoments(const float* x, NhwcShape s, const float* k, double* sum, double* squares) {
  for (std::int64_t p = 0; p < s.h * s.w; ++p) {
    const float* v = x + p * s.c;
    for (std::int64_t c = 0; c < s.c; ++c) {
      const double d = static_cast<double>(v[c]) - k[c];
      sum[c] += d;
      squares[c] += d * d;
    }
  }
}

// A window of a channels_last sample: its four positions' values start at p[0..3] (row-major),
// `channels` apart within a row, channel c at p[k] + c.
struct WindowNhwc {
  const float* p[4];
  // The four positions' values at channels [c, c + n), the lanes past n 0.
  detail::Windows at(std::int64_t c, int n) const {
    return {{detail::loadFirst(p[0] + c, n), detail::loadFirst(p[1] + c, n), detail::loadFirst(p[2] + c, n),
             detail::loadFirst(p[3] + c, n)}};
  }
};

// Runs body(window, out, c, n) over one sample's pooling windows and their groups of four
// channels [c, c + n) (n < 4 only for the last group); out = the offset of the window's first
// channel in the pooled output (and argmax). The body loads what it needs.
template <typename Body>
void forEachWindowNhwc(const float* x, NhwcShape s, Body&& body) {
  for (std::int64_t oh = 0; oh < s.oh(); ++oh)
    for (std::int64_t ow = 0; ow < s.ow(); ++ow) {
      const float* p0 = x + (2 * oh * s.w + 2 * ow) * s.c;
      const float* p2 = p0 + s.w * s.c;
      const WindowNhwc window = {{p0, p0 + s.c, p2, p2 + s.c}};
      const std::int64_t out = (oh * s.ow() + ow) * s.c;
      for (std::int64_t c = 0; c < s.c; c += 4) body(window, out, c, static_cast<int>(s.c - c < 4 ? s.c - c : 4));
    }
}

// out = max-pool(relu(x * scale + shift)) of one sample, per channel scale/shift; argmax (may be
// null) gets the bytes, laid out as out.
inline void poolNhwc(const float* x, float* out, std::uint8_t* argmax, NhwcShape s, const float* scale,
                     const float* shift) {
  using namespace detail;
  forEachWindowNhwc(x, s, [&](const WindowNhwc& w, std::int64_t at, std::int64_t c, int n) {
    F4 y;
    I4 q;
    pool(w.at(c, n), loadFirst(scale + c, n), loadFirst(shift + c, n), y, q);
    storeFirst(out + at + c, y, n);
    if (argmax) storeBytes(argmax + at + c, q, n);
  });
}

// Adds one sample's per-channel batch norm backward sums over the gradient-receiving positions:
// sumGrad[c] += dy, dot[c] += dy * (x - mean[c]).
inline void gradientSumsNhwc(const float* x, const float* gradOut, const std::uint8_t* argmax, NhwcShape s,
                             const double* mean, double* sumGrad, double* dot) {
  using namespace detail;
  forEachWindowNhwc(x, s, [&](const WindowNhwc& w, std::int64_t at, std::int64_t c, int n) {
    const I4 q = loadBytes(argmax + at + c, n);
    const I4 active = q != I4{kInactive, kInactive, kInactive, kInactive};
    if (!anyLane(active)) return;  // no channel of this window receives a gradient
    const F4 g = select(active, loadFirst(gradOut + at + c, n), F4{0, 0, 0, 0});
    const F4 v = picked(w.at(c, n), q);
    for (int i = 0; i < n; ++i) {
      const double gi = g[i];
      sumGrad[c + i] += gi;
      dot[c + i] += gi * (static_cast<double>(v[i]) - mean[c + i]);
    }
  });
}

// Batch norm's input gradient of one sample, per channel: (dy - meanGrad - (x - mean) * proj) * scale,
// dy the pooled gradient at each window's argmax and 0 elsewhere (and on a dropped odd row/column).
inline void inputGradientNhwc(const float* x, const float* gradOut, const std::uint8_t* argmax, float* gradIn,
                              NhwcShape s, const float* meanGrad, const float* mean, const float* proj,
                              const float* scale) {
  using namespace detail;
  const F4 zero = {0, 0, 0, 0};
  forEachWindowNhwc(x, s, [&](const WindowNhwc& w, std::int64_t at, std::int64_t c, int n) {
    const I4 q = loadBytes(argmax + at + c, n);
    const F4 g = loadFirst(gradOut + at + c, n), mg = loadFirst(meanGrad + c, n), mu = loadFirst(mean + c, n),
             pj = loadFirst(proj + c, n), sc = loadFirst(scale + c, n);
    for (int k = 0; k < 4; ++k) {
      const F4 dy = select(q == I4{k, k, k, k}, g, zero);
      const F4 xv = loadFirst(w.p[k] + c, n);
      storeFirst(gradIn + (w.p[k] - x) + c, (dy - mg - (xv - mu) * pj) * sc, n);
    }
  });
  auto noGradient = [&](std::int64_t position) {  // a position outside every window
    for (std::int64_t c = 0; c < s.c; ++c)
      gradIn[position * s.c + c] = (-meanGrad[c] - (x[position * s.c + c] - mean[c]) * proj[c]) * scale[c];
  };
  if (s.w % 2 == 1)  // the column the pool drops (in the rows the windows cover; the dropped row below)
    for (std::int64_t row = 0; row < 2 * s.oh(); ++row) noGradient(row * s.w + s.w - 1);
  if (s.h % 2 == 1)
    for (std::int64_t i = 0; i < s.w; ++i) noGradient((s.h - 1) * s.w + i);
}

}  // namespace exprun::kernels
