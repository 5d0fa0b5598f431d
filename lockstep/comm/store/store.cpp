#include "lockstep/comm/store/store.h"

#include <charconv>

#include "lockstep/util/error.h"

namespace lockstep::comm {

void Store::setString(const std::string& key, const std::string& v) {
  set(key, std::vector<uint8_t>(v.begin(), v.end()));
}

std::string Store::getString(const std::string& key) {
  auto v = get(key);
  return std::string(v.begin(), v.end());
}

namespace detail {

std::string joinKeys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) {
    if (!out.empty()) out += ", ";
    out += "'" + k + "'";
  }
  return out;
}

int64_t parseCounter(const std::string& key, const std::vector<uint8_t>& value) {
  if (value.empty()) return 0;
  int64_t v = 0;
  const char* first = reinterpret_cast<const char*>(value.data());
  const char* last = first + value.size();
  auto [ptr, ec] = std::from_chars(first, last, v);
  LOCKSTEP_ENFORCE(ec == std::errc() && ptr == last, ValueError, "store key '", key,
                   "' holds a value that is not a decimal integer, so add() cannot update it; "
                   "use a separate key for counters");
  return v;
}

int64_t addToCounter(const std::string& key, const std::vector<uint8_t>& value, int64_t delta) {
  const int64_t v = parseCounter(key, value);
  int64_t sum = 0;
  LOCKSTEP_ENFORCE(!__builtin_add_overflow(v, delta, &sum), ValueError, "store key '", key, "': adding ",
                   delta, " to its counter ", v, " overflows 64 bits");
  return sum;
}

std::vector<uint8_t> formatCounter(int64_t v) {
  std::string s = std::to_string(v);
  return std::vector<uint8_t>(s.begin(), s.end());
}

}  // namespace detail
}  // namespace lockstep::comm
