#include "lockstep/train/language_model_run.h"

#include <fmt/format.h>

#include <filesystem>

#include "lockstep/data/byte_tokenizer.h"
#include "lockstep/data/datasets/text_corpus.h"
#include "lockstep/nn/models/llama.h"
#include "lockstep/nn/models/model_zoo.h"
#include "lockstep/train/checkpoint/checkpoint.h"
#include "lockstep/train/checkpoint/training_state.h"
#include "lockstep/train/checkpoint/zero_checkpoint.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"
#include "lockstep/util/json.h"

namespace lockstep::train {

std::string activationCheckpointingNote(const ActivationCheckpointingConfig& a, int64_t every,
                                        int64_t n_layer, const std::string& model, bool on_gpu) {
  if (every <= 0) return "";
  const int64_t segments = (n_layer + every - 1) / every;
  std::string s = fmt::format(
      "activation checkpointing: segments of {} block{} of {} ({} segments; the last keeps its activations, "
      "as its backward follows at once)",
      every, every == 1 ? "" : "s", model, segments);
  if (a.profile)
    s += on_gpu ? "; profile: on (times at the end; host times, which on a GPU measure launching the work "
                  "more than running it)"
                : "; profile: on (times at the end)";
  std::vector<std::string> none;
  if (a.partition_activations)
    none.push_back(
        "partition_activations (it splits checkpoints across model-parallel ranks; lockstep has no model "
        "parallelism)");
  if (a.cpu_checkpointing)
    none.push_back(
        "cpu_checkpointing (it moves checkpoints from GPU to CPU memory; they are in CPU memory already)");
  if (a.contiguous_memory_optimization)
    none.push_back("contiguous_memory_optimization (DeepSpeed uses it with partitioned activations only)");
  if (a.number_checkpoints)
    none.push_back("number_checkpoints (it sizes contiguous_memory_optimization's buffer)");
  if (a.synchronize_checkpoint_boundary)
    none.push_back("synchronize_checkpoint_boundary (a device synchronize; CPU work is synchronous)");
  if (!none.empty()) {
    s += "; no effect here: ";
    for (size_t i = 0; i < none.size(); ++i) s += (i ? ", " : "") + none[i];
  }
  return s;
}

nlohmann::json sampleText(nn::LanguageModel& model, const TrainConfig::Sample& sample, uint64_t seed) {
  return sampleTextWith(sample, seed, [&](const std::vector<int64_t>& prompt, const nn::GenerateOptions& o) {
    return nn::generate(model, prompt, o);
  });
}

nlohmann::json sampleTextWith(
    const TrainConfig::Sample& sample, uint64_t seed,
    const std::function<std::vector<int64_t>(const std::vector<int64_t>&, const nn::GenerateOptions&)>&
        generate) {
  std::vector<uint16_t> bytes = data::ByteTokenizer::encode(sample.prompt);
  std::vector<int64_t> prompt(bytes.begin(), bytes.end());
  auto decode = [&](const std::vector<int64_t>& tokens) {
    return data::ByteTokenizer::decodeForDisplay(
        std::vector<int64_t>(tokens.begin() + static_cast<std::ptrdiff_t>(prompt.size()), tokens.end()));
  };
  nn::GenerateOptions greedy;
  greedy.max_new_tokens = sample.max_new_tokens;
  greedy.temperature = 0;
  Generator gen(seed);
  nn::GenerateOptions sampled = greedy;
  sampled.temperature = sample.temperature;
  sampled.top_k = sample.top_k;
  sampled.generator = &gen;
  return {{"prompt", sample.prompt},
          {"greedy", decode(generate(prompt, greedy))},
          {"sampled", decode(generate(prompt, sampled))},
          {"temperature", sample.temperature},
          {"top_k", sample.top_k}};
}

namespace {
// The vocabulary the weights were trained with: the token table's rows.
int64_t vocabOf(const NamedTensors& tensors) {
  for (const auto& [name, t] : tensors) {
    if (name == "transformer.wte.weight" || name == "model.embed_tokens.weight") return t.size(0);
  }
  return 0;
}
}  // namespace

nlohmann::json huggingFaceConfig(const nn::LanguageModel& model) {
  const auto* llama = dynamic_cast<const nn::Llama*>(&model);
  if (!llama) return nullptr;
  const nn::LlamaOptions& o = llama->options();
  const DType dtype = model.parameters().front().dtype();
  return {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", o.vocab_size},
      {"hidden_size", o.n_embd},
      {"intermediate_size", o.intermediate_size},
      {"num_hidden_layers", o.n_layer},
      {"num_attention_heads", o.n_head},
      {"num_key_value_heads", o.n_kv_head > 0 ? o.n_kv_head : o.n_head},
      {"max_position_embeddings", o.block_size},
      {"rms_norm_eps", o.rms_norm_eps},
      {"rope_theta", o.rope_theta},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"attention_dropout", o.dropout},
      {"tie_word_embeddings", false},
      {"torch_dtype", dtype == DType::bf16  ? "bfloat16"
                      : dtype == DType::f16 ? "float16"
                                            : "float32"},
  };
}

