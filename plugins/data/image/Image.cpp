// Purpose: JPEG/PNG decoding of a crop region and its one-pass resample + flip + normalise.
#include "plugins/data/image/Image.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>

// jpeglib.h needs FILE and size_t declared first.
#include <jerror.h>
#include <jpeglib.h>
#ifndef LIBJPEG_TURBO_VERSION
#error "exprun needs libjpeg-turbo's libjpeg (jpeg_crop_scanline, jpeg_skip_scanlines): Debian's libjpeg62-turbo-dev"
#endif

namespace exprun {

ImageFormat detectImageFormat(const std::uint8_t* d, std::size_t n) {
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return ImageFormat::Jpeg;
  static const std::uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (n >= 8 && std::memcmp(d, kPng, 8) == 0) return ImageFormat::Png;
  return ImageFormat::Unknown;
}

void readImageFile(const std::string& path, std::vector<std::uint8_t>& buf) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw ImageError(path + ": cannot open: " + std::strerror(errno));
  buf.clear();
  std::uint8_t chunk[1 << 16];
  std::size_t got;
  while ((got = std::fread(chunk, 1, sizeof chunk, f)) > 0) buf.insert(buf.end(), chunk, chunk + got);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw ImageError(path + ": read error");
}

namespace {

// ---- JPEG through libjpeg-turbo's libjpeg API --------------------------------------------------
// libjpeg reports fatal errors through error_exit, which must not return: it longjmps back into the
// method that called libjpeg. Those methods hold no C++ objects with destructors.
struct JpegErrors {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {0};
  bool truncated = false;
};

void jpegErrorExit(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErrors*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings: "premature end of file" marks a truncated image; recoverable ones (e.g. extraneous
// bytes before a marker, common in real photo collections) are ignored as Pillow does.
void jpegEmitMessage(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) reinterpret_cast<JpegErrors*>(c->err)->truncated = true;
}

class JpegDecoder {
 public:
  JpegDecoder(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {
    cinfo_.err = jpeg_std_error(&err_.pub);
    err_.pub.error_exit = jpegErrorExit;
    err_.pub.emit_message = jpegEmitMessage;
  }
  ~JpegDecoder() {
    if (created_) jpeg_destroy_decompress(&cinfo_);
  }
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  const char* message() const { return err_.message; }
  bool truncated() const { return err_.truncated; }
  int width() const { return static_cast<int>(cinfo_.image_width); }
  int height() const { return static_cast<int>(cinfo_.image_height); }
  bool cmyk() const { return cinfo_.jpeg_color_space == JCS_CMYK || cinfo_.jpeg_color_space == JCS_YCCK; }
  bool adobeInverted() const { return cinfo_.saw_Adobe_marker != 0; }
  const jpeg_decompress_struct& info() const { return cinfo_; }
  int components() const { return cmyk() ? 4 : 3; }

  bool readHeader() {
    if (setjmp(err_.jump)) return false;
    jpeg_create_decompress(&cinfo_);  // may fail (out of memory): inside the setjmp
    created_ = true;
    jpeg_mem_src(&cinfo_, data_, static_cast<unsigned long>(size_));
    jpeg_read_header(&cinfo_, TRUE);
    return true;
  }

  // Output size at scale num/8 (libjpeg rounds up).
  bool scaledSize(int num, int* w, int* h) {
    if (setjmp(err_.jump)) return false;
    cinfo_.scale_num = static_cast<unsigned>(num);
    cinfo_.scale_denom = 8;
    cinfo_.out_color_space = cmyk() ? JCS_CMYK : JCS_RGB;
    jpeg_calc_output_dimensions(&cinfo_);
    *w = static_cast<int>(cinfo_.output_width);
    *h = static_cast<int>(cinfo_.output_height);
    return true;
  }

  // Decodes rows [row0, row1) and at least columns [col0, col1) of the scaled image into `buf`
  // (rows of `*cols` pixels starting at column `*colStart`; buf holds the full width).
  bool decodeRegion(int col0, int col1, int row0, int row1, std::uint8_t* buf, int* colStart, int* cols) {
    if (setjmp(err_.jump)) return false;
    jpeg_start_decompress(&cinfo_);
    JDIMENSION x = static_cast<JDIMENSION>(col0), w = static_cast<JDIMENSION>(col1 - col0);
    if (w < cinfo_.output_width) jpeg_crop_scanline(&cinfo_, &x, &w);
    *colStart = static_cast<int>(x);
    *cols = static_cast<int>(cinfo_.output_width);  // the cropped width
    if (row0 > 0) jpeg_skip_scanlines(&cinfo_, static_cast<JDIMENSION>(row0));
    const std::size_t stride = static_cast<std::size_t>(cinfo_.output_width) * cinfo_.output_components;
    for (int r = row0; r < row1;) {
      JSAMPROW rows[8];
      int k = 0;
      for (; k < 8 && r + k < row1; ++k) rows[k] = buf + static_cast<std::size_t>(r - row0 + k) * stride;
      const JDIMENSION got = jpeg_read_scanlines(&cinfo_, rows, static_cast<JDIMENSION>(k));
      if (got == 0) break;
      r += static_cast<int>(got);
    }
    return true;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  bool created_ = false;
  jpeg_decompress_struct cinfo_{};
  JpegErrors err_;
};

// ---- resampling -----------------------------------------------------------------------------
// Coefficients of one axis (Image.h's ResampleAxis; taps: the most an output reads).
using Axis = ResampleAxis;

float triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? static_cast<float>(1.0 - x) : 0.0f;
}

// Pillow's precompute_coeffs for the bilinear filter over the input range [clampLo, clampHi).
Axis makeAxis(double in0, double in1, int outSize, int clampLo, int clampHi) {
  Axis a;
  const double scale = (in1 - in0) / outSize;
  const double filterScale = std::max(scale, 1.0);
  const double support = filterScale;  // bilinear support 1, widened when downscaling
  a.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  a.first.resize(outSize);
  a.count.resize(outSize);
  a.w.assign(static_cast<std::size_t>(outSize) * a.taps, 0.0f);
  a.lo = clampHi;
  a.hi = clampLo;
  for (int o = 0; o < outSize; ++o) {
    const double center = in0 + (o + 0.5) * scale;
    int lo = static_cast<int>(std::floor(center - support + 0.5));
    int hi = static_cast<int>(std::floor(center + support + 0.5));
    lo = std::max(lo, clampLo);
    hi = std::min(hi, clampHi);
    if (hi <= lo) {  // degenerate box: nearest input
      lo = std::clamp(static_cast<int>(center), clampLo, clampHi - 1);
      hi = lo + 1;
    }
    int n = std::min(hi - lo, a.taps);
    double sum = 0;
    float* w = &a.w[static_cast<std::size_t>(o) * a.taps];
    for (int k = 0; k < n; ++k) {
      w[k] = triangle((lo + k - center + 0.5) / filterScale);
      sum += w[k];
    }
    if (sum <= 0) {
      w[0] = 1.0f;
      n = 1;
      sum = 1;
    }
    for (int k = 0; k < n; ++k) w[k] = static_cast<float>(w[k] / sum);
    a.first[o] = lo;
    a.count[o] = n;
    a.lo = std::min(a.lo, lo);
    a.hi = std::max(a.hi, lo + n);
  }
  return a;
}

// Resamples the RGB region `src` (rows of `srcCols` pixels, absolute origin (colStart, rowStart))
// with the axes and writes normalised planes.
void resampleNormalise(const std::uint8_t* src, int srcCols, int colStart, int rowStart, const Axis& ax,
                       const Axis& ay, const TransformSpec& spec, float* out) {
  const int ow = spec.outWidth, oh = spec.outHeight;
  const int rows = ay.hi - ay.lo;
  // Horizontal pass over the rows the vertical pass needs: tmp[r][x*3 + c].
  std::vector<float> tmp(static_cast<std::size_t>(rows) * ow * 3);
  for (int r = 0; r < rows; ++r) {
    const std::uint8_t* row = src + static_cast<std::size_t>(ay.lo + r - rowStart) * srcCols * 3;
    float* t = &tmp[static_cast<std::size_t>(r) * ow * 3];
    for (int x = 0; x < ow; ++x) {
      const float* w = &ax.w[static_cast<std::size_t>(x) * ax.taps];
      const std::uint8_t* p = row + static_cast<std::size_t>(ax.first[x] - colStart) * 3;
      float s0 = 0, s1 = 0, s2 = 0;
      for (int k = 0; k < ax.count[x]; ++k, p += 3) {
        s0 += w[k] * p[0];
        s1 += w[k] * p[1];
        s2 += w[k] * p[2];
      }
      t[x * 3] = s0;
      t[x * 3 + 1] = s1;
      t[x * 3 + 2] = s2;
    }
  }
  // Vertical pass, then normalise into planes (mirrored when flipping).
  float a[3], b[3];
  for (int c = 0; c < 3; ++c) {
    a[c] = 1.0f / (255.0f * spec.std[c]);
    b[c] = -spec.mean[c] / spec.std[c];
  }
  std::vector<float> acc(static_cast<std::size_t>(ow) * 3);
  const std::size_t plane = static_cast<std::size_t>(ow) * oh;
  for (int y = 0; y < oh; ++y) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    const float* w = &ay.w[static_cast<std::size_t>(y) * ay.taps];
    for (int k = 0; k < ay.count[y]; ++k) {
      const float* t = &tmp[static_cast<std::size_t>(ay.first[y] + k - ay.lo) * ow * 3];
      const float wk = w[k];
      for (int i = 0; i < ow * 3; ++i) acc[i] += wk * t[i];
    }
    for (int c = 0; c < 3; ++c) {
      if (spec.bytesOut) {
        std::uint8_t* dst = spec.bytesOut + c * plane + static_cast<std::size_t>(y) * ow;
        for (int x = 0; x < ow; ++x)
          dst[spec.flip ? ow - 1 - x : x] = static_cast<std::uint8_t>(std::floor(std::clamp(acc[x * 3 + c], 0.0f, 255.0f) + 0.5f));
        continue;
      }
      float* dst = out + c * plane + static_cast<std::size_t>(y) * ow;
      for (int x = 0; x < ow; ++x) {
        const int xo = spec.flip ? ow - 1 - x : x;
        // Clamp to the 8-bit range first, as Pillow's resize does.
        const float v = std::clamp(acc[x * 3 + c], 0.0f, 255.0f);
        dst[xo] = v * a[c] + b[c];
      }
    }
  }
}

// Input range of an axis before the coefficients exist: the box, or the whole image.
void clampRange(double lo, double hi, int size, bool toBox, int* clampLo, int* clampHi) {
  if (toBox) {
    *clampLo = std::clamp(static_cast<int>(std::floor(lo + 1e-9)), 0, size - 1);
    *clampHi = std::clamp(static_cast<int>(std::ceil(hi - 1e-9)), *clampLo + 1, size);
  } else {
    *clampLo = 0;
    *clampHi = size;
  }
}

void checkBox(const CropBox& b, int w, int h, const std::string& name) {
  if (!(b.x1 > b.x0 && b.y1 > b.y0 && b.x0 >= -1e-6 && b.y0 >= -1e-6 && b.x1 <= w + 1e-6 && b.y1 <= h + 1e-6))
    throw ImageError(name + ": crop box outside the " + std::to_string(w) + "x" + std::to_string(h) + " image");
}

// The end-of-image marker after the first scan: searched in the last 4 KiB first (almost every
// file), else after the first start-of-scan (files with long trailing data, e.g. an appended
// video). Entropy-coded data cannot contain FF D9, so a marker after the scan start is the real one.
bool hasEndOfImage(const std::uint8_t* d, std::size_t n) {
  for (std::size_t i = n, stop = n > 4096 ? n - 4096 : 0; i >= stop + 2; --i)
    if (d[i - 2] == 0xFF && d[i - 1] == 0xD9) return true;
  std::size_t pos = 2, sos = 0;
  while (pos + 4 <= n) {  // walk the marker segments up to the first scan
    if (d[pos] != 0xFF) return false;
    const std::uint8_t m = d[pos + 1];
    if (m == 0xFF) {
      ++pos;
      continue;
    }
    if (m == 0xDA) {
      sos = pos;
      break;
    }
    pos += 2 + (static_cast<std::size_t>(d[pos + 2]) << 8 | d[pos + 3]);
  }
  if (sos == 0) return false;
  for (std::size_t i = n; i >= sos + 4; --i)
    if (d[i - 2] == 0xFF && d[i - 1] == 0xD9) return true;
  return false;
}

DecodeInfo decodeJpeg(const std::uint8_t* data, std::size_t size, const std::string& name,
                      const std::function<CropBox(int, int)>& chooseBox, const TransformSpec& spec, float* out) {
  // A complete JPEG ends with the end-of-image marker; a truncated one is detected even when the
  // crop does not reach the missing rows (some files carry trailing bytes, hence the window).
  if (!hasEndOfImage(data, size)) throw ImageError(name + ": truncated JPEG (no end-of-image marker)");
  JpegDecoder dec(data, size);
  if (!dec.readHeader()) throw ImageError(name + ": corrupt JPEG: " + dec.message());
  DecodeInfo info;
  info.width = dec.width();
  info.height = dec.height();
  const CropBox box = chooseBox(info.width, info.height);
  checkBox(box, info.width, info.height, name);
  // The smallest M/8 that keeps the crop at least as large as the output (DCT-domain scaling).
  int num = 8;
  if (spec.dctScaling)
    for (int m = 1; m < 8; ++m)
      if (box.width() * m / 8.0 >= spec.outWidth && box.height() * m / 8.0 >= spec.outHeight) {
        num = m;
        break;
      }
  int sw = 0, sh = 0;
  if (!dec.scaledSize(num, &sw, &sh)) throw ImageError(name + ": corrupt JPEG: " + dec.message());
  info.scaleNum = num;
  const double fx = static_cast<double>(sw) / info.width, fy = static_cast<double>(sh) / info.height;
  const CropBox sbox{box.x0 * fx, box.y0 * fy, box.x1 * fx, box.y1 * fy, box.clampToBox};
  int cx0, cx1, cy0, cy1;
  clampRange(sbox.x0, sbox.x1, sw, box.clampToBox, &cx0, &cx1);
  clampRange(sbox.y0, sbox.y1, sh, box.clampToBox, &cy0, &cy1);
  const Axis ax = makeAxis(sbox.x0, sbox.x1, spec.outWidth, cx0, cx1);
  const Axis ay = makeAxis(sbox.y0, sbox.y1, spec.outHeight, cy0, cy1);
  thread_local std::vector<std::uint8_t> pixels, rgb;
  const int comps = dec.components();
  // A margin around the region: chroma upsampling at the edges of a cropped or skipped-to region
  // lacks its neighbours; the margin keeps those pixels out of the resampling.
  constexpr int kMargin = 16;
  const int row0 = std::max(0, ay.lo - kMargin), row1 = std::min(sh, ay.hi + kMargin);
  const int col0 = std::max(0, ax.lo - kMargin), col1 = std::min(sw, ax.hi + kMargin);
  pixels.resize(static_cast<std::size_t>(sw) * comps * (row1 - row0));
  int colStart = 0, cols = 0;
  if (!dec.decodeRegion(col0, col1, row0, row1, pixels.data(), &colStart, &cols))
    throw ImageError(name + ": corrupt JPEG: " + dec.message());
  if (dec.truncated()) throw ImageError(name + ": truncated JPEG (premature end of data)");
  info.decodedCols = cols;
  info.decodedRows = row1 - row0;
  const std::uint8_t* src = pixels.data();
  if (comps == 4) {  // CMYK (Adobe files store it inverted) -> RGB
    const std::size_t n = static_cast<std::size_t>(cols) * info.decodedRows;
    rgb.resize(n * 3);
    const bool inv = dec.adobeInverted();
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint8_t* p = &pixels[i * 4];
      const int k = inv ? p[3] : 255 - p[3];
      for (int c = 0; c < 3; ++c) rgb[i * 3 + c] = static_cast<std::uint8_t>((inv ? p[c] : 255 - p[c]) * k / 255);
    }
    src = rgb.data();
  }
  resampleNormalise(src, cols, colStart, row0, ax, ay, spec, out);
  return info;
}

DecodeInfo decodePng(const std::uint8_t* data, std::size_t size, const std::string& name,
                     const std::function<CropBox(int, int)>& chooseBox, const TransformSpec& spec, float* out) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, data, size))
    throw ImageError(name + ": corrupt PNG: " + img.message);
  // RGBA, then the alpha channel dropped (as Pillow's convert('RGB')): an RGB read would composite
  // transparent pixels onto whatever the buffer held before.
  img.format = PNG_FORMAT_RGBA;
  thread_local std::vector<std::uint8_t> rgba, pixels;
  rgba.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, rgba.data(), 0, nullptr)) {
    const std::string msg = img.message;
    png_image_free(&img);
    throw ImageError(name + ": corrupt PNG: " + msg);
  }
  const std::size_t count = static_cast<std::size_t>(img.width) * img.height;
  pixels.resize(count * 3);
  for (std::size_t i = 0; i < count; ++i)
    for (int c = 0; c < 3; ++c) pixels[i * 3 + c] = rgba[i * 4 + c];
  DecodeInfo info;
  info.width = static_cast<int>(img.width);
  info.height = static_cast<int>(img.height);
  info.decodedCols = info.width;
  info.decodedRows = info.height;
  const CropBox box = chooseBox(info.width, info.height);
  checkBox(box, info.width, info.height, name);
  int cx0, cx1, cy0, cy1;
  clampRange(box.x0, box.x1, info.width, box.clampToBox, &cx0, &cx1);
  clampRange(box.y0, box.y1, info.height, box.clampToBox, &cy0, &cy1);
  const Axis ax = makeAxis(box.x0, box.x1, spec.outWidth, cx0, cx1);
  const Axis ay = makeAxis(box.y0, box.y1, spec.outHeight, cy0, cy1);
  resampleNormalise(pixels.data(), info.width, 0, 0, ax, ay, spec, out);
  return info;
}

}  // namespace

