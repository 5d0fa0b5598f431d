#pragma once
// The root cause of a failed attempt: which rank failed first, how, where, and what it said.
#include <string>

namespace lockstep::launch {

/// One worker that exited non-zero or was killed by a signal.
struct WorkerFailure {
  int rank = -1;
  int local_rank = -1;
  int group_rank = 0;
  std::string host;
  int pid = 0;
  int exit_code = 0;           ///< Meaningful when signal == 0.
  int signal = 0;              ///< The signal that killed it; 0 if it exited.
  bool still_running = false;  ///< It wrote its error file but had not exited yet when seen.
  double time_s = 0;           ///< When the agent saw it exit (seconds since the epoch).
  std::string stderr_tail;     ///< The last lines the worker wrote to stderr.
  std::string error_file;      ///< Path of its error file (LOCKSTEP_ERROR_FILE), if it wrote one.
  std::string error_content;   ///< What it wrote there (truncated).
};

/// "SIGKILL" for 9; "signal 77" for numbers without a name.
std::string signalName(int sig);

/// "exited with code 3" or "was killed by signal SIGKILL (9)".
std::string describeExit(int exit_code, int signal);

/// The multi-line root-cause block printed by the agent (and shared with the other agents):
/// "root cause: rank N (local rank L on host H, pid P) exited with code C" followed by the error
/// file's content and the tail of the worker's stderr, indented.
std::string formatRootCause(const WorkerFailure& f);

/// The content of an error file, at most max_bytes (with a note when cut); "" when absent/empty.
std::string readErrorFile(const std::string& path, size_t max_bytes = 8192);

}  // namespace lockstep::launch
