#include "lockstep/data/transforms/image_resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "lockstep/util/error.h"

namespace lockstep::data {
namespace {

// Pillow: 8 bits for the result, 2 for the overshoot of filters with negative lobes.
constexpr int kPrecisionBits = 32 - 8 - 2;

double bilinearFilter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// One output sample's input window [first, first + count) and its fixed-point weights.
struct Taps {
  std::vector<int> first, count;
  std::vector<int32_t> weights;  // out_size x ksize
  int ksize = 0;
};

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for the box [0, in_size) and BILINEAR (support 1).
Taps precomputeTaps(int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  Taps taps;
  taps.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.first.resize(static_cast<size_t>(out_size));
  taps.count.resize(static_cast<size_t>(out_size));
  taps.weights.assign(static_cast<size_t>(out_size * taps.ksize), 0);
  std::vector<double> k(static_cast<size_t>(taps.ksize));
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
    int32_t* w = &taps.weights[static_cast<size_t>(xx * taps.ksize)];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? k[static_cast<size_t>(x)] / ww : k[static_cast<size_t>(x)];
      w[x] = static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    taps.first[static_cast<size_t>(xx)] = xmin;
    taps.count[static_cast<size_t>(xx)] = std::max(xmax, 0);
  }
  return taps;
}

// Pillow's clip8: the accumulator holds the value << 22 plus a half for rounding.
uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;  // arithmetic shift: floor, as Pillow's table lookup
  return static_cast<uint8_t>(std::clamp<int32_t>(v, 0, 255));
}

Image resizeHorizontal(const Image& in, int64_t width) {
  const Taps taps = precomputeTaps(in.width, width);
  Image out = Image::zeros(in.height, width, in.channels);
  const int64_t c = in.channels;
  for (int64_t y = 0; y < in.height; ++y) {
    const uint8_t* row = in.data.data() + y * in.width * c;
    uint8_t* dst = out.data.data() + y * width * c;
    for (int64_t xx = 0; xx < width; ++xx) {
      const int32_t* w = &taps.weights[static_cast<size_t>(xx * taps.ksize)];
      const uint8_t* src = row + static_cast<int64_t>(taps.first[static_cast<size_t>(xx)]) * c;
      const int n = taps.count[static_cast<size_t>(xx)];
      for (int64_t ch = 0; ch < c; ++ch) {
        int32_t acc = 1 << (kPrecisionBits - 1);
        for (int x = 0; x < n; ++x) acc += src[x * c + ch] * w[x];
        dst[xx * c + ch] = clip8(acc);
      }
    }
  }
  return out;
}

Image resizeVertical(const Image& in, int64_t height) {
  const Taps taps = precomputeTaps(in.height, height);
  Image out = Image::zeros(height, in.width, in.channels);
  const int64_t row_len = in.width * in.channels;
  std::vector<int32_t> acc(static_cast<size_t>(row_len));
  for (int64_t yy = 0; yy < height; ++yy) {
    const int32_t* w = &taps.weights[static_cast<size_t>(yy * taps.ksize)];
    const int64_t first = taps.first[static_cast<size_t>(yy)];
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    for (int y = 0; y < taps.count[static_cast<size_t>(yy)]; ++y) {
      const uint8_t* src = in.data.data() + (first + y) * row_len;
      for (int64_t i = 0; i < row_len; ++i) acc[static_cast<size_t>(i)] += src[i] * w[y];
    }
    uint8_t* dst = out.data.data() + yy * row_len;
    for (int64_t i = 0; i < row_len; ++i) dst[i] = clip8(acc[static_cast<size_t>(i)]);
  }
  return out;
}

}  // namespace

Image resizeImage(const Image& image, int64_t height, int64_t width) {
  LOCKSTEP_ENFORCE(height >= 1 && width >= 1, ValueError,
                   "resizeImage: the target size must be at least 1x1, got ", height, "x", width);
  LOCKSTEP_ENFORCE(image.height >= 1 && image.width >= 1, ValueError, "resizeImage: cannot resize an empty ",
                   image.describe());
  if (image.height == height && image.width == width) return image;
  // Pillow skips a pass whose size does not change.
  if (image.width == width) return resizeVertical(image, height);
  if (image.height == height) return resizeHorizontal(image, width);
  // Pillow 13 runs the vertical pass first when the height shrinks by more than twice as many pixels
  // as the width (Pillow <= 12 always went horizontal first: results differ by at most one unit).
  const int64_t dh = image.height - height, dw = image.width - width;
  if (dh > 0 && dh > dw * 2) return resizeHorizontal(resizeVertical(image, height), width);
  return resizeVertical(resizeHorizontal(image, width), height);
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
