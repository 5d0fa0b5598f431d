#pragma once
// Model FLOPs utilisation (MFU) of a language-model run: the FLOPs a training step of the model
// needs per token, by nanoGPT's estimate (the PaLM paper's appendix B: 6 N for the forward and
// backward matmuls of N parameters, position embeddings not counted, plus 12 L H Q T for attention's
// scores and weighted sums over T positions), against the GPU's dense bf16 tensor-core peak from
// NVIDIA's datasheets. Pure functions; summary.json reports both and their ratio.
#include <optional>
#include <string>

#include "lockstep/nn/module.h"

namespace lockstep::train {

/// FLOPs of one training token of a gpt or llama model at sequence length seq_len; nullopt for any
/// other model.
std::optional<double> trainingFlopsPerToken(const nn::Module& model, int64_t seq_len);

/// A GPU's dense bf16 tensor-core peak in FLOP/s, from its name as CUDA reports it ("NVIDIA H100
/// 80GB HBM3", "NVIDIA H200", ...); LOCKSTEP_GPU_PEAK_TFLOPS (a number) overrides it or names the
/// peak of a GPU the table lacks. nullopt when neither knows.
std::optional<double> denseBf16PeakFlops(const std::string& gpu_name);

}  // namespace lockstep::train
