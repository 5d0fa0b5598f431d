// Image transforms on decoded uint8 images: Pillow's resize arithmetic, torchvision's crop rules,
// counter-based randomness, ToTensor + Normalize into channels_last f32.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <tuple>

#include "lockstep/data/transforms/center_crop.h"
#include "lockstep/data/transforms/color_adjust.h"
#include "lockstep/data/transforms/color_jitter.h"
#include "lockstep/data/transforms/image.h"
#include "lockstep/data/transforms/image_pipeline.h"
#include "lockstep/data/transforms/image_resize.h"
#include "lockstep/data/transforms/image_to_tensor.h"
#include "lockstep/data/transforms/random_horizontal_flip.h"
#include "lockstep/data/transforms/random_resized_crop.h"
#include "lockstep/data/transforms/resize.h"

namespace lockstep::data {
namespace {

Image grey(int64_t h, int64_t w, std::vector<uint8_t> values) {
  Image image = Image::zeros(h, w, 1);
  image.data = std::move(values);
  return image;
}

Image constant(int64_t h, int64_t w, int64_t c, uint8_t v) {
  Image image = Image::zeros(h, w, c);
  std::fill(image.data.begin(), image.data.end(), v);
  return image;
}

// The triangle filter's resize in f64 along one axis (the definition, not Pillow's fixed point):
// output sample i is centred at (i + 0.5) * scale, taps weighted by 1 - |d| / max(scale, 1).
std::vector<double> resize1d(const std::vector<double>& in, int64_t out_size) {
  const auto n = static_cast<int64_t>(in.size());
  const double scale = static_cast<double>(n) / static_cast<double>(out_size), fs = std::max(scale, 1.0);
  std::vector<double> out(static_cast<size_t>(out_size));
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    double sum = 0, wsum = 0;
    for (int64_t x = 0; x < n; ++x) {
      const double w = std::max(0.0, 1.0 - std::fabs((static_cast<double>(x) + 0.5 - center) / fs));
      sum += w * in[static_cast<size_t>(x)];
      wsum += w;
    }
    out[static_cast<size_t>(i)] = sum / wsum;
  }
  return out;
}

TEST(ResizeImage, downscale_by_two_matches_hand_computed_weights) {
  // 4 -> 2: taps (3/7, 3/7, 1/7) and (1/7, 3/7, 3/7).
  Image out = resizeImage(grey(1, 4, {0, 70, 140, 210}), 1, 2);
  EXPECT_EQ(out.data, (std::vector<uint8_t>{50, 160}));
  out = resizeImage(grey(1, 4, {0, 10, 20, 31}), 1, 2);  // 50/7 = 7.14, 163/7 = 23.29
  EXPECT_EQ(out.data, (std::vector<uint8_t>{7, 23}));
}

TEST(ResizeImage, upscale_is_bilinear_with_half_pixel_centres) {
  Image out = resizeImage(grey(1, 2, {0, 200}), 1, 4);
  EXPECT_EQ(out.data, (std::vector<uint8_t>{0, 50, 150, 200}));
  out = resizeImage(grey(2, 1, {0, 200}), 4, 1);  // the vertical pass alone
  EXPECT_EQ(out.data, (std::vector<uint8_t>{0, 50, 150, 200}));
}

TEST(ResizeImage, runs_the_vertical_pass_first_when_height_shrinks_most) {
  // Pillow 13's order. Vertical first: columns average to (159, 164.5 -> 165), then 2 -> 4 gives
  // 159, 160.5 -> 161, 163.5 -> 164, 165. Horizontal first would give 163 for the third.
  Image out = resizeImage(grey(2, 2, {137, 193, 181, 136}), 1, 4);
  EXPECT_EQ(out.data, (std::vector<uint8_t>{159, 161, 164, 165}));
}

TEST(ResizeImage, constant_image_stays_constant) {
  for (auto [h, w, oh, ow] : {std::tuple{8, 6, 4, 3}, {7, 9, 3, 2}, {5, 5, 11, 13}, {1, 1, 224, 224}}) {
    Image out = resizeImage(constant(h, w, 3, 37), oh, ow);
    ASSERT_EQ(out.height, oh);
    ASSERT_EQ(out.width, ow);
    ASSERT_EQ(out.channels, 3);
    for (uint8_t v : out.data) ASSERT_EQ(v, 37) << h << "x" << w << " -> " << oh << "x" << ow;
  }
}

TEST(ResizeImage, gradient_matches_f64_triangle_filter_within_rounding) {
  const int64_t h = 9, w = 13, c = 2;
  Image image = Image::zeros(h, w, c);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t ch = 0; ch < c; ++ch)
        image.at(y, x, ch) = static_cast<uint8_t>(ch == 0 ? 19 * x + 3 * y : 250 - 27 * y);
  for (auto [oh, ow] : {std::pair<int64_t, int64_t>{4, 5}, {3, 13}, {9, 4}, {17, 6}}) {
    Image out = resizeImage(image, oh, ow);
    for (int64_t ch = 0; ch < c; ++ch) {
      // Horizontal pass, rounded to uint8 as Pillow's intermediate image, then vertical.
      std::vector<std::vector<double>> rows;
      for (int64_t y = 0; y < h; ++y) {
        std::vector<double> row;
        for (int64_t x = 0; x < w; ++x) row.push_back(image.at(y, x, ch));
        auto r = ow == w ? row : resize1d(row, ow);
        for (double& v : r) v = std::floor(v + 0.5);
        rows.push_back(r);
      }
      for (int64_t x = 0; x < ow; ++x) {
        std::vector<double> col;
        for (int64_t y = 0; y < h; ++y) col.push_back(rows[static_cast<size_t>(y)][static_cast<size_t>(x)]);
        auto r = oh == h ? col : resize1d(col, oh);
        for (int64_t y = 0; y < oh; ++y)
          EXPECT_NEAR(out.at(y, x, ch), r[static_cast<size_t>(y)], 0.5 + 1e-3)
              << "(" << y << ", " << x << ", " << ch << ") of " << oh << "x" << ow;
      }
    }
  }
}

