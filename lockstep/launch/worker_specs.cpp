#include "lockstep/launch/worker_specs.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lockstep/comm/op_watch.h"
#include "lockstep/launch/output_sink.h"
#include "lockstep/launch/progress_channel.h"
#include "lockstep/util/error.h"

namespace lockstep::launch {

namespace {

std::map<std::string, std::string> workerEnv(const WorkerSpecsOptions& o, const WorkerSpec& s,
                                             const std::map<std::string, std::string>& base) {
  WorkerEnvSpec es = o.env;
  es.local_rank = s.local_rank;
  es.error_file = s.error_file;
  auto env = buildWorkerEnv(base, es);
  setProgressSocket(env, s.rank, o.progress_address);
  env[comm::kOpWatchFdVariable] = std::to_string(o.op_watch_fd);
  return env;
}

void setOutputSinks(const WorkerSpecsOptions& o, const std::string& dir, WorkerSpec& s) {
  const int redirect = o.redirects.forLocalRank(s.local_rank);
  const int files = redirect | o.tee.forLocalRank(s.local_rank) | (o.log_files ? kStdout | kStderr : 0);
  const bool several = o.env.layout.world_size > 1;
  const std::string prefix = several && s.rank != 0 ? "[rank " + std::to_string(s.rank) + "] " : "";
  // With several ranks stdout goes through the agent too, whole lines at a time, so that lines of
  // two ranks never run together (Python's print writes the text and its newline separately); with
  // a progress line on the terminal, its lines go above it.
  if ((files & kStdout) || o.console || several) {
    OutputSinkOptions out;
    if (files & kStdout) out.file_path = dir + "/stdout.log";
    out.console_fd = (redirect & kStdout) ? -1 : STDOUT_FILENO;
    out.console_prefix = prefix;
    s.process.stdout_sink = out;
  }
  OutputSinkOptions err;  // stderr is always piped: its tail goes into the failure report
  if (files & kStderr) err.file_path = dir + "/stderr.log";
  err.console_fd = (redirect & kStderr) ? -1 : STDERR_FILENO;
  err.console_prefix = prefix;
  s.process.stderr_sink = err;
}

}  // namespace

std::vector<WorkerSpec> workerSpecs(const WorkerSpecsOptions& options,
                                    const std::map<std::string, std::string>& base_env) {
  const RankLayout& layout = options.env.layout;
  std::vector<WorkerSpec> specs;
  for (int lr = 0; lr < layout.local_world_size; ++lr) {
    WorkerSpec s;
    s.local_rank = lr;
    s.rank = layout.first_rank + lr;
    const std::string dir = options.attempt_dir + "/" + std::to_string(s.rank);
    makeDirs(dir);
    s.error_file = dir + "/error.json";
    // A launch with the same --log-dir and run id reuses the directory (torchrun's adds a random
    // suffix): an error file of an earlier launch would be read as this one's root cause.
    LOCKSTEP_ENFORCE(::unlink(s.error_file.c_str()) == 0 || errno == ENOENT, IoError,
                     "cannot remove the old error file '", s.error_file, "': ", std::strerror(errno),
                     "; check --log-dir");
    s.process.path = options.program_path;
    s.process.argv = options.argv;
    s.process.env = toEnvStrings(workerEnv(options, s, base_env));
    setOutputSinks(options, dir, s);
    specs.push_back(std::move(s));
  }
  return specs;
}

}  // namespace lockstep::launch
