#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep {

using Shape = std::vector<int64_t>;

/// "[2, 3, 4]".
std::string shapeToString(const Shape& s);
/// Product of the sizes (1 for a 0-d shape).
int64_t shapeNumel(const Shape& s);
/// Row-major strides in elements.
Shape contiguousStrides(const Shape& s);
/// NHWC strides for a 4-d NCHW shape (PyTorch's channels_last).
Shape channelsLastStrides(const Shape& s);
/// A possibly negative dim index made non-negative; ValueError naming `what` when out of range.
int64_t normalizeDim(int64_t dim, int64_t ndim, const char* what = "dim");
/// The shape two shapes broadcast to (numpy rules); ValueError naming op and both shapes otherwise.
Shape broadcastShapes(const Shape& a, const Shape& b, const char* op);

}  // namespace lockstep
