#include "lockstep/kernels/fusions.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/util/env.h"
#include "lockstep/util/error.h"
#include "lockstep/util/suggest.h"

namespace lockstep::kernels {

namespace {

// Each fusion and the name LOCKSTEP_DISABLE_FUSIONS gives it, in Fusion's order.
constexpr std::array<std::pair<Fusion, std::string_view>, 3> kFusions = {{
    {Fusion::packed_qkv_attention, "packed_qkv_attention"},
    {Fusion::residual_epilogue, "residual_epilogue"},
    {Fusion::loss_with_grad, "loss_with_grad"},
}};
static_assert(
    [] {
      for (size_t i = 0; i < kFusions.size(); ++i)
        if (static_cast<size_t>(kFusions[i].first) != i) return false;
      return true;
    }(),
    "kFusions must list the fusions in Fusion's order (fusionName indexes it)");
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
    auto known =
        std::find_if(kFusions.begin(), kFusions.end(), [&](const auto& f) { return f.second == name; });
    if (known != kFusions.end()) {
      off |= bit(known->first);
      continue;
    }
    std::vector<std::string> names;
    for (const auto& f : kFusions) names.emplace_back(f.second);
    const std::string near = nearestKey(name, names);
    std::string listed;
    for (const std::string& n : names) listed += (listed.empty() ? "" : ", ") + n;
    throw ValueError(detail::concat(kVariable, "='", v, "': no fusion is called '", name, "'",
                                    near.empty() ? "" : " (did you mean '" + near + "'?)",
                                    "; the fusions lockstep can turn off are ", listed));
  }
  return off;
}

std::atomic<uint32_t>& disabled() {
  static std::atomic<uint32_t> bits{fromEnvironment()};
  return bits;
}

}  // namespace

std::string_view fusionName(Fusion f) { return kFusions[static_cast<size_t>(f)].second; }

bool fusionEnabled(Fusion f) { return (disabled().load(std::memory_order_acquire) & bit(f)) == 0; }

void checkFusionsVariable() { (void)disabled(); }

void setFusionEnabled(Fusion f, bool enabled) {
  if (enabled) {
    disabled().fetch_and(~bit(f), std::memory_order_acq_rel);
  } else {
    disabled().fetch_or(bit(f), std::memory_order_acq_rel);
  }
}

}  // namespace lockstep::kernels
