// The `lockstep` binary: a thin dispatcher over self-registered subcommands (command.h).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "lockstep/cli/command.h"
#include "lockstep/util/error.h"
#include "lockstep/util/suggest.h"
#include "lockstep/util/version.h"

namespace lockstep::cli {

std::vector<Command>& commandRegistry() {
  static std::vector<Command> commands;
  return commands;
}

}  // namespace lockstep::cli

namespace {

void printUsage(FILE* out) {
  auto cmds = lockstep::cli::commandRegistry();
  std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::fprintf(out, "usage: lockstep COMMAND [ARGS...]\n\ncommands:\n");
  for (const auto& c : cmds) std::fprintf(out, "  %-10s %s\n", c.name.c_str(), c.summary.c_str());
  std::fprintf(out, "  %-10s %s\n", "version", "print lockstep's version (also --version)");
  std::fprintf(out, "\n'lockstep COMMAND --help' describes a command.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    printUsage(stderr);
    return 2;
  }
  std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    printUsage(stdout);
    return 0;
  }
  if (name == "--version" || name == "version") {
    std::printf("lockstep %s\n", lockstep::lockstepVersionLine().c_str());
    return 0;
  }
  for (const auto& c : lockstep::cli::commandRegistry()) {
    if (c.name != name) continue;
    std::string prog = "lockstep " + name;
    std::vector<char*> args;
    args.push_back(prog.data());
    for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    try {
      return c.main(static_cast<int>(args.size()) - 1, args.data());
    } catch (const lockstep::ValueError& e) {
      std::fprintf(stderr, "lockstep %s: error: %s\n", name.c_str(), e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lockstep %s: error: %s\n", name.c_str(), e.what());
      return 1;
    }
  }
  std::vector<std::string> names = {"version"};
  for (const auto& c : lockstep::cli::commandRegistry()) names.push_back(c.name);
  const std::string near = lockstep::nearestKey(name, names);
  std::fprintf(stderr, "lockstep: unknown command '%s'", name.c_str());
  if (!near.empty()) std::fprintf(stderr, "; did you mean '%s'?", near.c_str());
  std::fprintf(stderr, "\n\n");
  printUsage(stderr);
  return 2;
}
