#include "lockstep/nn/module.h"

#include <sstream>

namespace lockstep::nn {

namespace {
std::string joinName(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  return name.empty() ? prefix : prefix + "." + name;
}

std::string quotedList(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += ", ";
    out += "\"" + names[i] + "\"";
  }
  return out;
}
}  // namespace

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

Variable Module::forward(const Variable&) {
  throw NotSupportedError(detail::concat(type_name_, " does not implement forward(x)"));
}

Variable Module::operator()(const Variable& x) {
  if (hooks_.empty()) return forward(x);
  // A copy: a hook may remove itself.
  const std::vector<ForwardHooks> hooks = hooks_;
  for (const auto& h : hooks) {
    if (h.pre) h.pre(*this);
  }
  Variable y = forward(x);
  for (const auto& h : hooks) {
    if (h.post) y = h.post(*this, y);
  }
  return y;
}

size_t Module::registerForwardHooks(ForwardPreHook pre, ForwardHook post) {
  hooks_.push_back({next_hook_, std::move(pre), std::move(post)});
  return next_hook_++;
}

void Module::removeForwardHooks(size_t handle) {
  std::erase_if(hooks_, [handle](const ForwardHooks& h) { return h.handle == handle; });
}

void Module::checkNewName(const std::string& name, const char* what) const {
  LOCKSTEP_ENFORCE(!name.empty() && name.find('.') == std::string::npos, ValueError, type_name_, ": ", what,
                   " name '", name, "' must be non-empty and contain no '.'");
  auto taken = [&](const auto& list) {
    for (const auto& [n, v] : list) {
      if (n == name) return true;
    }
    return false;
  };
  LOCKSTEP_ENFORCE(!taken(params_) && !taken(buffers_) && !taken(children_), ValueError, type_name_,
                   ": cannot add ", what, " '", name, "': the name is already used");
}

namespace {
thread_local ParameterRegisteredHook parameter_registered;
}  // namespace

ParameterRegisteredHook setParameterRegisteredHook(ParameterRegisteredHook hook) {
  std::swap(hook, parameter_registered);
  return hook;
}

Variable Module::registerParameter(const std::string& name, Tensor value, bool requires_grad) {
  if (!value.defined()) return Variable();
  checkNewName(name, "parameter");
  Variable v(std::move(value), requires_grad);
  v.setName(name);
  if (parameter_registered) parameter_registered(v);
  params_.emplace_back(name, v);
  return v;
}

Tensor Module::registerBuffer(const std::string& name, Tensor value) {
  checkNewName(name, "buffer");
  buffers_.emplace_back(name, value);
  return value;
}

Tensor& Module::buffer(const std::string& name) {
  for (auto& [n, t] : buffers_) {
    if (n == name) return t;
  }
  throw ValueError(detail::concat(type_name_, " has no buffer '", name, "'"));
}

void Module::registerChild(const std::string& name, std::shared_ptr<Module> module) {
  LOCKSTEP_ENFORCE(module != nullptr, ValueError, type_name_, ": child module '", name, "' is null");
  checkNewName(name, "module");
  module->train(training_);
  children_.emplace_back(name, std::move(module));
}

std::vector<std::pair<std::string, Variable>> Module::namedParameters(bool recurse) const {
  std::vector<std::pair<std::string, Variable>> out(params_.begin(), params_.end());
  if (!recurse) return out;
  for (const auto& [cname, child] : children_) {
    for (auto& [n, p] : child->namedParameters(true)) out.emplace_back(joinName(cname, n), p);
  }
  return out;
}

std::vector<Variable> Module::parameters(bool recurse) const {
  std::vector<Variable> out;
  for (auto& [n, p] : namedParameters(recurse)) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::namedBuffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out(buffers_.begin(), buffers_.end());
  if (!recurse) return out;
  for (const auto& [cname, child] : children_) {
    for (auto& [n, b] : child->namedBuffers(true)) out.emplace_back(joinName(cname, n), b);
  }
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, b] : namedBuffers(recurse)) out.push_back(b);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, c] : children_) out.push_back(c);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::namedModules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [cname, child] : children_) {
    for (auto& [n, m] : child->namedModules()) out.emplace_back(joinName(cname, n), m);
  }
  return out;
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (const auto& [n, c] : children_) {
    if (n == name) return c;
  }
  throw ValueError(detail::concat(type_name_, " has no child module '", name, "'"));
}

int64_t Module::numParameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

StateDict Module::stateDict() const {
  // PyTorch order: a module's own parameters, then its own buffers, then each child's entries.
  StateDict out;
  for (const auto& [n, p] : params_) out.insert(n, p.tensor());
  for (const auto& [n, b] : buffers_) out.insert(n, b);
  for (const auto& [cname, child] : children_) {
    for (const auto& [n, t] : child->stateDict()) out.insert(joinName(cname, n), t);
  }
  return out;
}

