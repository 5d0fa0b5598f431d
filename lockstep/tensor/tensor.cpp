#include "lockstep/tensor/tensor.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "lockstep/tensor/convert.h"
#include "lockstep/tensor/device_copy.h"
#include "lockstep/tensor/strided.h"

namespace lockstep {

namespace {

template <typename D, typename S>
inline D castValue(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<S, BFloat16> || std::is_same_v<S, Half>) {
    return castValue<D>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, BFloat16> || std::is_same_v<D, Half>) {
    return D(static_cast<float>(v));
  } else {
    return static_cast<D>(v);
  }
}

Shape inferShape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      LOCKSTEP_ENFORCE(infer < 0, ValueError, op, ": only one dimension can be -1 in ", shapeToString(shape));
      infer = static_cast<int>(i);
    } else {
      LOCKSTEP_ENFORCE(out[i] >= 0, ValueError, op, ": invalid size in ", shapeToString(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    LOCKSTEP_ENFORCE(known != 0 && numel % known == 0, ValueError, op, ": shape ", shapeToString(shape),
                     " is invalid for ", numel, " elements");
    out[infer] = numel / known;
  }
  LOCKSTEP_ENFORCE(shapeNumel(out) == numel, ValueError, op, ": shape ", shapeToString(shape),
                   " is invalid for ", numel, " elements");
  return out;
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, MemoryFormat format, Device device) {
  for (int64_t d : shape) {
    LOCKSTEP_ENFORCE(d >= 0, ValueError, "negative size in shape ", shapeToString(shape));
  }
  Shape strides =
      format == MemoryFormat::channels_last ? channelsLastStrides(shape) : contiguousStrides(shape);
  return emptyStrided(shape, strides, dtype, device);
}

Tensor Tensor::emptyStrided(const Shape& shape, const Shape& strides, DType dtype, Device device) {
  LOCKSTEP_ENFORCE(shape.size() == strides.size(), ValueError, "emptyStrided: shape ", shapeToString(shape),
                   " and strides ", shapeToString(strides), " differ in length");
  Tensor t;
  t.shape_ = shape;
  t.strides_ = strides;
  t.dtype_ = dtype;
  t.numel_ = shapeNumel(shape);
  int64_t extent = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) extent = 0;
  }
  // The elements' span and its bytes, refused past what a size counts (it would wrap to a small
  // allocation).
  bool overflow = false;
  if (extent != 0) {
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t span = 0;
      overflow = overflow || __builtin_mul_overflow(shape[i] - 1, strides[i], &span) ||
                 __builtin_add_overflow(extent, span, &extent);
    }
  }
  size_t bytes = 0;
  overflow = overflow || __builtin_mul_overflow(static_cast<size_t>(extent), dtypeSize(dtype), &bytes);
  LOCKSTEP_ENFORCE(!overflow, ValueError, "a tensor of shape ", shapeToString(shape), " and dtype ",
                   dtypeName(dtype), " would take more bytes than a size counts");
  t.storage_ = std::make_shared<Storage>(bytes, device);
  return t;
}

Tensor Tensor::emptyLike(const Tensor& other) { return emptyLike(other, other.dtype_); }

