#include "lockstep/autograd/ops/device.h"

#include "lockstep/autograd/function.h"

namespace lockstep::autograd {

namespace {

class ToDeviceBackward final : public Node {
 public:
  explicit ToDeviceBackward(Device from) : from_(from) {}
  std::vector<Tensor> apply(const Tensor& g) override { return {g.device() == from_ ? g : g.to(from_)}; }
  std::string name() const override { return "ToDeviceBackward"; }

 private:
  Device from_;
};

}  // namespace

Variable toDevice(const Variable& x, const Device& device) {
  if (x.tensor().device() == device) return x;
  return record<ToDeviceBackward>(x.tensor().to(device), {&x}, x.tensor().device());
}

}  // namespace lockstep::autograd
