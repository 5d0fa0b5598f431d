#pragma once
// JPEG files through libjpeg-turbo's TurboJPEG API: decoding to 8-bit RGB as PIL's
// Image.open(f).convert("RGB") gives it, and encoding (the test data generator).
// Thread-safety: every function may be called from any number of threads at once (each thread
// keeps its own TurboJPEG handles).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/data/image_codecs/decode_options.h"
#include "lockstep/data/transforms/image.h"

namespace lockstep::data {

/// Whether bytes start with a JPEG's SOI marker (FF D8 FF).
bool isJpeg(const uint8_t* data, size_t size);

/// The JPEG in bytes as a 3-channel RGB image. Grey images are replicated into R, G and B; CMYK and
/// YCCK ones (Adobe's inverted convention, as PIL assumes) are converted as PIL's CMYK -> RGB does.
/// libjpeg's default (accurate integer) IDCT and fancy upsampling: PIL's settings, so the pixels
/// are PIL's where both use the same libjpeg. A file that ends early is an error (PIL raises
/// "image file is truncated"); libjpeg's other warnings (extraneous bytes) are not (PIL ignores
/// them). IoError starting with `name` and saying why for anything undecodable or larger than
/// options.max_pixels.
Image decodeJpeg(const uint8_t* data, size_t size, const std::string& name,
                 const DecodeOptions& options = {});

/// The image (1 or 3 channels) as a baseline JPEG of `quality` (1..100), 4:2:0 chroma subsampling
/// for RGB. ValueError for another channel count, an empty image or a quality out of range.
std::vector<uint8_t> encodeJpeg(const Image& image, int quality = 90);

}  // namespace lockstep::data
