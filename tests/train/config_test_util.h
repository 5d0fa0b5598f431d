#pragma once
// Shared by the config tests of tests/train: the error a config text gives, and a substring check.
#include <string>
#include <vector>

#include "lockstep/train/config/config.h"
#include "lockstep/util/error.h"

namespace lockstep::test {

/// The ValueError's message that parseTrainConfig gives for text (with --set overrides and a world
/// size), or "(no error)".
inline std::string errorOf(const std::string& text, const std::vector<std::string>& sets = {},
                           int64_t world = 1) {
  try {
    train::parseTrainConfig(text, sets, world);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(no error)";
}

inline bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace lockstep::test
