#pragma once
// What `lockstep train` adds for language models (gpt, llama): the one line that says how
// activation checkpointing runs and which DeepSpeed keys have no effect here, and the text sampled
// from the trained model at the end.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "lockstep/nn/models/language_model.h"
#include "lockstep/train/config/config.h"

namespace lockstep::train {

/// E.g. "activation checkpointing: segments of 1 block of gpt (6 segments); no effect here:
/// partition_activations (no model parallelism: ...)". on_gpu: the run trains on a GPU (the profile's
/// times are host times; the config refuses cpu_checkpointing and synchronize_checkpoint_boundary
/// there). Empty when checkpointing is off. Pure.
std::string activationCheckpointingNote(const ActivationCheckpointingConfig& config, int64_t checkpoint_every,
                                        int64_t n_layer, const std::string& model, bool on_gpu = false);

/// Greedy and sampled (temperature, top-k) continuations of sample.prompt, byte-decoded with broken
/// UTF-8 replaced: {"prompt", "greedy", "sampled", "temperature", "top_k"}. Deterministic for a
/// seed. ValueError when the prompt holds a byte outside the model's vocabulary.
nlohmann::json sampleText(nn::LanguageModel& model, const TrainConfig::Sample& sample, uint64_t seed);
/// The same with the generation given: generate(prompt, options) returns prompt + new tokens (a
/// pipeline's, through its stages: nn::generateWith).
nlohmann::json sampleTextWith(
    const TrainConfig::Sample& sample, uint64_t seed,
    const std::function<std::vector<int64_t>(const std::vector<int64_t>&, const nn::GenerateOptions&)>&
        generate);

struct LoadedLanguageModel {
  std::shared_ptr<nn::LanguageModel> model;
  TrainConfig config;
  std::string weights;  // the file or checkpoint the weights came from
  /// The tokenizer of the token directory it trained on (its meta.json, where that is still there),
  /// else "byte".
  std::string tokenizer = "byte";
};

/// Hugging Face's config.json for `model` (LlamaConfig's keys: LlamaForCausalLM.from_pretrained of
/// the run's directory, beside its model.safetensors of HF's names), or null for a model HF's
/// classes do not load as they are (gpt: its Conv1D weights are transposed).
nlohmann::json huggingFaceConfig(const nn::LanguageModel& model);
/// DIR/config.json: huggingFaceConfig(model) where there is one, else none (a stale one from an
/// earlier run into DIR, a llama's beside another model's weights, is removed).
void writeHuggingFaceConfig(const std::string& dir, const nn::Module& model);
/// The note a run prints instead of its text samples when the data's tokenizer is not the byte
/// tokenizer the samples read and write; empty for "byte".
std::string noSamplesNote(const DataConfig& data, const std::string& tokenizer);

/// The language model a run trained, for `lockstep generate`: PATH is a checkpoint directory
/// (its config.json and weights), or a run's output dir (run.json's config and model.safetensors,
/// else its latest checkpoint). IoError / ValueError naming what is missing, or when the run did not
/// train gpt or llama.
LoadedLanguageModel loadLanguageModel(const std::string& path);

}  // namespace lockstep::train
