#include "lockstep/kernels/dnnl/context.h"

#include <cstdlib>
#include <new>
#include <sstream>

#include "lockstep/kernels/threads.h"

namespace lockstep::kernels::onednn {

dnnl::engine& engine() {
  static dnnl::engine e = [] {
    initThreads();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

std::mutex& primitiveMutex() {
  static std::mutex mu;
  return mu;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

dnnl::primitive_attr attributes() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// The scratchpad below is reused as soon as execute() returns: right only where oneDNN runs a
// primitive to its end before returning, as its OpenMP CPU runtime does (not threadpool or SYCL).
static_assert(DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP,
              "execute() assumes oneDNN's synchronous OpenMP CPU runtime");

void execute(const dnnl::primitive& prim, const std::unordered_map<int, dnnl::memory>& args) {
  std::lock_guard<std::mutex> lock(primitiveMutex());
  const_dnnl_primitive_desc_t pd = prim.get_primitive_desc();
  const_dnnl_primitive_attr_t attr = nullptr;
  dnnl_scratchpad_mode_t mode = dnnl_scratchpad_mode_library;
  if (dnnl_primitive_desc_get_attr(pd, &attr) != dnnl_success ||
      dnnl_primitive_attr_get_scratchpad_mode(attr, &mode) != dnnl_success ||
      mode != dnnl_scratchpad_mode_user) {
    throw InternalError(
        "a oneDNN primitive was created without kernels::onednn::attributes() (scratchpad_mode::user): "
        "its scratchpad would belong to the thread that created it");
  }
  const dnnl_memory_desc_t* scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  const size_t bytes = scratch == nullptr ? 0 : dnnl_memory_desc_get_size(scratch);
  if (bytes == 0) {
    prim.execute(stream(), args);
    return;
  }
  // One buffer for the process, grown to the largest scratchpad asked for and kept (as oneDNN's own
  // global scratchpad is): executions are serialised by primitiveMutex().
  static void* pad = nullptr;
  static size_t pad_bytes = 0;
  if (pad_bytes < bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* grown = std::aligned_alloc(64, rounded);
    if (grown == nullptr) throw std::bad_alloc();
    std::free(pad);
    pad = grown;
    pad_bytes = rounded;
  }
  std::unordered_map<int, dnnl::memory> with_scratchpad = args;
  with_scratchpad.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(dnnl::memory::desc(*scratch), engine(), pad));
  prim.execute(stream(), with_scratchpad);
}

dnnl::memory::data_type dataType(DType t) {
  switch (t) {
    case DType::f32:
      return dnnl::memory::data_type::f32;
    case DType::bf16:
      return dnnl::memory::data_type::bf16;
    case DType::f16:
      return dnnl::memory::data_type::f16;
    case DType::i32:
      return dnnl::memory::data_type::s32;
    case DType::u8:
      return dnnl::memory::data_type::u8;
    default:
      throw NotSupportedError(std::string("oneDNN kernels do not support dtype ") + dtypeName(t));
  }
}

dnnl::memory::desc memDesc(const Tensor& t) {
  dnnl::memory::dims dims(t.shape().begin(), t.shape().end());
  dnnl::memory::dims strides(t.strides().begin(), t.strides().end());
  if (dims.empty()) {
    dims = {1};
    strides = {1};
  }
  return dnnl::memory::desc(dims, dataType(t.dtype()), strides);
}

dnnl::memory memory(const Tensor& t) { return dnnl::memory(memDesc(t), engine(), t.dataPtr()); }

dnnl::memory memory(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, engine(), t.dataPtr());
}

Tensor emptyFor(const dnnl::memory::desc& md, const Shape& logical_shape, DType dtype) {
  const dnnl_memory_desc_t& c = md.data;
  if (c.format_kind == dnnl_blocked && c.format_desc.blocking.inner_nblks == 0 &&
      static_cast<size_t>(c.ndims) == logical_shape.size()) {
    Shape strides(c.format_desc.blocking.strides, c.format_desc.blocking.strides + c.ndims);
    return Tensor::emptyStrided(logical_shape, strides, dtype);
  }
  return Tensor::empty({static_cast<int64_t>(md.get_size())}, DType::u8);
}

dnnl::memory::desc flatDesc(const Tensor& t) {
  return dnnl::memory::desc({std::max<int64_t>(t.numel(), 1)}, dataType(t.dtype()),
                            dnnl::memory::format_tag::a);
}

std::string keyOf(const Tensor& t) {
  std::ostringstream os;
  os << dtypeName(t.dtype()) << shapeToString(t.shape()) << "s" << shapeToString(t.strides());
  return os.str();
}

bool supportsDtype(DType t) {
  // Probe the two primitives every network needs (an element-wise op and a matrix product): oneDNN
  // refuses to create either for a dtype this CPU has no kernels for.
  try {
    const auto dt = dataType(t);
    dnnl::memory::desc v({8, 8}, dt, dnnl::memory::format_tag::ab);
    dnnl::eltwise_forward::primitive_desc relu(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, v, 0.f),
        engine());
    dnnl::matmul::primitive_desc mm(dnnl::matmul::desc(v, v, v), engine());
    return true;
  } catch (const dnnl::error&) {
    return false;
  } catch (const NotSupportedError&) {
    return false;
  }
}

void rethrow(const dnnl::error& e, const char* op) {
  if (e.status == dnnl_unimplemented) {
    throw NotSupportedError(std::string("oneDNN has no kernel for ") + op + " here: " + e.what());
  }
  throw InternalError(std::string("oneDNN failed in ") + op + ": " + e.what() + " (status " +
                      std::to_string(static_cast<int>(e.status)) + ")");
}

}  // namespace lockstep::kernels::onednn
