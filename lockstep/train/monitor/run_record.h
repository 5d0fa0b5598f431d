#pragma once
// Everything a training run left in its output directory, read back for `lockstep report`:
// metrics.csv (every metric as a series), run.json (config, environment), summary.json (results,
// per-rank DDP timings) and the checkpoint directory. Reading tolerates what a run in progress or
// an older lockstep leaves: missing files, a torn last CSV line, CSVs without wall_time, and
// metrics this reader does not know (they are kept and shown as they are).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lockstep::train {

struct MetricSeries {
  std::vector<int64_t> epoch, step;
  std::vector<double> value;
  std::vector<double> wall_time;  // Unix seconds; empty when the CSV has no wall_time column
};

struct CheckpointEntry {
  std::string name;  // ckpt-<step>
  int64_t step = 0;
  uint64_t bytes = 0;
  double mtime = 0;  // Unix seconds
  bool latest = false;
};

struct RunRecord {
  std::string dir;
  std::map<std::string, MetricSeries> metrics;        // by metric name ("train/loss")
  nlohmann::json run = nlohmann::json::object();      // run.json, {} when absent
  nlohmann::json summary = nlohmann::json::object();  // summary.json, {} when absent (still running)
  std::vector<CheckpointEntry> checkpoints;           // oldest first
};

/// Parses metrics.csv text: the long form `epoch,step,metric,value[,wall_time]` lockstep writes,
/// or a wide form (epoch?,step,NAME...,wall_time?) with one column per metric. A malformed line
/// (a run killed mid-write) is skipped; rows a resumed run logged again replace the older ones. ValueError
/// naming `source` when there is no step column.
std::map<std::string, MetricSeries> parseMetricsCsv(const std::string& text, const std::string& source);

/// Reads DIR. ValueError naming DIR when it is not a directory or holds none of metrics.csv,
/// run.json and summary.json (not a lockstep run).
RunRecord loadRunRecord(const std::string& dir);

}  // namespace lockstep::train
