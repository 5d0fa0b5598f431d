// `lockstep run` on its own: the command registry of lockstep/cli/main.cpp plus only the run
// command, so the launcher tests need no other module. Same code path as the real binary.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "lockstep/cli/command.h"
#include "lockstep/util/error.h"

namespace lockstep::cli {
std::vector<Command>& commandRegistry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace lockstep::cli

int main(int argc, char** argv) {
  for (const auto& c : lockstep::cli::commandRegistry()) {
    if (c.name != "run") continue;
    std::string prog = "lockstep run";
    std::vector<char*> args{prog.data()};
    for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    try {
      return c.main(argc, args.data());
    } catch (const lockstep::ValueError& e) {
      std::fprintf(stderr, "lockstep run: error: %s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lockstep run: error: %s\n", e.what());
      return 1;
    }
  }
  return 2;
}
