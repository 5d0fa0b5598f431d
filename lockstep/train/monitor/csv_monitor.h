#pragma once
// DeepSpeed's csv_monitor layout (deepspeed/monitor/csv_monitor.py), so that scripts written for
// DeepSpeed's files read lockstep's: one CSV per tag in output_path/job_name, named after the tag
// with '/' and ' ' made '_' (Train/Samples/lr -> Train_Samples_lr.csv), whose first row is
// "step,<the tag's last part>" and every other "<step>,<value>". Which tags and which step DeepSpeed
// writes is metrics_log.h's business.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

namespace lockstep::train {

/// Not thread-safe; rank 0 only. IoError naming the file when it cannot be written.
class CsvMonitor {
 public:
  /// Creates `dir` (output_path/job_name) if it is missing.
  explicit CsvMonitor(std::string dir);
  ~CsvMonitor();
  CsvMonitor(const CsvMonitor&) = delete;
  CsvMonitor& operator=(const CsvMonitor&) = delete;

  /// The file of `tag`, opened for appending on first use; its header is written when the file is
  /// new or empty, so that a resumed run does not repeat it. The value is the shortest text that
  /// reads back as the same double (DeepSpeed writes Python's repr of the float).
  void write(const std::string& tag, double value, int64_t step);
  void flush();
  /// The file `tag` goes to.
  std::string path(const std::string& tag) const;

 private:
  std::string dir_;
  std::map<std::string, FILE*> files_;
};

}  // namespace lockstep::train
