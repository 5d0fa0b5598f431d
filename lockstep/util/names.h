#pragma once
// Matching a mistyped name against the known ones, for "did you mean ...?" in error messages
// (config keys, registries' names).
#include <cstddef>
#include <string>
#include <vector>

namespace lockstep {

/// Levenshtein distance. Thread-safe (pure).
size_t editDistance(const std::string& a, const std::string& b);
/// The candidate nearest to `name` (edit distance at most max(2, |name| / 3)), or "" when none is.
/// Thread-safe (pure).
std::string nearestName(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace lockstep
