#pragma once
// torchvision's adjust_brightness / adjust_contrast / adjust_saturation on PIL images, i.e. Pillow's
// ImageEnhance: Image.blend(degenerate, image, factor) with Pillow's float arithmetic and truncation;
// adjust_hue through Pillow's HSV conversions.
#include "lockstep/data/transforms/image.h"

namespace lockstep::data {

/// Blends towards black: factor 0 gives black, 1 the image, > 1 brighter (clamped to 255).
void adjustBrightness(Image& image, double factor);
/// Blends towards the mean grey level (Pillow's luma, its mean rounded to an integer).
void adjustContrast(Image& image, double factor);
/// Blends towards the image's greyscale version (luma); a no-op on 1-channel images.
void adjustSaturation(Image& image, double factor);

/// torchvision's adjust_hue on a PIL image: RGB -> HSV (Pillow's uint8 HSV), H += int(factor * 255)
/// modulo 256, HSV -> RGB. factor in [-0.5, 0.5] (ValueError otherwise); a no-op on 1-channel images.
void adjustHue(Image& image, double factor);

/// Pillow's RGB -> L: (19595 R + 38470 G + 7471 B + 0x8000) >> 16 (ITU-R 601-2 luma).
inline uint8_t lumaOf(uint8_t r, uint8_t g, uint8_t b) {
  return static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

}  // namespace lockstep::data
