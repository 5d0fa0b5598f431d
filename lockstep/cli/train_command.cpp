// `lockstep train CONFIG`: the config-driven trainer (lockstep/train/, docs/config.md). With
// --nproc-per-node N > 1 it becomes a launcher agent (like `lockstep run`) whose workers run
// `lockstep train CONFIG ...` again without --nproc-per-node.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lockstep/cli/command.h"
#include "lockstep/comm/backend_registry.h"
#include "lockstep/comm/device_sharing.h"
#include "lockstep/comm/worker_environment.h"
#include "lockstep/kernels/fusions.h"
#include "lockstep/launch.h"
#include "lockstep/launch/rank_capacity.h"
#include "lockstep/tensor/device.h"
#include "lockstep/train.h"
#include "lockstep/train/run_setup.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"
#include "lockstep/util/json.h"

namespace {

struct TrainArgs {
  std::string config;
  std::string nproc = "1";  // --nproc-per-node as given: N, auto or cpu
  int nproc_per_node = 1;
  bool oversubscribe = false;  // start nproc_per_node ranks even past the machine
  std::string output_dir = "lockstep-out";
  std::vector<std::string> sets;
  bool resume = false;
  std::string resume_from;
  int max_restarts = 0;
};

// Whether this process starts the ranks itself (as an agent) rather than being one of them.
bool startsAgent(const TrainArgs& a) { return a.nproc_per_node > 1 || a.max_restarts > 0; }

// Everything a user can get wrong, checked before any process starts or any data loads.
lockstep::train::TrainConfig validate(const TrainArgs& a, const lockstep::comm::WorkerEnvironment& env,
                                      int world) {
  if (startsAgent(a) && env.launcher != lockstep::comm::Launcher::none) {
    throw lockstep::ValueError(
        std::string("--nproc-per-node and --max-restarts start and supervise the ranks, but this process is "
                    "already rank ") +
        std::to_string(env.rank) + " of a job started by " + lockstep::comm::launcherName(env.launcher) +
        "; leave them out (the launcher decides), or start lockstep train on its own");
  }
  // They are written into run.json and every checkpoint's config.json, which JSON keeps UTF-8.
  auto requireUtf8 = [](const std::string& value, const std::string& what) {
    if (!lockstep::json::utf8Error(value).empty())
      throw lockstep::ValueError(what + " '" + value + "' is not UTF-8 text; rename it or give another");
  };
  lockstep::kernels::checkFusionsVariable();  // a misspelt fusion fails now, whatever the model
  requireUtf8(a.config, "the config path");
  requireUtf8(a.output_dir, "--output-dir");
  requireUtf8(a.resume_from, "--resume-from");
  for (const std::string& set : a.sets) requireUtf8(set, "--set");
  auto config = lockstep::train::loadTrainConfig(a.config, a.sets, world);
  if (!lockstep::comm::findBackend(config.backend).needs_store && startsAgent(a)) {
    throw lockstep::ValueError("backend " + config.backend +
                               " takes its ranks from mpirun, so lockstep train cannot start or "
                               "restart them (--nproc-per-node, --max-restarts); run `mpirun -np " +
                               std::to_string(world) + " lockstep train " + a.config +
                               " ...`, or use backend shm, gloo or auto");
  }
  // Said once, here, rather than by every rank it would start.
  if (startsAgent(a)) lockstep::comm::checkBackendRunsHere(config.backend);
  // A GPU that is not there is a config error (exit 2) like any other, said before any rank starts
  // or any data loads. device: cuda is cuda:LOCAL_RANK, local ranks sharing GPUs round robin where
  // there are more of them than GPUs (comm::localRankDevice), which NCCL cannot run.
  lockstep::Device d = config.device;
  if (config.device_per_local_rank) {
    const int gpus = lockstep::cudaDeviceCount();
    const int last_local_rank = startsAgent(a) ? a.nproc_per_node - 1 : env.local_rank;
    d.index = gpus > 0 ? lockstep::comm::localRankDevice(last_local_rank, gpus) : last_local_rank;
    if (gpus > 0 && startsAgent(a) && config.backend == "nccl") {
      const auto ids = lockstep::comm::localRankDevices(a.nproc_per_node, gpus);
      const auto sharing = lockstep::comm::findSharedDevices(ids);
      if (sharing.shared()) {
        throw lockstep::ValueError(
            lockstep::comm::ncclSharedGpuError(lockstep::comm::describeSharing(sharing, ids)));
      }
    }
  }
  if (d.isCuda()) lockstep::checkDeviceAvailable(d);
  lockstep::train::prepareOutputDir(a.output_dir);
  // Checkpoints elsewhere: found unwritable now, not at the first save after hours of training.
  if (!config.checkpoint_dir.empty())
    lockstep::train::prepareWritableDir(config.checkpoint_dir, "checkpoint.dir");
  lockstep::train::checkDataFiles(config.data);
  lockstep::train::checkOffloadDirs(config.zero);
  return config;
}

// torchrun's PET_NPROC_PER_NODE and PET_MAX_RESTARTS for the flags not given (`nproc_flag` becomes
// the variable's name, for messages); PET_NNODES above 1 asks for what only `lockstep run` does.
void readTorchrunVariables(const CLI::App& app, TrainArgs& a, std::string& nproc_flag) {
  if (auto nnodes = lockstep::env::get("PET_NNODES"); nnodes && !nnodes->empty() && *nnodes != "1") {
    throw lockstep::ValueError("PET_NNODES=" + *nnodes +
                               " asks for a job across nodes, which lockstep train does not start; run "
                               "`lockstep run lockstep train CONFIG ...` on each node (docs/deploy.md)");
  }
  auto nproc = lockstep::env::get("PET_NPROC_PER_NODE");
  if (app.get_option("--nproc-per-node")->count() == 0 && nproc && !nproc->empty()) {
    a.nproc = *nproc;
    nproc_flag = "PET_NPROC_PER_NODE";
  }
  auto restarts = lockstep::env::get("PET_MAX_RESTARTS");
  if (app.get_option("--max-restarts")->count() == 0 && restarts && !restarts->empty()) {
    const auto n = lockstep::env::getInt("PET_MAX_RESTARTS");
    if (*n < 0 || *n > (1 << 20)) {
      throw lockstep::ValueError("PET_MAX_RESTARTS=" + *restarts + " must be an integer in [0, 1048576]");
    }
    a.max_restarts = static_cast<int>(*n);
  }
}

int launch(const TrainArgs& a, const lockstep::train::TrainConfig& config) {
  lockstep::launch::LaunchOptions lo;
  lo.timeout_s = config.comm_timeout_seconds;  // the watchdog waits as long as the collectives
  lo.nproc_per_node = a.nproc_per_node;
  lo.standalone = true;
  lo.master_port = 0;
  lo.max_restarts = a.max_restarts;
  lo.program = std::filesystem::read_symlink("/proc/self/exe").string();
  lo.program_args = {"train", a.config, "--output-dir", a.output_dir};
  for (const auto& s : a.sets) lo.program_args.insert(lo.program_args.end(), {"--set", s});
  if (a.resume) lo.program_args.push_back("--resume");
  if (!a.resume_from.empty()) lo.program_args.insert(lo.program_args.end(), {"--resume-from", a.resume_from});
  lockstep::launch::Agent agent(lo);
  return agent.run();
}

int trainMain(int argc, char** argv) {
  TrainArgs a;
  CLI::App app{"Train a zoo model as a YAML/JSON config says (docs/config.md)", "lockstep train"};
  app.add_option("config", a.config, "YAML or JSON config file")->required();
  // The flags of `lockstep run` in both its spellings: --nproc-per-node and torchrun's
  // --nproc_per_node, as `--flag value` or `--flag=value`.
  app.add_option("--nproc-per-node,--nproc_per_node", a.nproc,
                 "ranks to start on this machine: N, or auto / cpu for one per core");
  app.add_flag("--oversubscribe", a.oversubscribe,
               "start --nproc-per-node ranks even where that is more than 4 per core or the memory holds");
  app.add_option("--output-dir,--output_dir", a.output_dir,
                 "where checkpoints, metrics, the model and summary.json go");
  app.add_option("--set", a.sets, "override a config key: --set optimizer.params.lr=0.01 (repeatable)");
  app.add_flag(
      "--resume", a.resume,
      "continue from the newest valid checkpoint of this run or a compatible one (same config and seed)");
  app.add_option("--resume-from,--resume_from", a.resume_from,
                 "start from this checkpoint (or the newest valid one in this directory of checkpoints), "
                 "whatever run wrote it");
  app.add_option("--max-restarts,--max_restarts", a.max_restarts,
                 "restart all ranks this many times after a failure")
      ->check(CLI::Range(0, 1 << 20).description("an integer in [0, 1048576]"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  lockstep::comm::WorkerEnvironment env;
  lockstep::train::TrainConfig config;
  try {
    // Who this process is, whoever started it (lockstep run, torchrun, mpirun, srun).
    env = lockstep::comm::workerEnvironment();
    std::string nproc_flag = "--nproc-per-node";
    // As `lockstep run`, the launcher flags default to torchrun's PET_ variables, but only where
    // this process starts the ranks: a rank inherits its agent's PET_* (a Kubeflow pod's) and must
    // not start ranks of its own.
    if (env.launcher == lockstep::comm::Launcher::none) {
      readTorchrunVariables(app, a, nproc_flag);
    }
    a.nproc_per_node = lockstep::launch::parseNprocPerNode(
        nproc_flag, a.nproc, lockstep::launch::availableCores(),
        a.nproc == "gpu" || a.nproc == "auto" ? lockstep::launch::visibleGpus() : 0);
    lockstep::launch::checkRanksFit(nproc_flag, a.nproc_per_node, lockstep::launch::probeMachineCapacity(),
                                    a.oversubscribe);
    const int world = startsAgent(a) ? a.nproc_per_node : env.world_size;
    config = validate(a, env, world);
  } catch (const lockstep::Error& e) {
    std::fprintf(stderr, "lockstep train: error: %s\n", e.what());
    return 2;
  }
  if (startsAgent(a)) return launch(a, config);

  lockstep::train::TrainerOptions to;
  to.output_dir = a.output_dir;
  // A restarted worker (the launcher's --max-restarts) picks up where the job left off.
  to.resume = a.resume || env.restart_count > 0;
  to.resume_required = a.resume;
  to.resume_from = a.resume_from;
  // Tests of --max-restarts: crash the first attempt after a given step, or in the middle of a
  // given step's ZeRO checkpoint.
  if (env.restart_count == 0) {
    to.crash_after_step = lockstep::env::getInt("LOCKSTEP_TRAIN_CRASH_AFTER_STEP", 0);
    to.crash_rank = static_cast<int>(lockstep::env::getInt("LOCKSTEP_TRAIN_CRASH_RANK", -1));
    to.die_in_zero_save_at_step = lockstep::env::getInt("LOCKSTEP_TEST_DIE_IN_ZERO_SAVE_AT_STEP", 0);
  }
  const int world = env.world_size;
  to.config_json = {{"config", a.config}, {"overrides", a.sets}, {"world_size", world}};
  lockstep::train::TrainSummary s;
  try {
    s = lockstep::train::runTraining(config, to);
  } catch (const lockstep::ValueError& e) {
    std::fprintf(stderr, "lockstep train: error: %s\n", e.what());
    return 2;
  } catch (const lockstep::IoError& e) {
    // A file the job reads (data set, checkpoint) that is missing, corrupt or crafted.
    std::fprintf(stderr, "lockstep train: error: %s\n", e.what());
    return 2;
  } catch (const lockstep::TimeoutError& e) {
    // A collective or the store that timed out, a peer rank that went away: the world's doing, not
    // the job's, so the code a cluster retries (kJobTimedOut, as the agent's; docs/deploy.md).
    std::fprintf(stderr, "lockstep train: error: %s\n", e.what());
    return lockstep::launch::kJobTimedOut;
  } catch (const lockstep::PeerError& e) {
    std::fprintf(stderr, "lockstep train: error: %s\n", e.what());
    return lockstep::launch::kJobTimedOut;
  }
  if (s.stop_signal != 0) {
    // 128 + N, as if the signal had ended the process: a cluster's restart policy reads it as
    // "stopped from outside" and retries (docs/deploy.md), and the retry resumes from the checkpoint.
    if (env.rank == 0) {
      std::fprintf(stderr,
                   "lockstep train: stopped by %s after step %lld, whose checkpoint is in %s (continue "
                   "with --resume)\n",
                   lockstep::launch::signalName(s.stop_signal).c_str(), static_cast<long long>(s.steps),
                   lockstep::train::checkpointDir(config, to).c_str());
    }
    return 128 + s.stop_signal;
  }
  if (env.rank == 0) {
    std::printf(
        "world_size=%d steps=%lld global_batch_size=%lld samples_per_second=%.1f train_seconds=%.2f "
        "test_loss=%.4f test_accuracy=%.4f\n",
        s.world_size, static_cast<long long>(s.steps), static_cast<long long>(s.global_batch_size),
        s.samples_per_second, s.train_seconds, s.test_loss, s.test_accuracy);
    if (!s.ddp_timings.empty()) {
      // Where each rank's steps went; a rank that waits much longer than the others is the fast
      // one, held back by slower ranks (docs/parallel.md).
      std::printf("ddp ms per step (forward / backward compute / backward held by comm):");
      for (size_t r = 0; r < s.ddp_timings.size(); ++r) {
        const auto& t = s.ddp_timings[r];
        std::printf("%s rank %zu %.2f / %.2f / %.2f", r ? "," : "", r, t.forward_compute_ms,
                    t.backward_compute_ms, t.backward_comm_wait_ms);
      }
      std::printf("\n");
    }
    std::printf("wrote %s/model.safetensors and %s/summary.json\n", a.output_dir.c_str(),
                a.output_dir.c_str());
  }
  return 0;
}

static lockstep::cli::Registration reg{"train", "train a zoo model from a YAML/JSON config (like DeepSpeed)",
                                       &trainMain};

}  // namespace
