#include "lockstep/data/image_codecs/exif_orientation.h"

#include <algorithm>

namespace lockstep::data {

namespace {

constexpr uint16_t kOrientationTag = 0x0112;
constexpr uint16_t kShortType = 3;

struct TiffReader {
  const uint8_t* p;
  size_t n;
  bool big_endian;
  bool has(size_t at, size_t len) const { return at <= n && len <= n - at; }
  uint16_t u16(size_t at) const {
    return big_endian ? static_cast<uint16_t>(p[at] << 8 | p[at + 1])
                      : static_cast<uint16_t>(p[at + 1] << 8 | p[at]);
  }
  uint32_t u32(size_t at) const {
    return big_endian ? static_cast<uint32_t>(u16(at)) << 16 | u16(at + 2)
                      : static_cast<uint32_t>(u16(at + 2)) << 16 | u16(at);
  }
};

}  // namespace

int tiffOrientation(const uint8_t* tiff, size_t size) {
  if (size < 8) return 1;
  TiffReader r{tiff, size, false};
  if (tiff[0] == 'I' && tiff[1] == 'I') {
    r.big_endian = false;
  } else if (tiff[0] == 'M' && tiff[1] == 'M') {
    r.big_endian = true;
  } else {
    return 1;
  }
  if (r.u16(2) != 42) return 1;
  // IFD0 only: the orientation of the main image (IFD1 describes the thumbnail).
  const size_t ifd = r.u32(4);
  if (!r.has(ifd, 2)) return 1;
  const size_t entries = r.u16(ifd);
  for (size_t i = 0; i < entries; ++i) {
    const size_t e = ifd + 2 + 12 * i;
    if (!r.has(e, 12)) return 1;
    if (r.u16(e) != kOrientationTag) continue;
    if (r.u16(e + 2) != kShortType || r.u32(e + 4) < 1) return 1;
    const int v = r.u16(e + 8);  // a single SHORT sits in the entry's value field
    return v >= 1 && v <= 8 ? v : 1;
  }
  return 1;
}

int jpegExifOrientation(const uint8_t* jpeg, size_t size) {
  if (size < 4 || jpeg[0] != 0xFF || jpeg[1] != 0xD8) return 1;
  size_t at = 2;
  // Markers with a length up to the first scan; EXIF sits in APP1 right after SOI in practice.
  while (at + 4 <= size) {
    if (jpeg[at] != 0xFF) return 1;
    const uint8_t marker = jpeg[at + 1];
    if (marker == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return 1;  // start of scan / end of image
    const size_t len = static_cast<size_t>(jpeg[at + 2] << 8 | jpeg[at + 3]);
    if (len < 2 || at + 2 + len > size) return 1;
    const uint8_t* seg = jpeg + at + 4;
    const size_t seg_len = len - 2;
    static constexpr uint8_t kExif[6] = {'E', 'x', 'i', 'f', 0, 0};
    if (marker == 0xE1 && seg_len >= 6 && std::equal(kExif, kExif + 6, seg)) {
      return tiffOrientation(seg + 6, seg_len - 6);
    }
    at += 2 + len;
  }
  return 1;
}

Image applyExifOrientation(Image image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  const int64_t h = image.height, w = image.width, c = image.channels;
  // Orientations 5-8 swap the axes.
  const bool swap = orientation >= 5;
  Image out = Image::zeros(swap ? w : h, swap ? h : w, c);
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      int64_t sy = 0, sx = 0;  // the source pixel shown at (y, x)
      switch (orientation) {
        case 2:
          sy = y, sx = w - 1 - x;
          break;
        case 3:
          sy = h - 1 - y, sx = w - 1 - x;
          break;
        case 4:
          sy = h - 1 - y, sx = x;
          break;
        case 5:
          sy = x, sx = y;
          break;
        case 6:
          sy = h - 1 - x, sx = y;
          break;
        case 7:
          sy = h - 1 - x, sx = w - 1 - y;
          break;
        default:
          sy = x, sx = w - 1 - y;
          break;  // 8
      }
      const uint8_t* src = image.data.data() + (sy * w + sx) * c;
      std::copy(src, src + c, out.data.data() + (y * out.width + x) * c);
    }
  }
  return out;
}

}  // namespace lockstep::data
