#include "lockstep/util/version.h"

// Both are set by CMakeLists.txt on this file alone: a new version or commit recompiles only it.
#ifndef LOCKSTEP_VERSION
#define LOCKSTEP_VERSION "unknown"
#endif
#ifndef LOCKSTEP_GIT_COMMIT
#define LOCKSTEP_GIT_COMMIT ""
#endif

namespace lockstep {

const char* lockstepVersion() { return LOCKSTEP_VERSION; }

const char* lockstepCommit() { return LOCKSTEP_GIT_COMMIT; }

std::string lockstepVersionLine() {
  std::string line = lockstepVersion();
  if (*lockstepCommit() != '\0') line += std::string(" (commit ") + lockstepCommit() + ")";
  return line;
}

}  // namespace lockstep
