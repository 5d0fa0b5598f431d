#pragma once
// A pipeline step played out on paper: the stages' action lists (schedule.h) run against each
// other as PipelineStage runs them on a process group. Each rank's compute thread issues its
// transfers without waiting (a receive into its buffer, a send of its data) and waits only where a
// compute needs a received tensor, or at reduce_grads for its sends; each rank's worker runs the
// transfers in issue order, each completing only when both workers have reached it (the strictest
// a process group may be: a send that returns only once the peer receives). Compute takes a fixed
// time, transfers none. Shows that a schedule cannot deadlock and how long each stage idles.
// Pure; unit-tested without processes.
#include <vector>

#include "lockstep/parallel/pipeline/schedule.h"

namespace lockstep::parallel {

struct PipelineCosts {
  PipelineCosts(double forward = 1.0, double backward = 1.0) : forward(forward), backward(backward) {}
  /// The time of one micro-batch's forward and backward on any stage.
  double forward;
  double backward;
  /// Where set, [stage][chunk]: that chunk's own (measured) times instead, e.g. a stage that holds
  /// the head computes longer than the others.
  std::vector<std::vector<double>> stage_forward, stage_backward;
};

struct PipelineTimeline {
  /// When the last stage finished.
  double makespan = 0;
  /// Per stage: time spent computing, and the fraction of the makespan spent waiting.
  std::vector<double> busy;
  std::vector<double> idle_fraction;
  /// Per stage: the fraction of its own schedule (from the start to its last action, as
  /// PipelineStepTimes measures a stage) spent waiting.
  std::vector<double> own_idle_fraction;
};

/// Runs stage_actions[s] as stage s's list. Error naming every stage's blocked action (its worker's
/// first transfer, else its next action) when the stages wait on each other for ever, or a
/// transfer meets one of another micro-batch or chunk. Stage S - 1's activation goes to stage 0's
/// next chunk, as interleaved 1F1B sends it.
PipelineTimeline simulatePipeline(const std::vector<std::vector<PipelineAction>>& stage_actions,
                                  const PipelineCosts& costs = {});

/// Each stage's own idle fraction (PipelineTimeline::own_idle_fraction) when schedule `kind` over
/// `shape` runs with `costs` (a stage's measured times) and transfers that take no time: the part
/// of a measured bubble that the cut's imbalance leaves.
std::vector<double> idleForStageCosts(PipelineScheduleKind kind, const PipelineShape& shape,
                                      const PipelineCosts& costs);

}  // namespace lockstep::parallel
