#pragma once
// Subcommands of the `lockstep` binary register themselves from their own file:
//   static lockstep::cli::Registration reg{"run", "start ranks like torchrun", &runMain};
// main() dispatches argv[1] to the matching entry and passes the remaining arguments
// (argv[0] becomes "lockstep NAME"). Exit codes: 0 success, 2 bad usage/input, others as the
// command defines.
#include <functional>
#include <string>
#include <vector>

namespace lockstep::cli {

using CommandMain = std::function<int(int argc, char** argv)>;

struct Command {
  std::string name;
  std::string summary;
  CommandMain main;
};

std::vector<Command>& commandRegistry();

struct Registration {
  Registration(std::string name, std::string summary, CommandMain main) {
    commandRegistry().push_back({std::move(name), std::move(summary), std::move(main)});
  }
};

}  // namespace lockstep::cli
