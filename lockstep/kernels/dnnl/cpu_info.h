#pragma once
// What the oneDNN kernels run on, for run reports: the instruction set oneDNN's JIT picked on
// this CPU and the library's version.
#include <string>

namespace lockstep::kernels::onednn {

/// "avx512_core_vnni", "avx2", ... (oneDNN's effective ISA, which ONEDNN_MAX_CPU_ISA may cap).
std::string effectiveIsa();
/// "2.6.3".
std::string version();

}  // namespace lockstep::kernels::onednn
