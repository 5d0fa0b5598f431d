#include "lockstep/autograd/autocast.h"

#include <unordered_map>

#include "lockstep/autograd/function.h"
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/binary.h"

namespace lockstep::autograd {

namespace {
class ToDTypeBackward final : public Node {
 public:
  explicit ToDTypeBackward(DType from) : from_(from) {}
  std::vector<Tensor> apply(const Tensor& g) override { return {g.dtype() == from_ ? g : g.to(from_)}; }
  // A gradient that widens back to a wider input (a 16-bit reader of an f32 tensor under autocast)
  // is added to the input's held gradient as it is read: the same sums, no widened copy.
  std::vector<Tensor> applyInto(const Tensor& g, const std::vector<Tensor*>& into) override {
    Tensor* held = into[0];
    if (held && held->dtype() == from_ && held->shape() == g.shape() && from_ != g.dtype() &&
        kernels::binaryResultDType(from_, g.dtype()) == from_ && held->device() == g.device()) {
      kernels::addInto(*held, g);
      return {Tensor()};
    }
    return apply(g);
  }
  bool accumulates() const override { return true; }
  std::string name() const override { return "ToDTypeBackward"; }

 private:
  DType from_;
};

struct CachedCast {
  std::shared_ptr<VariableImpl> source;  // keeps the key's address from being reused
  Variable cast;
};

struct AutocastState {
  std::optional<DType> dtype;
  int depth = 0;
  size_t misses = 0;
  std::unordered_map<const VariableImpl*, CachedCast> cache;
};

AutocastState& state() {
  thread_local AutocastState s;
  return s;
}
}  // namespace

Variable toDType(const Variable& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  LOCKSTEP_ENFORCE(isFloating(x.dtype()) && isFloating(dtype), ValueError, "toDType: cannot cast ",
                   x.tensor().describe(), " to ", dtypeName(dtype), " differentiably (floating dtypes only)");
  return record<ToDTypeBackward>(x.tensor().to(dtype), {&x}, x.dtype());
}

std::optional<DType> autocastDType() { return state().dtype; }

AutocastGuard::AutocastGuard(DType dtype, bool enabled) {
  LOCKSTEP_ENFORCE(dtype == DType::bf16 || dtype == DType::f16, ValueError, "autocast: dtype ",
                   dtypeName(dtype), " is not a lower-precision dtype; use bf16 or f16");
  AutocastState& s = state();
  prev_ = s.dtype;
  if (s.depth++ == 0) s.misses = 0;
  s.dtype = enabled ? std::optional<DType>(dtype) : std::nullopt;
}

AutocastGuard::~AutocastGuard() {
  AutocastState& s = state();
  s.dtype = prev_;
  if (--s.depth == 0) s.cache.clear();
}

namespace autocast {

Variable lower(const Variable& v) {
  AutocastState& s = state();
  if (!s.dtype || !v.defined() || v.dtype() != DType::f32) return v;
  // Parameters are cast once per scope; anything else (activations) once per use, as it is used once.
  if (!(v.isLeaf() && v.requiresGrad() && isGradEnabled())) return toDType(v, *s.dtype);
  auto it = s.cache.find(v.impl().get());
  // A cast whose graph a backward pass already freed cannot carry a second gradient: make it anew.
  if (it != s.cache.end() && it->second.cast.dtype() == *s.dtype &&
      !(it->second.cast.gradFn() && it->second.cast.gradFn()->released())) {
    return it->second.cast;
  }
  ++s.misses;
  Variable cast = toDType(v, *s.dtype);
  s.cache[v.impl().get()] = CachedCast{v.impl(), cast};
  return cast;
}

Variable fp32(const Variable& v) {
  if (!state().dtype || !v.defined() || !(v.dtype() == DType::bf16 || v.dtype() == DType::f16)) return v;
  return toDType(v, DType::f32);
}

std::pair<Variable, Variable> promote(const Variable& a, const Variable& b) {
  if (a.dtype() == b.dtype() || !isFloating(a.dtype()) || !isFloating(b.dtype())) return {a, b};
  const DType wide = kernels::binaryResultDType(a.dtype(), b.dtype());  // bf16 with f16: f32, as add's
  return {toDType(a, wide), toDType(b, wide)};
}

size_t castCacheMisses() { return state().misses; }

}  // namespace autocast

}  // namespace lockstep::autograd
