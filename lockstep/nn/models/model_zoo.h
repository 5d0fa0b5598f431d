#pragma once
// The model zoo: models by name, as the trainer's config names them.
//   mnist_cnn       1x28x28 -> 10 logits, 93,322 parameters (see small_cnn.h)
//   cifar_cnn       3x32x32 -> 10 logits, the Paddle seed's MyNet, 122,570 parameters
//   linear          one Linear layer (in_features -> out_features; default 20 -> 1)
//   mlp             Flatten, then Linear+ReLU per hidden size, then Linear (Sequential: "1.weight", ...)
//   resnet18_cifar  CIFAR ResNet-18 (see resnet.h), 11,173,962 parameters
//   resnet18        torchvision's ImageNet ResNet-18 (see resnet_imagenet.h), 11,689,512 parameters
//   resnet50        torchvision's ImageNet ResNet-50 (Bottleneck v1.5), 25,557,032 parameters
//   gpt             GPT-2 / minGPT language model (see gpt.h); model_type picks minGPT's sizes
//   llama           Llama language model (see llama.h); model_type llama-tiny or llama-100m
// All parameters are drawn from options.generator (or the default generator) in registration order,
// so a seed fixes the model.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/nn/module.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::nn {

struct ModelOptions {
  /// linear and mlp; 0 = the model's default (linear 20, mlp 784).
  int64_t in_features = 0;
  /// linear and mlp; 0 = the model's default (linear 1, mlp 10).
  int64_t out_features = 0;
  /// mlp hidden layer sizes; empty = {128}.
  std::vector<int64_t> hidden{};
  /// mnist_cnn, cifar_cnn, resnet18_cifar, resnet18 and resnet50 (1000 for ImageNet).
  int64_t num_classes = 10;
  // ---- gpt and llama (0 / empty / unset: the model_type preset's value) ----
  /// A size preset (gptPresetNames(), llamaPresetNames()); empty: gpt-mini, llama-tiny.
  std::string model_type{};
  /// Default 256, the byte tokenizer's vocabulary.
  int64_t vocab_size = 0;
  /// Longest sequence (learned positions for gpt, rotary tables for llama); default 256.
  int64_t block_size = 0;
  int64_t n_layer = 0, n_head = 0, n_kv_head = 0, n_embd = 0, intermediate_size = 0;
  /// gpt: minGPT's embd/resid/attn_pdrop (default 0.1); llama: attention_dropout (default 0).
  std::optional<double> dropout{};
  /// Activation checkpointing: segments of this many consecutive blocks (0: off).
  int64_t checkpoint_every = 0;
  /// Borrowed during construction; nullptr = defaultGenerator().
  Generator* generator = nullptr;
};

/// Builds the named model; ValueError listing the known names for an unknown one.
std::shared_ptr<Module> makeModel(const std::string& name, const ModelOptions& options = {});
/// Whether makeModel(name) builds an nn::LanguageModel (token ids in, next-token logits out; it
/// trains on a language dataset and reads ModelOptions' language keys); false for an unknown name.
bool isLanguageModel(const std::string& name);
/// The logits per sample makeModel(name, options) outputs (its classes: out_features for linear and
/// mlp, num_classes for the CNNs and ResNets); 0 for a language model or an unknown name.
int64_t classifierOutputs(const std::string& name, const ModelOptions& options);
/// Whether makeModel(name) builds a model with a layer sequence (nn/layer_sequence.h), which a
/// pipeline cuts into stages: every zoo model but linear; false for an unknown name.
bool hasLayerSequence(const std::string& name);
/// The names makeModel() knows, sorted.
std::vector<std::string> modelNames();
/// The names of the language models (ModelTraits::language_model), sorted.
std::vector<std::string> languageModelNames();

}  // namespace lockstep::nn
