#include "lockstep/train/config/hf_auto.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "lockstep/nn/models/gpt.h"
#include "lockstep/nn/models/llama.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/train/config/config.h"
#include "lockstep/train/config/config_keys.h"

namespace lockstep::train {

namespace {

const char* const kBatchKeys[] = {"train_batch_size", "train_micro_batch_size_per_gpu",
                                  "gradient_accumulation_steps"};

// The keys the integration copies from a TrainingArguments flag, and the value that flag has when
// it is not given (TrainingArguments' default, YAML), which the "auto" takes here; none where
// lockstep computes the value as the integration does (the run's total steps).
struct FromFlag {
  const char* path;
  const char* flag;
  const char* trainer_default;
};
const FromFlag kFromFlag[] = {
    {"gradient_clipping", "--max_grad_norm's default", "1.0"},
    {"optimizer.params.lr", "--learning_rate's default", "5.0e-5"},
    {"optimizer.params.betas", "--adam_beta1's and --adam_beta2's defaults", "[0.9, 0.999]"},
    {"optimizer.params.eps", "--adam_epsilon's default", "1.0e-8"},
    {"optimizer.params.weight_decay", "--weight_decay's default", "0.0"},
    {"scheduler.params.warmup_min_lr", "always 0", "0.0"},
    {"scheduler.params.warmup_num_steps", "--warmup_steps' and --warmup_ratio's defaults", "0"},
    {"scheduler.params.total_num_steps", "the run's total number of steps", nullptr},
    {"fp16.enabled", "--fp16's default", "false"},
    {"bf16.enabled", "--bf16's default", "false"},
    {"amp.enabled", "--fp16's default (with --fp16_backend apex)", "false"},
    {"amp.opt_level", "--fp16_opt_level's default", "O1"},
};

// root[a][b][c] = value for path "a.b.c" (whose parents exist: the key was there, "auto").
void setAt(YAML::Node node, const std::string& path, const YAML::Node& value) {
  const size_t dot = path.find('.');
  if (dot == std::string::npos) {
    node[path] = value;
    return;
  }
  setAt(node[path.substr(0, dot)], path.substr(dot + 1), value);
}

// The paths the integration fills in (fill_match and fill_only in trainer_config_process and
// trainer_config_finalize).
bool filledIn(const std::string& path) {
  static const char* const derived[] = {"scheduler.params.warmup_max_lr",
                                        "zero_optimization.reduce_bucket_size",
                                        "zero_optimization.stage3_prefetch_bucket_size",
                                        "zero_optimization.stage3_param_persistence_threshold"};
  for (const char* k : kBatchKeys)
    if (path == k) return true;
  for (const FromFlag& f : kFromFlag)
    if (path == f.path) return true;
  return std::find(std::begin(derived), std::end(derived), path) != std::end(derived);
}

bool isAuto(const YAML::Node& v) { return v.IsScalar() && v.Scalar() == "auto"; }

void take(YAML::Node n, const std::string& path, int depth, std::vector<std::string>& out) {
  if (!n.IsMap() || depth > 3) return;  // the integration's paths are at most three keys deep
  std::vector<std::string> taken;
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();
    const std::string at = config_keys::join(path, key);
    if (isAuto(kv.second) && filledIn(at)) {
      taken.push_back(key);
      out.push_back(at);
    } else {
      take(kv.second, at, depth + 1, out);
    }
  }
  for (const auto& key : taken) n.remove(key);
}

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

std::optional<int64_t> modelHiddenSize(const std::string& model, const nn::ModelOptions& o) {
  if (model == "mlp") return o.hidden.empty() ? 128 : *std::max_element(o.hidden.begin(), o.hidden.end());
  if (model == "gpt")
    return o.n_embd > 0 ? o.n_embd : nn::gptPreset(o.model_type.empty() ? "gpt-mini" : o.model_type).n_embd;
  if (model == "llama")
    return o.n_embd > 0 ? o.n_embd
                        : nn::llamaPreset(o.model_type.empty() ? "llama-tiny" : o.model_type).n_embd;
  return std::nullopt;
}

HfAutoValues::HfAutoValues(YAML::Node root) {
  take(root, "", 0, paths_);
  for (const FromFlag& f : kFromFlag) {
    if (!has(f.path)) continue;
    if (!f.trainer_default) {
      // Known when the run's length is: the scheduler's "auto" (optim's registry) stands for it.
      setAt(root, f.path, YAML::Node("auto"));
      config_keys::note(std::string(f.path) + ": \"auto\" -> " + f.flag +
                        ", as Hugging Face Trainer fills it in");
      continue;
    }
    setAt(root, f.path, YAML::Load(f.trainer_default));
    config_keys::note(std::string(f.path) + ": \"auto\" -> " + f.trainer_default +
                      " (as Hugging Face Trainer fills it in: " + f.flag + "; --set " + f.path +
                      "=VALUE gives another)");
  }
}

bool HfAutoValues::has(const std::string& path) const {
  return std::find(paths_.begin(), paths_.end(), path) != paths_.end();
}

void HfAutoValues::checkBatch(const std::optional<int64_t>& train, std::optional<int64_t>& micro) const {
  if (train || micro) return;
  std::string autos;
  for (const char* k : kBatchKeys)
    if (has(k)) autos += (autos.empty() ? "" : ", ") + std::string(k);
  if (autos.empty()) return;  // resolveBatchSizes says what is missing
  config_keys::refuse(
      autos + ": \"auto\" needs a per-device batch size, which Hugging Face Trainer takes from " +
      "--per_device_train_batch_size and lockstep's config does not have; give it with --set " +
      "train_micro_batch_size_per_gpu=N");
  micro = 1;  // a stand-in, so that reading goes on: the refusal fails the parse
}

void HfAutoValues::noteBatch(const BatchSizes& b, int64_t world) const {
  const int64_t values[] = {b.train_batch_size, b.micro_batch_size, b.gradient_accumulation_steps};
  for (size_t i = 0; i < std::size(kBatchKeys); ++i) {
    if (!has(kBatchKeys[i])) continue;
    config_keys::note(
        std::string(kBatchKeys[i]) + ": \"auto\" -> " + std::to_string(values[i]) +
        " (train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x world "
        "size: " +
        std::to_string(b.train_batch_size) + " = " + std::to_string(b.micro_batch_size) + " x " +
        std::to_string(b.gradient_accumulation_steps) + " x " + std::to_string(world) + ")");
  }
}

void HfAutoValues::fillScheduler(YAML::Node root, const optim::OptimizerSpec& optimizer) const {
  const std::string path = "scheduler.params.warmup_max_lr";
  if (!has(path)) return;
  const double lr = optim::hyperDouble(optim::makeOptimizer(optimizer, {})->defaults(), "lr");
  root["scheduler"]["params"]["warmup_max_lr"] = lr;
  config_keys::note(path + ": \"auto\" -> " + number(lr) +
                    ", the optimizer's lr (Hugging Face Trainer fills in --learning_rate for both)");
}

void HfAutoValues::fillZero(YAML::Node root, const std::string& model,
                            const nn::ModelOptions& options) const {
  const std::string section = "zero_optimization.";
  struct Derived {
    const char* key;
    bool stage3_only;
    const char* formula;
    double (*value)(double hidden);
  };
  static const Derived derived[] = {
      {"reduce_bucket_size", false, "hidden x hidden", [](double h) { return h * h; }},
      {"stage3_prefetch_bucket_size", true, "0.9 x hidden x hidden", [](double h) { return 0.9 * h * h; }},
      {"stage3_param_persistence_threshold", true, "10 x hidden", [](double h) { return 10 * h; }},
  };
  // Read through a const node: a non-const operator[] would turn a section that is not a mapping
  // into one, hiding the error parseZeroConfig gives for it.
  const YAML::Node zero = root["zero_optimization"];
  if (!zero.IsMap()) return;
  int64_t stage = 0;
  if (zero["stage"]) {
    try {
      stage = config_keys::convert<int64_t>(zero["stage"], "zero_optimization.stage");
    } catch (const ValueError&) {
      return;  // parseZeroConfig reports the bad stage; nothing is filled in against a guessed one
    }
  }
  const std::optional<int64_t> hidden = modelHiddenSize(model, options);
  for (const Derived& d : derived) {
    const std::string path = section + d.key;
    if (!has(path)) continue;
    if (d.stage3_only && stage != 3) {
      config_keys::refuse(
          path + ": \"auto\" is filled in by Hugging Face Trainer at ZeRO stage 3 only; at stage " +
          std::to_string(stage) + " DeepSpeed refuses it too: give a number or remove the key");
      continue;
    }
    if (!hidden) {
      config_keys::refuse(
          path + ": \"auto\" is " + d.formula + " in Hugging Face Trainer, and model " + model +
          " has no hidden size (gpt and llama: n_embd; mlp: its widest hidden layer): give a number");
      continue;
    }
    const auto v = static_cast<int64_t>(std::floor(d.value(static_cast<double>(*hidden))));
    YAML::Node section = root["zero_optimization"];
    section[d.key] = v;
    config_keys::note(path + ": \"auto\" -> " + std::to_string(v) + " (" + d.formula + ", hidden " +
                      std::to_string(*hidden) + " of model " + model +
                      ", as Hugging Face Trainer fills it in)");
  }
}

}  // namespace lockstep::train
