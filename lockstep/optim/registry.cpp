#include "lockstep/optim/registry.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <set>
#include <sstream>
#include <type_traits>

#include "lockstep/optim/adam.h"
#include "lockstep/optim/sgd.h"
#include "lockstep/optim/warmup_lr.h"
#include "lockstep/util/error.h"
#include "lockstep/util/suggest.h"

namespace lockstep::optim {

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string describe(const SpecValue& v) {
  std::ostringstream os;
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, bool>)
          os << (x ? "true" : "false");
        else if constexpr (std::is_same_v<X, std::string>)
          os << "'" << x << "'";
        else if constexpr (std::is_same_v<X, std::vector<double>>)
          os << "a list";
        else
          os << x;
      },
      v);
  return os.str();
}

// Reads one section's params (optimizer.params or scheduler.params) for one type. Every key must be
// one the type declares (checked first, so a typo is reported before anything else); every
// declared key must be read (an invariant: a key that is accepted is used). Errors name the key as
// "<section>.params.<key>".
class ParamReader {
 public:
  ParamReader(std::string section, std::string type, const SpecParams& params, std::vector<std::string> keys)
      : section_(std::move(section)), type_(std::move(type)), params_(params), keys_(std::move(keys)) {
    for (const auto& [key, value] : params_) {
      if (std::find(keys_.begin(), keys_.end(), key) != keys_.end()) continue;
      if (section_ == "optimizer" && key == "max_grad_norm") {
        // DeepSpeed's engine refuses it too (_configure_basic_optimizer).
        throw ValueError(path(key) + " is not supported: use the top-level gradient_clipping key");
      }
      std::string msg = "unknown key " + path(key);
      const std::string near = nearestKey(key, keys_);
      if (!near.empty()) msg += " (did you mean " + path(near) + "?)";
      throw ValueError(msg + "; " + type_ + " takes " + joined(keys_));
    }
  }

  std::string path(const std::string& key) const { return section_ + ".params." + key; }
  bool has(const std::string& key) const { return params_.count(key) != 0; }
  /// Whether the key holds the string `text`.
  bool holds(const std::string& key, const std::string& text) const {
    const auto it = params_.find(key);
    const auto* s = it == params_.end() ? nullptr : std::get_if<std::string>(&it->second);
    return s != nullptr && *s == text;
  }

