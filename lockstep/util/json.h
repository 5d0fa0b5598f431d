#pragma once
// JSON that lockstep reads from files and peers (checkpoint manifests and states, safetensors
// headers, configs, run records, worker error files): nlohmann's parser with the nesting capped.
// nlohmann's parser and destructor do not recurse, but dump(), comparisons and conversions do: a
// document nested 200,000 deep (400 KB of brackets) overflows the stack of the first one that
// walks it. Past kMaxDepth the parse fails with json::TooDeep, a nlohmann::json::exception, so
// code that turns a parse error into its own message (naming the file) does the same for it.
//
// Header-only (nlohmann_json is); the modules that read JSON link it.
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace lockstep::json {

/// Deeper than any document lockstep writes or reads (a config nests a few levels).
inline constexpr int kMaxDepth = 128;

class TooDeep : public nlohmann::json::exception {
 public:
  TooDeep()
      : nlohmann::json::exception(
            -1, ("JSON nested deeper than " + std::to_string(kMaxDepth) + " levels (no valid input is)")
                    .c_str()) {}
};

namespace detail {
template <class Json>
typename Json::parser_callback_t depthLimit() {
  return [](int depth, typename Json::parse_event_t, Json&) {
    if (depth > kMaxDepth) throw TooDeep();
    return true;
  };
}
}  // namespace detail

/// Json::parse(input) with the nesting capped: a string, a string_view's or a file's bytes.
template <class Json = nlohmann::json, class Input>
Json parse(Input&& input) {
  return Json::parse(std::forward<Input>(input), detail::depthLimit<Json>());
}

/// The same over [begin, end).
template <class Json = nlohmann::json, class It>
Json parse(It begin, It end) {
  return Json::parse(begin, end, detail::depthLimit<Json>());
}

/// Empty when text is UTF-8 (what JSON strings must be: lockstep writes configs, paths and names
/// into run.json and checkpoints), else what is wrong and where ("invalid UTF-8 byte at index N:
/// 0xXX").
inline std::string utf8Error(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return "";
  } catch (const nlohmann::json::type_error& e) {
    const std::string what = e.what();  // "[json.exception.type_error.316] invalid UTF-8 byte ..."
    const size_t at = what.find("] ");
    return at == std::string::npos ? what : what.substr(at + 2);
  }
}

/// The start of a value's text for a message (a value read from a hostile file may be megabytes).
template <class Json>
std::string excerpt(const Json& value, size_t max_chars = 80) {
  std::string s = value.dump();
  if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
  return s;
}

}  // namespace lockstep::json
