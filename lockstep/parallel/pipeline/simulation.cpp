#include "lockstep/parallel/pipeline/simulation.h"

#include <algorithm>
#include <string>

#include "lockstep/util/error.h"

namespace lockstep::parallel {

namespace {

// The peer stage and its matching action of a transfer; {-1, op} for local actions.
std::pair<int64_t, PipelineOp> partner(PipelineOp op, int64_t stage) {
  switch (op) {
    case PipelineOp::send_activation:
      return {stage + 1, PipelineOp::recv_activation};
    case PipelineOp::recv_activation:
      return {stage - 1, PipelineOp::send_activation};
    case PipelineOp::send_grad:
      return {stage - 1, PipelineOp::recv_grad};
    case PipelineOp::recv_grad:
      return {stage + 1, PipelineOp::send_grad};
    default:
      return {-1, op};
  }
}

}  // namespace

PipelineTimeline simulatePipeline(const std::vector<std::vector<PipelineAction>>& stage_actions,
                                  const PipelineCosts& costs) {
  const auto stages = static_cast<int64_t>(stage_actions.size());
  std::vector<size_t> pos(stage_actions.size(), 0);
  std::vector<double> clock(stage_actions.size(), 0.0);
  PipelineTimeline t;
  t.busy.assign(stage_actions.size(), 0.0);
  auto at = [&](int64_t s) -> const PipelineAction* {
    const auto& list = stage_actions[static_cast<size_t>(s)];
    return pos[static_cast<size_t>(s)] < list.size() ? &list[pos[static_cast<size_t>(s)]] : nullptr;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < stages; ++s) {
      const auto i = static_cast<size_t>(s);
      while (const PipelineAction* a = at(s)) {
        if (a->op == PipelineOp::forward || a->op == PipelineOp::backward) {
          const double cost = a->op == PipelineOp::forward ? costs.forward : costs.backward;
          clock[i] += cost;
          t.busy[i] += cost;
        } else if (auto [peer, expected] = partner(a->op, s); peer >= 0) {
          LOCKSTEP_ENFORCE(peer < stages, ValueError, "stage ", s, "'s ", toString(*a), " has no stage ",
                           peer, " to talk to");
          const PipelineAction* b = at(peer);
          if (!b || b->op != expected) break;  // the peer is not there yet
          LOCKSTEP_ENFORCE(b->micro_batch == a->micro_batch, Error, "stage ", s, "'s ", toString(*a),
                           " meets stage ", peer, "'s ", toString(*b), ": the two orders disagree");
          const auto j = static_cast<size_t>(peer);
          clock[i] = clock[j] = std::max(clock[i], clock[j]);
          ++pos[j];
        }
        ++pos[i];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int64_t s = 0; s < stages; ++s) {
    if (const PipelineAction* a = at(s)) stuck += " stage " + std::to_string(s) + " at " + toString(*a) + ";";
  }
  LOCKSTEP_ENFORCE(stuck.empty(), Error, "the pipeline deadlocks:", stuck);
  t.makespan = stages ? *std::max_element(clock.begin(), clock.end()) : 0.0;
  for (double b : t.busy) t.idle_fraction.push_back(t.makespan > 0 ? 1.0 - b / t.makespan : 0.0);
  return t;
}

}  // namespace lockstep::parallel
