#pragma once
// The kernels' parameter structs from the autograd ops' options (one conversion, shared by the ops).
#include "lockstep/autograd/ops/conv.h"
#include "lockstep/autograd/ops/pool.h"
#include "lockstep/kernels/conv.h"
#include "lockstep/kernels/pool.h"

namespace lockstep::autograd {

inline kernels::Conv2dParams convParams(const Conv2dOptions& o) {
  return {o.stride, o.padding, o.dilation, o.groups, o.fuse_relu};
}

inline kernels::Pool2dParams poolParams(const Pool2dOptions& o) {
  return {o.kernel, o.stride, o.padding, o.ceil_mode, o.count_include_pad};
}

}  // namespace lockstep::autograd
