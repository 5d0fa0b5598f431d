#include "lockstep/train/monitor/run_record.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "lockstep/util/error.h"
#include "lockstep/util/file.h"
#include "lockstep/util/json.h"

namespace lockstep::train {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> splitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

bool toNumber(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return *end == '\0' || *end == '\r';
}

nlohmann::json readJson(const std::string& path) {
  if (!fs::exists(path)) return nlohmann::json::object();
  nlohmann::json j;
  try {
    j = json::parse(file::readAll(path));
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(path + " is not valid JSON (" + e.what() + "); was it edited by hand?");
  }
  // lockstep writes an object; anything else (a list, a number) would fail later with a bare
  // json type error that names no file.
  if (!j.is_object())
    throw ValueError(path + " holds JSON " + std::string(j.type_name()) +
                     ", not the object lockstep train writes; was it edited by hand?");
  return j;
}

double mtimeOf(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
}

std::vector<CheckpointEntry> readCheckpoints(const std::string& dir) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  std::string latest;
  if (fs::is_regular_file(dir + "/latest", ec)) {  // (an entry that cannot be looked at is none)
    latest = file::readAll(dir + "/latest");
    while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ')) latest.pop_back();
  }
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    // Complete checkpoints only: ckpt-<step>, not a ckpt-<step>.tmp-* being written.
    std::error_code kind;  // a symlink loop is no checkpoint (resume skipped it as well)
    if (!e.is_directory(kind) || name.rfind("ckpt-", 0) != 0 || name.find('.') != std::string::npos) continue;
    char* end = nullptr;
    const long long step = std::strtoll(name.c_str() + 5, &end, 10);
    if (*end != '\0') continue;
    CheckpointEntry c{name, step, 0, mtimeOf(e.path()), name == latest};
    for (const auto& f : fs::directory_iterator(e.path(), ec))
      if (f.is_regular_file(kind)) c.bytes += f.file_size(ec);
    out.push_back(c);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

}  // namespace

std::map<std::string, MetricSeries> parseMetricsCsv(const std::string& text, const std::string& source) {
  std::map<std::string, MetricSeries> out;
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) return out;
  std::vector<std::string> header = splitCsv(line);
  for (auto& h : header)
    if (!h.empty() && h.back() == '\r') h.pop_back();
  auto col = [&](const std::string& name) {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return static_cast<int>(i);
    return -1;
  };
  const int c_epoch = col("epoch"), c_step = col("step"), c_metric = col("metric"), c_value = col("value"),
            c_time = col("wall_time");
  if (c_step < 0) throw ValueError(source + ": no 'step' column in its header '" + line + "'");
  const bool long_form = c_metric >= 0 && c_value >= 0;
  auto add = [&](const std::string& name, double epoch, double step, double value, bool has_time, double t) {
    MetricSeries& s = out[name];
    // A resumed run logs again from its checkpoint's step: its rows replace the orphaned ones
    // after it (as TensorBoard purges orphaned data).
    size_t keep = s.step.size();
    while (keep > 0 && s.step[keep - 1] >= static_cast<int64_t>(step)) --keep;
    if (keep < s.step.size()) {
      s.epoch.resize(keep);
      s.step.resize(keep);
      s.value.resize(keep);
      if (s.wall_time.size() > keep) s.wall_time.resize(keep);
    }
    s.epoch.push_back(static_cast<int64_t>(epoch));
    s.step.push_back(static_cast<int64_t>(step));
    s.value.push_back(value);
    if (has_time) s.wall_time.push_back(t);
  };
  while (std::getline(in, line)) {
    if (in.eof() && !text.empty() && text.back() != '\n') break;  // torn last line of a live run
    std::vector<std::string> cells = splitCsv(line);
    if (cells.size() < header.size() - (c_time >= 0 ? 1 : 0)) continue;
    // A row one cell short (its wall_time not written) must still hold the columns read below,
    // wherever the header puts them.
    const int needed = std::max({c_epoch, c_step, long_form ? c_metric : -1, long_form ? c_value : -1});
    if (static_cast<int>(cells.size()) <= needed) continue;
    double epoch = 0, step = 0, t = 0;
    if (c_epoch >= 0 && !toNumber(cells[c_epoch], epoch)) continue;
    if (!toNumber(cells[c_step], step)) continue;
    const bool has_time =
        c_time >= 0 && c_time < static_cast<int>(cells.size()) && toNumber(cells[c_time], t);
    if (long_form) {
      double v = 0;
      if (!toNumber(cells[c_value], v)) continue;
      add(cells[c_metric], epoch, step, v, has_time, t);
      continue;
    }
    for (size_t i = 0; i < header.size() && i < cells.size(); ++i) {
      const int ci = static_cast<int>(i);
      double v = 0;
      if (ci == c_epoch || ci == c_step || ci == c_time || !toNumber(cells[i], v))
        continue;  // empty: not logged
      add(header[i], epoch, step, v, has_time, t);
    }
  }
  // A series with a wall time on some rows only (a CSV from an older lockstep resumed by a newer
  // one) has no usable time axis.
  for (auto& [name, s] : out)
    if (s.wall_time.size() != s.step.size()) s.wall_time.clear();
  return out;
}

RunRecord loadRunRecord(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw ValueError("RUN_DIR " + dir +
                     " is not a directory (give the --output-dir of a lockstep train run)");
  RunRecord r;
  r.dir = dir;
  r.run = readJson(dir + "/run.json");
  r.summary = readJson(dir + "/summary.json");
  // The dir's own files first (a run copied or moved elsewhere), else where run.json says they
  // went (csv_monitor.output_path, checkpoint_dir outside the output dir).
  auto recorded = [&](const std::string& own, const nlohmann::json& where) {
    if (fs::exists(own) || !where.is_string()) return own;
    return where.get<std::string>();
  };
  const nlohmann::json none;
  const std::string csv = recorded(dir + "/metrics.csv", r.run.value("metrics_csv", none));
  const bool has_csv = fs::exists(csv);
  if (has_csv) r.metrics = parseMetricsCsv(file::readAll(csv), csv);
  if (!has_csv && r.run.empty() && r.summary.empty())
    throw ValueError("RUN_DIR " + dir +
                     " has none of metrics.csv, run.json, summary.json: not the output dir of a lockstep "
                     "train run (its --output-dir)");
  const nlohmann::json resolved = r.run.value("resolved", nlohmann::json::object());
  if (!resolved.is_object())
    throw ValueError(dir + "/run.json: its 'resolved' is JSON " + std::string(resolved.type_name()) +
                     ", not the object lockstep train writes; was it edited by hand?");
  r.checkpoints = readCheckpoints(recorded(dir + "/checkpoints", resolved.value("checkpoint_dir", none)));
  return r;
}

}  // namespace lockstep::train