std::string JpegFacts::whyNotGpu() const {
  if (!complete) return "truncated (no end-of-image marker)";
  if (progressive) return "progressive";
  if (!eightBit) return "not 8-bit";
  if (!greyOrYcbcr) return "CMYK, YCCK or RGB colour";
  if (!commonSampling) return "uncommon chroma sampling";
  if (!interleaved) return "non-interleaved scans";
  return "";
}

JpegFacts readJpegFacts(const std::uint8_t* data, std::size_t size, const std::string& name) {
  JpegDecoder dec(data, size);
  if (!dec.readHeader()) throw ImageError(name + ": corrupt JPEG: " + dec.message());
  const jpeg_decompress_struct& c = dec.info();
  JpegFacts f;
  f.width = dec.width();
  f.height = dec.height();
  f.components = c.num_components;
  f.progressive = c.progressive_mode != 0 || c.arith_code != 0;
  f.eightBit = c.data_precision == 8;
  f.greyOrYcbcr = (c.jpeg_color_space == JCS_GRAYSCALE && c.num_components == 1) ||
                  (c.jpeg_color_space == JCS_YCbCr && c.num_components == 3);
  if (c.num_components == 3) {
    const jpeg_component_info* k = c.comp_info;
    const int h = k[0].h_samp_factor, v = k[0].v_samp_factor;
    f.commonSampling = h >= 1 && h <= 2 && v >= 1 && v <= 2 && k[1].h_samp_factor == 1 && k[1].v_samp_factor == 1 &&
                       k[2].h_samp_factor == 1 && k[2].v_samp_factor == 1;
  }
  f.interleaved = c.comps_in_scan == c.num_components;
  f.complete = hasEndOfImage(data, size);
  return f;
}

