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
