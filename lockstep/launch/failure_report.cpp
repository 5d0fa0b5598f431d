#include "lockstep/launch/failure_report.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lockstep/util/json.h"

namespace lockstep::launch {

namespace {

std::string indent(const std::string& text, const std::string& pad) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out += pad + line + "\n";
  return out;
}

std::string utcTime(double t) {
  std::time_t secs = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// A traceback deeper than this shows its innermost frames, where the error is.
constexpr size_t kTracebackLines = 60;

std::string lastLines(const std::string& text, size_t n) {
  size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  if (lines <= n) return text;
  size_t pos = 0;
  for (size_t skip = lines - n; skip > 0; --skip) pos = text.find('\n', pos) + 1;
  return "... (" + std::to_string(lines - n) + " earlier lines)\n" + text.substr(pos);
}

}  // namespace

std::optional<ErrorFileRecord> parseErrorFile(const std::string& content) {
  nlohmann::json doc;
  try {
    doc = json::parse(content);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // not PyTorch's error file: the caller reports the file as it is
  }
  if (!doc.is_object() || !doc.contains("message")) return std::nullopt;
  const auto& m = doc["message"];
  ErrorFileRecord r;
  if (m.is_string()) {
    r.message = m.get<std::string>();
    return r;
  }
  if (!m.is_object() || !m.contains("message") || !m["message"].is_string()) return std::nullopt;
  r.message = m["message"].get<std::string>();
  if (m.contains("extraInfo") && m["extraInfo"].is_object()) {
    const auto& extra = m["extraInfo"];
    if (extra.contains("py_callstack") && extra["py_callstack"].is_string())
      r.traceback = extra["py_callstack"].get<std::string>();
    if (extra.contains("timestamp") && extra["timestamp"].is_string())
      r.time_s = std::atof(extra["timestamp"].get<std::string>().c_str());
  }
  return r;
}

bool reportsLostPeer(const std::string& error_content) {
  auto record = parseErrorFile(error_content);
  const std::string& text = record ? record->message : error_content;
  for (const char* lost : {"Connection closed by peer", "Connection reset by peer"})
    if (text.find(lost) != std::string::npos) return true;
  return false;
}

int exitCodeOf(const WorkerFailure& f) {
  if (f.signal != 0) return 128 + f.signal;
  // A rank that wrote its error file and was still exiting has no code yet (0 so far): the job
  // failed all the same, so 1, torchrun's code for a failed job.
  if (f.still_running || f.exit_code == 0) return 1;
  return f.exit_code;
}

std::string signalName(int sig) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"}};
  for (const auto& [n, name] : kNames)
    if (n == sig) return name;
  return "signal " + std::to_string(sig);
}

std::string describeExit(int exit_code, int signal) {
  if (signal != 0) return "was killed by signal " + signalName(signal) + " (" + std::to_string(signal) + ")";
  return "exited with code " + std::to_string(exit_code);
}

std::string formatRootCause(const WorkerFailure& f) {
  std::ostringstream os;
  os << "root cause: rank " << f.rank << " (local rank " << f.local_rank << " on host '" << f.host
     << "', node rank " << f.group_rank << ", pid " << f.pid << ") "
     << (f.still_running ? std::string("reported an error and was still exiting")
                         : describeExit(f.exit_code, f.signal));
  if (f.time_s > 0) os << " at " << utcTime(f.time_s);
  os << "\n";
  std::optional<ErrorFileRecord> record = parseErrorFile(f.error_content);
  if (record && !record->traceback.empty()) {
    os << indent(record->message, "  ") << "  traceback (error file " << f.error_file;
    if (record->time_s > 0) os << ", written " << utcTime(record->time_s);
    os << "):\n" << indent(lastLines(record->traceback, kTracebackLines), "    ");
    return os.str();  // the same traceback is what its stderr ends with
  }
  if (!f.error_content.empty()) {
    os << "  error file " << f.error_file << ":\n"
       << indent(record ? record->message : f.error_content, "    ");
  }
  if (!f.stderr_tail.empty()) {
    os << "  last lines of its stderr:\n" << indent(f.stderr_tail, "    ");
  } else {
    os << "  (it wrote nothing to stderr)\n";
  }
  return os.str();
}

std::string readErrorFile(const std::string& path, size_t max_bytes) {
  if (path.empty()) return "";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string data(max_bytes + 1, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  bool cut = data.size() > max_bytes;
  if (cut) data.resize(max_bytes);
  while (!data.empty() && (data.back() == '\n' || data.back() == ' ')) data.pop_back();
  if (cut) data += "\n... (truncated)";
  return data;
}

}  // namespace lockstep::launch
