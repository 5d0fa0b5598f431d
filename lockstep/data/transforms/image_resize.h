#pragma once
// Resizing decoded images with Pillow's arithmetic, so that lockstep's Resize and RandomResizedCrop
// give the bytes torchvision gives on PIL images.
#include <cstdint>

#include "lockstep/data/transforms/image.h"

namespace lockstep::data {

/// Pillow's Image.resize((width, height), BILINEAR) (libImaging/Resample.c): a triangle filter whose
/// support grows with the downscale factor (antialiasing), separable, the first pass's result
/// rounded to uint8, weights in 22-bit fixed point, results rounded and clamped. The passes run in
/// Pillow 13's order (vertical first when the height shrinks by more than twice as many pixels as
/// the width, else horizontal first). An image already of the target size is copied. ValueError unless
/// height, width >= 1 and the image is non-empty. Thread-safety: pure.
Image resizeImage(const Image& image, int64_t height, int64_t width);

/// resizeImage(cropImage(image, top, left, window_height, window_width), height, width) without the
/// copy: the window's pixels only, its edges clamping the filter as the crop's would. ValueError
/// unless the window is non-empty and lies inside the image. Thread-safety: pure.
Image resizeImageWindow(const Image& image, int64_t top, int64_t left, int64_t window_height,
                        int64_t window_width, int64_t height, int64_t width);

/// torchvision's output size for Resize(size) with an int size: the shorter side becomes `size`, the
/// longer int(size * long / short) (truncated), so the aspect ratio is kept. Returns {height, width}.
struct ImageSize {
  int64_t height = 0;
  int64_t width = 0;
};
ImageSize shorterSideSize(int64_t height, int64_t width, int64_t size);

}  // namespace lockstep::data
