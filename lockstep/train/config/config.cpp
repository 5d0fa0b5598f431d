#include "lockstep/train/config/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <variant>

#include "lockstep/comm/backend_registry.h"
#include "lockstep/data/datasets/registry.h"
#include "lockstep/parallel/pipeline/schedule.h"
#include "lockstep/train/config/config_backends.h"
#include "lockstep/train/config/config_document.h"
#include "lockstep/train/config/config_keys.h"
#include "lockstep/train/config/hf_auto.h"
#include "lockstep/train/config/language_config.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"
#include "lockstep/util/suggest.h"

namespace lockstep::train {

bool DataConfig::isLanguage() const { return data::findDataset(dataset).language; }

BatchSizes resolveBatchSizes(std::optional<int64_t> train, std::optional<int64_t> micro,
                             std::optional<int64_t> accum, int64_t world, const std::string& world_name) {
  auto str = [](std::optional<int64_t> v) { return v ? std::to_string(*v) : std::string("unset"); };
  auto fail = [&](const std::string& why) {
    throw ValueError("inconsistent batch sizes: train_batch_size=" + str(train) +
                     ", train_micro_batch_size_per_gpu=" + str(micro) + ", gradient_accumulation_steps=" +
                     str(accum) + ", " + world_name + " " + std::to_string(world) + ": " + why);
  };
  for (auto v : {train, micro, accum}) {
    if (v && *v <= 0) fail("every batch size must be positive");
  }
  // The products, checked: a huge micro-batch or accumulation count must not wrap around (to 0, a
  // division by zero below, or to a value that passes the checks).
  auto times = [&](int64_t a, int64_t c) {
    int64_t r = 0;
    if (__builtin_mul_overflow(a, c, &r))
      fail("their product (the samples of one step) is past the largest batch size, 2^63 - 1");
    return r;
  };
  BatchSizes b;
  if (train && micro && accum) {
    if (*train != times(times(*micro, *accum), world))
      fail("train_batch_size must equal micro * accumulation * world size");
    b = {*train, *micro, *accum};
  } else if (train && micro) {
    if (*train % times(*micro, world) != 0) fail("train_batch_size is not a multiple of micro * world size");
    b = {*train, *micro, *train / (*micro * world)};
  } else if (train && accum) {
    if (*train % times(*accum, world) != 0)
      fail("train_batch_size is not a multiple of accumulation * world size");
    b = {*train, *train / (*accum * world), *accum};
  } else if (micro && accum) {
    b = {times(times(*micro, *accum), world), *micro, *accum};
  } else if (train) {
    if (*train % world != 0) fail("train_batch_size is not a multiple of the world size");
    b = {*train, *train / world, 1};
  } else if (micro) {
    b = {times(*micro, world), *micro, 1};
  } else {
    fail("set train_batch_size or train_micro_batch_size_per_gpu");
  }
  return b;
}

namespace {

using config_keys::convert;
using config_keys::get;
using config_keys::join;

// Every key of a section must be known (DeepSpeed's keys that lockstep has no feature for are
// judged by deepspeed_keys.h).
void checkKeys(const YAML::Node& n, const std::string& path, const std::vector<std::string>& known) {
  config_keys::checkKeys(n, path, known);
}

std::vector<int64_t> intList(const YAML::Node& v, const std::string& path) {
  if (!v.IsSequence()) throw ValueError(path + ": expected a list of integers");
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back(convert<int64_t>(v[i], path + "[" + std::to_string(i) + "]"));
  return out;
}

// A YAML value as the registry's SpecValue: a quoted scalar is a string (as in JSON); a plain one
// is a boolean, an integer, a real or else a string, in that order; a list must hold numbers.
optim::SpecValue specValue(const YAML::Node& v, const std::string& path) {
  if (v.IsSequence()) {
    std::vector<double> out;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string at = path + "[" + std::to_string(i) + "]";
      if (v[i].IsScalar() && v[i].Tag() == "!")
        throw ValueError(at + ": expected a number, got '" + v[i].Scalar() + "'");
      out.push_back(convert<double>(v[i], at));
    }
    return out;
  }
  if (!v.IsScalar())
    throw ValueError(path + ": expected a value or a list of numbers, got " +
                     (v.IsMap() ? "a mapping" : "null"));
  if (v.Tag() == "!") return v.Scalar();
  bool b;
  int64_t i;
  double d;
  if (YAML::convert<bool>::decode(v, b)) return b;
  if (YAML::convert<int64_t>::decode(v, i)) return i;
  if (YAML::convert<double>::decode(v, d)) return convert<double>(v, path);  // finite, or the error
  return v.Scalar();
}

// `section: {type, params}` -> (type, params); the registry checks the names and values.
void parseSection(const YAML::Node& n, const std::string& section, std::string& type,
                  optim::SpecParams& params) {
  checkKeys(n, section, {"type", "params"});
  get(n, section, "type", type);
  if (!n["params"]) return;
  const YAML::Node p = n["params"];
  if (!p.IsMap()) throw ValueError(section + ".params must be a mapping");
  for (const auto& kv : p) {
    const std::string key = kv.first.as<std::string>();
    params[key] = specValue(kv.second, section + ".params." + key);
  }
}

void parseMonitor(const YAML::Node& n, const std::string& path, MonitorConfig& m) {
  checkKeys(n, path, {"enabled", "output_path", "job_name"});
  get(n, path, "enabled", m.enabled);
  get(n, path, "output_path", m.output_path);
  get(n, path, "job_name", m.job_name);
}

void parseModel(const YAML::Node& n, TrainConfig& c) {
  if (n.IsScalar()) {
    c.model = n.as<std::string>();
    return;
  }
  checkKeys(n, "model",
            {"name", "in_features", "out_features", "hidden", "num_classes", "model_type", "vocab_size",
             "block_size", "n_layer", "n_head", "n_kv_head", "n_embd", "intermediate_size", "dropout",
             "checkpoint_every"});
  if (!n["name"]) throw ValueError("model.name is required when model is a mapping");
  nn::ModelOptions& m = c.model_options;
  get(n, "model", "name", c.model);
  get(n, "model", "in_features", m.in_features);
  get(n, "model", "out_features", m.out_features);
  get(n, "model", "num_classes", m.num_classes);
  if (n["hidden"]) m.hidden = intList(n["hidden"], "model.hidden");
  // A key the model does not read is refused, not ignored: linear and mlp are sized by
  // in_features / out_features / hidden, the CNNs and ResNets by num_classes.
  const bool dense = c.model == "linear" || c.model == "mlp";
  if (dense && n["num_classes"])
    throw ValueError("model.num_classes is not read by " + c.model + ": its outputs are model.out_features");
  for (const char* key : {"in_features", "out_features", "hidden"}) {
    if (!dense && n[key])
      throw ValueError(
          std::string("model.") + key + " is read only by linear and mlp, not by " + c.model +
          (std::string(key) == "out_features" ? ": its outputs are model.num_classes" : ": remove it"));
  }
  parseLanguageModelKeys(n, c);
}

// A key that only other datasets read is refused rather than ignored: data.input_shape in a config
// for mnist means something the run would not do. Unknown keys are checkKeys' to report.
void refuseOtherDatasetsKeys(const YAML::Node& n, const data::DatasetInfo& dataset) {
  const auto has = [](const std::vector<std::string>& keys, const std::string& key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  };
  for (const auto& entry : n) {
    const std::string key = entry.first.as<std::string>();
    if (has(data::kCommonDataKeys, key) || has(dataset.keys, key)) continue;
    std::vector<std::string> readers;
    for (const std::string& name : data::datasetNames()) {
      if (has(data::findDataset(name).keys, key)) readers.push_back(name);
    }
    if (readers.empty()) continue;
    std::string list;
    for (size_t i = 0; i < readers.size(); ++i)
      list += (i == 0 ? "" : i + 1 == readers.size() ? " and " : ", ") + readers[i];
    throw ValueError("data." + key + " is read only by " + list + ", not by " + dataset.name + ": remove it");
  }
}

void parseData(const YAML::Node& n, DataConfig& d) {
  // The keys every dataset reads, then those some registered dataset reads.
  std::vector<std::string> keys = data::kCommonDataKeys;
  for (const std::string& name : data::datasetNames()) {
    for (const std::string& key : data::findDataset(name).keys) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
  }
  checkKeys(n, "data", keys);
  get(n, "data", "dataset", d.dataset);
  const data::DatasetInfo* dataset = nullptr;
  try {
    dataset = &data::findDataset(d.dataset);
  } catch (const ValueError& e) {
    throw ValueError(std::string("data.dataset: ") + e.what());
  }
  refuseOtherDatasetsKeys(n, *dataset);
  get(n, "data", "root", d.root);
  get(n, "data", "val_split", d.val_split);
  if (d.val_split < 0 || d.val_split >= 1) throw ValueError("data.val_split must be in [0, 1)");
  get(n, "data", "num_workers", d.num_workers);
  get(n, "data", "size", d.size);
  get(n, "data", "test_size", d.test_size);
  get(n, "data", "num_classes", d.num_classes);
  if (n["input_shape"]) d.input_shape = intList(n["input_shape"], "data.input_shape");
  // Sizes the synthetic data set is allocated from: bounded here, so that no product overflows.
  constexpr int64_t kMaxElements = int64_t{1} << 31;
  int64_t features = 1;
  for (int64_t v : d.input_shape) {
    if (v < 1 || v > kMaxElements || features * v > kMaxElements)
      throw ValueError("data.input_shape: every dimension must be positive and their product at most 2^31");
    features *= v;
  }
  if (d.input_shape.empty()) throw ValueError("data.input_shape must not be empty");
  for (auto [key, v] : {std::pair<const char*, int64_t>{"size", d.size},
                        {"test_size", d.test_size},
                        {"num_classes", d.num_classes}}) {
    if (v < 1 || v > kMaxElements) throw ValueError(std::string("data.") + key + " must be in [1, 2^31]");
  }
  // Each worker is a thread with batches prefetched for it (prefetch_factor): thousands would only
  // hold memory.
  if (d.num_workers < 0 || d.num_workers > 256)
    throw ValueError(
        "data.num_workers must be in [0, 256] (loader threads; the cores of a host are a good "
        "number), got " +
        std::to_string(d.num_workers));
  get(n, "data", "image_size", d.image_size);
  get(n, "data", "resize_size", d.resize_size);
  for (auto [key, v] :
       {std::pair<const char*, int64_t>{"image_size", d.image_size}, {"resize_size", d.resize_size}}) {
    if (v < 1 || v > 65535) throw ValueError(std::string("data.") + key + " must be in [1, 65535]");
  }
  get(n, "data", "skip_bad_files", d.skip_bad_files);
  get(n, "data", "exif_transpose", d.exif_transpose);
  get(n, "data", "dct_scaling", d.dct_scaling);
  get(n, "data", "train_list", d.train_list);
  get(n, "data", "val_list", d.val_list);
  if (n["transforms"]) {
    const YAML::Node t = n["transforms"];
    checkKeys(
        t, "data.transforms",
        {"normalize", "random_crop", "horizontal_flip", "random_resized_crop", "color_jitter", "to_dtype"});
    if (t["normalize"]) {
      checkKeys(t["normalize"], "data.transforms.normalize", {"mean", "std"});
      get(t["normalize"], "data.transforms.normalize", "mean", d.normalize_mean);
      get(t["normalize"], "data.transforms.normalize", "std", d.normalize_std);
    }
    // image_folder's transforms are its pipeline's (decoded images); the others' act on tensors.
    const bool images = d.dataset == "image_folder";
    for (const char* key : {"random_resized_crop", "color_jitter", "to_dtype"}) {
      if (t[key] && !images)
        throw ValueError(std::string("data.transforms.") + key + " is read only by image_folder, not by " +
                         d.dataset + ": remove it");
    }
    if (t["random_crop"] && images)
      throw ValueError(
          "data.transforms.random_crop is not image_folder's (its training crop is random_resized_crop): "
          "remove "
          "it");
    get(t, "data.transforms", "random_crop", d.random_crop);
    get(t, "data.transforms", "horizontal_flip", images ? d.image_horizontal_flip : d.horizontal_flip);
    if (const YAML::Node r = t["random_resized_crop"]) {
      const std::string path = "data.transforms.random_resized_crop";
      checkKeys(r, path, {"scale", "ratio"});
      for (auto [key, range] : {std::pair<const char*, std::array<double, 2>*>{"scale", &d.crop_scale},
                                {"ratio", &d.crop_ratio}}) {
        if (!r[key]) continue;
        const YAML::Node v = r[key];
        if (!v.IsSequence() || v.size() != 2)
          throw ValueError(path + "." + key + ": expected two numbers [min, max], as torchvision's");
        for (size_t i = 0; i < 2; ++i)
          (*range)[i] = convert<double>(v[i], path + "." + key + "[" + std::to_string(i) + "]");
        if (!((*range)[0] > 0 && (*range)[0] <= (*range)[1]))
          throw ValueError(path + "." + key + ": expected 0 < min <= max, got [" +
                           std::to_string((*range)[0]) + ", " + std::to_string((*range)[1]) + "]");
      }
      if (d.crop_scale[1] > 1.0) throw ValueError(path + ".scale: the crop's area fraction must be <= 1");
    }
    if (t["to_dtype"]) {
      std::string name;
      get(t, "data.transforms", "to_dtype", name);
      if (name == "float32" || name == "f32" || name == "fp32") {
        d.image_dtype = DType::f32;
      } else if (name == "bfloat16" || name == "bf16") {
        d.image_dtype = DType::bf16;
      } else {
        throw ValueError(
            "data.transforms.to_dtype: expected float32 or bfloat16 (the images' dtype after "
            "normalize, torchvision's ToDtype), got '" +
            name + "'");
      }
    }
    if (const YAML::Node j = t["color_jitter"]) {
      const std::string path = "data.transforms.color_jitter";
      checkKeys(j, path, {"brightness", "contrast", "saturation", "hue"});
      const char* names[] = {"brightness", "contrast", "saturation", "hue"};
      for (size_t i = 0; i < 4; ++i) {
        get(j, path, names[i], d.color_jitter[i]);
        const double top = i == 3 ? 0.5 : std::numeric_limits<double>::infinity();
        if (!(d.color_jitter[i] >= 0 && d.color_jitter[i] <= top))
          throw ValueError(path + "." + names[i] + " must be " + (i == 3 ? "in [0, 0.5]" : ">= 0") +
                           " (torchvision's ColorJitter), got " + std::to_string(d.color_jitter[i]));
      }
    }
  }
  if (d.root.empty()) d.root = dataset->default_root;
  if (d.root.empty() && !dataset->root_hint.empty()) throw ValueError("data.root: " + dataset->root_hint);
  // A leading ~ is the home directory, as torchvision's datasets read their root (expanduser).
  if (d.root == "~" || d.root.rfind("~/", 0) == 0) {
    const std::optional<std::string> home = env::get("HOME");
    if (!home || home->empty())
      throw ValueError("data.root: " + d.root + " starts with ~ but HOME is not set: give the full path");
    d.root = *home + d.root.substr(1);
  }
  if (!n["val_split"]) d.val_split = dataset->default_val_split;
  // A token directory's split is its own val.bin: a held-out fraction would change nothing.
  if (d.dataset == "tokens" && d.val_split > 0)
    throw ValueError(
        "data.val_split: the tokens dataset validates on the directory's val.bin (`lockstep data "
        "tokenize --val-fraction` chose the split); leave data.val_split out");
}

CudaGraph parseCudaGraph(const std::string& text, const std::string& source) {
  if (text == "auto") return CudaGraph::automatic;
  if (text == "true") return CudaGraph::always;
  if (text == "false") return CudaGraph::never;
  throw ValueError(source + ": cuda_graph: expected auto, true or false, got '" + text + "'");
}

// DeepSpeed's "fp16" section (runtime/constants.py FP16_*, same defaults as LossScalerOptions),
// "bf16" (or its older name "bfloat16") and "torch_autocast": mixed precision with autocast.
// Disabled sections are checked for unknown keys and otherwise ignored, as DeepSpeed does.
void parsePrecision(const YAML::Node& root, TrainConfig& c) {
  bool fp16 = false, bf16 = false;
  if (root["fp16"]) {
    const YAML::Node n = root["fp16"];
    checkKeys(n, "fp16",
              {"enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
               "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads",
               "raise_error_at_min_scale"});
    if (n["raise_error_at_min_scale"]) {
      // DynamicLossScaler's argument, which DeepSpeed's config does not take (its fp16 section
      // refuses the key): accepting it would make a config DeepSpeed refuses.
      config_keys::refuse(
          "fp16.raise_error_at_min_scale is not a DeepSpeed config key (DeepSpeed 0.19's config refuses "
          "it): with ZeRO an overflow at min_loss_scale stops the run, as DeepSpeed's DynamicLossScaler "
          "does; without ZeRO the scale stays at the minimum; remove the key");
    }
    get(n, "fp16", "enabled", fp16);
    optim::LossScalerOptions ls;
    get(n, "fp16", "loss_scale", ls.loss_scale);
    get(n, "fp16", "initial_scale_power", ls.initial_scale_power);
    get(n, "fp16", "loss_scale_window", ls.loss_scale_window);
    get(n, "fp16", "hysteresis", ls.hysteresis);
    get(n, "fp16", "consecutive_hysteresis", ls.consecutive_hysteresis);
    get(n, "fp16", "min_loss_scale", ls.min_loss_scale);
    bool master16 = false;
    get(n, "fp16", "fp16_master_weights_and_grads", master16);
    if (master16) {
      config_keys::refuse(
          "fp16.fp16_master_weights_and_grads: true is not supported yet (fp16 master weights, which "
          "DeepSpeed keeps only with ZeRO-Offload); remove the key or set it to false (f32 master "
          "weights), or use bf16 with bf16_master_weights_and_grads");
    }
    if (fp16) {
      try {
        optim::validateLossScalerOptions(ls);
      } catch (const ValueError& e) {
        throw ValueError(std::string("fp16: ") + e.what());
      }
      c.loss_scaler = ls;
      get(n, "fp16", "auto_cast", c.auto_cast);
      c.precision = parallel::Precision::fp16;
    }
  }
  // DeepSpeed reads the older name "bfloat16" only where "bf16" is absent (get_bfloat16_config).
  if (root["bf16"] && root["bfloat16"])
    c.notes.push_back("bfloat16 is ignored beside bf16 (its newer name), as DeepSpeed ignores it");
  for (const char* name : {"bf16", "bfloat16"}) {
    if (!root[name] || (std::string(name) == "bfloat16" && root["bf16"])) continue;
    const YAML::Node n = root[name];
    checkKeys(n, name,
              {"enabled", "bf16_master_weights_and_grads", "bf16_optimizer_states", "check_grad_overflow"});
    bool on = false;
    get(n, name, "enabled", on);
    bf16 = bf16 || on;
    if (!on) continue;  // the rest of a disabled section is ignored
    get(n, name, "bf16_master_weights_and_grads", c.bf16_master_weights);
    get(n, name, "bf16_optimizer_states", c.bf16_optimizer_states);
    get(n, name, "check_grad_overflow", c.bf16_check_grad_overflow);
  }
  if (fp16 && bf16) {
    throw ValueError(
        "fp16.enabled and bf16.enabled are both true; enable one of them (DeepSpeed refuses both too)");
  }
  if (bf16) c.precision = parallel::Precision::bf16;
  // torch_autocast (DeepSpeed's runtime/torch_autocast.py): the forward under torch.autocast in its
  // dtype, which is what lockstep's bf16 and fp16 are. Alone it keeps the parameters, gradients
  // and optimizer states f32 at every ZeRO stage (useMasterWeights), as DeepSpeed does; beside a
  // bf16 or fp16 section it must name that section's dtype.
  const YAML::Node ta = root["torch_autocast"];
  if (!ta || ta.IsNull()) return;
  checkKeys(ta, "torch_autocast", {"enabled", "dtype", "lower_precision_safe_modules"});
  bool on = false;
  get(ta, "torch_autocast", "enabled", on);
  if (!on) return;
  std::string dtype;
  get(ta, "torch_autocast", "dtype", dtype);
  // DeepSpeed's DtypeEnum spellings.
  const std::set<std::string> bf16_names = {"torch.bfloat16", "bfloat16", "bf16"},
                              fp16_names = {"torch.float16", "float16", "fp16", "half"};
  if (dtype.empty())
    throw ValueError(
        "torch_autocast.dtype: name it (bfloat16 or float16): torch.autocast's default depends on the device "
        "(float16 on a GPU, bfloat16 on a CPU)");
  const bool is_bf16 = bf16_names.count(dtype) > 0;
  if (!is_bf16 && !fp16_names.count(dtype))
    throw ValueError(
        "torch_autocast.dtype: expected bfloat16 or float16 (torch.bfloat16, bf16, torch.float16, "
        "fp16, half), got '" +
        dtype + "'");
  if (ta["lower_precision_safe_modules"] && !ta["lower_precision_safe_modules"].IsNull())
    config_keys::refuse(
        "torch_autocast.lower_precision_safe_modules is not supported yet (choosing the modules whose "
        "parameters DeepSpeed communicates in the autocast dtype; lockstep communicates them in f32 under "
        "torch_autocast alone); remove it");
  const auto want = is_bf16 ? parallel::Precision::bf16 : parallel::Precision::fp16;
  if ((bf16 || fp16) && c.precision != want)
    throw ValueError(std::string("torch_autocast.dtype ") + dtype + " and " + (bf16 ? "bf16" : "fp16") +
                     ".enabled ask for two precisions; make torch_autocast's dtype " +
                     (bf16 ? "bfloat16" : "float16") + " or drop one of them");
  if (bf16 || fp16) {
    c.notes.push_back(std::string("torch_autocast in ") + dtype + " beside " + (bf16 ? "bf16" : "fp16") +
                      ": lockstep's " + (bf16 ? "bf16" : "fp16") +
                      " runs the forward under autocast already");
    return;
  }
  if (!is_bf16)
    throw ValueError(
        "torch_autocast in float16 without an fp16 section is not supported yet (torch's GradScaler); use "
        "fp16: {enabled: true} for float16 autocast with loss scaling, or torch_autocast in bfloat16");
  c.precision = parallel::Precision::bf16;
  c.torch_autocast = true;
}

void applyOverride(YAML::Node root, const std::string& spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) throw ValueError("--set " + spec + ": expected key=value");
  std::vector<std::string> keys;
  const std::string path = spec.substr(0, eq);
  if (path.back() == '.') throw ValueError("--set " + spec + ": empty key component");
  std::stringstream ss(path);
  for (std::string k; std::getline(ss, k, '.');) {
    if (k.empty()) throw ValueError("--set " + spec + ": empty key component");
    keys.push_back(k);
  }
  YAML::Node value;
  try {
    value = YAML::Load(spec.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ValueError("--set " + spec + ": cannot parse the value: " + e.what());
  }
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    YAML::Node parent = chain.back();
    YAML::Node node = parent[keys[i]];
    if (i == 0 && keys[i] == "model" && node && node.IsScalar()) {
      // `model: mlp` given a key of its mapping form: {name: mlp, KEY: value}.
      YAML::Node named(YAML::NodeType::Map);
      named["name"] = node.Scalar();
      parent[keys[i]] = named;
    } else if (node && !node.IsMap() && !node.IsNull()) {
      std::string at;
      for (size_t j = 0; j <= i; ++j) at += (j ? "." : "") + keys[j];
      throw ValueError("--set " + spec + ": " + at + " is " + config_keys::describe(node) +
                       " in the config, not a mapping of keys");
    } else if (!node || !node.IsMap()) {
      parent[keys[i]] = YAML::Node(YAML::NodeType::Map);
    }
    chain.push_back(parent[keys[i]]);
  }
  chain.back()[keys.back()] = value;
}

}  // namespace

