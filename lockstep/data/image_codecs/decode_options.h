#pragma once
#include <cstdint>

namespace lockstep::data {

/// How an image file becomes an Image. The defaults give torchvision's default loader's pixels
/// (PIL's Image.open(f).convert("RGB")): full size, EXIF orientation not applied.
struct DecodeOptions {
  /// > 0: a JPEG may be decoded at 1/2, 1/4 or 1/8 scale in the DCT domain (libjpeg-turbo's
  /// scaling, far cheaper than decoding at full size and resizing) as long as its shorter side stays
  /// >= this. 0: always full size.
  int64_t min_short_side = 0;
  /// Rotate/mirror as the EXIF orientation tag says (PIL's ImageOps.exif_transpose). torchvision's
  /// ImageFolder does not, so neither does the default.
  bool exif_transpose = false;
  /// Larger images are refused before any pixel is decoded (PIL's DecompressionBombError limit,
  /// 2 * Image.MAX_IMAGE_PIXELS), so a small hostile file cannot make a huge allocation.
  int64_t max_pixels = 178956970;
};

}  // namespace lockstep::data
