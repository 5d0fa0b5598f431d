#include "lockstep/train/config_keys.h"

#include <algorithm>

#include "lockstep/util/suggest.h"

namespace lockstep::train::config_keys {

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string describe(const YAML::Node& v) {
  return v.IsScalar() ? "'" + v.Scalar() + "'" : v.IsMap() ? "a mapping" : v.IsSequence() ? "a list" : "null";
}

void checkKeys(const YAML::Node& n, const std::string& path, const std::vector<std::string>& known,
               const std::set<std::string>& not_yet) {
  if (!n.IsMap()) throw ValueError((path.empty() ? "the config" : path) + " must be a mapping");
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    if (not_yet.count(key)) {
      const YAML::Node& v = kv.second;
      const bool disabled = v.IsMap() && v.size() == 1 && v["enabled"] && v["enabled"].IsScalar() &&
                            v["enabled"].Scalar() == "false";
      if (disabled) continue;
      throw ValueError(join(path, key) + " is not supported yet");
    }
    std::string msg = "unknown key " + join(path, key);
    const std::string near = nearestKey(key, known);
    if (!near.empty()) msg += " (did you mean " + join(path, near) + "?)";
    throw ValueError(msg);
  }
}

}  // namespace lockstep::train::config_keys
