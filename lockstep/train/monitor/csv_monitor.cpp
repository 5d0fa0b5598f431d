#include "lockstep/train/monitor/csv_monitor.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "lockstep/util/error.h"
#include "lockstep/util/file.h"

namespace lockstep::train {

CsvMonitor::CsvMonitor(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw IoError("cannot create " + dir_ + ": " + ec.message());
}

CsvMonitor::~CsvMonitor() {
  for (auto& [tag, f] : files_) std::fclose(f);
}

std::string CsvMonitor::path(const std::string& tag) const {
  std::string name = tag;
  for (char& ch : name)
    if (ch == '/' || ch == ' ') ch = '_';
  return dir_ + "/" + name + ".csv";
}

void CsvMonitor::write(const std::string& tag, double value, int64_t step) {
  FILE*& f = files_[tag];
  if (!f) {
    const std::string file = path(tag);
    file::AppendedLines lines;
    try {
      lines = file::openLinesForAppend(file);  // an unfinished last row (a full disk, a kill) cut off
    } catch (...) {
      files_.erase(tag);
      throw;
    }
    f = lines.file;
    if (lines.fresh) std::fprintf(f, "step,%s\n", tag.substr(tag.rfind('/') + 1).c_str());
  }
  char text[32];
  const auto end = std::to_chars(text, text + sizeof(text), value).ptr;
  std::fprintf(f, "%lld,%.*s\n", static_cast<long long>(step), static_cast<int>(end - text), text);
}

void CsvMonitor::flush() {
  for (auto& [tag, f] : files_) {
    if (std::fflush(f) != 0) throw IoError("cannot write " + path(tag) + ": " + std::strerror(errno));
  }
}

}  // namespace lockstep::train
