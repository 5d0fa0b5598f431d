#include "lockstep/train/config/config_keys.h"

#include <algorithm>

#include "lockstep/train/config/deepspeed_keys.h"
#include "lockstep/util/suggest.h"

namespace lockstep::train::config_keys {

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string describe(const YAML::Node& v) {
  return v.IsScalar() ? "'" + v.Scalar() + "'" : v.IsMap() ? "a mapping" : v.IsSequence() ? "a list" : "null";
}

namespace {
thread_local Collect* active = nullptr;
}  // namespace

Collect::Collect() : previous_(active) { active = this; }
Collect::~Collect() { active = previous_; }

void refuse(const std::string& message) {
  if (!active) throw ValueError(message);
  active->refused.push_back(message);
}

void note(const std::string& message) {
  if (active) active->notes.push_back(message);
}

void checkKeys(const YAML::Node& n, const std::string& path, const std::vector<std::string>& known,
               const std::set<std::string>& not_yet) {
  if (!n.IsMap()) throw ValueError((path.empty() ? "the config" : path) + " must be a mapping");
  const std::set<std::string> deepspeed = deepspeed_keys::names(path);
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    if (deepspeed.count(key)) {
      const deepspeed_keys::Verdict v = deepspeed_keys::judge(path, key, kv.second);
      if (v.accepted)
        note(v.message);
      else
        refuse(v.message);
      continue;
    }
    if (not_yet.count(key)) {
      const YAML::Node& v = kv.second;
      const bool disabled = v.IsMap() && v.size() == 1 && v["enabled"] && v["enabled"].IsScalar() &&
                            v["enabled"].Scalar() == "false";
      if (disabled) continue;
      refuse(join(path, key) + " is not supported yet");
      continue;
    }
    std::string msg = "unknown key " + join(path, key);
    std::vector<std::string> candidates = known;
    candidates.insert(candidates.end(), deepspeed.begin(), deepspeed.end());
    const std::string near = nearestKey(key, candidates);
    if (!near.empty()) msg += " (did you mean " + join(path, near) + "?)";
    refuse(msg);
  }
}

}  // namespace lockstep::train::config_keys
