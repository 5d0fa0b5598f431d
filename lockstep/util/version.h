#pragma once
// lockstep's version: the CMake project version and, where the source was a git checkout when
// CMake configured, the commit. `lockstep --version` prints it; run.json records it.
#include <string>

namespace lockstep {

/// The project version, "0.1.0".
const char* lockstepVersion();
/// The commit the build was configured from (12 hex digits; CMake reads it when it configures),
/// "" where unknown (a tarball without .git, no git installed).
const char* lockstepCommit();
/// "0.1.0 (commit 0123456789ab)", or "0.1.0" where the commit is unknown.
std::string lockstepVersionLine();

}  // namespace lockstep
