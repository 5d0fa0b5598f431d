#pragma once
// Reading config sections: the one place that checks a section's keys (unknown ones named with the
// nearest known one, DeepSpeed keys lockstep does not implement named as such) and converts a
// value to the type a key means, with errors that name the key's path ("fp16.loss_scale"). Every
// section parser (config.cpp, zero_config.cpp) uses these. Pure.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "lockstep/util/error.h"

namespace lockstep::train::config_keys {

/// "path.key", or "key" at the top level (path "").
std::string join(const std::string& path, const std::string& key);
/// A value as a message shows it: 'scalar', "a mapping", "a list" or "null".
std::string describe(const YAML::Node& v);

/// While one lives on this thread (parseTrainConfig holds one), refuse() records its message instead
/// of throwing, so that one run reports every refused key of a config at once, and note() records
/// the lines the run logs once. Scopes nest; the innermost collects. Not copyable.
class Collect {
 public:
  Collect();
  ~Collect();
  Collect(const Collect&) = delete;
  Collect& operator=(const Collect&) = delete;
  std::vector<std::string> refused, notes;

 private:
  Collect* previous_;
};

/// ValueError(message), or recorded by the active Collect.
void refuse(const std::string& message);
/// Recorded by the active Collect; dropped when none is active.
void note(const std::string& message);

/// Refuses (above) unless `n` is a mapping whose every key is in `known`: "unknown key PATH.KEY (did
/// you mean PATH.NEAR?)". A DeepSpeed key lockstep has no feature for (deepspeed_keys.h) is noted
/// when set to DeepSpeed's default or off value and otherwise refused as "not supported yet",
/// naming the feature. A key in `not_yet` is skipped when its value is `{enabled: false}` and
/// otherwise refused as "PATH.KEY is not supported yet".
void checkKeys(const YAML::Node& n, const std::string& path, const std::vector<std::string>& known,
               const std::set<std::string>& not_yet = {});

/// A scalar written without quotes: only such a one is read as a boolean or a number (a quoted one is
/// a string, as in JSON).
inline bool isPlainScalar(const YAML::Node& v) { return v.IsScalar() && v.Tag() != "!"; }
/// describe(v) for a value that should have been a boolean or a number: a quoted scalar reads
/// `the string "1" (write it without quotes)`.
inline std::string describeNonString(const YAML::Node& v) {
  if (v.IsScalar() && !isPlainScalar(v)) return "the string \"" + v.Scalar() + "\" (write it without quotes)";
  return describe(v);
}

template <typename T>
const char* typeName() {
  if constexpr (std::is_same_v<T, bool>)
    return "a boolean";
  else if constexpr (std::is_integral_v<T>)
    return "an integer";
  else if constexpr (std::is_floating_point_v<T>)
    return "a number";
  else
    return "a string";
}

/// v as T; ValueError "PATH: expected a number, got 'x'" otherwise. Floating values must be finite
/// (.inf and .nan are not learning rates or clip norms). A quoted scalar is a string, as in JSON: an
/// error for a boolean or a number (yaml-cpp would read "yes" as true and "1" as 1; DeepSpeed reads
/// such strings one way through pydantic and another as plain Python values, where "false" is true).
template <typename T>
T convert(const YAML::Node& v, const std::string& path) {
  if constexpr (!std::is_same_v<T, std::string>) {
    if (v.IsScalar() && !isPlainScalar(v))
      throw ValueError(path + ": expected " + typeName<T>() + ", got " + describeNonString(v));
  }
  if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && !std::is_same_v<T, bool>) {
    if (v.IsScalar() && !v.Scalar().empty() && v.Scalar()[0] == '-')
      throw ValueError(path + ": expected a non-negative integer, got '" + v.Scalar() + "'");
  }
  if (v.IsScalar()) {
    std::optional<T> out;
    try {
      out = v.as<T>();
    } catch (const YAML::Exception&) {
    }
    if (out) {
      if constexpr (std::is_floating_point_v<T>) {
        if (!std::isfinite(*out))
          throw ValueError(path + ": expected a finite number, got '" + v.Scalar() + "'");
      }
      return *out;
    }
  }
  throw ValueError(path + ": expected " + typeName<T>() + ", got " + describe(v));
}

/// out = n[key] as T when the key is present; unchanged otherwise.
template <typename T>
void get(const YAML::Node& n, const std::string& path, const std::string& key, T& out) {
  if (n[key]) out = convert<T>(n[key], join(path, key));
}
template <typename T>
void get(const YAML::Node& n, const std::string& path, const std::string& key, std::optional<T>& out) {
  if (n[key]) out = convert<T>(n[key], join(path, key));
}

}  // namespace lockstep::train::config_keys
