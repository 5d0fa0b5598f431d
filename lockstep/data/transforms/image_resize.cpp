#include "lockstep/data/transforms/image_resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "lockstep/util/error.h"

// An AVX2 copy of each pass beside the baseline (SSE2) one, picked at load time: the int32
// multiplies of the passes are one instruction with AVX2 and a shuffle sequence without.
#define LOCKSTEP_RESIZE_CLONES __attribute__((target_clones("avx2", "default")))
// The helpers of a cloned pass are always inlined, so that each clone compiles them for its
// instruction set (a separate copy would be baseline code).
#define LOCKSTEP_RESIZE_INLINE [[gnu::always_inline]] inline

namespace lockstep::data {
namespace {

// Pillow: 8 bits for the result, 2 for the overshoot of filters with negative lobes.
constexpr int kPrecisionBits = 32 - 8 - 2;
constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);

double bilinearFilter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Every output sample's input window as `ksize` taps from `first`: Pillow's own window
// [xmin, xmin + count) sits inside it and the other taps weigh 0, so each sample is the same fixed
// loop and the sums are Pillow's exactly (adding zeros changes nothing). Windows at the far edge
// start early to stay inside the input.
struct Taps {
  int ksize = 0;
  std::vector<int64_t> first;
  std::vector<int32_t> weights;  // out_size x ksize
};

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for the box [0, in_size) and BILINEAR (support 1).
Taps precomputeTaps(int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  // Pillow's window never holds more than ceil(support) * 2 + 1 taps, nor more than the input.
  const int pillow_ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  Taps taps;
  taps.ksize = static_cast<int>(std::min<int64_t>(pillow_ksize, in_size));
  taps.first.resize(static_cast<size_t>(out_size));
  taps.weights.assign(static_cast<size_t>(out_size * taps.ksize), 0);
  std::vector<double> k(static_cast<size_t>(pillow_ksize));
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (static_cast<double>(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // Pillow rounds with a truncating cast: (int)(v + 0.5).
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), static_cast<int>(in_size)) - xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      k[static_cast<size_t>(x)] = bilinearFilter((x + xmin - center + 0.5) * ss);
      ww += k[static_cast<size_t>(x)];
    }
    const int64_t first = std::min<int64_t>(xmin, in_size - taps.ksize);
    int32_t* w = &taps.weights[static_cast<size_t>(xx * taps.ksize + (xmin - first))];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? k[static_cast<size_t>(x)] / ww : k[static_cast<size_t>(x)];
      w[x] = static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    taps.first[static_cast<size_t>(xx)] = first;
  }
  return taps;
}

// Pillow's clip8: the accumulator holds the value << 22 plus a half for rounding; the arithmetic
// shift floors, as Pillow's table lookup does.
LOCKSTEP_RESIZE_INLINE uint8_t clip8(int32_t acc) {
  return static_cast<uint8_t>(std::clamp<int32_t>(acc >> kPrecisionBits, 0, 255));
}

// A window of an interleaved uint8 image: `rows` rows of `cols` pixels, rows `stride` bytes apart.
struct Plane {
  const uint8_t* data = nullptr;
  int64_t stride = 0;
  int64_t rows = 0;
  int64_t cols = 0;
};

// One RGB pixel in the first three lanes of a vector (GCC/Clang vector extensions: the compiler
// picks the instructions, SSE2 or AVX2; byte shuffles rather than conversions, which GCC 12 would
// do lane by lane). Shuffle index -1: any byte.
using Lanes = int32_t __attribute__((vector_size(16)));
using Bytes = uint8_t __attribute__((vector_size(16)));

// The RGB pixel at p; `whole` reads four bytes (the fourth, the next pixel's, lands in the unused
// lane), which is safe except at the very end of a buffer.
template <bool whole>
LOCKSTEP_RESIZE_INLINE Lanes loadRgb(const uint8_t* p) {
  Bytes b{};
  std::memcpy(&b, p, whole ? 4 : 3);
  // Byte i to lane i; byte 15 is zero.
  return reinterpret_cast<Lanes>(
      __builtin_shufflevector(b, b, 0, 15, 15, 15, 1, 15, 15, 15, 2, 15, 15, 15, 3, 15, 15, 15));
}