void Module::renameOnLoad(std::string old_prefix, std::string new_prefix) {
  LOCKSTEP_ENFORCE(!old_prefix.empty() && old_prefix != new_prefix, ValueError, type_name_,
                   ": renameOnLoad needs two different prefixes, got '", old_prefix, "' and '", new_prefix,
                   "'");
  renamed_.emplace_back(std::move(old_prefix), std::move(new_prefix));
}

std::string Module::currentKey(const std::string& saved) const {
  for (const auto& [from, to] : renamed_) {
    if (saved.starts_with(from)) return to + saved.substr(from.size());
  }
  return saved;
}

void Module::loadStateDict(const StateDict& given, bool strict) {
  // Keys under earlier names take the current ones, unless the state has both.
  StateDict renamed;
  if (!renamed_.empty()) {
    for (const auto& [name, t] : given) {
      const std::string key = currentKey(name);
      renamed.insert(key != name && given.contains(key) ? name : key, t);
    }
  }
  const StateDict& state = renamed_.empty() ? given : renamed;
  StateDict mine = stateDict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, dst] : mine) {
    const Tensor* src = state.find(name);
    if (!src || !src->defined()) {
      missing.push_back(name);
    } else if (src->shape() != dst.shape()) {
      mismatched.push_back(detail::concat("size mismatch for ", name, ": checkpoint has shape ",
                                          shapeToString(src->shape()), ", the model has ",
                                          shapeToString(dst.shape())));
    } else if (isFloating(src->dtype()) != isFloating(dst.dtype())) {
      // (torch casts; but integer values for a floating tensor, or the reverse, are not its values)
      mismatched.push_back(detail::concat("dtype mismatch for ", name, ": checkpoint has dtype ",
                                          dtypeName(src->dtype()), ", the model has ",
                                          dtypeName(dst.dtype())));
    }
  }
  for (const auto& [name, t] : state) {
    if (!mine.contains(name)) unexpected.push_back(name);
  }
  bool fail = !mismatched.empty() || (strict && (!missing.empty() || !unexpected.empty()));
  if (fail) {
    std::ostringstream os;
    os << "loadStateDict: error(s) loading the state dict of " << type_name_ << ":";
    if (strict && !missing.empty()) os << "\n  missing key(s): " << quotedList(missing) << ".";
    if (strict && !unexpected.empty()) os << "\n  unexpected key(s): " << quotedList(unexpected) << ".";
    for (const auto& m : mismatched) os << "\n  " << m << ".";
    throw ValueError(os.str());
  }
  for (const auto& [name, dst] : mine) {
    const Tensor* src = state.find(name);
    if (!src || !src->defined()) continue;
    Tensor target = dst;
    if (!target.sharesStorage(*src) || target.storageOffset() != src->storageOffset()) target.copyFrom(*src);
  }
}

void Module::zeroGrad(bool set_to_none) {
  for (auto& p : parameters()) p.zeroGrad(set_to_none);
}

void Module::to(DType dtype) {
  LOCKSTEP_ENFORCE(isFloating(dtype), ValueError, "Module::to: ", dtypeName(dtype),
                   " is not a floating dtype");
  for (auto& [n, p] : params_) {
    if (isFloating(p.dtype()) && p.dtype() != dtype) {
      p.tensor() = p.tensor().to(dtype);
      p.zeroGrad(true);
    }
  }
  for (auto& [n, b] : buffers_) {
    if (isFloating(b.dtype()) && b.dtype() != dtype) b = b.to(dtype);
  }
  for (auto& [n, c] : children_) c->to(dtype);
}

void Module::to(const Device& device) {
  checkDeviceAvailable(device);
  for (auto& [n, p] : params_) {
    if (p.tensor().defined() && p.tensor().device() != device) {
      p.tensor() = p.tensor().to(device);
      p.zeroGrad(true);
    }
  }
  // Every buffer moves, integer ones too (as in PyTorch): BatchNorm's num_batches_tracked is then
  // counted by a kernel on the device, so no step waits to read it and a CUDA graph replay counts.
  for (auto& [n, b] : buffers_) {
    if (b.defined() && b.device() != device) b = b.to(device);
  }
  for (auto& [n, c] : children_) c->to(device);
}

Device Module::device() const {
  for (const auto& [n, p] : params_) {
    if (p.tensor().defined()) return p.tensor().device();
  }
  for (const auto& [n, b] : buffers_) {
    if (b.defined()) return b.device();
  }
  for (const auto& [n, c] : children_) {
    Device d = c->device();
    if (d.isCuda()) return d;
  }
  return Device::cpu();
}

std::string Module::describe() const {
  std::string out;
  describeInto(out, 0);
  return out;
}

void Module::describeInto(std::string& out, int indent) const {
  out += type_name_ + "(" + extraRepr();
  if (!children_.empty()) {
    out += "\n";
    for (const auto& [n, c] : children_) {
      out += std::string(static_cast<size_t>(indent + 2), ' ') + "(" + n + "): ";
      c->describeInto(out, indent + 2);
      out += "\n";
    }
    out += std::string(static_cast<size_t>(indent), ' ');
  }
  out += ")";
}

}  // namespace lockstep::nn
