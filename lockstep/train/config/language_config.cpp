#include "lockstep/train/config/language_config.h"

#include "lockstep/data/datasets/registry.h"
#include "lockstep/nn/models/model_zoo.h"
#include "lockstep/train/config/config_keys.h"

namespace lockstep::train {

using config_keys::checkKeys;
using config_keys::get;

namespace {

// The registries' names for a message: "a", "a or b", "a, b or c".
std::string orList(const std::vector<std::string>& names) {
  std::string list;
  for (size_t i = 0; i < names.size(); ++i)
    list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return list;
}

// DeepSpeed's activation_checkpointing section (runtime/activation_checkpointing/config.py): every
// key is accepted with its type checked; profile is implemented; the others configure how
// DeepSpeed partitions, offloads or lays out checkpoints across model-parallel GPUs, and the run
// says which have no effect here.
void parseActivationCheckpointing(const YAML::Node& n, TrainConfig& c) {
  const std::string path = "activation_checkpointing";
  checkKeys(n, path,
            {"partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
             "number_checkpoints", "synchronize_checkpoint_boundary", "profile"});
  ActivationCheckpointingConfig& a = c.activation_checkpointing;
  a.present = true;
  get(n, path, "partition_activations", a.partition_activations);
  get(n, path, "cpu_checkpointing", a.cpu_checkpointing);
  get(n, path, "contiguous_memory_optimization", a.contiguous_memory_optimization);
  if (n["number_checkpoints"] && !n["number_checkpoints"].IsNull()) {
    get(n, path, "number_checkpoints", a.number_checkpoints);
    if (*a.number_checkpoints < 1) throw ValueError(path + ".number_checkpoints must be positive or null");
  }
  get(n, path, "synchronize_checkpoint_boundary", a.synchronize_checkpoint_boundary);
  get(n, path, "profile", a.profile);
}

void parseSample(const YAML::Node& n, TrainConfig& c) {
  checkKeys(n, "sample", {"prompt", "max_new_tokens", "temperature", "top_k"});
  get(n, "sample", "prompt", c.sample.prompt);
  get(n, "sample", "max_new_tokens", c.sample.max_new_tokens);
  get(n, "sample", "temperature", c.sample.temperature);
  get(n, "sample", "top_k", c.sample.top_k);
  if (c.sample.max_new_tokens < 0 || c.sample.max_new_tokens > 100000)
    throw ValueError("sample.max_new_tokens must be in [0, 100000]");
  if (c.sample.temperature < 0) throw ValueError("sample.temperature must be >= 0 (0: greedy)");
  if (c.sample.top_k < 0) throw ValueError("sample.top_k must be >= 0 (0: all tokens)");
  if (c.sample.prompt.empty()) throw ValueError("sample.prompt must not be empty");
}

}  // namespace

void parseLanguageModelKeys(const YAML::Node& n, TrainConfig& c) {
  nn::ModelOptions& m = c.model_options;
  get(n, "model", "model_type", m.model_type);
  for (auto [key, v] : {std::pair<const char*, int64_t*>{"vocab_size", &m.vocab_size},
                        {"block_size", &m.block_size},
                        {"n_layer", &m.n_layer},
                        {"n_head", &m.n_head},
                        {"n_kv_head", &m.n_kv_head},
                        {"n_embd", &m.n_embd},
                        {"intermediate_size", &m.intermediate_size},
                        {"checkpoint_every", &m.checkpoint_every}}) {
    get(n, "model", key, *v);
    if (*v < 0 || *v > (int64_t{1} << 24))
      throw ValueError(std::string("model.") + key + " must be in [0, 2^24]");
    // 0 is how the options say "not given" (the preset's size, the data's vocabulary): written out
    // it would silently mean that instead of what it says.
    if (n[key] && *v == 0 && std::string(key) != "checkpoint_every")
      throw ValueError(
          std::string("model.") + key + ": 0 is no size; give at least 1, or leave it out for " +
          (std::string(key) == "vocab_size" ? "the data's vocabulary" : "the model preset's value"));
  }
  get(n, "model", "dropout", m.dropout);
  if (m.dropout && !(*m.dropout >= 0 && *m.dropout < 1)) throw ValueError("model.dropout must be in [0, 1)");
  const bool language = nn::isLanguageModel(c.model);
  for (const char* key : {"model_type", "vocab_size", "block_size", "n_layer", "n_head", "n_kv_head",
                          "n_embd", "intermediate_size", "dropout", "checkpoint_every"}) {
    if (n[key] && !language) {
      throw ValueError(std::string("model.") + key + " applies to the language models (" +
                       orList(nn::languageModelNames()) + "), not " + c.model);
    }
  }
}

void parseLanguageSections(const YAML::Node& root, TrainConfig& c) {
  if (root["activation_checkpointing"]) parseActivationCheckpointing(root["activation_checkpointing"], c);
  if (root["sample"]) parseSample(root["sample"], c);
  const bool language_model = nn::isLanguageModel(c.model);
  if (c.data.isLanguage() != language_model) {
    throw ValueError(language_model
                         ? "model " + c.model + " trains on text: set data.dataset to " +
                               orList(data::languageDatasetNames())
                         : "data.dataset " + c.data.dataset +
                               " holds token sequences: train a language model on it (model.name: " +
                               orList(nn::languageModelNames()) + ")");
  }
  if (c.activation_checkpointing.present && !language_model) {
    throw ValueError("activation_checkpointing: model " + c.model +
                     " has no transformer blocks to checkpoint (use " + orList(nn::languageModelNames()) +
                     ", or remove the section)");
  }
  if (language_model) {
    if (c.model_options.block_size == 0) c.model_options.block_size = 256;
    c.data.block_size = c.model_options.block_size;
    if (c.activation_checkpointing.present && c.model_options.checkpoint_every == 0)
      c.model_options.checkpoint_every = 1;
  }
}

}  // namespace lockstep::train
