#pragma once
// A decoded image as a JPEG/PNG decoder gives it: rows of interleaved uint8 channels (HWC).
// The image transforms (image_transform.h) work on these until the last step turns them into f32.
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::data {

/// Height x width pixels of `channels` interleaved uint8 values (1 = grey, 3 = RGB), row-major.
struct Image {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  std::vector<uint8_t> data;  // height * width * channels bytes

  /// A zero-filled (black) image. ValueError for a negative size or channels < 1.
  static Image zeros(int64_t height, int64_t width, int64_t channels);
  uint8_t& at(int64_t y, int64_t x, int64_t c) {
    return data[static_cast<size_t>((y * width + x) * channels + c)];
  }
  uint8_t at(int64_t y, int64_t x, int64_t c) const {
    return data[static_cast<size_t>((y * width + x) * channels + c)];
  }
  /// "Image(3x224x224)": channels x height x width, for messages.
  std::string describe() const;
};

/// The rows [top, top + height) and columns [left, left + width) of image; pixels of the window that
/// fall outside the image are black (PIL's Image.crop). ValueError for a negative height or width.
Image cropImage(const Image& image, int64_t top, int64_t left, int64_t height, int64_t width);

/// Mirrors image left-right in place.
void flipImageHorizontally(Image& image);

}  // namespace lockstep::data
