// `lockstep generate PATH --prompt TEXT`: text from a language model that `lockstep train` trained,
// read from a checkpoint directory or a run's output dir (lockstep/train/language_model_run.h).
#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <optional>
#include <string>

#include "lockstep/cli/command.h"
#include "lockstep/data/byte_tokenizer.h"
#include "lockstep/tensor/device.h"
#include "lockstep/train/language_model_run.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/runtime.h"
#endif

namespace {

int generateMain(int argc, char** argv) {
  std::string path, prompt = "\n", device = "cpu";
  int64_t max_new_tokens = 200, top_k = 40;
  double temperature = 0.8;
  uint64_t seed = 1;
  CLI::App app{"Sample text from a trained language model (gpt, llama)", "lockstep generate"};
  app.add_option("path", path, "a checkpoint directory, or the output dir of a `lockstep train` run")
      ->required();
  app.add_option("--prompt", prompt, "the text to continue (default: a newline)");
  app.add_option("--max-new-tokens", max_new_tokens, "tokens to generate")->check(CLI::Range(0, 100000));
  app.add_option("--temperature", temperature, "0: greedy (argmax); else sample logits / temperature")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-k", top_k, "sample among the k most likely tokens (0: all)")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--seed", seed, "the sampling seed (0 .. 2^64 - 1)")->transform([](std::string v) {
    // Unsigned and in range: strtoull would wrap -1 and saturate 2^64 to 2^64 - 1 silently.
    uint64_t parsed = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), parsed);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size())
      throw CLI::ValidationError("--seed", "'" + v + "' is not an integer in 0 .. 2^64 - 1");
    return v;
  });
  app.add_option("--device", device, "where the model runs: cpu (default), cuda, cuda:N");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  const lockstep::Device on = lockstep::parseDevice(device);  // ValueError naming a bad name
  lockstep::train::LoadedLanguageModel lm = lockstep::train::loadLanguageModel(path);
  lm.model->to(on);  // NotSupportedError saying why when `on` cannot be used here
#if LOCKSTEP_WITH_CUDA
  std::optional<lockstep::cuda::DeviceGuard> on_gpu;  // the kernels launch on the current device
  if (on.isCuda()) on_gpu.emplace(on.index);
#endif
  std::fprintf(stderr, "%s from %s\n", lm.model->extraRepr().c_str(), lm.weights.c_str());
  if (lm.tokenizer != "byte") {
    std::fprintf(
        stderr,
        "lockstep generate: error: the model was trained on %s, whose meta.json names the tokenizer "
        "'%s'; lockstep generate reads a prompt and writes text as bytes (its byte tokenizer's ids), "
        "so it would print noise: sample with that tokenizer's own code (the weights are %s)\n",
        lm.config.data.root.c_str(), lm.tokenizer.c_str(), lm.weights.c_str());
    return 2;
  }
  std::vector<uint16_t> bytes = lockstep::data::ByteTokenizer::encode(prompt);
  std::vector<int64_t> ids(bytes.begin(), bytes.end());
  lockstep::Generator gen(seed);
  lockstep::nn::GenerateOptions go;
  go.max_new_tokens = max_new_tokens;
  go.temperature = temperature;
  go.top_k = top_k;
  go.generator = &gen;
  std::vector<int64_t> out = lockstep::nn::generate(*lm.model, ids, go);
  std::printf("%s\n", lockstep::data::ByteTokenizer::decodeForDisplay(out).c_str());
  return 0;
}

static lockstep::cli::Registration reg{"generate", "sample text from a trained language model",
                                       &generateMain};

}  // namespace
