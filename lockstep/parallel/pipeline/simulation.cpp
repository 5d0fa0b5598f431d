#include "lockstep/parallel/pipeline/simulation.h"

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <tuple>

#include "lockstep/util/error.h"

namespace lockstep::parallel {

namespace {

// The peer stage, its matching action and that action's chunk, of a transfer; {-1, op, 0} for
// local actions. The parts go round the ranks: the last stage's chunk c passes its activation to
// stage 0's chunk c + 1 (interleaved 1F1B).
struct Partner {
  int64_t stage;
  PipelineOp op;
  int64_t chunk;
};

Partner partner(const PipelineAction& a, int64_t stage, int64_t stages) {
  const bool last = stage + 1 == stages, first = stage == 0;
  switch (a.op) {
    case PipelineOp::send_activation:
      return {last ? 0 : stage + 1, PipelineOp::recv_activation, a.chunk + (last ? 1 : 0)};
    case PipelineOp::recv_activation:
      return {first ? stages - 1 : stage - 1, PipelineOp::send_activation, a.chunk - (first ? 1 : 0)};
    case PipelineOp::send_grad:
      return {first ? stages - 1 : stage - 1, PipelineOp::recv_grad, a.chunk - (first ? 1 : 0)};
    case PipelineOp::recv_grad:
      return {last ? 0 : stage + 1, PipelineOp::send_grad, a.chunk + (last ? 1 : 0)};
    default:
      return {-1, a.op, 0};
  }
}

}  // namespace

PipelineTimeline simulatePipeline(const std::vector<std::vector<PipelineAction>>& stage_actions,
                                  const PipelineCosts& costs) {
  const auto stages = static_cast<int64_t>(stage_actions.size());
  struct Posted {
    const PipelineAction* action;
    double at;  // when the compute thread issued it
  };
  struct Rank {
    size_t pos = 0;
    double clock = 0, worker = 0, busy = 0;
    std::deque<Posted> queue;  // the worker's transfers, in issue order
    // Receives by (op, micro-batch, chunk): when they completed, or -1 while in the queue.
    std::map<std::tuple<PipelineOp, int64_t, int64_t>, double> received;
  };
  std::vector<Rank> ranks(stage_actions.size());
  auto rank = [&](int64_t s) -> Rank& { return ranks[static_cast<size_t>(s)]; };
  for (bool progress = true; progress;) {
    progress = false;
    // Each compute thread runs on until a compute whose received input is not there yet.
    for (int64_t s = 0; s < stages; ++s) {
      Rank& r = rank(s);
      const auto& list = stage_actions[static_cast<size_t>(s)];
      for (; r.pos < list.size(); ++r.pos, progress = true) {
        const PipelineAction& a = list[r.pos];
        if (a.op == PipelineOp::forward || a.op == PipelineOp::backward) {
          const PipelineOp input =
              a.op == PipelineOp::forward ? PipelineOp::recv_activation : PipelineOp::recv_grad;
          if (auto it = r.received.find({input, a.micro_batch, a.chunk}); it != r.received.end()) {
            if (it->second < 0) break;  // posted, not arrived
            r.clock = std::max(r.clock, it->second);
          }
          const auto& by_stage = a.op == PipelineOp::forward ? costs.stage_forward : costs.stage_backward;
          const double cost = by_stage.empty()
                                  ? (a.op == PipelineOp::forward ? costs.forward : costs.backward)
                                  : by_stage.at(static_cast<size_t>(s)).at(static_cast<size_t>(a.chunk));
          r.clock += cost;
          r.busy += cost;
        } else if (const Partner p = partner(a, s, stages); p.stage >= 0) {
          LOCKSTEP_ENFORCE(p.chunk >= 0 && p.stage != s && p.stage < stages, ValueError, "stage ", s, "'s ",
                           toString(a), " has no stage to talk to");
          r.queue.push_back({&a, r.clock});
          if (a.op == PipelineOp::recv_activation || a.op == PipelineOp::recv_grad)
            r.received[{a.op, a.micro_batch, a.chunk}] = -1;
        } else if (a.op == PipelineOp::reduce_grads) {
          if (!r.queue.empty()) break;  // waits for the step's sends
          r.clock = std::max(r.clock, r.worker);
        }
      }
    }
    // Each worker runs its queue in order; a transfer completes once both workers reach it.
    for (int64_t s = 0; s < stages; ++s) {
      Rank& r = rank(s);
      while (!r.queue.empty()) {
        const Posted mine = r.queue.front();
        const Partner p = partner(*mine.action, s, stages);
        Rank& peer = rank(p.stage);
        if (peer.queue.empty() || peer.queue.front().action->op != p.op) break;  // the peer is not there yet
        const Posted theirs = peer.queue.front();
        LOCKSTEP_ENFORCE(
            theirs.action->micro_batch == mine.action->micro_batch && theirs.action->chunk == p.chunk, Error,
            "stage ", s, "'s ", toString(*mine.action), " meets stage ", p.stage, "'s ",
            toString(*theirs.action), ": the two orders disagree");
        const double done = std::max({r.worker, mine.at, peer.worker, theirs.at});
        r.worker = peer.worker = done;
        for (auto [side, posted] : {std::pair<Rank*, Posted>{&r, mine}, {&peer, theirs}}) {
          const PipelineAction& a = *posted.action;
          if (a.op == PipelineOp::recv_activation || a.op == PipelineOp::recv_grad)
            side->received[{a.op, a.micro_batch, a.chunk}] = done;
          side->queue.pop_front();
        }
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int64_t s = 0; s < stages; ++s) {
    const Rank& r = rank(s);
    if (!r.queue.empty())
      stuck += " stage " + std::to_string(s) + " at " + toString(*r.queue.front().action) + ";";
    else if (r.pos < stage_actions[static_cast<size_t>(s)].size())
      stuck += " stage " + std::to_string(s) + " at " +
               toString(stage_actions[static_cast<size_t>(s)][r.pos]) + ";";
  }
  LOCKSTEP_ENFORCE(stuck.empty(), Error, "the pipeline deadlocks:", stuck);
  PipelineTimeline t;
  for (const Rank& r : ranks) {
    t.makespan = std::max({t.makespan, r.clock, r.worker});
    t.busy.push_back(r.busy);
  }
  for (double b : t.busy) t.idle_fraction.push_back(t.makespan > 0 ? 1.0 - b / t.makespan : 0.0);
  for (const Rank& r : ranks) {
    const double end = std::max(r.clock, r.worker);
    t.own_idle_fraction.push_back(end > 0 ? 1.0 - r.busy / end : 0.0);
  }
  return t;
}

std::vector<double> idleForStageCosts(PipelineScheduleKind kind, const PipelineShape& shape,
                                      const PipelineCosts& costs) {
  std::vector<std::vector<PipelineAction>> lists;
  for (int64_t s = 0; s < shape.stages; ++s) lists.push_back(pipelineActions(kind, shape, s));
  return simulatePipeline(lists, costs).own_idle_fraction;
}

}  // namespace lockstep::parallel
