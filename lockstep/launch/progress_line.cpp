#include "lockstep/launch/progress_line.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace lockstep::launch {

std::string formatDuration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  auto t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60));
  } else if (t >= 60) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(t));
  }
  return buf;
}

std::string encodeProgressReport(const ProgressReport& r) {
  char buf[256];
  std::snprintf(
      buf, sizeof buf, "v1 epoch=%lld epochs=%lld step=%lld total_steps=%lld loss=%.9g sps=%.9g eta=%.9g",
      static_cast<long long>(r.epoch), static_cast<long long>(r.epochs), static_cast<long long>(r.step),
      static_cast<long long>(r.total_steps), r.loss, r.samples_per_sec, r.eta_seconds);
  return buf;
}

std::optional<ProgressReport> decodeProgressReport(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  if (!(in >> word) || word != "v1") return std::nullopt;
  ProgressReport r;
  int seen = 0;
  while (in >> word) {
    auto eq = word.find('=');
    if (eq == std::string::npos) return std::nullopt;
    std::string key = word.substr(0, eq), value = word.substr(eq + 1);
    char* end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0') return std::nullopt;
    if (key == "epoch")
      r.epoch = static_cast<int64_t>(v);
    else if (key == "epochs")
      r.epochs = static_cast<int64_t>(v);
    else if (key == "step")
      r.step = static_cast<int64_t>(v);
    else if (key == "total_steps")
      r.total_steps = static_cast<int64_t>(v);
    else if (key == "loss")
      r.loss = v;
    else if (key == "sps")
      r.samples_per_sec = v;
    else if (key == "eta")
      r.eta_seconds = v;
    else
      continue;  // a newer sender's extra field
    ++seen;
  }
  if (seen < 7) return std::nullopt;
  return r;
}

std::string formatProgressLine(const ProgressReport& r, int width) {
  const size_t limit = width > 1 ? static_cast<size_t>(width - 1) : 0;
  char buf[64];
  std::string epoch;
  if (r.epochs > 0) {
    std::snprintf(buf, sizeof buf, "epoch %lld/%lld ", static_cast<long long>(r.epoch),
                  static_cast<long long>(r.epochs));
    epoch = buf;
  }
  std::string tail;
  if (r.total_steps > 0) {
    std::snprintf(buf, sizeof buf, "step %lld/%lld", static_cast<long long>(r.step),
                  static_cast<long long>(r.total_steps));
  } else {
    std::snprintf(buf, sizeof buf, "step %lld", static_cast<long long>(r.step));
  }
  tail = buf;
  std::snprintf(buf, sizeof buf, " loss %.4f", r.loss);
  tail += buf;
  std::snprintf(buf, sizeof buf, " %.0f samples/s", r.samples_per_sec);
  tail += buf;
  tail += " ETA " + formatDuration(r.eta_seconds);
  // The bar takes what is left, 10 to 30 cells inside its brackets.
  const size_t fixed = epoch.size() + tail.size();
  if (r.total_steps > 0 && fixed + 13 <= limit) {
    const size_t cells = std::min<size_t>(30, limit - fixed - 3);
    const auto filled = static_cast<size_t>(
        static_cast<double>(cells) *
        std::min<double>(1.0, static_cast<double>(r.step) / static_cast<double>(r.total_steps)));
    std::string bar(filled, '=');
    if (filled < cells) bar += filled > 0 ? ">" : " ";
    bar.resize(cells, ' ');
    return epoch + "[" + bar + "] " + tail;
  }
  std::string line = fixed <= limit ? epoch + tail : tail;
  if (line.size() > limit) line.resize(limit);
  return line;
}

}  // namespace lockstep::launch
