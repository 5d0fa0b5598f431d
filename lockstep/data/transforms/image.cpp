#include "lockstep/data/transforms/image.h"

#include <algorithm>
#include <cstring>

#include "lockstep/util/error.h"

namespace lockstep::data {

Image Image::zeros(int64_t height, int64_t width, int64_t channels) {
  LOCKSTEP_ENFORCE(height >= 0 && width >= 0 && channels >= 1, ValueError,
                   "Image: needs height, width >= 0 and ", "channels >= 1, got ", height, "x", width,
                   " with ", channels, " channels");
  Image image;
  image.height = height;
  image.width = width;
  image.channels = channels;
  image.data.assign(static_cast<size_t>(height * width * channels), 0);
  return image;
}

std::string Image::describe() const {
  return "Image(" + std::to_string(channels) + "x" + std::to_string(height) + "x" + std::to_string(width) +
         ")";
}

Image cropImage(const Image& image, int64_t top, int64_t left, int64_t height, int64_t width) {
  LOCKSTEP_ENFORCE(height >= 0 && width >= 0, ValueError,
                   "cropImage: the window must have height, width >= 0, got ", height, "x", width);
  Image out = Image::zeros(height, width, image.channels);
  const int64_t c = image.channels;
  // Columns of the window that lie inside the image: [x0, x1) in window coordinates.
  const int64_t x0 = std::clamp<int64_t>(-left, 0, width),
                x1 = std::clamp<int64_t>(image.width - left, 0, width);
  if (x1 <= x0) return out;
  for (int64_t y = 0; y < height; ++y) {
    const int64_t sy = top + y;
    if (sy < 0 || sy >= image.height) continue;
    std::memcpy(out.data.data() + (y * width + x0) * c,
                image.data.data() + (sy * image.width + left + x0) * c, static_cast<size_t>((x1 - x0) * c));
  }
  return out;
}

void flipImageHorizontally(Image& image) {
  const int64_t c = image.channels, w = image.width;
  for (int64_t y = 0; y < image.height; ++y) {
    uint8_t* row = image.data.data() + y * w * c;
    for (int64_t a = 0, b = w - 1; a < b; ++a, --b)
      std::swap_ranges(row + a * c, row + (a + 1) * c, row + b * c);
  }
}

}  // namespace lockstep::data
