#include "lockstep/tensor/device_copy.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/copy.h"
#include "lockstep/tensor/cuda/runtime.h"
#endif

namespace lockstep::detail {

#if LOCKSTEP_WITH_CUDA
namespace {

/// Dense, same dtype, same strides: the bytes can move as one block.
bool sameBlock(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.strides() == b.strides() && a.isDense() && b.isDense();
}

/// A tensor on src's device holding src's values in dst's dtype and dst's layout (dense dst) or
/// contiguous, so that it and dst are one block apart.
Tensor asBlockFor(const Tensor& src, const Tensor& dst) {
  if (sameBlock(src, dst)) return src;
  Tensor t = dst.isDense() ? Tensor::emptyStrided(dst.shape(), dst.strides(), dst.dtype(), src.device())
                           : Tensor::empty(dst.shape(), dst.dtype(), MemoryFormat::contiguous, src.device());
  t.copyFrom(src);
  return t;
}

void copyBlock(const Tensor& dst, const Tensor& src, bool non_blocking) {
  const Device gpu = dst.isCuda() ? dst.device() : src.device();
  cuda::Stream stream = cuda::currentStream(gpu.index);
  cuda::DeviceGuard guard(gpu.index);
  if (dst.isCuda() && src.isCuda() && dst.device() != src.device()) {
    LOCKSTEP_CUDA_CHECK(cudaMemcpyPeerAsync(dst.devicePtr(), dst.device().index, src.devicePtr(),
                                            src.device().index, dst.nbytes(), stream.handle()));
    return;
  }
  const cudaMemcpyKind kind = dst.isCuda() && src.isCuda() ? cudaMemcpyDeviceToDevice
                              : dst.isCuda()               ? cudaMemcpyHostToDevice
                                                           : cudaMemcpyDeviceToHost;
  LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(dst.devicePtr(), src.devicePtr(), dst.nbytes(), kind, stream.handle()));
  // Pageable host memory or a blocking copy: the host may read (or free) its side as soon as this
  // returns, so wait. A device-to-device copy stays ordered on the stream.
  const Tensor& host = dst.isCuda() ? src : dst;
  if (kind != cudaMemcpyDeviceToDevice && (!non_blocking || !host.isPinned())) stream.synchronize();
}

}  // namespace

void copyWithDevices(const Tensor& dst, const Tensor& src, bool non_blocking) {
  if (dst.isCuda() && src.isCuda() && dst.device() == src.device()) {
    cuda::DeviceGuard guard(dst.device().index);
    cuda::copyStrided(dst, src);
    return;
  }
  // Across devices: cast and lay out on the source side, move one block, then scatter on the
  // destination side when dst itself is not dense.
  Tensor block = asBlockFor(src, dst);
  if (dst.isDense()) {
    copyBlock(dst, block, non_blocking);
    return;
  }
  Tensor landing = Tensor::emptyStrided(block.shape(), block.strides(), block.dtype(), dst.device());
  copyBlock(landing, block, false);
  Tensor(dst).copyFrom(landing);  // a handle copy: the same storage
}

bool copyManyTakes(const Tensor& dst, const Tensor& src) {
  return dst.isCuda() && src.isCuda() && cuda::copyManyTakes(dst, src);
}

void copyManyOnDevice(std::span<const Tensor> dst, std::span<const Tensor> src) { cuda::copyMany(dst, src); }

void fillOnDevice(const Tensor& dst, double value) {
  cuda::DeviceGuard guard(dst.device().index);
  cuda::fill(dst, value);
}

#else

void copyWithDevices(const Tensor&, const Tensor&, bool) {
  throw NotSupportedError("a copy to or from a GPU in a lockstep built without CUDA");
}
bool copyManyTakes(const Tensor&, const Tensor&) { return false; }
void copyManyOnDevice(std::span<const Tensor> dst, std::span<const Tensor>) {
  LOCKSTEP_CHECK(dst.empty(), "copyManyOnDevice without CUDA");
}
void fillOnDevice(const Tensor&, double) {
  throw NotSupportedError("a fill on a GPU in a lockstep built without CUDA");
}

#endif

}  // namespace lockstep::detail