TEST(ResizeImage, rejects_empty_sizes) {
  EXPECT_THROW(resizeImage(constant(2, 2, 1, 0), 0, 3), ValueError);
  EXPECT_THROW(resizeImage(Image::zeros(0, 2, 1), 2, 2), ValueError);
}

TEST(Resize, shorter_side_keeps_aspect_ratio_truncating) {
  auto s = shorterSideSize(480, 640, 256);
  EXPECT_EQ(s.height, 256);
  EXPECT_EQ(s.width, 341);  // int(256 * 640 / 480) = int(341.33)
  s = shorterSideSize(640, 480, 256);
  EXPECT_EQ(s.height, 341);
  EXPECT_EQ(s.width, 256);
  s = shorterSideSize(100, 100, 7);
  EXPECT_EQ(s.height, 7);
  EXPECT_EQ(s.width, 7);
  Image out = Resize({.size = 4}).apply(constant(1, 1, 3, 200), {});
  EXPECT_EQ(out.height, 4);
  EXPECT_EQ(out.width, 4);
  out = Resize({.height = 2, .width = 5}).apply(constant(3, 3, 1, 9), {});
  EXPECT_EQ(out.height, 2);
  EXPECT_EQ(out.width, 5);
  EXPECT_THROW(Resize({.size = 4, .height = 2, .width = 2}), ValueError);
  EXPECT_THROW(Resize({}), ValueError);
}

