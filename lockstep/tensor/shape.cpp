#include "lockstep/tensor/shape.h"

#include <sstream>

#include "lockstep/util/error.h"

namespace lockstep {

std::string shapeToString(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shapeNumel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    LOCKSTEP_ENFORCE(!__builtin_mul_overflow(n, d, &n), ValueError, "shape ", shapeToString(s),
                     " has more elements than an int64 counts");
  return n;
}

Shape contiguousStrides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

Shape channelsLastStrides(const Shape& s) {
  LOCKSTEP_ENFORCE(s.size() == 4, ValueError, "channels_last needs a 4-d NCHW shape, got ", shapeToString(s));
  int64_t c = std::max<int64_t>(s[1], 1), h = std::max<int64_t>(s[2], 1), w = std::max<int64_t>(s[3], 1);
  return {h * w * c, 1, w * c, c};
}

int64_t normalizeDim(int64_t dim, int64_t ndim, const char* what) {
  int64_t d = dim < 0 ? dim + ndim : dim;
  LOCKSTEP_ENFORCE(d >= 0 && d < std::max<int64_t>(ndim, 1), ValueError, what, " ", dim,
                   " is out of range for a tensor with ", ndim, " dimensions");
  return d;
}

Shape broadcastShapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    LOCKSTEP_ENFORCE(da == db || da == 1 || db == 1, ValueError, op, ": shapes ", shapeToString(a), " and ",
                     shapeToString(b), " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace lockstep
