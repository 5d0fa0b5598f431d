#pragma once
// Making every rank's replica of a model the same before data-parallel training: one check and
// one broadcast, shared by DistributedDataParallel and ZeRO.
#include <string>

#include "lockstep/comm/process_group.h"
#include "lockstep/nn/module.h"

namespace lockstep::parallel {

/// Collective. ValueError naming the first parameter (or buffer) whose name, dtype or shape
/// differs from rank 0's and every rank whose model differs; `who` starts the message
/// ("DistributedDataParallel", "ZeRO").
void verifySameModelEverywhere(const nn::Module& module, comm::ProcessGroup& group, const std::string& who);

/// Collective. Copies root's parameters and buffers into every rank's module.
void broadcastModel(nn::Module& module, comm::ProcessGroup& group, int root = 0);

/// Collective. Copies root's buffers (e.g. batch-norm running statistics) into every rank's.
void broadcastBuffers(nn::Module& module, comm::ProcessGroup& group, int root = 0);

}  // namespace lockstep::parallel