TEST(CenterCrop, offsets_round_halves_to_even) {
  EXPECT_EQ(CenterCrop::offsets(5, 7, 2, 2), (std::array<int64_t, 2>{2, 2}));  // round(1.5), round(2.5)
  EXPECT_EQ(CenterCrop::offsets(6, 6, 3, 3), (std::array<int64_t, 2>{2, 2}));  // round(1.5)
  EXPECT_EQ(CenterCrop::offsets(9, 8, 2, 3), (std::array<int64_t, 2>{4, 2}));  // round(3.5), round(2.5)
  EXPECT_EQ(CenterCrop::offsets(4, 4, 4, 4), (std::array<int64_t, 2>{0, 0}));
  Image image = Image::zeros(5, 7, 1);
  for (size_t i = 0; i < image.data.size(); ++i) image.data[i] = static_cast<uint8_t>(i);
  Image out = CenterCrop({.height = 2, .width = 3}).apply(image, {});
  // top round(1.5) = 2, left round(2.0) = 2
  EXPECT_EQ(out.data, (std::vector<uint8_t>{16, 17, 18, 23, 24, 25}));
}

TEST(CenterCrop, pads_an_image_smaller_than_the_crop_with_black) {
  Image out = CenterCrop({.height = 3, .width = 3}).apply(constant(1, 1, 1, 9), {});
  EXPECT_EQ(out.data, (std::vector<uint8_t>{0, 0, 0, 0, 9, 0, 0, 0, 0}));
  // Width 2 -> 5: pad (5-2)//2 = 1 on the left, 2 on the right; height 4 -> 1 crops row round(1.5) = 2.
  Image image = grey(4, 2, {1, 2, 3, 4, 5, 6, 7, 8});
  out = CenterCrop({.height = 1, .width = 5}).apply(image, {});
  EXPECT_EQ(out.data, (std::vector<uint8_t>{0, 5, 6, 0, 0}));
}

TEST(RandomResizedCrop, boxes_lie_inside_with_area_and_ratio_in_range) {
  RandomResizedCrop rrc({.height = 8, .width = 8});
  const int64_t h = 100, w = 80;
  int fallbacks = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    const CropBox b = rrc.cropBox(h, w, {.seed = 7, .epoch = 3, .index = i});
    ASSERT_GE(b.top, 0);
    ASSERT_GE(b.left, 0);
    ASSERT_GE(b.height, 1);
    ASSERT_GE(b.width, 1);
    ASSERT_LE(b.top + b.height, h);
    ASSERT_LE(b.left + b.width, w);
    if (b.height == h && b.width == w) ++fallbacks;  // the fallback here is the whole image (ratio 0.8)
    const double area = static_cast<double>(b.height * b.width) / static_cast<double>(h * w);
    const double ratio = static_cast<double>(b.width) / static_cast<double>(b.height);
    // Rounding each side to an integer moves a crop of side >= 22 by at most ~2.3% per side.
    EXPECT_GE(area, 0.08 * 0.95) << i;
    EXPECT_LE(area, 1.0) << i;
    EXPECT_GE(ratio, 0.75 * 0.95) << i;
    EXPECT_LE(ratio, 4.0 / 3.0 * 1.05) << i;
  }
  EXPECT_LT(fallbacks, 100);
}

TEST(RandomResizedCrop, same_seed_epoch_index_give_the_same_crop) {
  RandomResizedCrop rrc;
  auto key = [](const CropBox& b) { return std::tuple{b.top, b.left, b.height, b.width}; };
  const TransformContext ctx{.seed = 1, .epoch = 2, .index = 3};
  EXPECT_EQ(key(rrc.cropBox(500, 375, ctx)), key(rrc.cropBox(500, 375, ctx)));
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> seen;
  for (int64_t i = 0; i < 20; ++i)
    seen.insert(key(rrc.cropBox(500, 375, {.seed = 1, .epoch = 2, .index = i})));
  EXPECT_GE(seen.size(), 19u);  // different indices, different crops
  EXPECT_NE(key(rrc.cropBox(500, 375, ctx)), key(rrc.cropBox(500, 375, {.seed = 1, .epoch = 3, .index = 3})));
  EXPECT_NE(key(rrc.cropBox(500, 375, ctx)), key(rrc.cropBox(500, 375, {.seed = 2, .epoch = 2, .index = 3})));
}

