#include "lockstep/parallel/pipeline/pipeline_grid.h"

#include <vector>

#include "lockstep/util/error.h"

namespace lockstep::parallel {

PipelineGrid makePipelineGrid(comm::ProcessGroup& world, int64_t stages) {
  const int64_t n = world.size();
  LOCKSTEP_ENFORCE(stages >= 1 && n % stages == 0, ValueError, "pipeline.stages is ", stages,
                   " but the job has ", n, " ranks: the stages must divide the ranks (ranks = stages x ",
                   "data-parallel replicas)");
  PipelineGrid g;
  g.stages = stages;
  g.replicas = n / stages;
  g.stage = world.rank() / g.replicas;
  g.replica = world.rank() % g.replicas;
  // Every rank makes every group in the same order (newGroup is collective over the world).
  for (int64_t d = 0; d < g.replicas; ++d) {
    std::vector<int> ranks;
    for (int64_t s = 0; s < stages; ++s) ranks.push_back(static_cast<int>(s * g.replicas + d));
    auto group = world.newGroup(ranks);
    if (d == g.replica) g.pipe = std::move(group);
  }
  for (int64_t s = 0; s < stages; ++s) {
    std::vector<int> ranks;
    for (int64_t d = 0; d < g.replicas; ++d) ranks.push_back(static_cast<int>(s * g.replicas + d));
    auto group = world.newGroup(ranks);
    if (s == g.stage) g.data = std::move(group);
  }
  return g;
}

}  // namespace lockstep::parallel
