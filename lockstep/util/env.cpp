#include "lockstep/util/env.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

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

}  // namespace lockstep::env
