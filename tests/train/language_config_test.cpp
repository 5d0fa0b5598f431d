// The config keys of language models: model sizes and presets, text and token data, DeepSpeed's
// activation_checkpointing section as seed 002 writes it, the sample section, and their errors.
#include <gtest/gtest.h>

#include "lockstep/data.h"
#include "lockstep/nn.h"
#include "lockstep/train/config/config.h"
#include "lockstep/train/language_model_run.h"
#include "lockstep/train/train_data.h"
#include "lockstep/util/error.h"
#include "parallel/thread_ranks.h"
#include "train/config_test_util.h"

using namespace lockstep;
using namespace lockstep::train;
using namespace lockstep::test;

namespace {

const char* kGpt = R"(
train_micro_batch_size_per_gpu: 8
model: {name: gpt, model_type: gpt-mini, block_size: 128, dropout: 0.1}
data: {dataset: text}
)";

}  // namespace

TEST(LanguageConfig, gpt_on_text_defaults_to_the_fortunes_corpus_and_the_models_block) {
  TrainConfig c = parseTrainConfig(kGpt, {}, 2);
  EXPECT_EQ(c.model, "gpt");
  EXPECT_EQ(c.model_options.model_type, "gpt-mini");
  EXPECT_EQ(c.data.root, "/usr/share/games/fortunes");
  EXPECT_EQ(c.data.block_size, 128);
  EXPECT_DOUBLE_EQ(c.data.val_split, 0.1);
  EXPECT_EQ(c.model_options.checkpoint_every, 0);
  EXPECT_FALSE(c.activation_checkpointing.present);
}

TEST(LanguageConfig, seed_002_activation_checkpointing_block_is_accepted_and_turns_it_on) {
  const std::string json = R"({
    "train_micro_batch_size_per_gpu": 1,
    "model": {"name": "llama", "model_type": "llama-tiny"},
    "data": {"dataset": "text"},
    "activation_checkpointing": {
        "partition_activations": true,
        "cpu_checkpointing": true,
        "contiguous_memory_optimization": false,
        "number_checkpoints": null,
        "synchronize_checkpoint_boundary": false,
        "profile": true
    }
})";
  TrainConfig c = parseTrainConfig(json, {}, 1);
  const ActivationCheckpointingConfig& a = c.activation_checkpointing;
  EXPECT_TRUE(a.present && a.partition_activations && a.cpu_checkpointing && a.profile);
  EXPECT_FALSE(a.contiguous_memory_optimization || a.synchronize_checkpoint_boundary);
  EXPECT_FALSE(a.number_checkpoints.has_value());
  EXPECT_EQ(c.model_options.checkpoint_every, 1) << "the section checkpoints every block";
  EXPECT_EQ(c.data.block_size, 256);
  std::string note = activationCheckpointingNote(a, 1, 4, "llama");
  EXPECT_TRUE(has(note, "segments of 1 block of llama (4 segments; the last keeps its activations")) << note;
  EXPECT_TRUE(has(note, "no effect here: partition_activations")) << note;
  EXPECT_TRUE(has(note, "cpu_checkpointing")) << note;
  EXPECT_FALSE(has(note, "synchronize_checkpoint_boundary")) << "only keys that are on are listed: " << note;
  EXPECT_EQ(activationCheckpointingNote(a, 0, 4, "llama"), "");
  // On a GPU the profile's times are host times, and the note says so.
  std::string gpu = activationCheckpointingNote(a, 1, 4, "llama", /*on_gpu=*/true);
  EXPECT_TRUE(has(gpu, "on a GPU measure launching")) << gpu;
  // A GPU run would have to move the checkpoints to CPU memory, which lockstep does not: an error.
  std::string on_gpu = json;
  on_gpu.insert(1, R"("device": "cuda",)");
  try {
    parseTrainConfig(on_gpu, {}, 1);
    ADD_FAILURE() << "cpu_checkpointing on a GPU run was accepted";
  } catch (const ValueError& e) {
    EXPECT_TRUE(has(e.what(), "activation_checkpointing.cpu_checkpointing")) << e.what();
    EXPECT_TRUE(has(e.what(), "not implemented on a GPU")) << e.what();
  }
}

TEST(LanguageConfig, model_checkpoint_every_sets_the_segment_length) {
  TrainConfig c = parseTrainConfig(std::string(kGpt) + "activation_checkpointing: {profile: false}\n",
                                   {"model.checkpoint_every=2"}, 1);
  EXPECT_EQ(c.model_options.checkpoint_every, 2);
}

