#pragma once
// Embedding lookup (one node; the backward scatter-adds into the table's gradient).
#include <cstdint>

#include "lockstep/autograd/variable.h"

namespace lockstep::autograd {

/// torch.nn.functional.embedding: weight [V, D], indices i64 of any shape -> [..., D]. The backward
/// scatter-adds into the table's gradient (repeated indices accumulate); row padding_idx gets no
/// gradient. padding_idx = -1 (the default) means no padding row (torch's None); otherwise it must
/// be in [0, V). An index outside [0, V) is an IndexError naming it and its position; indices on
/// another device than weight are a ValueError.
Variable embedding(const Variable& weight, const Tensor& indices, int64_t padding_idx = -1);

}  // namespace lockstep::autograd