Tensor Tensor::emptyLike(const Tensor& other, DType dtype) {
  if (other.isDense()) return emptyStrided(other.shape_, other.strides_, dtype, other.device());
  return empty(other.shape_, dtype, MemoryFormat::contiguous, other.device());
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, MemoryFormat::contiguous, device);
  if (device.isCuda() || (t.storage_ && t.storage_->deferred())) {
    t.fill(0.0);
  } else if (t.nbytes()) {
    std::memset(t.dataPtr(), 0, t.nbytes());
  }
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, MemoryFormat::contiguous, device);
  t.fill(value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

Tensor Tensor::arange(int64_t n, DType dtype) {
  Tensor t = empty({n}, DType::f64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<double>(i);
  return dtype == DType::f64 ? t : t.to(dtype);
}

Tensor Tensor::fromBlob(void* data, const Shape& shape, DType dtype, std::function<void(void*)> deleter,
                        Device device) {
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguousStrides(shape);
  t.dtype_ = dtype;
  t.numel_ = shapeNumel(shape);
  t.storage_ = std::make_shared<Storage>(data, static_cast<size_t>(t.numel_) * dtypeSize(dtype),
                                         std::move(deleter), device);
  return t;
}

int64_t Tensor::size(int64_t d) const { return shape_[normalizeDim(d, dim())]; }
int64_t Tensor::stride(int64_t d) const { return strides_[normalizeDim(d, dim())]; }

bool Tensor::isContiguous() const {
  // No elements: nothing to lay out, so any strides will do (as torch's is_contiguous). Without
  // this, contiguousStrides() of a shape with a 0 ([3, 0] -> [1, 1]) failed the check below, and
  // view()/reshape() of such a tensor threw.
  if (numel_ == 0) return true;
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

bool Tensor::isChannelsLast() const {
  if (dim() != 4) return false;
  Shape cl = channelsLastStrides(shape_);
  for (int i = 0; i < 4; ++i) {
    if (shape_[i] != 1 && strides_[i] != cl[i]) return false;
  }
  return true;
}

bool Tensor::isDense() const {
  if (numel_ == 0) return true;  // as isContiguous()
  std::vector<size_t> order(shape_.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides_[a] < strides_[b]; });
  int64_t expected = 1;
  for (size_t i : order) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::dataPtr() const {
  LOCKSTEP_ENFORCE(defined(), ValueError, "data access on an undefined tensor");
  LOCKSTEP_ENFORCE(
      storage_->device().isCpu(), NotSupportedError, "host code was handed ", describe(),
      ", which lives on the GPU: this operation has no CUDA kernel (docs/gpu.md lists those that "
      "do); move the tensor with .to(Device::cpu()) first");
  return devicePtr();
}

void* Tensor::devicePtr() const {
  LOCKSTEP_ENFORCE(defined(), ValueError, "data access on an undefined tensor");
  if (storage_->deferred()) storage_->materialize();  // deferred initialisation ends at first use
  LOCKSTEP_ENFORCE(storage_->resident(), ValueError,
                   "data access on a tensor whose storage is released (a ZeRO stage 3 parameter read "
                   "outside the forward or backward of the module that owns it)");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtypeSize(dtype_));
}

Tensor Tensor::makeView(Shape shape, Shape strides, int64_t offset) const {
  Tensor t = *this;
  t.numel_ = shapeNumel(shape);
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  t.offset_ = offset;
  return t;
}

Tensor Tensor::view(const Shape& shape) const {
  Shape s = inferShape(shape, numel_, "view");
  LOCKSTEP_ENFORCE(isContiguous(), ValueError, "view ", shapeToString(shape_), " -> ", shapeToString(s),
                   " needs a contiguous tensor; use reshape() (which copies)");
  return makeView(s, contiguousStrides(s), offset_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (isContiguous()) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int64_t s = normalizeDim(start_dim, dim()), e = normalizeDim(end_dim, dim());
  LOCKSTEP_ENFORCE(s <= e, ValueError, "flatten: start_dim ", start_dim, " is after end_dim ", end_dim);
  Shape out(shape_.begin(), shape_.begin() + s);
  int64_t m = 1;
  for (int64_t i = s; i <= e; ++i) m *= shape_[i];
  out.push_back(m);
  out.insert(out.end(), shape_.begin() + e + 1, shape_.end());
  return reshape(out);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  int64_t dd = normalizeDim(d, dim());
  LOCKSTEP_ENFORCE(start >= 0 && length >= 0 && start + length <= shape_[dd], ValueError, "narrow: range [",
                   start, ", ", start + length, ") is out of bounds for dim ", d, " of size ", shape_[dd]);
  Shape s = shape_;
  s[dd] = length;
  return makeView(s, strides_, offset_ + start * strides_[dd]);
}

Tensor Tensor::slice(int64_t start, int64_t end) const {
  LOCKSTEP_ENFORCE(dim() >= 1, ValueError, "slice needs at least one dimension");
  return narrow(0, start, end - start);
}

Tensor Tensor::select(int64_t i) const {
  LOCKSTEP_ENFORCE(dim() >= 1 && i >= 0 && i < shape_[0], ValueError, "select: index ", i,
                   " is out of range for shape ", shapeToString(shape_));
  Shape s(shape_.begin() + 1, shape_.end()), st(strides_.begin() + 1, strides_.end());
  return makeView(s, st, offset_ + i * strides_[0]);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  int64_t a = normalizeDim(d0, dim()), b = normalizeDim(d1, dim());
  Shape s = shape_, st = strides_;
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  return makeView(s, st, offset_);
}

Tensor Tensor::permute(const Shape& dims) const {
  LOCKSTEP_ENFORCE(static_cast<int64_t>(dims.size()) == dim(), ValueError, "permute: ", dims.size(),
                   " dims given for a tensor with ", dim());
  Shape s(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = normalizeDim(dims[i], dim());
    LOCKSTEP_ENFORCE(!seen[d], ValueError, "permute: dim ", d, " repeated in ", shapeToString(dims));
    seen[d] = true;
    s[i] = shape_[d];
    st[i] = strides_[d];
  }
  return makeView(s, st, offset_);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  int64_t dd = normalizeDim(d, dim() + 1);
  Shape s = shape_, st = strides_;
  int64_t stride = dd < dim() ? strides_[dd] * shape_[dd] : 1;
  s.insert(s.begin() + dd, 1);
  st.insert(st.begin() + dd, stride);
  return makeView(s, st, offset_);
}

Tensor Tensor::squeeze(int64_t d) const {
  int64_t dd = normalizeDim(d, dim());
  if (shape_[dd] != 1) return *this;
  Shape s = shape_, st = strides_;
  s.erase(s.begin() + dd);
  st.erase(st.begin() + dd);
  return makeView(s, st, offset_);
}

Tensor Tensor::expand(const Shape& shape) const {
  LOCKSTEP_ENFORCE(shape.size() >= shape_.size(), ValueError, "expand: cannot expand ", shapeToString(shape_),
                   " to fewer dims ", shapeToString(shape));
  size_t lead = shape.size() - shape_.size();
  Shape st(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) continue;
    int64_t have = shape_[i - lead];
    LOCKSTEP_ENFORCE(have == shape[i] || have == 1, ValueError, "expand: cannot expand ",
                     shapeToString(shape_), " to ", shapeToString(shape));
    st[i] = have == 1 && shape[i] != 1 ? 0 : strides_[i - lead];
  }
  return makeView(shape, st, offset_);
}

Tensor Tensor::contiguous() const {
  if (isContiguous()) return *this;
  Tensor out = empty(shape_, dtype_, MemoryFormat::contiguous, device());
  out.copyFrom(*this);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = emptyLike(*this);
  out.copyFrom(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor out = isDense() ? emptyStrided(shape_, strides_, dtype, device())
                         : empty(shape_, dtype, MemoryFormat::contiguous, device());
  out.copyFrom(*this);
  return out;
}

Tensor Tensor::to(const Device& device, bool non_blocking) const {
  if (device == this->device()) return *this;
  Tensor out = isDense() ? emptyStrided(shape_, strides_, dtype_, device)
                         : empty(shape_, dtype_, MemoryFormat::contiguous, device);
  out.copyFrom(*this, non_blocking);
  return out;
}

Tensor Tensor::pinMemory() const {
  LOCKSTEP_ENFORCE(device().isCpu(), ValueError, "pinMemory: ", describe(), " is not on the host");
  Tensor src = contiguous();
  Tensor out = src;
  out.storage_ = Storage::pinnedHost(nbytes());
  out.offset_ = 0;
  if (numel_ != 0) std::memcpy(out.dataPtr(), src.dataPtr(), nbytes());
  return out;
}

Tensor Tensor::toFormat(MemoryFormat format) const {
  if (format == MemoryFormat::contiguous) return contiguous();
  if (isChannelsLast()) return *this;
  Tensor out = empty(shape_, dtype_, MemoryFormat::channels_last, device());
  out.copyFrom(*this);
  return out;
}

bool Tensor::convertDense(const Tensor& src) {
  const auto* s = src.dataPtr();
  void* d = dataPtr();
  if (src.dtype_ == DType::f32 && dtype_ == DType::bf16) {
    convertF32ToBF16(static_cast<const float*>(s), static_cast<uint16_t*>(d), numel_);
  } else if (src.dtype_ == DType::bf16 && dtype_ == DType::f32) {
    convertBF16ToF32(static_cast<const uint16_t*>(s), static_cast<float*>(d), numel_);
  } else if (src.dtype_ == DType::f32 && dtype_ == DType::f16) {
    convertF32ToF16(static_cast<const float*>(s), static_cast<uint16_t*>(d), numel_);
  } else if (src.dtype_ == DType::f16 && dtype_ == DType::f32) {
    convertF16ToF32(static_cast<const uint16_t*>(s), static_cast<float*>(d), numel_);
  } else {
    return false;
  }
  return true;
}

void Tensor::copyFrom(const Tensor& src, bool non_blocking) {
  LOCKSTEP_ENFORCE(src.shape_ == shape_, ValueError, "copy: source shape ", shapeToString(src.shape_),
                   " differs from destination shape ", shapeToString(shape_));
  if (numel_ == 0) return;
  if (isCuda() || src.isCuda()) {
    detail::copyWithDevices(*this, src, non_blocking);
    return;
  }
  if (src.dtype_ == dtype_ && src.strides_ == strides_ && isDense()) {
    std::memcpy(dataPtr(), src.dataPtr(), nbytes());
    return;
  }
  if (src.strides_ == strides_ && isDense() && convertDense(src)) return;
  char* dbase = static_cast<char*>(dataPtr());
  const char* sbase = static_cast<const char*>(src.dataPtr());
  visitDType(dtype_, [&](auto dtag) {
    using D = decltype(dtag);
    visitDType(src.dtype_, [&](auto stag) {
      using S = decltype(stag);
      D* d = reinterpret_cast<D*>(dbase);
      const S* s = reinterpret_cast<const S*>(sbase);
      forEachRun<2>(shape_, {&strides_, &src.strides_},
                    [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                      D* dp = d + off[0];
                      const S* sp = s + off[1];
                      if (st[0] == 1 && st[1] == 1) {
                        for (int64_t i = 0; i < n; ++i) dp[i] = castValue<D>(sp[i]);
                      } else {
                        for (int64_t i = 0; i < n; ++i) dp[i * st[0]] = castValue<D>(sp[i * st[1]]);
                      }
                    });
    });
  });
}

void Tensor::copyMany(std::span<const Tensor> dst, std::span<const Tensor> src) {
  LOCKSTEP_ENFORCE(dst.size() == src.size(), ValueError, "copyMany: ", dst.size(), " destinations for ",
                   src.size(), " sources");
  // Every pair checked before any is copied.
  for (size_t i = 0; i < dst.size(); ++i) {
    LOCKSTEP_ENFORCE(src[i].shape_ == dst[i].shape_, ValueError, "copyMany: pair ", i, ": source shape ",
                     shapeToString(src[i].shape_), " differs from destination shape ",
                     shapeToString(dst[i].shape_));
  }
  std::vector<Tensor> many_dst, many_src;
  for (size_t i = 0; i < dst.size(); ++i) {
    const Tensor &d = dst[i], &s = src[i];
    if (d.numel_ == 0) continue;
    const bool batched = d.isCuda() && !d.storage_->deferred() && !s.storage_->deferred() &&
                         (many_dst.empty() || d.device() == many_dst.front().device()) &&
                         detail::copyManyTakes(d, s);
    if (batched) {
      many_dst.push_back(d);
      many_src.push_back(s);
    } else {
      Tensor(d).copyFrom(s);  // a handle copy: the same storage
    }
  }
  detail::copyManyOnDevice(many_dst, many_src);
}

void Tensor::fill(double value) {
  if (numel_ == 0) return;
  if (deferWrite([value](Tensor& t) { t.fill(value); })) return;
  if (isCuda()) {
    detail::fillOnDevice(*this, value);
    return;
  }
  char* base = static_cast<char*>(dataPtr());
  visitDType(dtype_, [&](auto tag) {
    using T = decltype(tag);
    T v = castValue<T>(value);
    T* p = reinterpret_cast<T*>(base);
    forEachRun<1>(shape_, {&strides_},
                  [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
                    for (int64_t i = 0; i < n; ++i) p[off[0] + i * st[0]] = v;
                  });
  });
}

bool Tensor::deferWrite(std::function<void(Tensor&)> write) const {
  if (!defined() || numel_ == 0 || !storage_->deferred() || !isContiguous()) return false;
  const size_t byte_offset = static_cast<size_t>(offset_) * dtypeSize(dtype_);
  storage_->deferWrite([byte_offset, shape = shape_, dtype = dtype_, device = storage_->device(),
                        write = std::move(write)](void* data) {
    Tensor view = Tensor::fromBlob(static_cast<char*>(data) + byte_offset, shape, dtype, {}, device);
    write(view);
  });
  return true;
}

double Tensor::itemDouble() const {
  LOCKSTEP_ENFORCE(numel_ == 1, ValueError, "item() needs a one-element tensor, got shape ",
                   shapeToString(shape_));
  if (isCuda()) return to(Device::cpu()).itemDouble();
  return visitDType(dtype_, [&](auto tag) -> double {
    using T = decltype(tag);
    return castValue<double>(*static_cast<const T*>(dataPtr()));
  });
}

std::string Tensor::describe() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(" << dtypeName(dtype_) << ", " << shapeToString(shape_);
  if (isCuda()) os << ", " << deviceName(device());
  os << ")";
  return os.str();
}

}  // namespace lockstep
