#include "lockstep/data/transforms/color_adjust.h"

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
  const auto product =
      static_cast<float>(static_cast<double>(alpha) * (static_cast<int>(in2) - static_cast<int>(in1)));
  const auto temp = static_cast<float>(static_cast<double>(in1) + static_cast<double>(product));
  if (temp <= 0.0f) return 0;
  if (temp >= 255.0f) return 255;
  return static_cast<uint8_t>(temp);
}

uint8_t lumaAt(const Image& image, int64_t pixel) {
  const uint8_t* p = image.data.data() + pixel * image.channels;
  return image.channels == 1 ? p[0] : lumaOf(p[0], p[1], p[2]);
}

// Pillow's rgb2hsv_row (Convert.c) with C's float/double mixing: each float variable rounds.
void rgbToHsv(const uint8_t* rgb, uint8_t* hsv) {
  const uint8_t r = rgb[0], g = rgb[1], b = rgb[2];
  const uint8_t maxc = std::max({r, g, b}), minc = std::min({r, g, b});
  hsv[2] = maxc;
  if (minc == maxc) {
    hsv[0] = hsv[1] = 0;
    return;
  }
  const auto cr = static_cast<float>(maxc - minc);
  const float s = cr / static_cast<float>(maxc);
  const float rc = static_cast<float>(maxc - r) / cr, gc = static_cast<float>(maxc - g) / cr,
              bc = static_cast<float>(maxc - b) / cr;
  float h;
  if (r == maxc) {
    h = bc - gc;
  } else if (g == maxc) {
    h = static_cast<float>(2.0 + static_cast<double>(rc) - static_cast<double>(bc));
  } else {
    h = static_cast<float>(4.0 + static_cast<double>(gc) - static_cast<double>(rc));
  }
  h = static_cast<float>(std::fmod(static_cast<double>(h) / 6.0 + 1.0, 1.0));
  hsv[0] = static_cast<uint8_t>(std::clamp(static_cast<int>(static_cast<double>(h) * 255.0), 0, 255));
  hsv[1] = static_cast<uint8_t>(std::clamp(static_cast<int>(static_cast<double>(s) * 255.0), 0, 255));
}

// Pillow's hsv2rgb (Convert.c); round() is C's: halves away from zero.
void hsvToRgb(const uint8_t* hsv, uint8_t* rgb) {
  const uint8_t h = hsv[0], s = hsv[1], v = hsv[2];
  if (s == 0) {
    rgb[0] = rgb[1] = rgb[2] = v;
    return;
  }
  const double h6 = static_cast<double>(h) * 6.0 / 255.0;
  const auto i = static_cast<int>(std::floor(h6));
  const auto f = static_cast<float>(h6 - i);
  const auto fs = static_cast<float>(static_cast<double>(s) / 255.0);
  const double vd = v;
  auto clip = [](double x) {
    return static_cast<uint8_t>(std::clamp(static_cast<int>(std::round(x)), 0, 255));
  };
  const uint8_t p = clip(vd * (1.0 - static_cast<double>(fs)));
  const uint8_t q = clip(vd * (1.0 - static_cast<double>(fs * f)));
  const double fs_rest = static_cast<double>(fs) * (1.0 - static_cast<double>(f));
  const uint8_t t = clip(vd * (1.0 - fs_rest));
  switch (i % 6) {
    case 0:
      rgb[0] = v, rgb[1] = t, rgb[2] = p;
      break;
    case 1:
      rgb[0] = q, rgb[1] = v, rgb[2] = p;
      break;
    case 2:
      rgb[0] = p, rgb[1] = v, rgb[2] = t;
      break;
    case 3:
      rgb[0] = p, rgb[1] = q, rgb[2] = v;
      break;
    case 4:
      rgb[0] = t, rgb[1] = p, rgb[2] = v;
      break;
    default:
      rgb[0] = v, rgb[1] = p, rgb[2] = q;
      break;
  }
}

}  // namespace

void adjustHue(Image& image, double factor) {
  LOCKSTEP_ENFORCE(factor >= -0.5 && factor <= 0.5, ValueError,
                   "adjustHue: the factor must be in [-0.5, 0.5], got ", factor);
  checkColor(image, "adjustHue");
  if (image.channels == 1) return;  // torchvision leaves L images alone
  // numpy's np.array(factor * 255).astype(np.uint8): truncation, then modulo 256.
  const auto shift = static_cast<uint8_t>(static_cast<int>(factor * 255.0));
  const int64_t pixels = image.height * image.width;
  for (int64_t p = 0; p < pixels; ++p) {
    uint8_t* px = image.data.data() + p * 3;
    uint8_t hsv[3];
    rgbToHsv(px, hsv);
    hsv[0] = static_cast<uint8_t>(hsv[0] + shift);
    hsvToRgb(hsv, px);
  }
}

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
