#pragma once
// Whether GPU work queued now is being recorded into a CUDA graph rather than run (tensor/cuda/
// graph.h, parallel/step_graph.h). Host code that would wait for the device (read a value back,
// synchronise) must not then: the capture would fail. Such code asks here and leaves its check to
// the device (as the embedding's index check does).
#include "lockstep/tensor/device.h"

namespace lockstep::kernels {

/// True while `device`'s current stream is being captured into a CUDA graph; false for the host and
/// in a build without CUDA. Cheap (one runtime query).
bool isCapturingGraph(const Device& device);

}  // namespace lockstep::kernels