TEST(RandomResizedCrop, falls_back_to_the_centre_clamped_to_the_ratio_range) {
  // With scale (1, 1) no try fits a 1-pixel-high strip, so every sample takes the fallback.
  RandomResizedCrop rrc({.height = 4, .width = 4, .scale_min = 1.0, .scale_max = 1.0});
  for (int64_t i = 0; i < 20; ++i) {
    CropBox b = rrc.cropBox(1, 10, {.index = i});  // ratio 10 > 4/3: h = 1, w = round(4/3) = 1
    EXPECT_EQ(std::tuple(b.top, b.left, b.height, b.width), std::tuple(0, 4, 1, 1));
    b = rrc.cropBox(10, 1, {.index = i});  // ratio 0.1 < 3/4: w = 1, h = round(1 / 0.75) = 1
    EXPECT_EQ(std::tuple(b.top, b.left, b.height, b.width), std::tuple(4, 0, 1, 1));
    b = rrc.cropBox(30, 100, {.index = i});  // h = 30, w = round(30 * 4/3) = 40, centred
    EXPECT_EQ(std::tuple(b.top, b.left, b.height, b.width), std::tuple(0, 30, 30, 40));
  }
}

TEST(RandomResizedCrop, one_pixel_image_becomes_a_constant_image_of_the_output_size) {
  Image out = RandomResizedCrop({.height = 5, .width = 6}).apply(constant(1, 1, 3, 99), {.index = 4});
  EXPECT_EQ(out.height, 5);
  EXPECT_EQ(out.width, 6);
  for (uint8_t v : out.data) EXPECT_EQ(v, 99);
  EXPECT_THROW(RandomResizedCrop({.scale_min = 0.5, .scale_max = 0.1}), ValueError);
  EXPECT_THROW(RandomResizedCrop({.ratio_min = 0}), ValueError);
}

TEST(RandomHorizontalFlip, mirrors_pixels_keeping_channel_order) {
  Image image = Image::zeros(1, 3, 2);
  image.data = {1, 2, 3, 4, 5, 6};
  Image out = RandomHorizontalFlip({.p = 1.0}).apply(image, {});
  EXPECT_EQ(out.data, (std::vector<uint8_t>{5, 6, 3, 4, 1, 2}));
  EXPECT_EQ(RandomHorizontalFlip({.p = 0.0}).apply(image, {}).data, image.data);
  int flipped = 0;
  RandomHorizontalFlip half;
  for (int64_t i = 0; i < 1000; ++i) flipped += half.apply(image, {.index = i}).data != image.data;
  EXPECT_GT(flipped, 400);
  EXPECT_LT(flipped, 600);
  EXPECT_THROW(RandomHorizontalFlip({.p = 1.5}), ValueError);
}

