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
// Selective recomputation (Megatron's): an op whose outputs are small to keep and costly to compute
// (the fused attention: its output and [B, H, T] logsumexp, against the whole T x T softmax work)
// keeps them from the segment's first run in a stash and takes them back in the recomputation
// instead of running again (checkpointStash()). The recomputation is bitwise the first run, so the
// gradients stay bitwise a plain backward's.
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

/// The outputs an op keeps across a checkpointed segment's first run and its recomputation, in call
/// order. Per thread.
struct CheckpointStash {
  std::vector<std::vector<Tensor>> saved;
  size_t next = 0;
  bool replay = false;  // false: the first run (push); true: the recomputation (take in order)
  /// The next kept result in the recomputation (counted in checkpointProfile().stash_reuses), or
  /// nullptr: not replaying, or no kept result left.
  const std::vector<Tensor>* take();
};
/// The stash of the checkpointed segment running now on this thread; nullptr outside one. A
/// segment checkpointed inside another uses the outer one's stash (one call order for both runs).
CheckpointStash* checkpointStash();

/// What DeepSpeed's activation_checkpointing.profile reports: totals over every checkpointed
/// segment of this process since the last reset.
struct CheckpointProfile {
  int64_t segments = 0;        // checkpoint() calls that recorded a graph
  double forward_seconds = 0;  // their first runs
  int64_t recomputes = 0;
  double recompute_seconds = 0;  // their recomputation forwards
  double backward_seconds = 0;   // and the backward passes through them
  int64_t stash_reuses = 0;      // op results a recomputation took from its stash (not recomputed)
};
/// Per thread: the totals of the segments this thread ran (ranks as threads count apart).
CheckpointProfile checkpointProfile();
void resetCheckpointProfile();

}  // namespace lockstep::autograd
