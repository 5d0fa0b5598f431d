#pragma once
// Activation checkpointing (torch.utils.checkpoint, DeepSpeed's checkpointing.checkpoint): run a
// segment of the forward pass without keeping its intermediate activations, and run it again during
// backward to get them back. Memory drops from every activation of the segment to its inputs; the
// price is one more forward of the segment.
//
//   Variable y = checkpoint([&](const std::vector<Variable>& in) { return block(in[0]); }, {x},
//                           {.generators = {&dropout.generator()}});
//
// The recomputation sees exactly what the first run saw, so its gradients are bitwise those of a
// plain backward: every listed generator, and always defaultGenerator(), is rewound to the state it
// had when the segment first ran (dropout masks repeat) and set forward again afterwards; the
// autocast dtype of the first run is restored around the recomputation. Parameters the segment
// uses receive their gradients (and fire their gradient-ready hooks, so DDP's buckets work) during
// the recomputation's backward.
//
// Not thread-safe against other threads using the same generators. The segment must be a pure
// function of its inputs, the parameters and the listed generators.
#include <functional>
#include <vector>

#include "lockstep/autograd/variable.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::autograd {

using Segment = std::function<Variable(const std::vector<Variable>&)>;

struct CheckpointOptions {
  /// Generators the segment draws from besides defaultGenerator() (e.g. nn::Dropout's). Borrowed:
  /// they must outlive the backward pass.
  std::vector<Generator*> generators{};
};

/// The segment's output, with a graph that recomputes the segment in backward. When no input and
/// no parameter needs a gradient (or gradients are disabled) the segment simply runs.
Variable checkpoint(const Segment& segment, const std::vector<Variable>& inputs,
                    const CheckpointOptions& options = {});

/// What DeepSpeed's activation_checkpointing.profile reports: totals over every checkpointed
/// segment of this process since the last reset.
struct CheckpointProfile {
  int64_t segments = 0;        // checkpoint() calls that recorded a graph
  double forward_seconds = 0;  // their first runs
  int64_t recomputes = 0;
  double recompute_seconds = 0;  // their recomputation forwards
  double backward_seconds = 0;   // and the backward passes through them
};
/// Per thread: the totals of the segments this thread ran (ranks as threads count apart).
CheckpointProfile checkpointProfile();
void resetCheckpointProfile();

}  // namespace lockstep::autograd
