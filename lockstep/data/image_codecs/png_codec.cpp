#include "lockstep/data/image_codecs/png_codec.h"

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "lockstep/data/image_codecs/exif_orientation.h"
#include "lockstep/util/error.h"

namespace lockstep::data {

namespace {

// libpng reports errors through a callback that must not return; it longjmps back to the setjmp
// in readPng / writePng, which hold no objects with destructors (their buffers belong to the
// callers), so nothing is skipped by the jump.
struct PngIo {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  std::vector<uint8_t>* out = nullptr;  // encoding
  char message[256] = {};
};

void onError(png_structp png, png_const_charp message) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->message, sizeof io->message, "%s", message);
  png_longjmp(png, 1);
}

void onWarning(png_structp, png_const_charp) {}

void readBytes(png_structp png, png_bytep dst, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (n > io->size - io->pos) png_error(png, "file ends early (truncated)");
  std::memcpy(dst, io->data + io->pos, n);
  io->pos += n;
}

void writeBytes(png_structp png, png_bytep src, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  io->out->insert(io->out->end(), src, src + n);
}

void flushNothing(png_structp) {}

struct Decoded {
  Image image;
  int orientation = 1;
  std::vector<png_bytep> rows;
  bool pixels_read = false;
};

// false with io.message set on a libpng error. An error after the pixels (a file cut after its
// last IDAT chunk) is not one: PIL stops reading chunks there without complaint.
bool readPng(png_structp png, png_infop info, PngIo& io, Decoded& d, int64_t max_pixels, bool want_exif) {
  if (setjmp(png_jmpbuf(png))) return d.pixels_read;
  png_set_read_fn(png, &io, readBytes);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info), height = png_get_image_height(png, info);
  if (static_cast<int64_t>(width) * height > max_pixels) {
    std::snprintf(io.message, sizeof io.message, "PNG of %ux%u pixels exceeds the limit of %lld pixels",
                  static_cast<unsigned>(width), static_cast<unsigned>(height),
                  static_cast<long long>(max_pixels));
    return false;
  }
  const int color = png_get_color_type(png, info);
  if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
  // Alpha is dropped, as PIL's convert("RGB") drops it: an alpha channel's, and a palette's
  // transparency (tRNS), which png_set_palette_to_rgb expands into one.
  if ((color & PNG_COLOR_MASK_ALPHA) ||
      (color == PNG_COLOR_TYPE_PALETTE && png_get_valid(png, info, PNG_INFO_tRNS)))
    png_set_strip_alpha(png);
  if (!(color & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8) {
    std::snprintf(io.message, sizeof io.message, "unsupported PNG layout");
    return false;
  }
  d.image.height = height;
  d.image.width = width;
  d.image.channels = 3;
  d.image.data.resize(static_cast<size_t>(width) * height * 3);
  d.rows.resize(height);
  for (png_uint_32 y = 0; y < height; ++y)
    d.rows[y] = d.image.data.data() + static_cast<size_t>(y) * width * 3;
  png_read_image(png, d.rows.data());
  d.pixels_read = true;
  png_read_end(png, info);  // the chunks after the pixels (an eXIf chunk may be among them)
  png_uint_32 exif_len = 0;
  png_bytep exif = nullptr;
  if (want_exif && png_get_eXIf_1(png, info, &exif_len, &exif))
    d.orientation = tiffOrientation(exif, exif_len);
  return true;
}

bool writePng(png_structp png, png_infop info, PngIo& io, const Image& image, std::vector<png_bytep>& rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  static constexpr int kColorTypes[] = {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                                        PNG_COLOR_TYPE_RGB_ALPHA};
  png_set_write_fn(png, &io, writeBytes, flushNothing);
  png_set_IHDR(png, info, static_cast<png_uint_32>(image.width), static_cast<png_uint_32>(image.height), 8,
               kColorTypes[image.channels - 1], PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows.data());
  png_write_end(png, info);
  return true;
}

}  // namespace

bool isPng(const uint8_t* data, size_t size) { return size >= 8 && png_sig_cmp(data, 0, 8) == 0; }

Image decodePng(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& options) {
  LOCKSTEP_ENFORCE(isPng(data, size), IoError, name, ": not a PNG file (no PNG signature)");
  PngIo io;
  io.data = data;
  io.size = size;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, onError, onWarning);
  LOCKSTEP_ENFORCE(png, IoError, name, ": libpng could not allocate a reader");
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    throw IoError(name + ": libpng could not allocate a reader");
  }
  // libpng's own limits would allow 10^6 x 10^6; ours are the pixel count (checked after the header).
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  Decoded d;
  const bool ok = readPng(png, info, io, d, options.max_pixels, options.exif_transpose);
  png_destroy_read_struct(&png, &info, nullptr);
  if (!ok) throw IoError(name + ": corrupt or truncated PNG (" + io.message + ")");
  if (options.exif_transpose) return applyExifOrientation(std::move(d.image), d.orientation);
  return std::move(d.image);
}

std::vector<uint8_t> encodePng(const Image& image) {
  LOCKSTEP_ENFORCE(image.channels >= 1 && image.channels <= 4, ValueError,
                   "encodePng: needs 1 to 4 channels, got ", image.describe());
  LOCKSTEP_ENFORCE(image.height > 0 && image.width > 0, ValueError, "encodePng: empty image ",
                   image.describe());
  std::vector<uint8_t> out;
  PngIo io;
  io.out = &out;
  std::vector<png_bytep> rows(static_cast<size_t>(image.height));
  for (int64_t y = 0; y < image.height; ++y)
    rows[static_cast<size_t>(y)] =
        const_cast<png_bytep>(image.data.data() + y * image.width * image.channels);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &io, onError, onWarning);
  LOCKSTEP_ENFORCE(png, IoError, "encodePng: libpng could not allocate a writer");
  png_infop info = png_create_info_struct(png);
  const bool ok = info && writePng(png, info, io, image, rows);
  png_destroy_write_struct(&png, &info);
  LOCKSTEP_ENFORCE(ok, IoError, "encodePng: ", io.message);
  return out;
}

}  // namespace lockstep::data
