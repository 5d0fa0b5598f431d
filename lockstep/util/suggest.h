#pragma once
// "Did you mean ...?" for names typed by a user (config keys, optimizer and model names): one copy
// for every module that reports an unknown name.
#include <cstddef>
#include <string>
#include <vector>

namespace lockstep {

/// Levenshtein distance.
size_t editDistance(const std::string& a, const std::string& b);
/// The candidate nearest to `key`: one equal to it but for letter case first, else the nearest by
/// edit distance, if within max(2, |key| / 3); "" when none is.
std::string nearestKey(const std::string& key, const std::vector<std::string>& candidates);

}  // namespace lockstep
