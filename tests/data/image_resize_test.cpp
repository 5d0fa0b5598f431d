// resizeImage / resizeImageWindow (the vectorised passes) against a line-by-line transcription of
// Pillow's ImagingResample for BILINEAR (libImaging/Resample.c: precompute_coeffs,
// normalize_coeffs_8bpc, ImagingResampleHorizontal_8bpc / Vertical_8bpc, Pillow 13's pass order):
// the same bytes on random images, windows and sizes, every channel count and the edge cases
// (one pixel, more taps than input pixels, a window touching the image's last byte).
// And the flip folded into ToTensor: the same values as flipping the image first.
#include "lockstep/data/transforms/image_resize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "lockstep/data/transforms/image.h"
#include "lockstep/data/transforms/image_pipeline.h"
#include "lockstep/data/transforms/image_to_tensor.h"
#include "lockstep/data/transforms/random_horizontal_flip.h"
#include "lockstep/data/transforms/random_resized_crop.h"

namespace lockstep::data {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

struct PillowCoeffs {
  int ksize = 0;
  std::vector<int> bounds;  // xmin, xmax per output
  std::vector<int32_t> kk;  // out x ksize
};

PillowCoeffs pillowCoeffs(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = filterscale;  // BILINEAR's support is 1
  PillowCoeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.bounds.resize(static_cast<size_t>(out_size) * 2);
  c.kk.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> k(static_cast<size_t>(c.ksize));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale, ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double d = std::fabs((x + xmin - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = d < 1.0 ? 1.0 - d : 0.0;
      ww += k[static_cast<size_t>(x)];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? k[static_cast<size_t>(x)] / ww : k[static_cast<size_t>(x)];
      c.kk[static_cast<size_t>(xx) * c.ksize + x] =
          static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    c.bounds[static_cast<size_t>(xx) * 2] = xmin;
    c.bounds[static_cast<size_t>(xx) * 2 + 1] = xmax;
  }
  return c;
}

uint8_t clip8(int32_t v) { return static_cast<uint8_t>(std::clamp(v >> kPrecisionBits, 0, 255)); }

Image pillowHorizontal(const Image& in, int64_t width) {
  const PillowCoeffs c = pillowCoeffs(static_cast<int>(in.width), static_cast<int>(width));
  Image out = Image::zeros(in.height, width, in.channels);
  for (int64_t y = 0; y < in.height; ++y)
    for (int64_t xx = 0; xx < width; ++xx) {
      const int xmin = c.bounds[static_cast<size_t>(xx) * 2],
                xmax = c.bounds[static_cast<size_t>(xx) * 2 + 1];
      for (int64_t ch = 0; ch < in.channels; ++ch) {
        int32_t ss = 1 << (kPrecisionBits - 1);
        for (int x = 0; x < xmax; ++x)
          ss += in.at(y, x + xmin, ch) * c.kk[static_cast<size_t>(xx) * c.ksize + x];
        out.at(y, xx, ch) = clip8(ss);
      }
    }
  return out;
}

Image pillowVertical(const Image& in, int64_t height) {
  const PillowCoeffs c = pillowCoeffs(static_cast<int>(in.height), static_cast<int>(height));
  Image out = Image::zeros(height, in.width, in.channels);
  for (int64_t yy = 0; yy < height; ++yy) {
    const int ymin = c.bounds[static_cast<size_t>(yy) * 2], ymax = c.bounds[static_cast<size_t>(yy) * 2 + 1];
    for (int64_t x = 0; x < in.width; ++x)
      for (int64_t ch = 0; ch < in.channels; ++ch) {
        int32_t ss = 1 << (kPrecisionBits - 1);
        for (int y = 0; y < ymax; ++y)
          ss += in.at(y + ymin, x, ch) * c.kk[static_cast<size_t>(yy) * c.ksize + y];
        out.at(yy, x, ch) = clip8(ss);
      }
  }
  return out;
}

// Pillow 13's ImagingResampleInner for the box of the whole image.
Image pillowResize(const Image& in, int64_t height, int64_t width) {
  const bool need_h = width != in.width, need_v = height != in.height;
  const int64_t dh = in.height - height, dw = in.width - width;
  if (need_h && need_v && dh > 0 && dh > 2 * dw) return pillowHorizontal(pillowVertical(in, height), width);
  Image out = in;
  if (need_h) out = pillowHorizontal(out, width);
  if (need_v) out = pillowVertical(out, height);
  return out;
}

Image randomImage(std::mt19937& rng, int64_t h, int64_t w, int64_t c) {
  Image image = Image::zeros(h, w, c);
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& v : image.data) v = static_cast<uint8_t>(byte(rng));
  return image;
}

TEST(ResizeImageWindow, same_bytes_as_pillow_on_random_images_and_windows) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> side(1, 70), out_side(1, 90), channels(1, 4);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t h = side(rng), w = side(rng), c = channels(rng);
    const Image image = randomImage(rng, h, w, c);
    const int64_t wh = std::uniform_int_distribution<int64_t>(1, h)(rng),
                  ww = std::uniform_int_distribution<int64_t>(1, w)(rng);
    const int64_t top = std::uniform_int_distribution<int64_t>(0, h - wh)(rng),
                  left = std::uniform_int_distribution<int64_t>(0, w - ww)(rng);
    const int64_t oh = out_side(rng), ow = out_side(rng);
    const Image want = pillowResize(cropImage(image, top, left, wh, ww), oh, ow);
    const Image got = resizeImageWindow(image, top, left, wh, ww, oh, ow);
    ASSERT_EQ(got.height, oh);
    ASSERT_EQ(got.width, ow);
    ASSERT_EQ(got.channels, c);
    ASSERT_EQ(got.data, want.data) << "window " << wh << "x" << ww << " at (" << top << ", " << left
                                   << ") of " << image.describe() << " -> " << oh << "x" << ow;
    ASSERT_EQ(resizeImage(image, oh, ow).data, pillowResize(image, oh, ow).data)
        << image.describe() << " -> " << oh << "x" << ow;
  }
}