void decodeJpegRgb(const std::uint8_t* data, std::size_t size, const std::string& name, std::vector<std::uint8_t>& rgb,
                   int* width, int* height) {
  if (!hasEndOfImage(data, size)) throw ImageError(name + ": truncated JPEG (no end-of-image marker)");
  JpegDecoder dec(data, size);
  if (!dec.readHeader()) throw ImageError(name + ": corrupt JPEG: " + dec.message());
  if (dec.cmyk()) throw ImageError(name + ": CMYK JPEG: decodeJpegRgb takes greyscale and YCbCr files");
  int w = 0, h = 0, colStart = 0, cols = 0;
  if (!dec.scaledSize(8, &w, &h)) throw ImageError(name + ": corrupt JPEG: " + dec.message());
  rgb.resize(static_cast<std::size_t>(w) * h * 3);
  if (!dec.decodeRegion(0, w, 0, h, rgb.data(), &colStart, &cols)) throw ImageError(name + ": corrupt JPEG: " + dec.message());
  if (dec.truncated()) throw ImageError(name + ": truncated JPEG (premature end of data)");
  *width = w;
  *height = h;
}

void cropAxes(const CropBox& box, int width, int height, int outW, int outH, ResampleAxis& ax, ResampleAxis& ay) {
  int cx0, cx1, cy0, cy1;
  clampRange(box.x0, box.x1, width, box.clampToBox, &cx0, &cx1);
  clampRange(box.y0, box.y1, height, box.clampToBox, &cy0, &cy1);
  ax = makeAxis(box.x0, box.x1, outW, cx0, cx1);
  ay = makeAxis(box.y0, box.y1, outH, cy0, cy1);
}

