#include "lockstep/train/monitor/model_flops.h"

#include <utility>
#include <vector>

#include "lockstep/nn/models/gpt.h"
#include "lockstep/nn/models/llama.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"

namespace lockstep::train {

namespace {
int64_t parameterCount(const nn::Module& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.tensor().numel();
  return n;
}
}  // namespace

std::optional<double> trainingFlopsPerToken(const nn::Module& model, int64_t seq_len) {
  int64_t layers = 0, width = 0, position_parameters = 0;
  if (const auto* g = dynamic_cast<const nn::Gpt*>(&model)) {
    layers = g->options().n_layer;
    width = g->options().n_embd;
    position_parameters = g->options().block_size * g->options().n_embd;  // wpe
  } else if (const auto* l = dynamic_cast<const nn::Llama*>(&model)) {
    layers = l->options().n_layer;
    width = l->options().n_embd;  // n_head x head_dim: the queries' width, whatever the kv heads
  } else {
    return std::nullopt;
  }
  const double n = static_cast<double>(parameterCount(model) - position_parameters);
  return 6.0 * n +
         12.0 * static_cast<double>(layers) * static_cast<double>(width) * static_cast<double>(seq_len);
}

std::optional<double> denseBf16PeakFlops(const std::string& gpu_name) {
  if (auto v = env::get("LOCKSTEP_GPU_PEAK_TFLOPS")) {
    double t = 0;
    try {
      size_t used = 0;
      t = std::stod(*v, &used);
      if (used != v->size()) t = 0;
    } catch (const std::exception&) {
      t = 0;
    }
    LOCKSTEP_ENFORCE(t > 0, ValueError, "LOCKSTEP_GPU_PEAK_TFLOPS='", *v,
                     "' is not a positive number of TFLOP/s (the GPU's dense bf16 peak, for MFU)");
    return t * 1e12;
  }
  // NVIDIA's datasheets, dense (the sparse figures halved); the first name found in gpu_name wins,
  // so the variants come before their family.
  static const std::vector<std::pair<std::string, double>> kPeaks = {
      {"GH200", 989.4e12},   {"H200 NVL", 835e12}, {"H200", 989.4e12}, {"H100 NVL", 835e12},
      {"H100 PCIe", 756e12}, {"H100", 989.4e12},   {"H800", 989.4e12}, {"B200", 2250e12},
      {"A100", 312e12},      {"A800", 312e12},     {"L40S", 362.05e12}};
  for (const auto& [name, peak] : kPeaks) {
    if (gpu_name.find(name) != std::string::npos) return peak;
  }
  return std::nullopt;
}

}  // namespace lockstep::train
