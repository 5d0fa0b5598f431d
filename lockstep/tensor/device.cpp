#include "lockstep/tensor/device.h"

#include <charconv>

#include "lockstep/util/error.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/runtime.h"
#endif

namespace lockstep {

std::string deviceName(const Device& d) {
  return d.isCpu() ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

Device parseDevice(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view n = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
    if (ec == std::errc() && end == n.data() + n.size() && !n.empty() && index >= 0)
      return Device::cuda(index);
  }
  throw ValueError(
      detail::concat("device '", text, "' is not a device; use 'cpu', 'cuda' or 'cuda:N' (N >= 0)"));
}

bool builtWithCuda() { return LOCKSTEP_WITH_CUDA != 0; }

int cudaDeviceCount() {
#if LOCKSTEP_WITH_CUDA
  return cuda::deviceCount();
#else
  return 0;
#endif
}

void checkDeviceAvailable(const Device& d) {
  if (d.isCpu()) return;
#if LOCKSTEP_WITH_CUDA
  cuda::checkDevice(d.index);
#else
  throw NotSupportedError(
      detail::concat("device ", deviceName(d),
                     " is not available: this lockstep was built without CUDA (configure with "
                     "-DLOCKSTEP_CUDA=ON on a machine with the CUDA toolkit, or use device 'cpu')"));
#endif
}

}  // namespace lockstep
