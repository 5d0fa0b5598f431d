#include "lockstep/data/transforms/image_to_tensor.h"

#include "lockstep/util/error.h"

namespace lockstep::data {

ImageToTensor::ImageToTensor(const ImageToTensorOptions& options) {
  LOCKSTEP_ENFORCE(options.mean.size() == options.std.size(), ValueError, "ImageToTensor: mean has ",
                   options.mean.size(), " values but std has ", options.std.size(), "; give one per channel");
  LOCKSTEP_ENFORCE(options.dtype == DType::f32 || options.dtype == DType::bf16, ValueError,
                   "ImageToTensor: dtype must be f32 or bf16, got ", dtypeName(options.dtype));
  dtype_ = options.dtype;
  normalize_ = !options.mean.empty();
  const size_t n = normalize_ ? options.mean.size() : 1;
  table_.resize(n);
  for (size_t c = 0; c < n; ++c) {
    const float mean = normalize_ ? static_cast<float>(options.mean[c]) : 0.0f;
    const float sd = normalize_ ? static_cast<float>(options.std[c]) : 1.0f;
    LOCKSTEP_ENFORCE(sd > 0.0f, ValueError, "ImageToTensor: std[", c, "] must be > 0, got ", options.std[c]);
    // torchvision: img.float().div(255), then tensor.sub_(mean).div_(std), all in f32.
    for (int v = 0; v < 256; ++v)
      table_[c][static_cast<size_t>(v)] = (static_cast<float>(v) / 255.0f - mean) / sd;
  }
  if (dtype_ == DType::bf16) {
    table_bf16_.resize(n);
    for (size_t c = 0; c < n; ++c)
      for (size_t v = 0; v < 256; ++v) table_bf16_[c][v] = BFloat16(table_[c][v]);
  }
}

void ImageToTensor::checkChannels(const Image& image) const {
  LOCKSTEP_ENFORCE(!normalize_ || image.channels == static_cast<int64_t>(table_.size()), ValueError,
                   "ImageToTensor: Normalize has ", table_.size(), " channels' mean/std but the image is ",
                   image.describe());
  LOCKSTEP_ENFORCE(image.data.size() == static_cast<size_t>(image.height * image.width * image.channels),
                   ValueError, "ImageToTensor: ", image.describe(), " holds ", image.data.size(), " bytes");
}

namespace {

// Pixel x of a row goes to column x, or mirrored to column w - 1 - x. RGB with a table per channel
// (the pipelines' case) gets its own loop: three lookups per pixel from three fixed tables.
template <typename T, typename Table>
void lookUp(const Image& image, const Table& table, bool per_channel, bool mirror, T* __restrict dst) {
  const int64_t c = image.channels, w = image.width;
  const int64_t step = mirror ? -c : c;
  for (int64_t y = 0; y < image.height; ++y) {
    const uint8_t* __restrict src = image.data.data() + y * w * c;
    T* __restrict out = dst + y * w * c + (mirror ? (w - 1) * c : 0);
    if (c == 3 && per_channel) {
      const auto &r = table[0], &g = table[1], &b = table[2];
      for (int64_t x = 0; x < w; ++x, src += 3, out += step) {
        out[0] = r[src[0]];
        out[1] = g[src[1]];
        out[2] = b[src[2]];
      }
      continue;
    }
    for (int64_t x = 0; x < w; ++x, src += c, out += step)
      for (int64_t ch = 0; ch < c; ++ch) out[ch] = table[per_channel ? static_cast<size_t>(ch) : 0][src[ch]];
  }
}

}  // namespace

void ImageToTensor::writeTo(const Image& image, float* dst, bool mirror) const {
  checkChannels(image);
  lookUp(image, table_, normalize_, mirror, dst);
}

void ImageToTensor::writeTo(const Image& image, BFloat16* dst, bool mirror) const {
  checkChannels(image);
  if (table_bf16_.empty()) {  // an f32 pipeline asked for bf16 once: round as we go
    std::vector<float> f(image.data.size());
    lookUp(image, table_, normalize_, mirror, f.data());
    for (size_t i = 0; i < f.size(); ++i) dst[i] = BFloat16(f[i]);
    return;
  }
  lookUp(image, table_bf16_, normalize_, mirror, dst);
}

Tensor ImageToTensor::apply(const Image& image, bool mirror) const {
  checkChannels(image);
  const int64_t c = image.channels, h = image.height, w = image.width;
  Tensor out = Tensor::emptyStrided({c, h, w}, {1, w * c, c}, dtype_);
  if (dtype_ == DType::bf16) {
    writeTo(image, out.data<BFloat16>(), mirror);
  } else {
    writeTo(image, out.data<float>(), mirror);
  }
  return out;
}

}  // namespace lockstep::data
