#pragma once
#include <memory>

#include "lockstep/autograd/node.h"

namespace lockstep::autograd {

/// Runs backward from root with seed gradient grad: nodes execute when every gradient flowing into
/// them has arrived, latest-created first; leaf accumulators run (and fire their hooks) as soon as
/// they are ready. Without retain_graph every visited node is released.
void runBackward(const std::shared_ptr<Node>& root, const Tensor& grad, bool retain_graph);

}  // namespace lockstep::autograd
