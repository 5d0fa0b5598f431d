#pragma once
// DeepSpeed's config keys that lockstep has no feature for, with DeepSpeed's defaults
// (deepspeed/runtime/constants.py, runtime/config.py, runtime/zero/config.py): a config that sets
// one to its default or off value runs as written, said once in the log; any other value is
// "not supported yet", naming the feature. Pure.
#include <set>
#include <string>

namespace YAML {
class Node;
}

namespace lockstep::train::deepspeed_keys {

/// The keys of `section` ("" for the top level, "zero_optimization", "bf16") in the table.
std::set<std::string> names(const std::string& section);

/// What to do with `section`.`key` = `value` for a key in names(section).
struct Verdict {
  bool accepted = false;
  /// accepted: the note to log ("KEY: VALUE is DeepSpeed's default ..."); refused: the error.
  std::string message;
};
Verdict judge(const std::string& section, const std::string& key, const YAML::Node& value);

}  // namespace lockstep::train::deepspeed_keys
