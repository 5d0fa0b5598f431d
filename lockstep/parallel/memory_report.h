#pragma once
// The memory report: each rank's bytes of parameters, gradients and optimizer states (DeepSpeed's
// "model states"), for DDP and every ZeRO stage alike. With Psi parameters, Adam and f32 on N
// ranks: DDP 4+4+8 Psi; stage 1 4+4+8/N Psi; stage 2 4+4/N+8/N Psi.
#include <cstdint>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/optim/optimizer.h"

namespace lockstep::parallel {

struct ModelStateBytes {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_states = 0;
  /// A GPU run's model-state bytes kept in host memory instead (ZeRO-Offload: the optimizer
  /// states and the f32 host copies of the partition's values and gradients; offload_param: the
  /// parameters' pieces). 0 when the model is on the host (everything is host memory there).
  int64_t host_offload = 0;
};

/// The optimizer's state bytes for the elements its groups hold, counted from
/// Optimizer::stateElementsPerParameterElement (so the report is right before the first step).
int64_t optimizerStateBytes(const optim::Optimizer& optimizer);

/// Replicated training (DDP or one process): every parameter with a full gradient and full
/// optimizer state.
ModelStateBytes replicatedModelStateBytes(const optim::Optimizer& optimizer);

/// Every rank's numbers, in rank order. Collective over group; group null: {mine}.
std::vector<ModelStateBytes> gatherModelStateBytes(comm::ProcessGroup* group, const ModelStateBytes& mine);

}  // namespace lockstep::parallel