namespace {

// What a pipeline run does not combine with (yet), refused before any rank starts.
void checkPipelineFits(const TrainConfig& c, const YAML::Node& root, int64_t world,
                       const std::string& source) {
  const std::string where = source + ": pipeline: ";
  if (!nn::hasLayerSequence(c.model))
    throw ValueError(where + "model " + c.model +
                     " has no layer sequence, so it cannot be cut into pipeline stages; pipeline a model "
                     "that lists its layers (mlp, the CNNs, the ResNets, gpt, llama) or remove the pipeline "
                     "section");
  if (world < 2)
    throw ValueError(where + "a pipeline needs at least 2 ranks (one per stage), this job has " +
                     std::to_string(world) +
                     "; start it with --nproc-per-node N (N a multiple of pipeline.stages), or remove the "
                     "pipeline section");
  if (c.zero.stage >= 2)
    throw ValueError(where + "zero_optimization.stage " + std::to_string(c.zero.stage) +
                     " partitions gradients during each micro-batch's backward, which a pipeline's schedule "
                     "does not fit (DeepSpeed allows stages 0 and 1 with pipelines); set stage 0");
  try {  // the schedule's own rules (interleaved 1F1B's rounds of micro-batches)
    parallel::checkPipelineShape(
        parallel::parsePipelineSchedule(c.pipeline.schedule),
        {c.pipeline.stages, c.batch.gradient_accumulation_steps, c.pipeline.virtual_stages});
  } catch (const ValueError& e) {
    throw ValueError(where + e.what());
  }
  if (c.activation_checkpointing.present || c.model_options.checkpoint_every > 0)
    throw ValueError(where +
                     "a pipeline checkpoints activations by pipeline.activation_checkpoint_interval "
                     "(layers per segment on each stage); remove the activation_checkpointing "
                     "section and model.checkpoint_every");
  // Each stage averages its gradients over its replicas with DDP's reducer: its bucket size is
  // DDP's; the rest of the section configures a DistributedDataParallel a pipeline does not build.
  if (root["ddp"])
    for (const auto& kv : root["ddp"]) {
      const std::string key = kv.first.as<std::string>();
      if (key != "bucket_cap_mb")
        throw ValueError(where + "ddp." + key +
                         " configures DistributedDataParallel, which a pipeline does not use (each "
                         "stage averages its gradients over its replicas in buckets of "
                         "ddp.bucket_cap_mb, the one ddp key a pipeline takes); remove it");
    }
}

// Whether the optimizer's params hold `key`: true (a boolean).
bool specSaysTrue(const optim::SpecParams& params, const std::string& key) {
  const auto it = params.find(key);
  return it != params.end() && std::holds_alternative<bool>(it->second) && std::get<bool>(it->second);
}

// DeepSpeed's bf16 / fp16 with ZeRO: the model in 16 bits (parameters, gradients, their reductions
// and gathers) and f32 master weights in each rank's partition, stepped in f32 and rounded back
// (zero/optimizer.h's param_dtype). A pipeline's ZeRO-1 and the NVMe offloads keep f32 parameters
// under autocast (their swap files and stage buffers hold the parameters' own dtype); the note says so.
void useMasterWeights(TrainConfig& c, const YAML::Node& root) {
  const std::optional<DType> low = parallel::precisionDType(c.precision);
  // DeepSpeed's checks (runtime/config.py, base_optimizer.py's _configure_master_weights).
  if (c.bf16_optimizer_states && !c.bf16_master_weights)
    throw ValueError(
        "bf16.bf16_optimizer_states needs bf16.bf16_master_weights_and_grads: true too (bf16 "
        "optimizer states step bf16 master weights; DeepSpeed's rule)");
  if (c.bf16_master_weights && c.zero.stage == 0)
    throw ValueError(
        "bf16.bf16_master_weights_and_grads needs zero_optimization.stage 1, 2 or 3 (DeepSpeed's "
        "rule: the ZeRO optimizer keeps the master weights); set a stage or drop the key");
  if (c.bf16_master_weights) {
    // Adam's states beside bf16 master weights: bf16 with bf16_optimizer_states (which overrides
    // fp32_optimizer_states, as in DeepSpeed); else DeepSpeedCPUAdam's on the host (ZeRO-Offload),
    // f32 unless fp32_optimizer_states says false.
    std::string type = c.optimizer.type;
    std::transform(type.begin(), type.end(), type.begin(), [](unsigned char ch) { return std::tolower(ch); });
    const bool adam = type == "adam" || type == "adamw";
    if (!c.bf16_optimizer_states && (c.zero.offload_optimizer_device != OffloadDevice::cpu || !adam))
      throw ValueError(
          "bf16.bf16_master_weights_and_grads without bf16_optimizer_states keeps f32 optimizer states, "
          "which DeepSpeed allows only on the host: zero_optimization.offload_optimizer {device: cpu} with "
          "Adam or AdamW (DeepSpeedCPUAdam); add that, or set bf16_optimizer_states: true");
    if (c.bf16_optimizer_states && adam) {
      if (specSaysTrue(c.optimizer.params, "fp32_optimizer_states"))
        c.notes.push_back(
            "optimizer.params.fp32_optimizer_states: true is overridden by bf16.bf16_optimizer_states: the "
            "states are bf16 (as DeepSpeed overrides it)");
      c.optimizer.params["fp32_optimizer_states"] = false;
    } else if (!c.bf16_optimizer_states && !c.optimizer.params.count("fp32_optimizer_states")) {
      c.optimizer.params["fp32_optimizer_states"] = true;  // DeepSpeedCPUAdam's default
    }
  }
  if (!low || c.zero.stage == 0) return;
  if (c.torch_autocast) {
    c.zero.notes.push_back(
        "torch_autocast in bfloat16 with zero_optimization.stage " + std::to_string(c.zero.stage) +
        ": the parameters, their gradients (reduced in f32) and the optimizer states stay "
        "f32; the forward computes under autocast in bf16 (DeepSpeed reduces Linear and Conv "
        "gradients in bf16)");
    return;
  }
  const char* name = c.precision == parallel::Precision::bf16 ? "bf16" : "fp16";
  const std::string stage = "zero_optimization.stage " + std::to_string(c.zero.stage);
  const bool nvme = c.zero.offload_optimizer_device == OffloadDevice::nvme ||
                    c.zero.offload_param_device == OffloadDevice::nvme;
  // DeepSpeed's keys asking for f32 gradient accumulation, or (fp16) for the division by the world
  // size before an f16 sum that could overflow: f32 gradients do both.
  std::string f32_for;
  const YAML::Node types = root["data_types"];
  if (types && types.IsMap() && types["grad_accum_dtype"] && types["grad_accum_dtype"].IsScalar() &&
      types["grad_accum_dtype"].Scalar() == "fp32")
    f32_for = "data_types.grad_accum_dtype fp32 (gradients accumulated in f32)";
  if (c.precision == parallel::Precision::fp16) {
    bool prescale = false;
    double predivide = 1.0;
    get(root, "", "prescale_gradients", prescale);
    get(root, "", "gradient_predivide_factor", predivide);
    if (prescale) f32_for = "prescale_gradients (no f16 sum to overflow)";
    if (predivide != 1.0)
      f32_for = "gradient_predivide_factor " + root["gradient_predivide_factor"].Scalar() +
                " (no f16 sum to overflow)";
  }
  if (c.bf16_master_weights) {
    const std::string with = c.pipeline.enabled() ? "a pipeline"
                             : nvme               ? "NVMe offload"
                             : !f32_for.empty()   ? f32_for
                                                  : "";
    if (!with.empty()) {
      config_keys::refuse("bf16.bf16_master_weights_and_grads with " + with +
                          " is not supported yet (bf16 master weights there); drop the key (f32 master "
                          "weights)");
      return;
    }
    c.zero.options.param_dtype = DType::bf16;
    c.zero.options.master_weights_in_param_dtype = true;
    // fp32_optimizer_states as set above, where DeepSpeed decides it.
    const bool f32_states = specSaysTrue(c.optimizer.params, "fp32_optimizer_states");
    c.zero.notes.push_back("bf16 with " + stage + " and bf16_master_weights_and_grads" +
                           (c.bf16_optimizer_states ? ", bf16_optimizer_states" : "") +
                           ": the parameters and their gradients (reduced and gathered in bf16) are bf16, "
                           "the parameters their own master weights, stepped in f32 arithmetic and rounded; "
                           "the optimizer states are " +
                           (f32_states ? "f32 (fp32_optimizer_states)" : "bf16") +
                           ", as DeepSpeed keeps them");
    return;
  }
  if (c.pipeline.enabled() || nvme || !f32_for.empty()) {
    const std::string why = nvme                   ? " and NVMe offload"
                            : c.pipeline.enabled() ? " in a pipeline"
                                                   : " and " + f32_for;
    c.zero.notes.push_back(std::string(name) + " with " + stage + why +
                           ": the parameters, their gradients and the optimizer states stay f32 (autocast "
                           "computes in " +
                           name + "); DeepSpeed would keep " + name + " parameters with f32 master weights");
    return;
  }
  c.zero.options.param_dtype = low;
  c.zero.notes.push_back(std::string(name) + " with " + stage + ": " + name +
                         " parameters and gradients (reduced and gathered in " + name +
                         "), f32 master weights and optimizer states in each rank's partition, as "
                         "DeepSpeed keeps them");
}

// ZeRO on a GPU: stages 1-3 keep the partition in GPU memory; at stages 1 and 2 offload_optimizer
// {device: cpu} (ZeRO-Offload) puts its optimizer states and update on the host. The other offloads
// are not implemented there yet: an error before any rank starts, not a key that does nothing.
void checkZeroOnDevice(ZeroConfig& z, const Device& device, const std::string& source) {
  if (!device.isCuda() || z.stage == 0) return;
  // NVMe on a GPU: ZeRO-Infinity's configuration (stage 3, the parameters' pieces on nvme, which
  // needs the optimizer's there too: zero_config.cpp says so).
  if (z.offload_optimizer_device == OffloadDevice::nvme && z.offload_param_device != OffloadDevice::nvme)
    throw ValueError(source +
                     ": zero_optimization.offload_optimizer with device nvme on a GPU takes ZeRO-Infinity's "
                     "configuration: stage 3 with offload_param {device: nvme} too; or use device cpu "
                     "(ZeRO-Offload), or train with device: cpu");
  if (z.offload_param_device == OffloadDevice::cpu && z.offload_optimizer_device != OffloadDevice::cpu)
    throw ValueError(source +
                     ": zero_optimization.offload_param.device cpu needs offload_optimizer.device cpu too "
                     "on a GPU: the host pieces of the parameters are what the optimizer steps, so it "
                     "steps them on the host; add offload_optimizer: {device: cpu}");
  // The CPU run's notes ("nothing is moved") are not this run's.
  std::erase_if(z.notes, [](const std::string& n) {
    return n.rfind("zero_optimization.offload_optimizer.device cpu", 0) == 0 ||
           n.rfind("zero_optimization.offload_param.device cpu", 0) == 0;
  });
  if (z.offload_optimizer_device == OffloadDevice::cpu) {
    z.options.offload_optimizer_cpu = true;
    z.notes.push_back(std::string("zero_optimization") +
                      ".offload_optimizer.device cpu (ZeRO-Offload): each rank's optimizer states and update "
                      "live on the host; its gradients go to the host before each step and its updated "
                      "parameters back to the GPU" +
                      std::string(z.options.offload_optimizer_pin_memory ? ", through pinned memory." : "."));
  }
  if (z.offload_param_device == OffloadDevice::cpu) {
    z.options.offload_param_cpu = true;
    z.notes.push_back(std::string("zero_optimization") +
                      ".offload_param.device cpu: each rank's partition of the parameters lives in host " +
                      (z.options.offload_param_pin_memory ? "pinned " : "") +
                      "memory, stepped there; a layer's parameters are copied to the GPU for its forward "
                      "and backward only. buffer_count, buffer_size and max_in_cpu have no effect without "
                      "nvme.");
  }
}

TrainConfig parse(const std::string& text, const std::vector<std::string>& overrides, int64_t world,
                  const std::string& source) {
  YAML::Node root = loadConfigDocument(text, source);
  if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw ValueError(source + ": the top level must be a mapping");
  checkNoDuplicateKeys(root, "", source);
  for (const auto& o : overrides) applyOverride(root, o);
  // Hugging Face Trainer's "auto" values, taken out here and filled in where the values they
  // derive from are known (hf_auto.h).
  const HfAutoValues autos(root);
  checkKeys(root, "",
            {"train_batch_size",
             "train_micro_batch_size_per_gpu",
             "train_micro_batch_size_per_rank",
             "gradient_accumulation_steps",
             "optimizer",
             "scheduler",
             "gradient_clipping",
             "steps_per_print",
             "tensorboard",
             "csv_monitor",
             "model",
             "data",
             "epochs",
             "max_steps",
             "seed",
             "checkpoint",
             "eval",
             "backend",
             "device",
             "cuda_graph",
             "backends",
             "comm_timeout_seconds",
             "ddp",
             "fp16",
             "bf16",
             "bfloat16",
             "torch_autocast",
             "activation_checkpointing",
             "sample",
             "zero_optimization",
             "zero_allow_untested_optimizer",
             "pipeline"});
  TrainConfig c;
  // Before the batch sizes: with a pipeline they count data-parallel replicas, not ranks.
  int64_t replicas = world;
  std::string replicas_name = "world size";
  if (root["pipeline"]) {
    c.pipeline = parsePipelineConfig(root["pipeline"]);
    replicas = pipelineReplicas(c.pipeline.stages, world);
    replicas_name = "data-parallel size (world size " + std::to_string(world) + " / pipeline.stages " +
                    std::to_string(c.pipeline.stages) + ")";
  }
  std::optional<int64_t> train, micro, accum;
  get(root, "", "train_batch_size", train);
  get(root, "", "train_micro_batch_size_per_gpu", micro);
  get(root, "", "train_micro_batch_size_per_rank", micro);
  get(root, "", "gradient_accumulation_steps", accum);
  autos.checkBatch(train, micro);
  c.batch = resolveBatchSizes(train, micro, accum, replicas, replicas_name);
  autos.noteBatch(c.batch, replicas);
  if (root["optimizer"]) parseSection(root["optimizer"], "optimizer", c.optimizer.type, c.optimizer.params);
  // The registry's refusals (a type or a parameter lockstep lacks) are collected with the others,
  // so that reading goes on to the rest of the config.
  bool optimizer_valid = true;
  try {
    optim::validateOptimizerSpec(c.optimizer);
  } catch (const ValueError& e) {
    config_keys::refuse(e.what());
    optimizer_valid = false;
  }
  if (root["scheduler"] && optimizer_valid) autos.fillScheduler(root, c.optimizer);
  if (root["scheduler"]) parseSection(root["scheduler"], "scheduler", c.scheduler.type, c.scheduler.params);
  try {
    optim::validateSchedulerSpec(c.scheduler);
  } catch (const ValueError& e) {
    config_keys::refuse(e.what());
  }
  if (root["tensorboard"]) parseMonitor(root["tensorboard"], "tensorboard", c.tensorboard);
  if (root["csv_monitor"]) parseMonitor(root["csv_monitor"], "csv_monitor", c.csv_monitor);
  if (root["model"]) parseModel(root["model"], c);
  if (root["data"]) parseData(root["data"], c.data);
  parseLanguageSections(root, c);
  get(root, "", "gradient_clipping", c.gradient_clipping);
  parsePrecision(root, c);
  if (c.data.image_dtype == DType::bf16 && c.precision != parallel::Precision::bf16) {
    throw ValueError(
        "data.transforms.to_dtype: bfloat16 needs bf16.enabled: true (the images then meet bf16 "
        "computation, as autocast's cast would give them; an f32 or fp16 run computes in another dtype): "
        "enable bf16 or remove to_dtype");
  }
  get(root, "", "steps_per_print", c.steps_per_print);
  get(root, "", "epochs", c.epochs);
  get(root, "", "max_steps", c.max_steps);
  get(root, "", "seed", c.seed);
  get(root, "", "backend", c.backend);
  comm::checkBackendName(c.backend);  // here, so that a bad name fails before any rank starts
  std::string device = "cpu", cuda_graph = "auto";
  get(root, "", "device", device);
  get(root, "", "cuda_graph", cuda_graph);
  c.cuda_graph = parseCudaGraph(cuda_graph, source);
  {
    c.device = parseDevice(device);  // "cpu", "cuda" or "cuda:N"; ValueError names the text
    c.device_per_local_rank = device == "cuda";
    const Device d = c.device;
    if (d.isCuda() && !c.device_per_local_rank && world > 1) {
      throw ValueError(source + ": device: '" + device + "' names one GPU for all " + std::to_string(world) +
                       " ranks; write device: cuda, and each rank trains on cuda:LOCAL_RANK");
    }
    // On a GPU these two would have work to do, which lockstep does not do: an error, not a no-op.
    const ActivationCheckpointingConfig& a = c.activation_checkpointing;
    for (auto [on, key] :
         {std::pair{a.cpu_checkpointing, "cpu_checkpointing (moving checkpoints to CPU memory)"},
          std::pair{a.synchronize_checkpoint_boundary,
                    "synchronize_checkpoint_boundary (a device synchronize at each boundary)"}}) {
      if (d.isCuda() && on) {
        throw ValueError(source + ": activation_checkpointing." + key +
                         " is not implemented on a GPU; set it to false or remove it");
      }
    }
  }
  if (root["backends"]) c.gpu_math = parseBackendsConfig(root["backends"]);
  get(root, "", "comm_timeout_seconds", c.comm_timeout_seconds);
  if (c.comm_timeout_seconds && !(*c.comm_timeout_seconds > 0 && *c.comm_timeout_seconds <= 864000)) {
    throw ValueError(source + ": comm_timeout_seconds: expected a number of seconds in (0, 864000], got " +
                     std::to_string(*c.comm_timeout_seconds));
  }
  if (root["checkpoint"]) {
    const YAML::Node k = root["checkpoint"];
    checkKeys(k, "checkpoint", {"dir", "every_steps", "keep_last"});
    get(k, "checkpoint", "dir", c.checkpoint_dir);
    get(k, "checkpoint", "every_steps", c.checkpoint_every_steps);
    get(k, "checkpoint", "keep_last", c.checkpoint_keep_last);
  }
  if (root["eval"]) {
    checkKeys(root["eval"], "eval", {"every_epochs", "every_steps"});
    get(root["eval"], "eval", "every_epochs", c.eval_every_epochs);
    get(root["eval"], "eval", "every_steps", c.eval_every_steps);
  }
  if (root["ddp"]) {
    const YAML::Node k = root["ddp"];
    checkKeys(k, "ddp",
              {"bucket_cap_mb", "find_unused_parameters", "gradient_as_bucket_view", "broadcast_buffers",
               "comm_hook"});
    get(k, "ddp", "bucket_cap_mb", c.ddp.bucket_cap_mb);
    get(k, "ddp", "find_unused_parameters", c.ddp.find_unused_parameters);
    get(k, "ddp", "gradient_as_bucket_view", c.ddp.gradient_as_bucket_view);
    get(k, "ddp", "broadcast_buffers", c.ddp.broadcast_buffers);
    get(k, "ddp", "comm_hook", c.ddp.comm_hook);
    if (!(c.ddp.bucket_cap_mb > 0)) throw ValueError("ddp.bucket_cap_mb must be positive");
    try {
      parallel::makeCommHook(c.ddp.comm_hook);
    } catch (const ValueError& e) {
      throw ValueError(std::string("ddp.comm_hook: ") + e.what());
    }
  }
  if (root["zero_optimization"]) {
    autos.fillZero(root, c.model, c.model_options);
    c.zero = parseZeroConfig(root["zero_optimization"]);
    checkZeroOnDevice(c.zero, c.device, source);
  }
  const auto models = nn::modelNames();
  if (std::find(models.begin(), models.end(), c.model) == models.end()) {
    std::string near = nearestKey(c.model, models), known;
    for (const auto& m : models) known += (known.empty() ? "" : ", ") + m;
    throw ValueError("model: unknown model " + c.model +
                     (near.empty() ? "" : " (did you mean " + near + "?)") + "; known: " + known);
  }
  if (c.pipeline.enabled()) checkPipelineFits(c, root, world, source);
  useMasterWeights(c, root);
  // DeepSpeed's engine asserts that ZeRO's optimizer is one it tested (ZERO_SUPPORTED_OPTIMIZERS:
  // torch's Adam and AdamW, FusedAdam, DeepSpeedCPUAdam, Adagrad, Lion; _do_optimizer_sanity_check)
  // unless zero_allow_untested_optimizer is true: of lockstep's, SGD.
  bool allow_untested = false;
  get(root, "", "zero_allow_untested_optimizer", allow_untested);
  std::string optimizer_type = c.optimizer.type;
  std::transform(optimizer_type.begin(), optimizer_type.end(), optimizer_type.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  if (optimizer_valid && c.zero.stage >= 1 && optimizer_type != "adam" && optimizer_type != "adamw" &&
      !allow_untested) {
    config_keys::refuse("zero_optimization.stage " + std::to_string(c.zero.stage) + " with optimizer.type " +
                        c.optimizer.type +
                        ": DeepSpeed refuses ZeRO with an optimizer it has not tested with it (Adam, AdamW, "
                        "Adagrad, Lion) unless zero_allow_untested_optimizer: true; add that key (lockstep's "
                        "ZeRO steps " +
                        c.optimizer.type + " exactly as without ZeRO) or use Adam or AdamW");
  }
  if (c.loss_scaler && c.zero.stage == 0) {
    // Without ZeRO DeepSpeed's engine scales with FP16_Optimizer, which has no hysteresis.
    const YAML::Node fp16 = static_cast<const YAML::Node&>(root)["fp16"];
    for (const char* key : {"hysteresis", "consecutive_hysteresis"}) {
      if (fp16[key])
        config_keys::note(std::string("fp16.") + key +
                          " has no effect without ZeRO (zero_optimization.stage 0): DeepSpeed's "
                          "FP16_Optimizer then divides the loss scale at every overflow; ZeRO stages 1-3 "
                          "use it");
    }
  }
  if (c.pipeline.enabled() && c.zero.options.offload_optimizer_cpu)
    throw ValueError(source +
                     ": zero_optimization.offload_optimizer (ZeRO-Offload) is not implemented for a "
                     "pipeline on a GPU yet; remove it or drop the pipeline section");
  if (c.epochs <= 0) throw ValueError("epochs must be positive");
  if (c.max_steps < 0) throw ValueError("max_steps must be >= 0");
  if (c.steps_per_print <= 0) throw ValueError("steps_per_print must be positive");
  if (c.eval_every_epochs <= 0) throw ValueError("eval.every_epochs must be positive");
  if (c.eval_every_steps < 0)
    throw ValueError("eval.every_steps must be >= 0 (0: at the ends of epochs only), got " +
                     std::to_string(c.eval_every_steps));
  if (c.checkpoint_every_steps < 0)
    throw ValueError("checkpoint.every_steps must be >= 0 (0: only at the ends of epochs), got " +
                     std::to_string(c.checkpoint_every_steps));
  if (c.checkpoint_keep_last < 0)
    throw ValueError("checkpoint.keep_last must be >= 0 (0: keep every checkpoint), got " +
                     std::to_string(c.checkpoint_keep_last));
  c.document = configDocumentToJson(root, source);
  c.identity_hash = configIdentityHash(c.document);
  return c;
}

// Every refused key at once: one line each, then the error that stopped the parse, if any.
[[noreturn]] void throwRefused(const std::string& source, const std::vector<std::string>& refused,
                               const std::string& also = "") {
  if (refused.size() == 1 && also.empty()) throw ValueError(refused[0]);
  std::string msg =
      source + ": " + std::to_string(refused.size()) + (refused.size() == 1 ? " refusal:" : " refusals:");
  for (const auto& r : refused) msg += "\n  " + r;
  if (!also.empty()) msg += "\n  " + also;
  throw ValueError(msg);
}

}  // namespace

TrainConfig parseTrainConfig(const std::string& text, const std::vector<std::string>& overrides,
                             int64_t world, const std::string& source) {
  config_keys::Collect collect;
  TrainConfig c;
  try {
    c = parse(text, overrides, world, source);
  } catch (const ValueError& e) {
    if (collect.refused.empty()) throw;
    throwRefused(source, collect.refused, e.what());
  }
  if (!collect.refused.empty()) throwRefused(source, collect.refused);
  // The keys' notes, then those the parse added to the config itself (kept: they were dropped).
  collect.notes.insert(collect.notes.end(), c.notes.begin(), c.notes.end());
  c.notes = std::move(collect.notes);
  return c;
}

TrainConfig loadTrainConfig(const std::string& path, const std::vector<std::string>& overrides,
                            int64_t world) {
  std::ifstream in(path);
  // Why and where: the errno of the open (a directory opens, then reads nothing), the path made
  // absolute (a relative one is from a working directory the user may not have in mind).
  const int err = !in ? (errno != 0 ? errno : EIO) : std::filesystem::is_directory(path) ? EISDIR : 0;
  if (err != 0) {
    std::error_code ec;
    const auto where = std::filesystem::absolute(path, ec).lexically_normal().string();
    throw ValueError("cannot read config file '" + (ec ? path : where) + "': " + std::strerror(err));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parseTrainConfig(ss.str(), overrides, world, path);
}

}  // namespace lockstep::train
