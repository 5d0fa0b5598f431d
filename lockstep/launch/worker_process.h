#pragma once
// One worker: a child process in its own process group (so it and everything it starts can be
// signalled at once), killed by the kernel if the agent dies (PR_SET_PDEATHSIG), with its
// stdout/stderr optionally piped through OutputSinks. Not thread-safe: the agent's loop owns it.
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/launch/output_sink.h"

namespace lockstep::launch {

struct WorkerProcessOptions {
  std::string path;                              ///< Resolved executable (see resolveProgram).
  std::vector<std::string> argv;                 ///< argv[0] included.
  std::vector<std::string> env;                  ///< "K=V" strings.
  std::optional<OutputSinkOptions> stdout_sink;  ///< nullopt: inherit the agent's stdout.
  std::optional<OutputSinkOptions> stderr_sink;  ///< nullopt: inherit the agent's stderr.
};

class WorkerProcess {
 public:
  /// Forks and executes the worker. If exec fails the child writes why to its stderr and exits 127.
  explicit WorkerProcess(const WorkerProcessOptions& options);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  /// Pipe read ends still open (for poll); -1 when not piped or closed.
  int stdoutFd() const { return out_fd_; }
  int stderrFd() const { return err_fd_; }
  /// Reads what is available on fd (one of the above) into its sink; closes it at EOF.
  void drain(int fd);
  /// Drains both pipes without blocking until they are empty.
  void drainAll();
  /// Closes the pipes (after the worker is gone; grandchildren may hold them open forever).
  void closePipes();
  /// Reaps the worker if it has exited (non-blocking). True once it has exited.
  bool poll();
  bool exited() const { return exited_; }
  int exitCode() const { return exit_code_; }
  int termSignal() const { return signal_; }
  bool failed() const { return exited_ && (signal_ != 0 || exit_code_ != 0); }
  /// Sends sig to the worker's whole process group (the worker and its descendants).
  void signalGroup(int sig);
  /// The last lines of its stderr ("" when stderr was not piped).
  std::string stderrTail() const;

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::unique_ptr<OutputSink> out_sink_;
  std::unique_ptr<OutputSink> err_sink_;
  bool exited_ = false;
  int exit_code_ = 0;
  int signal_ = 0;
};

/// The executable PROGRAM names: itself when it contains '/', else the first match on PATH.
/// ValueError naming it when it is missing or not executable.
std::string resolveProgram(const std::string& program, const std::string& path_env);

}  // namespace lockstep::launch
