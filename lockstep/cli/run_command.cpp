// `lockstep run`: the torchrun-compatible launcher (lockstep/launch/, docs/launch.md).
#include <sched.h>

#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/cli/command.h"
#include "lockstep/launch.h"
#include "lockstep/launch/rank_capacity.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"

namespace {

int printHostCommands(lockstep::launch::LaunchOptions options) {
  auto hosts = lockstep::launch::readHostfile(options.hostfile);
  if (options.run_id == "none") {
    std::random_device rd;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%08x", rd());
    options.run_id = buf;
  }
  auto commands = lockstep::launch::hostCommands(hosts, options);
  int total = 0;
  for (const auto& h : hosts) total += h.slots;
  std::printf("# %zu hosts, %d workers in all. Run on each host:\n", hosts.size(), total);
  if (options.join_token.empty()) {
    std::printf(
        "# (with the same secret in every host's environment, so that only this job's agents and workers\n"
        "#  can use the rendezvous store: export LOCKSTEP_JOIN_TOKEN=$(openssl rand -hex 32); "
        "docs/security.md)\n");
  }
  for (size_t i = 0; i < hosts.size(); ++i) {
    std::printf("# on %s (node rank %zu, %d slots):\n%s\n", hosts[i].host.c_str(), i, hosts[i].slots,
                commands[i].c_str());
  }
  return 0;
}

// A pod of a Kubeflow PyTorchJob from an operator before v1.7 has RANK/WORLD_SIZE (the pod's
// index, the pod count) but no PET_NNODES: like torchrun, lockstep run does not read them
// (docs/deploy.md), so without a word every pod would train alone. A launcher's own rank has
// LOCAL_RANK and is not this case.
void warnOfUnreadPodVariables(const lockstep::launch::LaunchOptions& options) {
  const auto world = lockstep::env::get("WORLD_SIZE");
  const auto rank = lockstep::env::get("RANK");
  if (!world || !rank || *world == "1" || *world == "0" || options.nnodes != 1 ||
      lockstep::env::get("PET_NNODES") || lockstep::env::get("LOCAL_RANK")) {
    return;
  }
  std::fprintf(
      stderr,
      "lockstep run: warning: WORLD_SIZE=%s and RANK=%s are set but, as under torchrun, not read: this "
      "node runs alone. A Kubeflow operator from v1.7 on sets PET_NNODES and PET_NODE_RANK; with an "
      "older one pass --nnodes $(WORLD_SIZE) --node-rank $(RANK) --master-addr $(MASTER_ADDR) "
      "--master-port $(MASTER_PORT) (docs/deploy.md)\n",
      world->c_str(), rank->c_str());
}

int runMain(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  lockstep::launch::LaunchOptions options;
  try {
    options = lockstep::launch::parseLaunchArgs(args, lockstep::launch::availableCores());
  } catch (const lockstep::ValueError& e) {
    std::fprintf(stderr, "lockstep run: error: %s\n\n%s", e.what(), lockstep::launch::launchUsage().c_str());
    return 2;
  }
  if (options.help) {
    std::fputs(lockstep::launch::launchUsage().c_str(), stdout);
    return 0;
  }
  if (!options.hostfile.empty()) return printHostCommands(options);
  for (const auto& note : options.notes) std::fprintf(stderr, "lockstep run: warning: %s\n", note.c_str());
  warnOfUnreadPodVariables(options);
  try {
    lockstep::launch::checkRanksFit("--nproc-per-node", options.nproc_per_node,
                                    lockstep::launch::probeMachineCapacity(), options.oversubscribe);
  } catch (const lockstep::ValueError& e) {
    std::fprintf(stderr, "lockstep run: error: %s\n", e.what());
    return 2;
  }
  lockstep::launch::Agent agent(options);
  return agent.run();
}

static lockstep::cli::Registration reg{"run", "start and supervise worker processes (like torchrun)",
                                       &runMain};

}  // namespace
