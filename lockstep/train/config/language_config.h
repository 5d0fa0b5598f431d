#pragma once
// The config keys of language models (gpt, llama): the model's sizes and preset, DeepSpeed's
// `activation_checkpointing` section, the `sample` section, and the checks that tie them to the
// data (text or tokens go with a language model and the other way round; the data's windows take
// the model's block_size). Pure; ValueError naming the key.
#include "lockstep/train/config/config.h"

namespace YAML {
class Node;
}

namespace lockstep::train {

/// model.{model_type, vocab_size, block_size, n_layer, n_head, n_kv_head, n_embd,
/// intermediate_size, dropout, checkpoint_every} of the `model` mapping n (c.model already set).
void parseLanguageModelKeys(const YAML::Node& n, TrainConfig& c);

/// The `activation_checkpointing` and `sample` sections of the document, then the cross-checks and
/// defaults (block_size 256; the section turns on checkpoint_every 1). After model and data.
void parseLanguageSections(const YAML::Node& root, TrainConfig& c);

}  // namespace lockstep::train
