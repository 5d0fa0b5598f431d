#pragma once
// Tensor: a dtype, a shape, strides (in elements) and an offset into shared Storage, which lives on
// a Device (the host or one GPU; docs/gpu.md). Ops run where their operands live.
// Views (view, reshape, slice, narrow, select, transpose, permute, expand) share storage; copies
// (contiguous, clone, to) do not. No math lives here beyond copies, casts, fills and random init.
// Thread-safety: a Tensor handle may be copied across threads; writing the same elements from two
// threads at once is the caller's race.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lockstep/tensor/device.h"
#include "lockstep/tensor/shape.h"
#include "lockstep/tensor/storage.h"
#include "lockstep/util/dtype.h"
#include "lockstep/util/error.h"

namespace lockstep {

enum class MemoryFormat { contiguous, channels_last };

class Tensor {
 public:
  Tensor() = default;  // undefined; defined() is false

  // ---- creation ----
  /// Creation on a GPU (device cuda:N) allocates from that device's caching allocator on its current
  /// stream, and throws NotSupportedError where the device is not available (checkDeviceAvailable).
  static Tensor empty(const Shape& shape, DType dtype = DType::f32,
                      MemoryFormat format = MemoryFormat::contiguous, Device device = Device::cpu());
  static Tensor emptyStrided(const Shape& shape, const Shape& strides, DType dtype = DType::f32,
                             Device device = Device::cpu());
  /// A tensor of the same shape, dtype, device and (dense) layout as other.
  static Tensor emptyLike(const Tensor& other);
  /// The same, of `dtype`.
  static Tensor emptyLike(const Tensor& other, DType dtype);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = Device::cpu());
  /// A 0-d tensor.
  static Tensor scalar(double value, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor arange(int64_t n, DType dtype = DType::i64);
  template <typename T>
  static Tensor fromVector(const std::vector<T>& values, const Shape& shape) {
    LOCKSTEP_ENFORCE(static_cast<int64_t>(values.size()) == shapeNumel(shape), ValueError,
                     "fromVector: ", values.size(), " values do not fill shape ", shapeToString(shape));
    Tensor t = empty(shape, dtypeOf<T>);
    if (!values.empty()) std::memcpy(t.dataPtr(), values.data(), values.size() * sizeof(T));
    return t;
  }
  /// Wraps memory owned elsewhere (contiguous) on device. deleter runs when the last user goes away.
  static Tensor fromBlob(void* data, const Shape& shape, DType dtype, std::function<void(void*)> deleter = {},
                         Device device = Device::cpu());

  // ---- properties ----
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  const Shape& shape() const { return shape_; }
  int64_t size(int64_t d) const;
  const Shape& strides() const { return strides_; }
  int64_t stride(int64_t d) const;
  int64_t numel() const { return numel_; }
  size_t elementSize() const { return dtypeSize(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel_) * elementSize(); }
  int64_t storageOffset() const { return offset_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool sharesStorage(const Tensor& o) const { return storage_ && storage_ == o.storage_; }
  /// Where the elements live (cpu for an undefined tensor).
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool isCuda() const { return device().isCuda(); }
  /// Host memory pinned for asynchronous copies (pinMemory()).
  bool isPinned() const { return storage_ && storage_->pinned(); }

  /// Row-major with no gaps.
  bool isContiguous() const;
  /// 4-d and laid out NHWC.
  bool isChannelsLast() const;
  /// Covers exactly numel() consecutive elements in some dimension order (no gaps, no overlap).
  bool isDense() const;

  /// The first element, for host code: a tensor on a GPU is refused (NotSupportedError naming it),
  /// so a CPU kernel handed a GPU tensor fails instead of reading device memory.
  void* dataPtr() const;
  /// The first element wherever it lives: for device kernels and copies (lockstep/*/cuda/).
  void* devicePtr() const;
  template <typename T>
  T* data() const {
    LOCKSTEP_ENFORCE(dtypeOf<T> == dtype_, ValueError, "data<", dtypeName(dtypeOf<T>),
                     ">() called on a tensor of dtype ", dtypeName(dtype_));
    return static_cast<T*>(dataPtr());
  }

  // ---- views ----
  /// Same elements, new shape; one size may be -1. Needs a contiguous tensor.
  Tensor view(const Shape& shape) const;
  /// view() when the layout allows, a contiguous copy otherwise.
  Tensor reshape(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  /// Rows [start, end) along dim 0.
  Tensor slice(int64_t start, int64_t end) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  /// Index i along dim 0, dropping that dim.
  Tensor select(int64_t i) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const Shape& dims) const;
  Tensor unsqueeze(int64_t d) const;
  Tensor squeeze(int64_t d) const;
  /// Broadcast view (stride 0 along expanded dims).
  Tensor expand(const Shape& shape) const;

  // ---- copies ----
  Tensor contiguous() const;
  /// A copy with the same shape and a dense layout (same memory format when dense).
  Tensor clone() const;
  Tensor to(DType dtype) const;
  /// A copy on device (same dtype, same layout when dense); this tensor itself when already there.
  /// non_blocking: a copy between pinned host memory and a GPU returns before it has finished
  /// (ordered on the GPU's current stream, as torch's to(non_blocking=True)); otherwise the copy
  /// has finished when this returns.
  Tensor to(const Device& device, bool non_blocking = false) const;
  Tensor toFormat(MemoryFormat format) const;
  /// A copy in pinned host memory (a CPU tensor; NotSupportedError without CUDA).
  Tensor pinMemory() const;
  /// Element-wise copy with cast from src (same shape; any strides on both sides; any devices:
  /// non_blocking as in to(Device)).
  void copyFrom(const Tensor& src, bool non_blocking = false);
  /// dst[i].copyFrom(src[i]) for every i (as many of each; no pair may overlap another; every pair's
  /// shapes are checked before any is copied). On a GPU
  /// the pairs of contiguous floating tensors on one device are cast in one launch per pair of
  /// dtypes (multi-tensor apply, as torch._foreach_copy_), not one launch each: a model's 16-bit
  /// gradients widened for its f32 master weights, and those rounded back into the parameters.
  static void copyMany(std::span<const Tensor> dst, std::span<const Tensor> src);
  /// Recorded instead of written when the storage is deferred (deferWrite).
  void fill(double value);
  void zero() { fill(0.0); }
  /// Deferred initialisation (tensor/deferred_init.h): when this tensor's storage is deferred and
  /// the tensor is contiguous, records `write` to run on these elements once the storage is
  /// materialised and returns true; otherwise returns false, and the caller writes now.
  bool deferWrite(std::function<void(Tensor&)> write) const;

  template <typename T>
  T item() const {
    LOCKSTEP_ENFORCE(numel_ == 1, ValueError, "item() needs a one-element tensor, got shape ",
                     shapeToString(shape_));
    return static_cast<T>(itemDouble());
  }
  double itemDouble() const;
  /// All elements in row-major order, cast to T.
  template <typename T>
  std::vector<T> toVector() const {
    Tensor c = to(Device::cpu()).to(dtypeOf<T>).contiguous();
    const T* p = static_cast<const T*>(c.dataPtr());
    return std::vector<T>(p, p + numel_);
  }
  /// "Tensor(f32, [2, 3])", "Tensor(f32, [2, 3], cuda:0)".
  std::string describe() const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::f32;

  Tensor makeView(Shape shape, Shape strides, int64_t offset) const;
  /// copyFrom's fast path for same-layout dense f32 <-> bf16 / f16: false when it does not apply.
  bool convertDense(const Tensor& src);
};

}  // namespace lockstep
