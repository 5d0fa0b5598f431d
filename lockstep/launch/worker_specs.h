#pragma once
// What each worker of one attempt on this node runs: the program, its environment, its error file
// and where its output goes. The first half of an attempt (the agent then supervises the workers,
// agent.h); pure but for creating each rank's directory, so every stream choice is unit-tested.
#include <map>
#include <string>
#include <vector>

#include "lockstep/launch/launch_options.h"
#include "lockstep/launch/worker_env.h"
#include "lockstep/launch/worker_group.h"

namespace lockstep::launch {

/// The attempt's choices, the same for every worker of this node.
struct WorkerSpecsOptions {
  /// Layout, rendezvous, run id, restarts, timeout and token; local_rank and error_file are set
  /// per worker.
  WorkerEnvSpec env;
  std::string program_path;       ///< What is executed (resolveProgram).
  std::vector<std::string> argv;  ///< argv[0] as the user gave it, then the program's arguments.
  std::string attempt_dir;        ///< Rank R's files go to attempt_dir/R/ (error.json, logs).
  StreamSelection redirects;      ///< Streams that go to the files only (--redirects).
  StreamSelection tee;            ///< Streams that go to the files and the console (--tee).
  bool log_files = false;         ///< --log-dir: both streams of every rank go to files too.
  bool console = false;           ///< A progress line is drawn: stdout goes through it as well.
  std::string progress_address;   ///< Rank 0's progress socket (progress_channel.h); empty: none.
  int op_watch_fd = -1;           ///< The op watch table the workers write (comm/op_watch.h).
};

/// One spec per local rank of options.env.layout, with `base_env` (the agent's environment)
/// under each worker's own variables. Creates each rank's directory (IoError when it cannot).
std::vector<WorkerSpec> workerSpecs(const WorkerSpecsOptions& options,
                                    const std::map<std::string, std::string>& base_env);

}  // namespace lockstep::launch
