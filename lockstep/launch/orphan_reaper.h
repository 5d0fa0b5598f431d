#pragma once
// Guarantees that nothing a worker started outlives the agent. The agent becomes a child
// subreaper (PR_SET_CHILD_SUBREAPER), so a grandchild whose parent died, even one that left the
// worker's process group with setsid(), is re-parented to the agent instead of init; these
// functions find such strays among the agent's children and kill and reap them.
#include <sys/types.h>

#include <set>
#include <vector>

namespace lockstep::launch {

/// Makes this process a child subreaper. Returns false when the kernel refuses.
bool becomeSubreaper();

/// The pids whose parent is `parent`, from /proc.
std::vector<pid_t> childrenOf(pid_t parent);

/// Reaps exited children that are not in `keep` (re-parented grandchildren), without blocking
/// and without touching the exit status of the pids in `keep`.
void reapStrays(const std::set<pid_t>& keep);

/// SIGKILLs every child of this process not in `keep` and its process group, reaps it, and
/// repeats until none is left (their own children get re-parented here in turn). Returns how
/// many it killed. Call only after the workers themselves have been reaped or are in `keep`.
int killStrays(const std::set<pid_t>& keep);

}  // namespace lockstep::launch
