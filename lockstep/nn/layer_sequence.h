#pragma once
// LayerSequence: a model as an ordered list of layers whose composition is exactly the model's
// forward (DeepSpeed's PipelineModule layer list, torch.distributed.pipelining's split of a
// sequential model): what a pipeline cuts into stages. The layers share the model's parameters
// (they hold the model's own submodules), so a stage built from them trains the model.
//
// A parameter used by more than one layer (GPT's token embedding, also its output layer) is
// listed in `tied`, as DeepSpeed's TiedLayerSpec: a pipeline that puts those layers on different
// stages keeps a copy on each and sums their gradients.
//
// Module::layers() is another list: the units ZeRO-3 gathers one at a time (a transformer's
// blocks), not the whole forward.
#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/nn/module.h"

namespace lockstep::nn {

struct TiedParameter {
  /// The parameter's name in the model ("transformer.wte.weight").
  std::string name;
  /// The layers that use it, ascending.
  std::vector<size_t> layers;
};

/// Named submodules, in order.
using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

struct LayerSequence {
  /// The layers' names: the model's submodule they are ("layer1.0", "transformer.h.3") or a name
  /// for the piece of forward they run ("embedding", "head").
  std::vector<std::string> names;
  std::vector<std::shared_ptr<Module>> layers;
  std::vector<TiedParameter> tied;

  size_t size() const { return layers.size(); }
  /// Runs layers [begin, end) one after another through operator() (end past the last: the last).
  Variable forward(const Variable& x, size_t begin = 0,
                   size_t end = std::numeric_limits<size_t>::max()) const;
};

/// A model that can be run as a sequence of layers. The zoo's models implement it.
class HasLayerSequence {
 public:
  virtual ~HasLayerSequence() = default;
  /// The layers, in order, with their names; running them one after another through operator()
  /// gives bitwise the model's forward (activation checkpointing aside: a pipeline checkpoints by
  /// its own interval). The layers hold the model's submodules and may call
  /// the model: the model must outlive them.
  virtual NamedModules sequenceLayers() = 0;
};

/// The model's layer sequence, its tied parameters found, its layers in the model's mode (training
/// or evaluation): the model's own (HasLayerSequence), or a Sequential's modules. ValueError naming the
/// model's type when it has none.
LayerSequence layerSequence(Module& model);

/// A layer made of some of a model's submodules and the piece of the model's forward that uses them
/// (a stem, an embedding, a head). `parts` are registered as its children, so its parameters are
/// theirs; `run` gets the layer itself (for isTraining()) and the input.
class SequenceLayer : public Module {
 public:
  using Run = std::function<Variable(Module& self, const Variable& x)>;
  SequenceLayer(std::string type_name, NamedModules parts, Run run);
  Variable forward(const Variable& x) override { return run_(*this, x); }

 private:
  Run run_;
};

}  // namespace lockstep::nn
