// applyRotary and its cos/sin tables (HF Llama's convention).
#include "lockstep/autograd/ops/rotary.h"

#include <cmath>

#include "lockstep/autograd/function.h"
#include "lockstep/kernels/transformer.h"

namespace lockstep::autograd {

namespace {

class RotaryBackward final : public Node {
 public:
  RotaryBackward(Tensor cos, Tensor sin) : cos_(std::move(cos)), sin_(std::move(sin)) {}
  std::vector<Tensor> apply(const Tensor& g) override { return {kernels::rotaryBackward(g, cos_, sin_)}; }
  std::string name() const override { return "RotaryBackward"; }
  void releaseSaved() override { cos_ = sin_ = Tensor(); }

 private:
  Tensor cos_, sin_;
};

}  // namespace

Variable applyRotary(const Variable& x, const Tensor& cos, const Tensor& sin) {
  LOCKSTEP_ENFORCE(cos.device() == x.tensor().device() && sin.device() == x.tensor().device(), ValueError,
                   "applyRotary: cos (", deviceName(cos.device()), ") and sin (", deviceName(sin.device()),
                   ") must be on x's device (", deviceName(x.tensor().device()),
                   "); rotaryTables makes them on the host: move them with .to()");
  Tensor y = kernels::rotaryForward(x.tensor(), cos, sin);
  return record<RotaryBackward>(y, {&x}, cos, sin);
}

std::pair<Tensor, Tensor> rotaryTables(int64_t T, int64_t D, double theta, int64_t position_offset) {
  LOCKSTEP_ENFORCE(T >= 0 && D > 0 && D % 2 == 0, ValueError,
                   "rotaryTables: need T >= 0 and an even D > 0, got T=", T, " D=", D);
  LOCKSTEP_ENFORCE(theta > 0.0 && position_offset >= 0, ValueError, "rotaryTables: theta must be > 0 and ",
                   "position_offset >= 0, got theta=", theta, " position_offset=", position_offset);
  const int64_t h = D / 2;
  Tensor c = Tensor::empty({T, h}, DType::f32), s = Tensor::empty({T, h}, DType::f32);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < h; ++i) {
      // HF Llama: inv_freq = theta^(-2i/D), angle = position * inv_freq.
      const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      const double a = static_cast<double>(t + position_offset) * inv_freq;
      c.data<float>()[t * h + i] = static_cast<float>(std::cos(a));
      s.data<float>()[t * h + i] = static_cast<float>(std::sin(a));
    }
  }
  return {c, s};
}

}  // namespace lockstep::autograd
