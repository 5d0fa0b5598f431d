#pragma once
// PNG files through libpng: decoding to 8-bit RGB as PIL's Image.open(f).convert("RGB") gives it,
// and encoding (tests, the data generator). Thread-safety: reentrant (no shared state).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/data/image_codecs/decode_options.h"
#include "lockstep/data/transforms/image.h"

namespace lockstep::data {

/// Whether bytes start with the PNG signature.
bool isPng(const uint8_t* data, size_t size);

/// The PNG in bytes as a 3-channel RGB image, as PIL converts it: palettes expanded (their
/// transparency ignored), grey replicated into R, G and B, alpha dropped (not composited), no gamma
/// correction, 16-bit samples reduced to their high byte (PIL's "RGB;16B"; for 16-bit grey PIL
/// instead clips the value at 255, which makes most such images white: lockstep keeps the high
/// byte there too). options.exif_transpose reads the eXIf chunk. IoError starting with `name`
/// and saying why for anything undecodable (bad CRC, truncated data) or larger than
/// options.max_pixels.
Image decodePng(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& options = {});

/// The image (1 grey, 2 grey + alpha, 3 RGB, 4 RGBA channels) as an 8-bit PNG. ValueError for
/// another channel count or an empty image.
std::vector<uint8_t> encodePng(const Image& image);

}  // namespace lockstep::data
