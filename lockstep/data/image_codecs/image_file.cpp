#include "lockstep/data/image_codecs/image_file.h"

#include <cstring>

#include "lockstep/data/file_bytes.h"
#include "lockstep/data/image_codecs/jpeg_codec.h"
#include "lockstep/data/image_codecs/png_codec.h"
#include "lockstep/util/error.h"

namespace lockstep::data {

namespace {

bool startsWith(const uint8_t* data, size_t size, const char* magic) {
  const size_t n = std::strlen(magic);
  return size >= n && std::memcmp(data, magic, n) == 0;
}

// The formats torchvision's IMG_EXTENSIONS name that lockstep does not decode, for the message.
const char* otherFormat(const uint8_t* data, size_t size) {
  if (startsWith(data, size, "BM")) return "BMP";
  if (startsWith(data, size, "II*") || startsWith(data, size, "MM\0*")) return "TIFF";
  if (startsWith(data, size, "RIFF") && size >= 12 && std::memcmp(data + 8, "WEBP", 4) == 0) return "WebP";
  if (size >= 2 && data[0] == 'P' && data[1] >= '1' && data[1] <= '7') return "PNM (PPM/PGM)";
  if (startsWith(data, size, "GIF8")) return "GIF";
  return nullptr;
}

}  // namespace

Image decodeImage(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& options) {
  if (isJpeg(data, size)) return decodeJpeg(data, size, name, options);
  if (isPng(data, size)) return decodePng(data, size, name, options);
  if (size == 0) throw IoError(name + ": empty file, not an image");
  if (const char* format = otherFormat(data, size)) {
    throw IoError(name + ": " + format +
                  " images are not supported (JPEG and PNG are); convert it or remove it");
  }
  throw IoError(name + ": not an image file lockstep can decode (neither JPEG nor PNG)");
}

Image readImageFile(const std::string& path, const DecodeOptions& options) {
  const std::vector<uint8_t> bytes = readFileBytes(path);
  return decodeImage(bytes.data(), bytes.size(), path, options);
}

}  // namespace lockstep::data
