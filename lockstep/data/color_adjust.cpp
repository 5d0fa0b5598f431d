#include "lockstep/data/color_adjust.h"

#include <algorithm>
#include <cmath>

#include "lockstep/util/error.h"

namespace lockstep::data {
namespace {

void checkColor(const Image& image, const char* what) {
  LOCKSTEP_ENFORCE(image.channels == 1 || image.channels == 3, ValueError, what,
                   ": needs a 1-channel (grey) or 3-channel (RGB) image, got ", image.describe());
}

// Pillow's ImagingBlend for one byte: in1 + alpha * (in2 - in1) in float (alpha a C float), clamped
// to [0, 255] and truncated. The product and the sum are each rounded to float explicitly, as in C,
// so no fused multiply-add can change a value.
uint8_t blend(uint8_t in1, uint8_t in2, float alpha) {
  const auto product = static_cast<float>(static_cast<double>(alpha) * (static_cast<int>(in2) - static_cast<int>(in1)));
  const auto temp = static_cast<float>(static_cast<double>(in1) + static_cast<double>(product));
  if (temp <= 0.0f) return 0;
  if (temp >= 255.0f) return 255;
  return static_cast<uint8_t>(temp);
}

uint8_t lumaAt(const Image& image, int64_t pixel) {
  const uint8_t* p = image.data.data() + pixel * image.channels;
  return image.channels == 1 ? p[0] : lumaOf(p[0], p[1], p[2]);
}

}  // namespace

void adjustBrightness(Image& image, double factor) {
  const auto alpha = static_cast<float>(factor);
  for (uint8_t& v : image.data) v = blend(0, v, alpha);
}

void adjustContrast(Image& image, double factor) {
  checkColor(image, "adjustContrast");
  const int64_t pixels = image.height * image.width;
  if (pixels == 0) return;
  int64_t sum = 0;
  for (int64_t p = 0; p < pixels; ++p) sum += lumaAt(image, p);
  // ImageStat's mean (an exact sum over a true division), then int(mean + 0.5).
  const auto mean = static_cast<uint8_t>(static_cast<double>(sum) / static_cast<double>(pixels) + 0.5);
  const auto alpha = static_cast<float>(factor);
  for (uint8_t& v : image.data) v = blend(mean, v, alpha);
}

void adjustSaturation(Image& image, double factor) {
  checkColor(image, "adjustSaturation");
  if (image.channels == 1) return;  // Pillow: L converted to L is the image itself
  const auto alpha = static_cast<float>(factor);
  const int64_t pixels = image.height * image.width;
  for (int64_t p = 0; p < pixels; ++p) {
    uint8_t* px = image.data.data() + p * 3;
    const uint8_t grey = lumaOf(px[0], px[1], px[2]);
    for (int c = 0; c < 3; ++c) px[c] = blend(grey, px[c], alpha);
  }
}

}  // namespace lockstep::data
