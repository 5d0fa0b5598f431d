#pragma once
// DeepSpeed/Horovod hostfiles ("host slots=N" per line) turned into the `lockstep run` command
// line each host must run. Pure functions.
#include <string>
#include <vector>

#include "lockstep/launch/launch_options.h"

namespace lockstep::launch {

struct HostSlots {
  std::string host;
  int slots = 1;
};

/// Parses hostfile text: "host slots=N" (or "host:N", or "host" for one slot) per line; '#'
/// starts a comment. ValueError naming `name` and the line when malformed, duplicated or empty.
std::vector<HostSlots> parseHostfile(const std::string& text, const std::string& name);

/// Reads and parses a hostfile; IoError naming it when unreadable.
std::vector<HostSlots> readHostfile(const std::string& path);

/// One shell command per host (same order): `lockstep run --nnodes N --node-rank I
/// --nproc-per-node SLOTS --master-addr FIRST_HOST --master-port P --rdzv-id ID ... PROGRAM ARGS`,
/// with arguments shell-quoted. options.run_id must be set (not "none") so hosts agree.
std::vector<std::string> hostCommands(const std::vector<HostSlots>& hosts, const LaunchOptions& options);

/// Quotes s for a POSIX shell when it needs it.
std::string shellQuote(const std::string& s);

}  // namespace lockstep::launch
