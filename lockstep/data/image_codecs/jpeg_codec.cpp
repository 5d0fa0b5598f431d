#include "lockstep/data/image_codecs/jpeg_codec.h"

#include <turbojpeg.h>

#include <algorithm>
#include <memory>

#include "lockstep/data/image_codecs/exif_orientation.h"
#include "lockstep/util/error.h"

namespace lockstep::data {

namespace {

// One TurboJPEG handle per thread and direction: a handle is not safe to share between threads,
// and creating one per image would cost more than decoding a small one.
struct HandleCloser {
  void operator()(void* h) const { tjDestroy(h); }
};
using Handle = std::unique_ptr<void, HandleCloser>;

// A decompressor that failed is replaced: libjpeg-turbo 2.1 leaves a handle whose header read
// failed mid-way in that state, and the next image on it fails with the same error.
Handle& threadDecompressor() {
  thread_local Handle h;
  if (!h) h.reset(tjInitDecompress());
  LOCKSTEP_ENFORCE(h, IoError, "TurboJPEG: cannot create a decompressor: ", tjGetErrorStr2(nullptr));
  return h;
}

[[noreturn]] void fail(Handle& handle, const std::string& message) {
  handle.reset();
  throw IoError(message);
}

tjhandle threadCompressor() {
  thread_local Handle h(tjInitCompress());
  LOCKSTEP_ENFORCE(h, IoError, "TurboJPEG: cannot create a compressor: ", tjGetErrorStr2(nullptr));
  return h.get();
}

// Pillow's cmyk2rgb on the inverted samples Pillow reads Adobe CMYK JPEGs as ("CMYK;I"):
// c' = 255 - c, k' = 255 - k, out = (255 - k') - c' * (255 - k') / 255 with Pillow's MULDIV255.
uint8_t cmykChannel(uint8_t stored_c, uint8_t stored_k) {
  const int c = 255 - stored_c, nk = stored_k;  // nk = 255 - k' = stored k
  const int t = c * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// The largest DCT scaling (1/8, 1/4, 1/2; 1 always works) whose shorter side stays >= min_side.
tjscalingfactor chooseScale(int width, int height, int64_t min_side) {
  tjscalingfactor best{1, 1};
  if (min_side <= 0) return best;
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  for (int i = 0; factors && i < count; ++i) {
    const tjscalingfactor f = factors[i];
    if (f.num != 1 || f.denom > 8) continue;  // only the cheap reductions 1/2, 1/4, 1/8
    const int64_t w = TJSCALED(width, f), h = TJSCALED(height, f);
    if (std::min(w, h) >= min_side && f.denom > best.denom) best = f;
  }
  return best;
}

}  // namespace

bool isJpeg(const uint8_t* data, size_t size) {
  return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

Image decodeJpeg(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& options) {
  Handle& handle = threadDecompressor();
  tjhandle tj = handle.get();
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  // TurboJPEG's sizes are unsigned long; larger inputs are not JPEGs anyone decodes.
  LOCKSTEP_ENFORCE(size <= (1ull << 31), IoError, name, ": JPEG file of ", size, " bytes is too large");
  auto* bytes = const_cast<unsigned char*>(data);  // TurboJPEG 2.1 takes non-const input but never writes it
  if (tjDecompressHeader3(tj, bytes, static_cast<unsigned long>(size), &width, &height, &subsamp,
                          &colorspace) != 0) {
    fail(handle, name + ": not a decodable JPEG (" + tjGetErrorStr2(tj) + ")");
  }
  LOCKSTEP_ENFORCE(width > 0 && height > 0, IoError, name, ": JPEG has no pixels (", width, "x", height, ")");
  LOCKSTEP_ENFORCE(static_cast<int64_t>(width) * height <= options.max_pixels, IoError, name, ": JPEG of ",
                   width, "x", height, " pixels exceeds the limit of ", options.max_pixels,
                   " pixels (a decompression bomb?)");
  const tjscalingfactor scale = chooseScale(width, height, options.min_short_side);
  const int w = TJSCALED(width, scale), h = TJSCALED(height, scale);
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const int pixel_format = cmyk ? TJPF_CMYK : TJPF_RGB;
  const int in_channels = cmyk ? 4 : 3;
  std::vector<uint8_t> pixels(static_cast<size_t>(w) * h * in_channels);
  if (tjDecompress2(tj, bytes, static_cast<unsigned long>(size), pixels.data(), w, w * in_channels, h,
                    pixel_format, 0) != 0) {
    const std::string why = tjGetErrorStr2(tj);
    // libjpeg's warnings leave a complete image; the one for a file that ends early does not.
    if (tjGetErrorCode(tj) != TJERR_WARNING || why.find("Premature end") != std::string::npos) {
      fail(handle, name + ": corrupt or truncated JPEG (" + why + ")");
    }
  }
  Image image;
  image.height = h;
  image.width = w;
  image.channels = 3;
  if (cmyk) {
    image.data.resize(static_cast<size_t>(w) * h * 3);
    for (size_t i = 0, n = static_cast<size_t>(w) * h; i < n; ++i) {
      const uint8_t* p = pixels.data() + 4 * i;
      for (int c = 0; c < 3; ++c) image.data[3 * i + c] = cmykChannel(p[c], p[3]);
    }
  } else {
    image.data = std::move(pixels);
  }
  if (options.exif_transpose) image = applyExifOrientation(std::move(image), jpegExifOrientation(data, size));
  return image;
}

std::vector<uint8_t> encodeJpeg(const Image& image, int quality) {
  LOCKSTEP_ENFORCE(image.channels == 1 || image.channels == 3, ValueError,
                   "encodeJpeg: needs 1 or 3 channels, got ", image.describe());
  LOCKSTEP_ENFORCE(image.height > 0 && image.width > 0 && image.height <= 65535 && image.width <= 65535,
                   ValueError, "encodeJpeg: sides must be 1..65535, got ", image.describe());
  LOCKSTEP_ENFORCE(quality >= 1 && quality <= 100, ValueError, "encodeJpeg: quality must be 1..100, got ",
                   quality);
  tjhandle tj = threadCompressor();
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  const bool grey = image.channels == 1;
  const int rc =
      tjCompress2(tj, image.data.data(), static_cast<int>(image.width), 0, static_cast<int>(image.height),
                  grey ? TJPF_GRAY : TJPF_RGB, &out, &out_size, grey ? TJSAMP_GRAY : TJSAMP_420, quality, 0);
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(out, [](unsigned char* p) { tjFree(p); });
  LOCKSTEP_ENFORCE(rc == 0, IoError, "encodeJpeg: ", tjGetErrorStr2(tj));
  return std::vector<uint8_t>(out, out + out_size);
}

}  // namespace lockstep::data