DecodeInfo decodeTransformed(const std::uint8_t* data, std::size_t size, const std::string& name,
                             const std::function<CropBox(int, int)>& chooseBox, const TransformSpec& spec,
                             float* out) {
  switch (detectImageFormat(data, size)) {
    case ImageFormat::Jpeg:
      return decodeJpeg(data, size, name, chooseBox, spec, out);
    case ImageFormat::Png:
      return decodePng(data, size, name, chooseBox, spec, out);
    case ImageFormat::Unknown:
      break;
  }
  throw ImageError(name + ": unsupported image format (not JPEG or PNG" +
                   std::string(size == 0 ? "; the file is empty)" : ")"));
}

CropBox randomResizedCrop(int width, int height, double scaleMin, double scaleMax, double ratioMin, double ratioMax,
                          const std::function<double()>& u) {
  const double area = static_cast<double>(width) * height;
  const double logLo = std::log(ratioMin), logHi = std::log(ratioMax);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (scaleMin + (scaleMax - scaleMin) * u());
    const double aspect = std::exp(logLo + (logHi - logLo) * u());
    const int w = static_cast<int>(std::nearbyint(std::sqrt(target * aspect)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(target / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int i = std::min(static_cast<int>(u() * (height - h + 1)), height - h);
      const int j = std::min(static_cast<int>(u() * (width - w + 1)), width - w);
      return CropBox{double(j), double(i), double(j + w), double(i + h)};
    }
  }
  const double inRatio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (inRatio < ratioMin) {
    h = static_cast<int>(std::nearbyint(w / ratioMin));
  } else if (inRatio > ratioMax) {
    w = static_cast<int>(std::nearbyint(h * ratioMax));
  }
  const int i = (height - h) / 2, j = (width - w) / 2;
  return CropBox{double(j), double(i), double(j + w), double(i + h)};
}

CropBox resizeCenterCrop(int width, int height, int resize, int size) {
  int rw, rh;
  if (width <= height) {
    rw = resize;
    rh = static_cast<int>(static_cast<double>(resize) * height / width);
  } else {
    rh = resize;
    rw = static_cast<int>(static_cast<double>(resize) * width / height);
  }
  const int cw = std::min(size, rw), ch = std::min(size, rh);
  const int left = static_cast<int>(std::nearbyint((rw - cw) / 2.0));
  const int top = static_cast<int>(std::nearbyint((rh - ch) / 2.0));
  const double sx = static_cast<double>(width) / rw, sy = static_cast<double>(height) / rh;
  CropBox b{left * sx, top * sy, (left + cw) * sx, (top + ch) * sy};
  b.clampToBox = false;  // resizing the whole image first lets the filter see past the crop
  return b;
}

void resizePlanes(const float* src, int c, int sh, int sw, float* dst, int dh, int dw) {
  const Axis ax = makeAxis(0, sw, dw, 0, sw), ay = makeAxis(0, sh, dh, 0, sh);
  std::vector<float> rows(static_cast<std::size_t>(sh) * dw);
  for (int k = 0; k < c; ++k) {
    const float* in = src + static_cast<std::size_t>(k) * sh * sw;
    for (int y = 0; y < sh; ++y)
      for (int x = 0; x < dw; ++x) {
        const float* w = &ax.w[static_cast<std::size_t>(x) * ax.taps];
        float s = 0;
        for (int t = 0; t < ax.count[x]; ++t) s += w[t] * in[y * sw + ax.first[x] + t];
        rows[static_cast<std::size_t>(y) * dw + x] = s;
      }
    float* out = dst + static_cast<std::size_t>(k) * dh * dw;
    for (int y = 0; y < dh; ++y) {
      const float* w = &ay.w[static_cast<std::size_t>(y) * ay.taps];
      for (int x = 0; x < dw; ++x) {
        float s = 0;
        for (int t = 0; t < ay.count[y]; ++t) s += w[t] * rows[static_cast<std::size_t>(ay.first[y] + t) * dw + x];
        out[y * dw + x] = s;
      }
    }
  }
}

void normaliseBytes(const std::uint8_t* planes, const TransformSpec& spec, float* out) {
  const std::size_t plane = static_cast<std::size_t>(spec.outWidth) * spec.outHeight;
  for (int c = 0; c < 3; ++c) {
    const float a = 1.0f / (255.0f * spec.std[c]), b = -spec.mean[c] / spec.std[c];
    for (std::size_t i = 0; i < plane; ++i) out[c * plane + i] = planes[c * plane + i] * a + b;
  }
}

}  // namespace exprun