// Lanes 0..2 (each 0..255) as bytes at p; `whole` writes lane 3 too, over the next pixel's first
// byte (written after this one), which is safe except at the very end of a buffer.
template <bool whole>
LOCKSTEP_RESIZE_INLINE void storeRgb(Lanes v, uint8_t* p) {
  const auto b = reinterpret_cast<Bytes>(v);
  const Bytes packed =
      __builtin_shufflevector(b, b, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  std::memcpy(p, &packed, whole ? 4 : 3);
}

// out[x] for x in [x0, x1) of one row: the taps' weighted sum per channel, all three at once.
// `whole_in` / `whole_out`: loadRgb's and storeRgb's; kTaps: taps.ksize when known at compile time
// (3: every upscale), 0 otherwise.
template <bool whole_in, bool whole_out, int kTaps>
LOCKSTEP_RESIZE_INLINE void horizontalRgbSpan(const uint8_t* row, const Taps& taps, int64_t x0, int64_t x1,
                                              uint8_t* out) {
  const int k = kTaps ? kTaps : taps.ksize;
  for (int64_t x = x0; x < x1; ++x) {
    const uint8_t* s = row + taps.first[static_cast<size_t>(x)] * 3;
    const int32_t* w = &taps.weights[static_cast<size_t>(x * k)];
    Lanes acc = Lanes{} + kHalf;
    for (int t = 0; t < k; ++t) acc += loadRgb<whole_in>(s + 3 * t) * w[t];
    acc >>= kPrecisionBits;
    acc = acc < 0 ? 0 : acc;
    acc = acc > 255 ? 255 : acc;
    storeRgb<whole_out>(acc, out + 3 * x);
  }
}

// Two output pixels per vector of eight lanes (AVX2's width): pixel x in lanes 0..3, x + 1 in
// lanes 4..7, each with its own taps. pair_weights holds, per pair and tap, both pixels' weight
// four times over.
using PairLanes = int32_t __attribute__((vector_size(32)));
using PairBytes = uint8_t __attribute__((vector_size(32)));

// Output pixels [x0, x1) of one row, x0 and x1 even, two at a time; four bytes read and written per
// pixel (safe away from the buffers' ends). The 32-byte vectors stay inside this function: passed
// to or returned from another, they would make the baseline clone's calling convention differ
// (GCC's -Wpsabi).
template <int kTaps>
LOCKSTEP_RESIZE_INLINE void horizontalRgbPairs(const uint8_t* row, const Taps& taps,
                                               const int32_t* pair_weights, int64_t x0, int64_t x1,
                                               uint8_t* out) {
  const int k = kTaps ? kTaps : taps.ksize;
  for (int64_t x = x0; x < x1; x += 2) {
    const uint8_t* s0 = row + taps.first[static_cast<size_t>(x)] * 3;
    const uint8_t* s1 = row + taps.first[static_cast<size_t>(x + 1)] * 3;
    const int32_t* w = pair_weights + (x / 2) * k * 8;
    PairLanes acc = PairLanes{} + kHalf;
    for (int t = 0; t < k; ++t) {
      int32_t a = 0, b = 0;
      std::memcpy(&a, s0 + 3 * t, 4);
      std::memcpy(&b, s1 + 3 * t, 4);
      const auto bytes = reinterpret_cast<PairBytes>(PairLanes{a, 0, 0, 0, b, 0, 0, 0});
      // Byte i of each half to lane i of that half; bytes 4 and 20 are zero.
      const auto pixels = reinterpret_cast<PairLanes>(
          __builtin_shufflevector(bytes, bytes, 0, 4, 4, 4, 1, 4, 4, 4, 2, 4, 4, 4, 3, 4, 4, 4, 16, 20, 20,
                                  20, 17, 20, 20, 20, 18, 20, 20, 20, 19, 20, 20, 20));
      PairLanes wt;
      std::memcpy(&wt, w + t * 8, sizeof wt);
      acc += pixels * wt;
    }
    acc >>= kPrecisionBits;
    acc = acc < 0 ? 0 : acc;
    acc = acc > 255 ? 255 : acc;
    const auto bytes = reinterpret_cast<PairBytes>(acc);
    const auto packed = reinterpret_cast<PairLanes>(
        __builtin_shufflevector(bytes, bytes, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 16,
                                20, 24, 28, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
    const int32_t first = packed[0], second = packed[4];
    std::memcpy(out + 3 * x, &first, 4);
    std::memcpy(out + 3 * x + 3, &second, 4);
  }
}

template <int kTaps>
LOCKSTEP_RESIZE_INLINE void horizontalRgbRows(const Plane& in, const Taps& taps, const int32_t* pair_weights,
                                              int64_t out_cols, uint8_t* dst) {
  // Output pixels from `tail` on read the plane's last input pixel.
  int64_t tail = out_cols;
  while (tail > 0 && taps.first[static_cast<size_t>(tail - 1)] + taps.ksize == in.cols) --tail;
  const int64_t paired = out_cols & ~int64_t{1};
  for (int64_t y = 0; y + 1 < in.rows; ++y) {
    const uint8_t* row = in.data + y * in.stride;
    uint8_t* out = dst + y * out_cols * 3;
    horizontalRgbPairs<kTaps>(row, taps, pair_weights, 0, paired, out);
    horizontalRgbSpan<true, true, kTaps>(row, taps, paired, out_cols, out);
  }
  // The last row: the input's last pixel and the output's last pixel three bytes at a time.
  const uint8_t* row = in.data + (in.rows - 1) * in.stride;
  uint8_t* out = dst + (in.rows - 1) * out_cols * 3;
  const int64_t safe = std::min(tail, out_cols - 1);
  horizontalRgbPairs<kTaps>(row, taps, pair_weights, 0, safe & ~int64_t{1}, out);
  horizontalRgbSpan<true, true, kTaps>(row, taps, safe & ~int64_t{1}, safe, out);
  horizontalRgbSpan<false, true, kTaps>(row, taps, safe, out_cols - 1, out);
  horizontalRgbSpan<false, false, kTaps>(row, taps, out_cols - 1, out_cols, out);
}

// The horizontal pass for RGB, the pipelines' case.
LOCKSTEP_RESIZE_CLONES void horizontalRgb(const Plane& in, const Taps& taps, int64_t out_cols, uint8_t* dst) {
  const int k = taps.ksize;
  thread_local std::vector<int32_t> pair_weights;
  pair_weights.resize(static_cast<size_t>(out_cols / 2 * k * 8));
  for (int64_t p = 0; p < out_cols / 2; ++p)
    for (int t = 0; t < k; ++t)
      for (int lane = 0; lane < 8; ++lane)
        pair_weights[static_cast<size_t>((p * k + t) * 8 + lane)] =
            taps.weights[static_cast<size_t>((2 * p + lane / 4) * k + t)];
  if (k == 3) {
    horizontalRgbRows<3>(in, taps, pair_weights.data(), out_cols, dst);
  } else {
    horizontalRgbRows<0>(in, taps, pair_weights.data(), out_cols, dst);
  }
}

// The horizontal pass for any channel count.
void horizontalAny(const Plane& in, int64_t channels, const Taps& taps, int64_t out_cols, uint8_t* dst) {
  const int k = taps.ksize;
  for (int64_t y = 0; y < in.rows; ++y) {
    const uint8_t* row = in.data + y * in.stride;
    uint8_t* out = dst + y * out_cols * channels;
    for (int64_t x = 0; x < out_cols; ++x) {
      const uint8_t* s = row + taps.first[static_cast<size_t>(x)] * channels;
      const int32_t* w = &taps.weights[static_cast<size_t>(x * k)];
      for (int64_t c = 0; c < channels; ++c) {
        int32_t acc = kHalf;
        for (int t = 0; t < k; ++t) acc += s[t * channels + c] * w[t];
        out[x * channels + c] = clip8(acc);
      }
    }
  }
}

// The vertical pass: each output row a weighted sum of ksize input rows, vectorised along the row
// (all channels alike). acc holds one row of sums.
LOCKSTEP_RESIZE_CLONES void verticalRows(const Plane& in, int64_t channels, const Taps& taps,
                                         int64_t out_rows, uint8_t* __restrict dst, int32_t* __restrict acc) {
  const int64_t n = in.cols * channels;
  const int k = taps.ksize;
  for (int64_t yy = 0; yy < out_rows; ++yy) {
    const int32_t* w = &taps.weights[static_cast<size_t>(yy * k)];
    const uint8_t* s = in.data + taps.first[static_cast<size_t>(yy)] * in.stride;
    const int32_t w0 = w[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) acc[i] = kHalf + s[i] * w0;
    for (int t = 1; t < k; ++t) {
      const uint8_t* __restrict st = s + t * in.stride;
      const int32_t wt = w[t];
      if (wt == 0) continue;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) acc[i] += st[i] * wt;
    }
    uint8_t* __restrict out = dst + yy * n;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = clip8(acc[i]);
  }
}

void horizontal(const Plane& in, int64_t channels, int64_t out_cols, uint8_t* dst) {
  const Taps taps = precomputeTaps(in.cols, out_cols);
  if (channels == 3) {
    horizontalRgb(in, taps, out_cols, dst);
  } else {
    horizontalAny(in, channels, taps, out_cols, dst);
  }
}

void vertical(const Plane& in, int64_t channels, int64_t out_rows, uint8_t* dst) {
  const Taps taps = precomputeTaps(in.rows, out_rows);
  thread_local std::vector<int32_t> acc;
  acc.resize(static_cast<size_t>(in.cols * channels));
  verticalRows(in, channels, taps, out_rows, dst, acc.data());
}

}  // namespace

Image resizeImageWindow(const Image& image, int64_t top, int64_t left, int64_t window_height,
                        int64_t window_width, int64_t height, int64_t width) {
  LOCKSTEP_ENFORCE(height >= 1 && width >= 1, ValueError,
                   "resizeImage: the target size must be at least 1x1, got ", height, "x", width);
  LOCKSTEP_ENFORCE(window_height >= 1 && window_width >= 1, ValueError,
                   "resizeImage: cannot resize an empty ", window_height, "x", window_width, " window of ",
                   image.describe());
  LOCKSTEP_ENFORCE(
      top >= 0 && left >= 0 && top + window_height <= image.height && left + window_width <= image.width,
      ValueError, "resizeImage: the window ", window_height, "x", window_width, " at (", top, ", ", left,
      ") does not lie inside ", image.describe());
  const int64_t c = image.channels;
  const Plane window{image.data.data() + (top * image.width + left) * c, image.width * c, window_height,
                     window_width};
  Image out;
  out.height = height;
  out.width = width;
  out.channels = c;
  out.data.resize(static_cast<size_t>(height * width * c));
  // Pillow skips a pass whose size does not change.
  const bool scale_h = window_height != height, scale_w = window_width != width;
  if (!scale_h && !scale_w) {
    for (int64_t y = 0; y < height; ++y)
      std::copy_n(window.data + y * window.stride, width * c, out.data.data() + y * width * c);
    return out;
  }
  if (!scale_w) {
    vertical(window, c, height, out.data.data());
    return out;
  }
  if (!scale_h) {
    horizontal(window, c, width, out.data.data());
    return out;
  }
  // Pillow 13 runs the vertical pass first when the height shrinks by more than twice as many pixels
  // as the width (Pillow <= 12 always went horizontal first: results differ by at most one unit).
  // The first pass's image is rounded to uint8, as Pillow's intermediate image.
  thread_local std::vector<uint8_t> between;
  const int64_t dh = window_height - height, dw = window_width - width;
  if (dh > 0 && dh > dw * 2) {
    between.resize(static_cast<size_t>(height * window_width * c));
    vertical(window, c, height, between.data());
    horizontal(Plane{between.data(), window_width * c, height, window_width}, c, width, out.data.data());
  } else {
    between.resize(static_cast<size_t>(window_height * width * c));
    horizontal(window, c, width, between.data());
    vertical(Plane{between.data(), width * c, window_height, width}, c, height, out.data.data());
  }
  return out;
}

Image resizeImage(const Image& image, int64_t height, int64_t width) {
  LOCKSTEP_ENFORCE(image.height >= 1 && image.width >= 1, ValueError, "resizeImage: cannot resize an empty ",
                   image.describe());
  if (image.height == height && image.width == width) return image;
  return resizeImageWindow(image, 0, 0, image.height, image.width, height, width);
}

ImageSize shorterSideSize(int64_t height, int64_t width, int64_t size) {
  LOCKSTEP_ENFORCE(size >= 1, ValueError, "Resize: size must be >= 1, got ", size);
  LOCKSTEP_ENFORCE(height >= 1 && width >= 1, ValueError, "Resize: cannot resize an empty ", height, "x",
                   width, " image");
  const int64_t shorter = std::min(height, width), longer = std::max(height, width);
  // Python's int(size * long / short): a correctly rounded true division, then truncation.
  const auto new_long =
      static_cast<int64_t>(static_cast<double>(size * longer) / static_cast<double>(shorter));
  return width <= height ? ImageSize{new_long, size} : ImageSize{size, new_long};
}

}  // namespace lockstep::data
