// libFuzzer target: the image decoders (data/image_codecs/) on arbitrary bytes, EXIF orientation
// applied. Only an IoError may come out; an accepted image holds exactly height x width RGB pixels
// within the pixel limit; and after any input, failed or not, the same thread still decodes a good
// JPEG and PNG (a TurboJPEG handle left broken by a failed header once failed every later image).
#include <cstdint>

#include "lockstep/data/image_codecs/exif_orientation.h"
#include "lockstep/data/image_codecs/image_file.h"
#include "lockstep/data/image_codecs/jpeg_codec.h"
#include "lockstep/data/image_codecs/png_codec.h"
#include "lockstep/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  data::DecodeOptions options;
  options.exif_transpose = true;
  options.max_pixels = int64_t{1} << 22;  // keeps each input fast and small in memory
  // The first byte picks a DCT scaling, so the scaled decode paths are fuzzed too.
  if (size > 0 && (data[0] & 1)) options.min_short_side = data[0] >> 1;
  try {
    const data::Image im = data::decodeImage(data, size, "fuzz-image", options);
    LOCKSTEP_CHECK(im.channels == 3 && im.height > 0 && im.width > 0, im.describe());
    LOCKSTEP_CHECK(im.height * im.width <= options.max_pixels, im.describe());
    LOCKSTEP_CHECK(im.data.size() == static_cast<size_t>(im.height * im.width * 3), im.data.size());
  } catch (const IoError&) {
  }
  (void)data::tiffOrientation(data, size);
  static const data::Image good = [] {
    data::Image im = data::Image::zeros(8, 8, 3);
    for (size_t i = 0; i < im.data.size(); ++i) im.data[i] = static_cast<uint8_t>(i * 5);
    return im;
  }();
  static const std::vector<uint8_t> good_jpeg = data::encodeJpeg(good), good_png = data::encodePng(good);
  LOCKSTEP_CHECK(data::decodeImage(good_jpeg.data(), good_jpeg.size(), "good.jpg").height == 8);
  LOCKSTEP_CHECK(data::decodeImage(good_png.data(), good_png.size(), "good.png").data == good.data);
  return 0;
}
