#pragma once
// The oneDNN CPU engine and stream shared by all fast kernels, tensor <-> memory descriptor
// mapping, a per-shape primitive cache, and the intra-op thread count.
#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "lockstep/kernels/layout.h"  // dense, laidOutLike
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::onednn {

dnnl::engine& engine();
dnnl::stream& stream();

/// Serialises oneDNN primitive creation and execution in this process. oneDNN 2.6 (Debian's build)
/// gave wrong results when different primitives ran concurrently from several threads (seen with
/// ranks-as-threads tests); a lockstep rank computes on one thread (intra-op parallelism is inside
/// each primitive), so in training this lock is never contended.
std::mutex& primitiveMutex();

/// The attributes every primitive lockstep runs is created with (add post-ops to a copy):
/// scratchpad_mode::user, so that execute() hands it lockstep's scratchpad. In oneDNN's default
/// (library) mode some implementations keep their scratchpad in a buffer of the thread that
/// created the primitive and use the running thread's: a cached primitive run on another thread
/// (ranks as threads, a primitive reused by a later thread) wrote through that thread's null or
/// smaller buffer (seen: jit:avx2 convolution backward-weights, SIGSEGV).
dnnl::primitive_attr attributes();

/// Runs a primitive on the shared stream under primitiveMutex(), with the process's scratchpad.
/// InternalError for a primitive not created with attributes().
void execute(const dnnl::primitive& prim, const std::unordered_map<int, dnnl::memory>& args);

/// A 1-d descriptor over all of a dense tensor's elements: element-wise ops ignore layout.
dnnl::memory::desc flatDesc(const Tensor& t);

/// oneDNN's type for a dtype; NotSupportedError for f64/i64 (oneDNN has none).
dnnl::memory::data_type dataType(DType t);
/// A descriptor with the tensor's dims and strides (any dense layout, e.g. NCHW or NHWC).
dnnl::memory::desc memDesc(const Tensor& t);
/// A memory object over the tensor's data (no copy).
dnnl::memory memory(const Tensor& t);
dnnl::memory memory(const dnnl::memory::desc& md, const Tensor& t);
/// A fresh tensor laid out as md says, when md is a plain strided layout; otherwise a tensor of
/// md.get_size() bytes viewed as 1-d u8 (an opaque blocked buffer).
Tensor emptyFor(const dnnl::memory::desc& md, const Shape& logical_shape, DType dtype);

/// Caches primitives (or primitive descriptors) by a key string built from shapes and params:
/// created once per shape, reused every step.
template <typename T>
class PrimitiveCache {
 public:
  template <typename Make>
  T& get(const std::string& key, Make&& make) {
    std::lock_guard<std::mutex> lock(primitiveMutex());
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, std::make_unique<T>(make())).first;
    return *it->second;
  }

 private:
  std::unordered_map<std::string, std::unique_ptr<T>> cache_;
};

/// "f32:[2,3]s[3,1]" — the part of a cache key that describes a tensor.
std::string keyOf(const Tensor& t);

/// Whether oneDNN creates primitives for dtype t on this CPU (bf16 needs AVX-512 in oneDNN 2.6).
bool supportsDtype(DType t);

/// Wraps oneDNN's C++ API errors into lockstep errors naming the op: NotSupportedError when oneDNN
/// has no implementation for the request (e.g. a dtype this CPU lacks), InternalError otherwise.
[[noreturn]] void rethrow(const dnnl::error& e, const char* op);

}  // namespace lockstep::kernels::onednn
