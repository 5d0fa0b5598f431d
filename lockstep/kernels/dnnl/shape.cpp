// concat with oneDNN's concat primitive (f32), cached per input layouts and dim; other dtypes copy
// each input into its slice of the result.
#include "lockstep/kernels/shape.h"

#include <dnnl.hpp>

#include "lockstep/kernels/dnnl/context.h"
#include "lockstep/kernels/tables/shape.h"

namespace lockstep::kernels::onednn {

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  int64_t d = 0;
  Shape out = checkConcat(xs, dim, &d);
  Tensor y = Tensor::empty(out, xs[0].dtype());
  if (y.numel() == 0) return y;
  // oneDNN rejects empty sources; they contribute nothing anyway.
  std::vector<Tensor> srcs;
  srcs.reserve(xs.size());
  for (const Tensor& x : xs) {
    if (x.numel() > 0) srcs.push_back(x.isDense() ? x : x.contiguous());
  }
  if (y.dtype() != DType::f32 || srcs.size() == 1) {
    int64_t start = 0;
    for (const Tensor& x : xs) {
      y.narrow(d, start, x.size(d)).copyFrom(x);
      start += x.size(d);
    }
    return y;
  }
  static PrimitiveCache<dnnl::concat> cache;
  std::vector<dnnl::memory::desc> mds;
  std::string key = std::to_string(d);
  for (const Tensor& x : srcs) {
    mds.push_back(memDesc(x));
    key += keyOf(x);
  }
  auto ym = memDesc(y);
  try {
    auto& prim = cache.get(key, [&] {
      return dnnl::concat(dnnl::concat::primitive_desc(ym, static_cast<int>(d), mds, engine(), attributes()));
    });
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_DST, memory(ym, y)}};
    for (size_t i = 0; i < srcs.size(); ++i)
      args.emplace(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), memory(mds[i], srcs[i]));
    execute(prim, args);
    stream().wait();
  } catch (const dnnl::error& err) {
    rethrow(err, "concat");
  }
  return y;
}

const ShapeKernels kShape{LOCKSTEP_SHAPE_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::onednn