TEST(ColorAdjust, blends_as_pillow_with_truncation_and_clamping) {
  Image image = grey(1, 3, {201, 10, 255});
  adjustBrightness(image, 0.5);  // 100.5, 5, 127.5 truncated
  EXPECT_EQ(image.data, (std::vector<uint8_t>{100, 5, 127}));
  image = grey(1, 2, {100, 200});
  adjustBrightness(image, 1.5);  // 150, 300 -> 255
  EXPECT_EQ(image.data, (std::vector<uint8_t>{150, 255}));
  image = grey(1, 2, {0, 255});  // mean 127.5 -> int(128.0) = 128
  adjustContrast(image, 0.5);    // 128 - 64, 128 + 63.5
  EXPECT_EQ(image.data, (std::vector<uint8_t>{64, 191}));
  EXPECT_EQ(lumaOf(200, 100, 50), 124);  // (200*19595 + 100*38470 + 50*7471 + 32768) >> 16
  Image rgb = Image::zeros(1, 1, 3);
  rgb.data = {200, 100, 50};
  Image grey_out = rgb;
  adjustSaturation(grey_out, 0.0);
  EXPECT_EQ(grey_out.data, (std::vector<uint8_t>{124, 124, 124}));
  adjustSaturation(rgb, 2.0);  // 124 + 2 * (76, -24, -74)
  EXPECT_EQ(rgb.data, (std::vector<uint8_t>{255, 76, 0}));
  Image red = Image::zeros(1, 2, 3);
  red.data = {255, 0, 0, 90, 90, 90};
  adjustHue(red, 0.4);  // H 0 -> int(0.4 * 255) = 102 of 255: i = 2, f = 0.4 -> (0, 255, round(255 * 0.4))
  EXPECT_EQ(red.data, (std::vector<uint8_t>{0, 255, 102, 90, 90, 90}));  // grey has no hue
  adjustHue(red, -0.4);                                                  // back: 102 - 102
  EXPECT_EQ(red.data, (std::vector<uint8_t>{255, 0, 0, 90, 90, 90}));
  Image g = grey(1, 1, {7});
  adjustHue(g, 0.3);
  EXPECT_EQ(g.data, std::vector<uint8_t>{7});
  EXPECT_THROW(adjustHue(red, 0.6), ValueError);
  Image four = Image::zeros(1, 1, 4);
  EXPECT_THROW(adjustContrast(four, 0.5), ValueError);
}

TEST(ColorJitter, factors_lie_in_torchvision_ranges_and_order_is_a_permutation) {
  ColorJitter jitter({.brightness = 0.4, .contrast = 1.5, .saturation = 0.0, .hue = 0.1});
  std::set<std::array<int, 4>> orders;
  for (int64_t i = 0; i < 500; ++i) {
    const auto p = jitter.params({.seed = 3, .index = i});
    EXPECT_GE(p.brightness, 0.6);
    EXPECT_LT(p.brightness, 1.4);
    EXPECT_GE(p.contrast, 0.0);  // max(0, 1 - 1.5)
    EXPECT_LT(p.contrast, 2.5);
    EXPECT_EQ(p.saturation, 1.0);
    EXPECT_GE(p.hue, -0.1);
    EXPECT_LE(p.hue, 0.1);
    auto sorted = p.order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::array<int, 4>{0, 1, 2, 3}));
    orders.insert(p.order);
  }
  EXPECT_EQ(orders.size(), 24u);  // every order of the four adjustments occurs
  Image image = constant(4, 4, 3, 90);
  EXPECT_EQ(jitter.apply(image, {.index = 2}).data, jitter.apply(image, {.index = 2}).data);
  EXPECT_EQ(ColorJitter({}).apply(image, {.index = 2}).data, image.data);
  EXPECT_THROW(ColorJitter({.brightness = -0.1}), ValueError);
  EXPECT_THROW(ColorJitter({.hue = 0.6}), ValueError);
}