TEST(LanguageConfig, mismatches_and_bad_values_are_errors_naming_the_key) {
  EXPECT_TRUE(
      has(errorOf("train_batch_size: 8\nmodel: {name: gpt}\n"), "set data.dataset to text or tokens"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\ndata: {dataset: text}\n"), "train a language model"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nactivation_checkpointing: {profile: true}\n"),
                  "has no transformer blocks"));
  EXPECT_TRUE(has(errorOf(std::string(kGpt) + "activation_checkpointing: {partition_activation: true}\n"),
                  "did you mean activation_checkpointing.partition_activations"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nmodel: {name: mlp, n_layer: 2}\n"),
                  "model.n_layer applies to the language models"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nmodel: {name: gpt, dropout: 1.5}\ndata: {dataset: text}\n"),
                  "model.dropout must be in [0, 1)"));
  EXPECT_TRUE(has(errorOf("train_batch_size: 8\nmodel: {name: gpt}\ndata: {dataset: tokens}\n"),
                  "lockstep data tokenize"));
  // 0 written out is no size (it used to mean the preset's, or the data's vocabulary, silently).
  for (const char* key : {"n_layer", "block_size", "vocab_size", "n_embd"}) {
    EXPECT_TRUE(has(errorOf("train_batch_size: 8\nmodel: {name: gpt, " + std::string(key) + ": 0}\n" +
                            "data: {dataset: text}\n"),
                    "model." + std::string(key) + ": 0 is no size"))
        << key;
  }
  // A token directory's split is its val.bin: data.val_split would change nothing.
  EXPECT_TRUE(has(
      errorOf(
          "train_batch_size: 8\nmodel: {name: gpt}\ndata: {dataset: tokens, root: /tmp, val_split: 0.2}\n"),
      "data.val_split: the tokens dataset validates on the directory's val.bin"));
  EXPECT_TRUE(has(errorOf(std::string(kGpt) + "sample: {temperature: -1}\n"), "sample.temperature"));
  EXPECT_TRUE(has(errorOf(std::string(kGpt) + "activation_checkpointing: {number_checkpoints: 0}\n"),
                  "number_checkpoints must be positive"));
}

// Evaluation batches of a language model: 128K positions for a byte vocabulary, as many windows of a
// 50,257-word one as keep their f32 logits within 256 MiB (one of 1,024 positions), never none.
TEST(LanguageEvaluation, batches_keep_the_logits_within_256_mib) {
  EXPECT_EQ(evalBatchWindows(256, 256), 512);
  EXPECT_EQ(evalBatchWindows(256, 0), 512);
  EXPECT_EQ(evalBatchWindows(1024, 50257), 1);
  EXPECT_EQ(evalBatchWindows(64, 50257), 20);
  EXPECT_EQ(evalBatchWindows(8192, 50257), 1);
  EXPECT_LE(evalBatchWindows(64, 50257) * 64 * 50257 * 4, int64_t{256} << 20);
}

// The validation pass on several ranks is the one-process pass: the samples the sampler pads the
// ranks' shares with (every rank runs as many forwards) are not counted. 7 windows of a language
// model and 7 samples of a classifier over 1, 2 and 3 thread ranks.
TEST(Evaluation, the_ranks_padding_is_not_counted) {
  data::SyntheticDatasetOptions so;
  so.size = 7;
  so.input_shape = {5};
  so.num_classes = 3;
  auto classes = std::make_shared<data::SyntheticDataset>(so);
  std::vector<uint16_t> ids(7 * 4 + 1);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint16_t>((i * 7) % 11);
  auto windows =
      std::make_shared<data::TokenWindowDataset>(data::TokenFile::fromTokens(ids, "tokens"), 4, 11);
  for (const auto& [name, ds] :
       {std::pair<std::string, std::shared_ptr<data::Dataset>>{"mlp", classes}, {"gpt", windows}}) {
    SCOPED_TRACE(name);
    auto build = [&] {
      Generator g(3);
      nn::ModelOptions mo;
      mo.generator = &g;
      if (name == "mlp") {
        mo.in_features = 5;
        mo.out_features = 3;
        mo.hidden = {4};
        return nn::makeModel("mlp", mo);
      }
      mo.vocab_size = 11;
      mo.block_size = 4;
      mo.n_layer = 1;
      mo.n_head = 1;
      mo.n_embd = 8;
      return nn::makeModel("gpt", mo);
    };
    auto one = build();
    const EvalResult whole = evaluate(*one, ds, nullptr, 0, 1, 11);
    for (int world : {2, 3}) {
      std::vector<EvalResult> got(static_cast<size_t>(world));
      lockstep::testing::runThreadRanks(world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
        auto model = build();
        got[static_cast<size_t>(rank)] = evaluate(*model, ds, pg.get(), rank, world, 11);
      });
      for (const EvalResult& r : got) {
        EXPECT_NEAR(r.loss, whole.loss, 1e-6 * whole.loss) << "world " << world;  // f32 sums per batch
        EXPECT_EQ(r.accuracy, whole.accuracy) << "world " << world;
      }
    }
  }
}
