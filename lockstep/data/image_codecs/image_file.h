#pragma once
// Image files as the datasets read them: the format found from the bytes (as PIL does, not from
// the file name), JPEG or PNG decoded to 8-bit RGB (jpeg_codec.h, png_codec.h).
// Thread-safety: every function may be called from any number of threads at once.
#include <cstddef>
#include <cstdint>
#include <string>

#include "lockstep/data/image_codecs/decode_options.h"
#include "lockstep/data/transforms/image.h"

namespace lockstep::data {

/// The image in bytes (JPEG or PNG) as 3-channel RGB. IoError starting with `name` for another or
/// an unknown format (saying which were found and which are supported) and for a file that fails to
/// decode (saying why).
Image decodeImage(const uint8_t* data, size_t size, const std::string& name,
                  const DecodeOptions& options = {});

/// decodeImage of the file at path; IoError naming it when it cannot be read.
Image readImageFile(const std::string& path, const DecodeOptions& options = {});

}  // namespace lockstep::data
