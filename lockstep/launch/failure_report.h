#pragma once
// The root cause of a failed attempt: which rank failed first, how, where, and what it said.
#include <optional>
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

/// The exit code that stands for a failed worker: its own code (2 for a bad config), or 128 + N
/// when signal N killed it, as a shell reports it; 1 (never 0) for one that reported an error and
/// had not exited yet, or exited 0.
int exitCodeOf(const WorkerFailure& f);

/// "SIGKILL" for 9; "signal 77" for numbers without a name.
std::string signalName(int sig);

/// "exited with code 3" or "was killed by signal SIGKILL (9)".
std::string describeExit(int exit_code, int signal);

/// What a worker wrote to its error file in the JSON PyTorch's @record writes
/// (torch.distributed.elastic.multiprocessing.errors): {"message": "TEXT"} or {"message":
/// {"message": "ValueError: ...", "extraInfo": {"py_callstack": "Traceback ...", "timestamp":
/// "1732620000"}, "errorCode": N}}.
struct ErrorFileRecord {
  std::string message;
  std::string traceback;  ///< Empty when the file has none.
  double time_s = 0;      ///< When the worker wrote it (seconds since the epoch); 0: not said.
};

/// The record in an error file's content; nullopt when it is not such JSON (then it is shown as
/// written).
std::optional<ErrorFileRecord> parseErrorFile(const std::string& content);

/// True when an error file's content (its message, when it is @record's JSON) says that the
/// rank lost its connection to a peer (gloo's "Connection closed by peer" / "Connection reset by
/// peer"): the consequence of another rank's exit, not a root cause.
bool reportsLostPeer(const std::string& error_content);

/// The multi-line root-cause block printed by the agent (and shared with the other agents):
/// "root cause: rank N (local rank L on host H, pid P) exited with code C" followed by what its
/// error file says (the exception and its traceback, as torchrun's "Root Cause" block) and the
/// tail of the worker's stderr (left out when the error file gave the traceback), indented.
std::string formatRootCause(const WorkerFailure& f);

/// The content of an error file, at most max_bytes (with a note when cut); "" when absent/empty.
std::string readErrorFile(const std::string& path, size_t max_bytes = 65536);

}  // namespace lockstep::launch