void writeHuggingFaceConfig(const std::string& dir, const nn::Module& model) {
  const auto* lm = dynamic_cast<const nn::LanguageModel*>(&model);
  const nlohmann::json hf = lm ? huggingFaceConfig(*lm) : nlohmann::json();
  const std::string path = dir + "/config.json";
  if (hf.is_null()) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    return;
  }
  file::writeAtomic(path, hf.dump(2) + "\n");
}

std::string noSamplesNote(const DataConfig& data, const std::string& tokenizer) {
  if (tokenizer == "byte") return "";
  return "note: no text samples: " + data.root + "/meta.json names the tokenizer '" + tokenizer +
         "', and lockstep's samples (and `lockstep generate`) read and write bytes, its byte tokenizer's ids";
}

LoadedLanguageModel loadLanguageModel(const std::string& path) {
  namespace fs = std::filesystem;
  nlohmann::json document;
  NamedTensors weights;
  LoadedLanguageModel out;
  if (fs::exists(path + "/run.json")) {  // first: a run dir holds Hugging Face's config.json too
    nlohmann::json run;
    try {
      run = json::parse(file::readAll(path + "/run.json"));
    } catch (const nlohmann::json::exception& e) {
      throw IoError(path + "/run.json is not valid JSON: " + e.what());
    }
    document = run.value("config", nlohmann::json());
    if (fs::exists(path + "/model.safetensors")) {
      out.weights = path + "/model.safetensors";
      weights = loadSafetensors(out.weights).tensors;
    } else if (auto latest = latestCheckpoint(path + "/checkpoints")) {
      out.weights = *latest;
      weights = checkpointModelState(loadCheckpoint(*latest));
    } else {
      throw IoError(path + " holds neither model.safetensors nor a checkpoint yet");
    }
  } else if (fs::exists(path + "/manifest.json") || fs::exists(path + "/config.json")) {
    CheckpointData d = loadCheckpoint(path);
    document = d.config.value("document", nlohmann::json());
    weights = checkpointModelState(d);  // a ZeRO or pipeline checkpoint's parameters put together
    out.weights = path;
  } else {
    throw IoError(path +
                  " is neither a checkpoint directory (config.json) nor a run's output dir (run.json)");
  }
  if (!document.is_object() || document.empty()) {
    throw IoError(path + " does not record the config that trained it (written by an older lockstep?)");
  }
  // The batch keys were resolved for the training run's world size, and the pipeline's stages
  // split it; generation runs the whole model in one process and needs none of them.
  document.erase("train_batch_size");
  document.erase("gradient_accumulation_steps");
  document.erase("pipeline");
  out.config = parseTrainConfig(document.dump(), {}, 1, path);
  nn::ModelOptions mo = out.config.model_options;
  if (mo.vocab_size == 0) mo.vocab_size = vocabOf(weights);
  auto model = nn::makeModel(out.config.model, mo);
  out.model = std::dynamic_pointer_cast<nn::LanguageModel>(model);
  if (!out.model) {
    throw ValueError(path + " holds a " + out.config.model + " model, not a language model (gpt or llama)");
  }
  nn::StateDict sd;
  for (auto& [name, t] : weights) sd.insert(name, t);
  model->loadStateDict(sd, /*strict=*/true);
  const std::string meta = out.config.data.root + "/meta.json";
  if (out.config.data.dataset == "tokens" && fs::exists(meta))
    out.tokenizer = data::parseTokenDirMeta(file::readAll(meta), meta).tokenizer;
  return out;
}

}  // namespace lockstep::train