TEST(ResizeImageWindow, same_bytes_as_pillow_for_imagenet_sized_crops) {
  // RandomResizedCrop's sizes: windows from a tenth to all of a 300-500 px image, to 224 x 224,
  // down and up, RGB (the fast path), windows at every edge including the image's last pixel.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t h = std::uniform_int_distribution<int64_t>(300, 500)(rng),
                  w = std::uniform_int_distribution<int64_t>(300, 500)(rng);
    const Image image = randomImage(rng, h, w, 3);
    const int64_t wh = std::uniform_int_distribution<int64_t>(h / 10, h)(rng),
                  ww = std::uniform_int_distribution<int64_t>(w / 10, w)(rng);
    const int64_t top = trial % 3 == 0 ? h - wh : std::uniform_int_distribution<int64_t>(0, h - wh)(rng);
    const int64_t left = trial % 3 == 0 ? w - ww : std::uniform_int_distribution<int64_t>(0, w - ww)(rng);
    EXPECT_EQ(resizeImageWindow(image, top, left, wh, ww, 224, 224).data,
              pillowResize(cropImage(image, top, left, wh, ww), 224, 224).data)
        << "window " << wh << "x" << ww << " at (" << top << ", " << left << ") of " << image.describe();
  }
}

TEST(ResizeImageWindow, rejects_windows_outside_the_image) {
  const Image image = Image::zeros(4, 5, 3);
  EXPECT_THROW(resizeImageWindow(image, 1, 0, 4, 5, 2, 2), ValueError);
  EXPECT_THROW(resizeImageWindow(image, 0, -1, 2, 2, 2, 2), ValueError);
  EXPECT_THROW(resizeImageWindow(image, 0, 0, 0, 2, 2, 2), ValueError);
  EXPECT_THROW(resizeImageWindow(image, 0, 0, 2, 2, 2, 0), ValueError);
}

TEST(ImageToTensor, mirror_gives_the_values_of_the_flipped_image) {
  std::mt19937 rng(5);
  for (int64_t c : {1, 2, 3}) {
    Image image = randomImage(rng, 5, 7, c);
    const ImageToTensor plain(ImageToTensorOptions{}),
        normalising({.mean = std::vector<double>(static_cast<size_t>(c), 0.4),
                     .std = std::vector<double>(static_cast<size_t>(c), 0.3)});
    for (const ImageToTensor* to_tensor : {&plain, &normalising}) {
      Image flipped = image;
      flipImageHorizontally(flipped);
      const Tensor want = to_tensor->apply(flipped), got = to_tensor->apply(image, /*mirror=*/true);
      ASSERT_EQ(got.strides(), want.strides());
      for (int64_t i = 0; i < want.numel(); ++i)
        ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << "channels " << c << ", element " << i;
    }
  }
}

TEST(ImagePipeline, apply_equals_augment_then_to_tensor) {
  // apply() folds the trailing flip into ToTensor; augment() moves the pixels. Same values.
  const ImageToTensor to_tensor({.mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225}});
  ImagePipeline pipeline(
      {std::make_shared<RandomResizedCrop>(RandomResizedCropOptions{.height = 24, .width = 24}),
       std::make_shared<RandomHorizontalFlip>()},
      to_tensor, /*seed=*/3);
  std::mt19937 rng(9);
  const Image image = randomImage(rng, 40, 50, 3);
  for (int64_t index = 0; index < 16; ++index) {
    const Tensor got = pipeline.apply(image, 2, index);
    const Tensor want = to_tensor.apply(pipeline.augment(image, 2, index));
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << "index " << index << ", element " << i;
  }
}

}  // namespace
}  // namespace lockstep::data
