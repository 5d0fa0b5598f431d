#include "lockstep/train/config/config_backends.h"

#include <yaml-cpp/yaml.h>

#include "lockstep/train/config/config_keys.h"

namespace lockstep::train {

using config_keys::checkKeys;
using config_keys::get;

kernels::GpuMathOptions parseBackendsConfig(const YAML::Node& n) {
  kernels::GpuMathOptions o;
  checkKeys(n, "backends", {"cudnn", "cuda"});
  if (n["cudnn"]) {
    const YAML::Node c = n["cudnn"];
    checkKeys(c, "backends.cudnn", {"deterministic", "benchmark", "allow_tf32"});
    get(c, "backends.cudnn", "deterministic", o.cudnn_deterministic);
    get(c, "backends.cudnn", "benchmark", o.cudnn_benchmark);
    get(c, "backends.cudnn", "allow_tf32", o.cudnn_allow_tf32);
  }
  if (n["cuda"]) {
    const YAML::Node c = n["cuda"];
    checkKeys(c, "backends.cuda", {"matmul", "enable_cudnn_sdp"});
    get(c, "backends.cuda", "enable_cudnn_sdp", o.cudnn_sdp);
    if (c["matmul"]) {
      checkKeys(c["matmul"], "backends.cuda.matmul", {"allow_tf32"});
      get(c["matmul"], "backends.cuda.matmul", "allow_tf32", o.matmul_allow_tf32);
    }
  }
  return o;
}

std::vector<std::string> backendsNotes(const kernels::GpuMathOptions& o, bool present, bool on_gpu) {
  if (!on_gpu) {
    if (!present) return {};
    return {
        "backends: no effect on a CPU run (the CPU kernels have no TF32 and are always "
        "deterministic); the section applies with device: cuda"};
  }
  std::vector<std::string> notes;
  if (!o.cudnn_deterministic) {
    notes.push_back(
        "backends.cudnn.deterministic: false: cuDNN may pick nondeterministic algorithms; runs are not "
        "bitwise repeatable");
  }
  if (o.cudnn_benchmark) {
    notes.push_back(
        "backends.cudnn.benchmark: true: each convolution shape takes the algorithm that timed fastest, "
        "which "
        "may differ between runs; runs are not bitwise repeatable");
  }
  return notes;
}

nlohmann::json backendsJson(const kernels::GpuMathOptions& o) {
  return {{"cudnn",
           {{"deterministic", o.cudnn_deterministic},
            {"benchmark", o.cudnn_benchmark},
            {"allow_tf32", o.cudnn_allow_tf32}}},
          {"cuda", {{"matmul", {{"allow_tf32", o.matmul_allow_tf32}}}, {"enable_cudnn_sdp", o.cudnn_sdp}}}};
}

}  // namespace lockstep::train
