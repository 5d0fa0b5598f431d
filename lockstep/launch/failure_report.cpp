#include "lockstep/launch/failure_report.h"

#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

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

}  // namespace

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
  if (!f.error_content.empty()) {
    os << "  error file " << f.error_file << ":\n" << indent(f.error_content, "    ");
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
