#include "lockstep/train/config/config_document.h"

#include <cmath>
#include <cstdio>
#include <map>

#include "lockstep/util/error.h"
#include "lockstep/util/file.h"
#include "lockstep/util/json.h"

namespace lockstep::train {

namespace {

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// A .json file is held to JSON's grammar (no trailing commas, quoted keys) and its syntax errors
// are reported as a JSON parser sees them, at the line and column where it went wrong; YAML reads
// most broken JSON as something else (and then complains of a key or a value far from the typo).
// (yaml-cpp bounds its own recursion: deep nesting is a DeepRecursion parse error.)
void checkSyntax(const std::string& text, const std::string& source) {
  constexpr size_t kMaxConfigBytes = 16 << 20;
  if (text.size() > kMaxConfigBytes)
    throw ValueError(source + ": " + std::to_string(text.size()) + " bytes is too large for a config file");
  // A config is UTF-8 text (YAML and JSON both say so); yaml-cpp does not check, and a string with
  // invalid bytes could not be written into a checkpoint's config.json (found by fuzz_config).
  if (const std::string bad = json::utf8Error(text); !bad.empty())
    throw ValueError(source + ": not UTF-8 text: " + bad);
  const bool is_json = source.size() >= 5 && source.compare(source.size() - 5, 5, ".json") == 0;
  if (is_json) {
    try {
      const nlohmann::json parsed = json::parse(text);
      (void)parsed;
    } catch (const nlohmann::json::parse_error& e) {
      // e.byte is 1-based, the position after the offending character.
      size_t line = 1, col = 1;
      for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
        if (text[i] == '\n') {
          ++line;
          col = 1;
        } else {
          ++col;
        }
      }
      std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 4, ...: why"
      const size_t at = what.find(": ", what.find("parse error"));
      if (at != std::string::npos) what = what.substr(at + 2);
      if (what.rfind("syntax error ", 0) == 0) what = what.substr(13);
      throw ValueError(source + ": line " + std::to_string(line) + ", column " + std::to_string(col) +
                       ": JSON syntax error: " + what);
    } catch (const nlohmann::json::exception& e) {
      // E.g. a number too large for a double (out_of_range.406): found by fuzz_config.
      std::string what = e.what();
      const size_t at = what.find("] ");
      throw ValueError(source + ": JSON error: " + (at == std::string::npos ? what : what.substr(at + 2)));
    }
  }
}

}  // namespace

YAML::Node loadConfigDocument(const std::string& text, const std::string& source) {
  checkSyntax(text, source);
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ValueError(source + ": line " + std::to_string(e.mark.line + 1) + ", column " +
                     std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
  }
}

namespace {

// Every walk of the document is bounded: YAML aliases can make a node its own descendant
// (`a: &x {b: *x}`, found by fuzz_config: the walk overflowed the stack) or a small file expand
// to billions of values (nested aliases). No config is anywhere near these bounds.
constexpr int kMaxDepth = 64;
constexpr int64_t kMaxValues = 100000;

struct Walk {
  const std::string& source;
  int64_t values = 0;
  void enter(int depth, const std::string& path) {
    if (depth > kMaxDepth) {
      throw ValueError(source + ": " + (path.empty() ? "the config" : path) + " is nested more than " +
                       std::to_string(kMaxDepth) + " levels deep (a YAML alias that refers to itself?)");
    }
    if (++values > kMaxValues) {
      throw ValueError(source + ": the config holds more than " + std::to_string(kMaxValues) +
                       " values (YAML aliases that expand?)");
    }
  }
};

void checkKeysOnce(Walk& w, const YAML::Node& n, const std::string& path, int depth) {
  w.enter(depth, path);
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i)
      checkKeysOnce(w, n[i], path + "[" + std::to_string(i) + "]", depth + 1);
    return;
  }
  if (!n.IsMap()) return;
  std::map<std::string, int> seen;  // key -> line (1-based)
  for (const auto& kv : n) {
    const int line = kv.first.Mark().line + 1;
    if (!kv.first.IsScalar()) {
      throw ValueError(w.source + ": line " + std::to_string(line) + ": a key of " +
                       (path.empty() ? "the config" : path) + " is a list or a mapping; keys are names");
    }
    const std::string key = kv.first.Scalar();
    auto [it, fresh] = seen.emplace(key, line);
    if (!fresh) {
      throw ValueError(w.source + ": key " + join(path, key) + " is given twice (lines " +
                       std::to_string(it->second) + " and " + std::to_string(line) + "); keep one");
    }
    checkKeysOnce(w, kv.second, join(path, key), depth + 1);
  }
}

nlohmann::json toJson(Walk& w, const YAML::Node& n, int depth) {
  w.enter(depth, "");
  if (n.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& kv : n) out[kv.first.Scalar()] = toJson(w, kv.second, depth + 1);
    return out;
  }
  if (n.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : n) out.push_back(toJson(w, v, depth + 1));
    return out;
  }
  if (!n.IsScalar()) return nullptr;
  if (n.Tag() == "!") return n.Scalar();
  bool b;
  int64_t i;
  double d;
  if (YAML::convert<bool>::decode(n, b)) return b;
  if (YAML::convert<int64_t>::decode(n, i)) return i;
  if (YAML::convert<double>::decode(n, d) && std::isfinite(d)) return d;
  return n.Scalar();
}

}  // namespace

// A key given twice in one mapping is an error naming both lines: YAML and JSON parsers disagree on
// which one wins (yaml-cpp keeps the first, most JSON readers the last), so neither is guessed.
void checkNoDuplicateKeys(const YAML::Node& n, const std::string& path, const std::string& source) {
  Walk w{source};
  checkKeysOnce(w, n, path, 0);
}

nlohmann::json configDocumentToJson(const YAML::Node& n, const std::string& source) {
  Walk w{source};
  return toJson(w, n, 0);
}

std::string configIdentityHash(nlohmann::json doc) {
  // zero_optimization says how the ranks share the model state, not what is trained: a checkpoint
  // of any stage is resharded at load (zero_checkpoint.h), so any stage resumes any other's. backends
  // (TF32, cuDNN's algorithm choice) says how a GPU computes, as device says where: a run may resume
  // another's checkpoint with other math switches, as it may on another device. pipeline says how
  // the ranks split the computation: its checkpoints load into any stage count, or none.
  for (const char* k : {"epochs", "max_steps", "steps_per_print", "checkpoint", "eval", "tensorboard",
                        "csv_monitor", "backend", "device", "backends", "seed", "zero_optimization",
                        "zero_allow_untested_optimizer", "pipeline"})
    doc.erase(k);
  if (doc.contains("data") && doc["data"].is_object()) doc["data"].erase("num_workers");
  // Hugging Face's "auto" total_num_steps stays in the document for the scheduler (the run's
  // length); it was absent before, so a run of an earlier lockstep keeps its identity.
  if (doc.contains("scheduler") && doc["scheduler"].is_object() && doc["scheduler"].contains("params") &&
      doc["scheduler"]["params"].is_object() &&
      doc["scheduler"]["params"].value("total_num_steps", nlohmann::json()) == "auto")
    doc["scheduler"]["params"].erase("total_num_steps");
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", file::crc32(doc.dump()));
  return buf;
}

}  // namespace lockstep::train
