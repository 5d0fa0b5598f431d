#pragma once
// The config's `backends` section: PyTorch's torch.backends switches for GPU math, with their
// names and meanings, as lockstep::kernels::GpuMathOptions (kernels/gpu_math_options.h):
//
//   backends:
//     cudnn: {deterministic: true, benchmark: false, allow_tf32: true}
//     cuda: {matmul: {allow_tf32: false}}
//
// lockstep's defaults are PyTorch's but for cudnn.deterministic, true here (runs repeat bitwise).
// The CPU kernels read none of them (no TF32 there, always deterministic): on a CPU run the section
// is accepted and said once in the log to have no effect. Pure.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lockstep/kernels/gpu_math_options.h"

namespace YAML {
class Node;
}

namespace lockstep::train {

/// Parses the `backends` mapping. ValueError naming "backends.KEY..." for an unknown key (with the
/// nearest known one) or a value that is not a boolean.
kernels::GpuMathOptions parseBackendsConfig(const YAML::Node& node);

/// The lines a run logs once about these options: on a GPU, what makes the run not repeat bitwise
/// (nondeterministic cuDNN algorithms, benchmark timings); on a CPU, that a `backends` section given
/// (`present`) has no effect.
std::vector<std::string> backendsNotes(const kernels::GpuMathOptions& o, bool present, bool on_gpu);

/// The options in the section's own shape ({"cudnn": {...}, "cuda": {"matmul": {...}}}): run.json's
/// record of them.
nlohmann::json backendsJson(const kernels::GpuMathOptions& o);

}  // namespace lockstep::train
