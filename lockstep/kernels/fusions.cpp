#include "lockstep/kernels/fusions.h"

#include <array>
#include <atomic>
#include <string>

#include "lockstep/util/env.h"
#include "lockstep/util/error.h"

namespace lockstep::kernels {

namespace {

constexpr std::array<Fusion, 3> kAll = {Fusion::packed_qkv_attention, Fusion::residual_epilogue,
                                        Fusion::loss_with_grad};
constexpr const char* kVariable = "LOCKSTEP_DISABLE_FUSIONS";

uint32_t bit(Fusion f) { return 1u << static_cast<uint32_t>(f); }

// The fusions turned off, as bits: LOCKSTEP_DISABLE_FUSIONS (comma- or space-separated names).
uint32_t fromEnvironment() {
  const std::string v = env::get(kVariable).value_or("");
  uint32_t off = 0;
  size_t at = 0;
  while (at < v.size()) {
    const size_t end = v.find_first_of(", ", at);
    const std::string name = v.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? v.size() : end + 1;
    if (name.empty()) continue;
    bool known = false;
    for (Fusion f : kAll) {
      if (name == fusionName(f)) {
        off |= bit(f);
        known = true;
      }
    }
    if (!known) {
      std::string names;
      for (Fusion f : kAll) names += (names.empty() ? "" : ", ") + std::string(fusionName(f));
      throw ValueError(detail::concat(kVariable, "='", v, "': no fusion is called '", name,
                                      "'; the fusions lockstep can turn off are ", names));
    }
  }
  return off;
}

std::atomic<uint32_t>& disabled() {
  static std::atomic<uint32_t> bits{fromEnvironment()};
  return bits;
}

}  // namespace

std::string_view fusionName(Fusion f) {
  switch (f) {
    case Fusion::packed_qkv_attention:
      return "packed_qkv_attention";
    case Fusion::residual_epilogue:
      return "residual_epilogue";
    case Fusion::loss_with_grad:
      return "loss_with_grad";
  }
  return "?";
}

bool fusionEnabled(Fusion f) { return (disabled().load(std::memory_order_acquire) & bit(f)) == 0; }

void setFusionEnabled(Fusion f, bool enabled) {
  if (enabled) {
    disabled().fetch_and(~bit(f), std::memory_order_acq_rel);
  } else {
    disabled().fetch_or(bit(f), std::memory_order_acq_rel);
  }
}

}  // namespace lockstep::kernels