TEST(ImageToTensor, scales_normalises_and_is_channels_last) {
  Image image = Image::zeros(1, 2, 3);
  image.data = {0, 255, 51, 102, 0, 255};
  Tensor t = ImageToTensor({.mean = {0.5, 0.5, 0.2}, .std = {0.25, 0.5, 0.1}}).apply(image);
  EXPECT_EQ(t.shape(), Shape({3, 1, 2}));
  EXPECT_EQ(t.strides(), Shape({1, 6, 3}));
  const float* p = t.data<float>();  // HWC order in memory
  EXPECT_FLOAT_EQ(p[0], -2.0f);      // (0 - 0.5) / 0.25
  EXPECT_FLOAT_EQ(p[1], 1.0f);       // (1 - 0.5) / 0.5
  EXPECT_FLOAT_EQ(p[2], 0.0f);       // (0.2 - 0.2) / 0.1
  EXPECT_FLOAT_EQ(p[3], (102.0f / 255.0f - 0.5f) / 0.25f);
  EXPECT_FLOAT_EQ(p[4], -1.0f);
  EXPECT_FLOAT_EQ(p[5], 8.0f);  // (1 - 0.2) / 0.1
  Tensor plain = ImageToTensor().apply(image);
  EXPECT_FLOAT_EQ(plain.data<float>()[1], 1.0f);
  EXPECT_FLOAT_EQ(plain.data<float>()[2], 0.2f);
  Tensor half =
      ImageToTensor({.mean = {0.5, 0.5, 0.2}, .std = {0.25, 0.5, 0.1}, .dtype = DType::bf16}).apply(image);
  EXPECT_EQ(half.dtype(), DType::bf16);
  EXPECT_EQ(half.strides(), Shape({1, 6, 3}));
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_EQ(half.data<BFloat16>()[i].bits, BFloat16(p[i]).bits) << i;  // the f32 value, rounded
  EXPECT_THROW(ImageToTensor({.mean = {}, .std = {}, .dtype = DType::i64}), ValueError);
  EXPECT_THROW(ImageToTensor({.mean = {0.5}, .std = {0.5}}).apply(image), ValueError);
  EXPECT_THROW(ImageToTensor({.mean = {0.5}, .std = {0.0}}), ValueError);
  EXPECT_THROW(ImageToTensor({.mean = {0.5}, .std = {}}), ValueError);
}

TEST(ImagePipeline, is_deterministic_per_epoch_and_index) {
  ImagePipeline pipeline(
      {std::make_shared<RandomResizedCrop>(RandomResizedCropOptions{.height = 6, .width = 6}),
       std::make_shared<RandomHorizontalFlip>()},
      ImageToTensor({.mean = {0.5, 0.5, 0.5}, .std = {0.5, 0.5, 0.5}}), /*seed=*/11);
  Image image = Image::zeros(20, 30, 3);
  for (size_t i = 0; i < image.data.size(); ++i) image.data[i] = static_cast<uint8_t>(i * 7);
  auto bytes = [&](uint64_t epoch, int64_t index) { return pipeline.augment(image, epoch, index).data; };
  EXPECT_EQ(bytes(0, 5), bytes(0, 5));
  EXPECT_NE(bytes(0, 5), bytes(1, 5));
  EXPECT_NE(bytes(0, 5), bytes(0, 6));
  Tensor t = pipeline.apply(image, 0, 5);
  EXPECT_EQ(t.shape(), Shape({3, 6, 6}));
  EXPECT_EQ(pipeline.describe(), "RandomResizedCrop(6x6) -> RandomHorizontalFlip -> ToTensor");
}

TEST(ImagePipeline, validation_pipeline_on_an_image_smaller_than_the_crop) {
  ImagePipeline pipeline({std::make_shared<Resize>(ResizeOptions{.size = 8}),
                          std::make_shared<CenterCrop>(CenterCropOptions{.height = 6, .width = 6})},
                         ImageToTensor());
  Tensor t = pipeline.apply(constant(1, 1, 1, 255), 0, 0);
  EXPECT_EQ(t.shape(), Shape({1, 6, 6}));
  for (int64_t i = 0; i < 36; ++i) EXPECT_FLOAT_EQ(t.data<float>()[i], 1.0f);
  t = ImagePipeline({std::make_shared<CenterCrop>(CenterCropOptions{.height = 3, .width = 3})},
                    ImageToTensor())
          .apply(constant(1, 1, 1, 255), 0, 0);
  EXPECT_FLOAT_EQ(t.data<float>()[4], 1.0f);
  EXPECT_FLOAT_EQ(t.data<float>()[0], 0.0f);
}

}  // namespace
}  // namespace lockstep::data