  double number(const std::string& key, double def) {
    const SpecValue* v = find(key);
    if (!v) return def;
    if (const auto* d = std::get_if<double>(v)) return *d;
    if (const auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
    wrongType(key, "a number", *v);
  }
  int64_t integer(const std::string& key, int64_t def) {
    const SpecValue* v = find(key);
    if (!v) return def;
    if (const auto* i = std::get_if<int64_t>(v)) return *i;
    wrongType(key, "an integer", *v);
  }
  bool boolean(const std::string& key, bool def) {
    const SpecValue* v = find(key);
    if (!v) return def;
    if (const auto* b = std::get_if<bool>(v)) return *b;
    wrongType(key, "a boolean", *v);
  }
  std::string string(const std::string& key, const std::string& def) {
    const SpecValue* v = find(key);
    if (!v) return def;
    if (const auto* s = std::get_if<std::string>(v)) return *s;
    wrongType(key, "a string", *v);
  }
  /// A list of numbers (a YAML/JSON list), `count` long unless count is 0.
  std::vector<double> numbers(const std::string& key, std::vector<double> def, size_t count) {
    const SpecValue* v = find(key);
    if (!v) return def;
    const std::string what = count ? "a list of " + std::to_string(count) + " numbers" : "a list of numbers";
    const auto* l = std::get_if<std::vector<double>>(v);
    if (!l) wrongType(key, what, *v);
    if (count && l->size() != count)
      invalid(key, "expected " + what + ", got " + std::to_string(l->size()) + " numbers");
    return *l;
  }
  /// A list of integers (numbers with no fraction).
  std::vector<int64_t> integers(const std::string& key, std::vector<int64_t> def) {
    const SpecValue* v = find(key);
    if (!v) return def;
    const auto* l = std::get_if<std::vector<double>>(v);
    if (!l) wrongType(key, "a list of integers", *v);
    std::vector<int64_t> out;
    for (size_t i = 0; i < l->size(); ++i) {
      const double x = (*l)[i];
      if (!(x == std::floor(x)) || std::abs(x) > 9.0e15)
        invalid(key + "[" + std::to_string(i) + "]", "expected an integer, got " + describe(x));
      out.push_back(static_cast<int64_t>(x));
    }
    return out;
  }

  void atLeast(const std::string& key, double value, double min) {
    if (!(value >= min)) invalid(key, "must be >= " + describe(min) + ", got " + describe(value));
  }
  void positive(const std::string& key, double value) {
    if (!(value > 0)) invalid(key, "must be positive, got " + describe(value));
  }
  [[noreturn]] void invalid(const std::string& key, const std::string& why) const {
    throw ValueError(path(key) + ": " + why);
  }

  /// Every declared key was read: an InternalError otherwise (an entry that accepts a key and
  /// ignores it is a bug in this file, not in the config).
  void finish() const {
    for (const auto& k : keys_)
      LOCKSTEP_CHECK(read_.count(k), type_, " declares ", path(k), " but never reads it");
  }

 private:
  const SpecValue* find(const std::string& key) {
    LOCKSTEP_CHECK(std::find(keys_.begin(), keys_.end(), key) != keys_.end(), type_, " reads ", path(key),
                   " without declaring it");
    read_.insert(key);
    auto it = params_.find(key);
    return it == params_.end() ? nullptr : &it->second;
  }
  [[noreturn]] void wrongType(const std::string& key, const std::string& what, const SpecValue& got) const {
    throw ValueError(path(key) + ": expected " + what + ", got " + describe(got));
  }

  std::string section_, type_;
  const SpecParams& params_;
  std::vector<std::string> keys_;
  std::set<std::string> read_;
};

// ---- optimizers --------------------------------------------------------------------------------

using OptimizerBuilder = std::function<std::unique_ptr<Optimizer>(std::vector<Variable>)>;

struct OptimizerEntry {
  std::string name;
  /// DeepSpeed lower-cases the names of its own optimizers (adam, adamw, ...; runtime/config.py,
  /// DEEPSPEED_OPTIMIZERS) but takes any other from torch.optim by its exact name (SGD).
  bool any_case;
  std::vector<std::string> keys;
  /// Reads and checks every key; the result builds the optimizer.
  std::function<OptimizerBuilder(ParamReader&)> parse;
};

// DeepSpeed's Adam/AdamW (runtime/engine.py, _configure_basic_optimizer): adam_w_mode (default
// true) and torch_adam (default false) are popped from the params; the update is decoupled
// (AdamW) when the type is AdamW or adam_w_mode holds. torch_adam builds torch.optim.Adam/AdamW,
// else FusedAdam (ops/adam/fused_adam.py), whose weight_decay defaults to 0 while torch's AdamW's
// defaults to 1e-2. lockstep's update is torch's, so torch_adam changes only that default.
OptimizerBuilder parseAdam(ParamReader& r, bool adamw_type) {
  AdamOptions o;
  o.lr = r.number("lr", 1e-3);
  r.atLeast("lr", o.lr, 0.0);
  const auto betas = r.numbers("betas", {0.9, 0.999}, 2);
  for (size_t i = 0; i < 2; ++i) {
    if (!(betas[i] >= 0.0 && betas[i] < 1.0))
      r.invalid("betas[" + std::to_string(i) + "]", "must be in [0, 1), got " + describe(betas[i]));
  }
  o.beta1 = betas[0], o.beta2 = betas[1];
  o.eps = r.number("eps", 1e-8);
  r.atLeast("eps", o.eps, 0.0);
  o.amsgrad = r.boolean("amsgrad", false);
  // FusedAdam's and DeepSpeedCPUAdam's bias_correction (default true). torch's Adam has no such
  // option (DeepSpeed hands it the key and torch raises a TypeError).
  o.bias_correction = r.boolean("bias_correction", true);
  // DeepSpeed pops fp32_optimizer_states and hands it to DeepSpeedCPUAdam (ZeRO-Offload), which
  // keeps the states in f32 when true (its default), else in the dtype of the values it steps: f32
  // either way for f32 master weights. Unset here, the states take the dtype of the values (torch's
  // and FusedAdam's way); the config sets DeepSpeedCPUAdam's default where bf16 master weights meet
  // it (bf16.bf16_master_weights_and_grads without bf16_optimizer_states, which overrides it).
  o.fp32_states = r.boolean("fp32_optimizer_states", false);
  const bool torch_adam = r.boolean("torch_adam", false);
  if (o.amsgrad && !torch_adam) {
    // DeepSpeed's FusedAdam and DeepSpeedCPUAdam raise "does not support the AMSGrad variant".
    r.invalid("amsgrad",
              "true needs torch_adam: true (DeepSpeed's FusedAdam and DeepSpeedCPUAdam refuse AMSGrad; only "
              "torch's Adam has it)");
  }
  if (torch_adam && !o.bias_correction) {
    r.invalid("bias_correction",
              "false needs DeepSpeed's FusedAdam: torch's Adam (torch_adam: true) always corrects; drop one "
              "of the two");
  }
  const bool adam_w_mode = r.boolean("adam_w_mode", true);
  if (adamw_type && !adam_w_mode) {
    // DeepSpeed ignores it for AdamW; an accepted key must do what it says, so refuse it.
    r.invalid("adam_w_mode",
              "false has no effect with type AdamW (always decoupled); use type Adam for L2 decay");
  }
  const bool decoupled = adamw_type || adam_w_mode;
  o.weight_decay = r.number("weight_decay", torch_adam && decoupled ? 1e-2 : 0.0);
  r.atLeast("weight_decay", o.weight_decay, 0.0);
  return [o, decoupled](std::vector<Variable> params) -> std::unique_ptr<Optimizer> {
    if (!decoupled) return std::make_unique<Adam>(std::move(params), o);
    AdamWOptions w;
    static_cast<AdamOptions&>(w) = o;
    return std::make_unique<AdamW>(std::move(params), w);
  };
}

OptimizerBuilder parseSgd(ParamReader& r) {
  SGDOptions o;
  o.lr = r.number("lr", 1e-3);
  r.atLeast("lr", o.lr, 0.0);
  o.momentum = r.number("momentum", 0.0);
  r.atLeast("momentum", o.momentum, 0.0);
  o.dampening = r.number("dampening", 0.0);
  o.weight_decay = r.number("weight_decay", 0.0);
  r.atLeast("weight_decay", o.weight_decay, 0.0);
  o.nesterov = r.boolean("nesterov", false);
  if (o.nesterov && !(o.momentum > 0.0 && o.dampening == 0.0))
    r.invalid("nesterov", "needs a positive momentum and zero dampening");
  return [o](std::vector<Variable> params) { return std::make_unique<SGD>(std::move(params), o); };
}

const std::vector<OptimizerEntry>& optimizers() {
  static const std::vector<std::string> adam_keys = {
      "lr",           "betas",           "eps",
      "weight_decay", "amsgrad",         "adam_w_mode",
      "torch_adam",   "bias_correction", "fp32_optimizer_states"};
  static const std::vector<OptimizerEntry> entries = {
      {"Adam", true, adam_keys, [](ParamReader& r) { return parseAdam(r, false); }},
      {"AdamW", true, adam_keys, [](ParamReader& r) { return parseAdam(r, true); }},
      {"SGD", false, {"lr", "momentum", "dampening", "weight_decay", "nesterov"}, parseSgd},
  };
  return entries;
}

bool sameIgnoringCase(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

template <typename Entry>
const Entry& findEntry(const std::vector<Entry>& entries, const std::string& section, const std::string& type,
                       const std::vector<std::string>& names) {
  for (const auto& e : entries) {
    if constexpr (requires { e.any_case; }) {
      if (e.any_case && sameIgnoringCase(e.name, type)) return e;
    }
    if (e.name == type) return e;
  }
  std::string msg = section + ".type: " + (type.empty() ? "(empty)" : type) + " is not supported yet";
  const std::string near = nearestKey(type, names);
  if (!near.empty()) msg += " (did you mean " + near + "?)";
  throw ValueError(msg + "; lockstep has " + joined(names));
}

OptimizerBuilder parseOptimizer(const OptimizerSpec& spec) {
  const auto& e = findEntry(optimizers(), "optimizer", spec.type, optimizerNames());
  ParamReader r("optimizer", e.name, spec.params, e.keys);
  OptimizerBuilder b = e.parse(r);
  r.finish();
  return b;
}

// ---- schedulers --------------------------------------------------------------------------------
// The trainer and the engine step every scheduler once per optimizer step (DeepSpeed's
// convention), so StepLR's step_size, MultiStepLR's milestones and CosineAnnealingLR's T_max count
// steps.

using SchedulerBuilder = std::function<std::unique_ptr<LRScheduler>(Optimizer&, int64_t total_steps)>;

struct SchedulerEntry {
  std::string name;
  std::vector<std::string> keys;
  std::function<SchedulerBuilder(ParamReader&)> parse;
};

// DeepSpeed's WarmupLR / WarmupDecayLR keys and defaults (runtime/lr_schedules.py, DeepSpeed
// 0.19): WarmupLR's warmup_max_lr defaults to each group's lr, WarmupDecayLR's to 0.001. A
// negative warmup_num_steps is refused (DeepSpeed 0.19 refuses 0 too, but 0 is what Hugging Face
// Trainer fills "auto" with when no warmup is asked for, so it keeps DeepSpeed's older meaning:
// max(2, n) steps). WarmupDecayLR's total_num_steps is required (a positional argument there),
// "auto" (Hugging Face Trainer's) being the run's total steps: -1 in the result.
WarmupDecayLROptions parseWarmup(ParamReader& r, bool decay) {
  WarmupDecayLROptions o;
  if (!decay) o.warmup_max_lr.reset();
  o.warmup_min_lr = r.number("warmup_min_lr", o.warmup_min_lr);
  const double max_lr = r.number("warmup_max_lr", 0.0);
  if (r.has("warmup_max_lr")) o.warmup_max_lr = max_lr;
  o.warmup_num_steps = r.integer("warmup_num_steps", o.warmup_num_steps);
  r.atLeast("warmup_num_steps", static_cast<double>(o.warmup_num_steps), 0.0);
  const std::string type = r.string("warmup_type", "log");
  if (type != "log" && type != "linear")
    r.invalid("warmup_type", "expected log or linear, got '" + type + "'");
  o.warmup_type = warmupTypeFromName(type);
  if (decay) {
    if (!r.has("total_num_steps")) {
      r.invalid("total_num_steps",
                "required for WarmupDecayLR (DeepSpeed's has no default): the step the lr reaches "
                "warmup_min_lr at, or \"auto\" for the run's total steps");
    }
    if (r.holds("total_num_steps", "auto")) {
      r.string("total_num_steps", "");  // read
      o.total_num_steps = -1;
    } else {
      o.total_num_steps = r.integer("total_num_steps", 0);
      r.atLeast("total_num_steps", static_cast<double>(o.total_num_steps), 0.0);
    }
  }
  return o;
}

const std::vector<SchedulerEntry>& schedulers() {
  static const std::vector<std::string> warmup_keys = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                                                       "warmup_type"};
  static const std::vector<SchedulerEntry> entries = {
      {"WarmupLR", warmup_keys,
       [](ParamReader& r) -> SchedulerBuilder {
         const WarmupLROptions o = parseWarmup(r, false);
         return [o](Optimizer& opt, int64_t) { return std::make_unique<WarmupLR>(opt, o); };
       }},
      {"WarmupDecayLR",
       {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "total_num_steps"},
       [](ParamReader& r) -> SchedulerBuilder {
         const WarmupDecayLROptions o = parseWarmup(r, true);
         return [o](Optimizer& opt, int64_t total_steps) {
           WarmupDecayLROptions w = o;
           if (w.total_num_steps < 0) w.total_num_steps = total_steps;  // "auto"
           return std::make_unique<WarmupDecayLR>(opt, w);
         };
       }},
      {"StepLR",
       {"step_size", "gamma"},
       [](ParamReader& r) -> SchedulerBuilder {
         StepLROptions o;
         // Required, as torch's StepLR (DeepSpeed passes the params to it) requires it.
         if (!r.has("step_size")) r.invalid("step_size", "required for StepLR (optimizer steps per decay)");
         o.step_size = r.integer("step_size", 1);
         r.positive("step_size", static_cast<double>(o.step_size));
         o.gamma = r.number("gamma", 0.1);
         return [o](Optimizer& opt, int64_t) { return std::make_unique<StepLR>(opt, o); };
       }},
      {"MultiStepLR",
       {"milestones", "gamma"},
       [](ParamReader& r) -> SchedulerBuilder {
         MultiStepLROptions o;
         if (!r.has("milestones"))
           r.invalid("milestones", "required for MultiStepLR (a list of step counts)");
         o.milestones = r.integers("milestones", {});
         o.gamma = r.number("gamma", 0.1);
         return [o](Optimizer& opt, int64_t) { return std::make_unique<MultiStepLR>(opt, o); };
       }},
      {"CosineAnnealingLR",
       {"T_max", "eta_min"},
       [](ParamReader& r) -> SchedulerBuilder {
         CosineAnnealingLROptions o;
         // Required and spelt T_max, as torch's CosineAnnealingLR takes it.
         if (!r.has("T_max"))
           r.invalid("T_max", "required for CosineAnnealingLR (optimizer steps of the half cosine)");
         o.t_max = r.integer("T_max", 1);
         r.positive("T_max", static_cast<double>(o.t_max));
         o.eta_min = r.number("eta_min", 0.0);
         return [o](Optimizer& opt, int64_t) { return std::make_unique<CosineAnnealingLR>(opt, o); };
       }},
  };
  return entries;
}

SchedulerBuilder parseScheduler(const SchedulerSpec& spec) {
  if (spec.type.empty()) {
    LOCKSTEP_ENFORCE(spec.params.empty(), ValueError,
                     "scheduler.type: missing, but scheduler.params is given; use one of ",
                     joined(schedulerNames()));
    return nullptr;
  }
  const auto& e = findEntry(schedulers(), "scheduler", spec.type, schedulerNames());
  ParamReader r("scheduler", e.name, spec.params, e.keys);
  SchedulerBuilder b = e.parse(r);
  r.finish();
  return b;
}

}  // namespace

std::vector<std::string> optimizerNames() {
  std::vector<std::string> out;
  for (const auto& e : optimizers()) out.push_back(e.name);
  return out;
}

std::vector<std::string> schedulerNames() {
  std::vector<std::string> out;
  for (const auto& e : schedulers()) out.push_back(e.name);
  return out;
}

void validateOptimizerSpec(const OptimizerSpec& spec) {
  // Building over no parameters also runs the optimizer's own checks, without touching anything.
  parseOptimizer(spec)({});
}

void validateSchedulerSpec(const SchedulerSpec& spec) { parseScheduler(spec); }

std::unique_ptr<Optimizer> makeOptimizer(const OptimizerSpec& spec, std::vector<autograd::Variable> params) {
  return parseOptimizer(spec)(std::move(params));
}

std::unique_ptr<LRScheduler> makeScheduler(const SchedulerSpec& spec, Optimizer& optimizer,
                                           int64_t total_steps) {
  SchedulerBuilder b = parseScheduler(spec);
  return b ? b(optimizer, total_steps) : nullptr;
}

}  // namespace lockstep::optim
