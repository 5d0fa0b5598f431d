#include "lockstep/util/env.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "lockstep/util/error.h"

namespace lockstep::env {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::optional<int64_t> getInt(const char* name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v->c_str(), &end, 10);
  LOCKSTEP_ENFORCE(!v->empty() && errno == 0 && end != nullptr && *end == '\0', ValueError,
                   "environment variable ", name, "='", *v,
                   "' is not an integer; set it to a whole number or unset it");
  return static_cast<int64_t>(x);
}

int64_t getInt(const char* name, int64_t def) { return getInt(name).value_or(def); }

bool getBool(const char* name, bool def) {
  auto v = get(name);
  return v ? parseBool(name, *v) : def;
}

bool parseBool(const char* name, const std::string& value) {
  std::string s = value;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  throw ValueError("environment variable " + std::string(name) + "='" + value +
                   "' is not a boolean; use 1/0, true/false, yes/no or on/off");
}

int64_t parseBytes(const char* name, const std::string& value) {
  auto bad = [&](const char* why) {
    return ValueError("environment variable " + std::string(name) + "='" + value + "' " + why +
                      "; give a size such as 8GiB, 1.5G, 500MB or a number of bytes");
  };
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(value.c_str(), &end);
  if (value.empty() || end == value.c_str() || errno != 0 || !(x >= 0)) throw bad("is not a size");
  std::string unit(end);
  unit.erase(0, unit.find_first_not_of(' '));
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  double scale = 0;
  const std::pair<const char*, double> units[] = {
      {"", 1},       {"b", 1},        {"k", 0x1p10},   {"kib", 0x1p10}, {"kb", 1e3},
      {"m", 0x1p20}, {"mib", 0x1p20}, {"mb", 1e6},     {"g", 0x1p30},   {"gib", 0x1p30},
      {"gb", 1e9},   {"t", 0x1p40},   {"tib", 0x1p40}, {"tb", 1e12}};
  for (const auto& [u, s] : units) {
    if (unit == u) scale = s;
  }
  if (scale == 0) throw bad("has an unknown unit");
  const double bytes = x * scale;
  if (bytes != std::floor(bytes)) throw bad("is not a whole number of bytes");
  if (bytes >= 0x1p63) throw bad("is too large");
  return static_cast<int64_t>(bytes);
}

std::optional<int64_t> getBytes(const char* name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  return parseBytes(name, *v);
}

}  // namespace lockstep::env
