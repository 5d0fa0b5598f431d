#pragma once
// One call from the launch environment to a wrapped (model, optimizer, loader), in the spirit of
// Accelerate's prepare() and Paddle Fleet's distributed_model / distributed_optimizer:
//
//   auto job = parallel::prepare(model, optimizer, train_set, {.loader = {.batch_size = 32}});
//   for (epoch ...) { job.setEpoch(epoch); for (auto& b : *job.loader) { ... job.model()->forward ... } }
//
// It is the training engine (engine.h) for a loop the user writes with their own optimizer: in a
// world of one rank (no launcher) the model is returned as is and the loader shuffles the whole
// dataset; otherwise the process group is created from the environment (collective), the model is
// wrapped in DistributedDataParallel and the loader reads this rank's DistributedSampler shard.
// The optimizer needs no wrapping: DDP shares the module's parameters and averages their
// gradients before backward() returns. job.engine runs whole steps (accumulation, clipping) for
// loops that want them.
#include <memory>
#include <string>

#include "lockstep/data/data_loader.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/parallel/engine.h"

namespace lockstep::parallel {

struct PrepareOptions {
  /// The engine's options: backend, ddp, gradient_accumulation_steps, gradient_clipping (its
  /// optimizer and scheduler specs are unused: the caller's optimizer is).
  EngineOptions engine;
  /// batch_size is per rank; shuffle/seed/drop_last apply to the (distributed) sampler.
  data::DataLoaderOptions loader;
};

struct PreparedJob {
  std::shared_ptr<Engine> engine;
  std::shared_ptr<data::DataLoader> loader;
  const DistributedEnvironment& env() const { return engine->environment(); }
  /// What to run forward: the DDP wrapper on several ranks, else the model itself.
  const std::shared_ptr<nn::Module>& model() const { return engine->module(); }
  const std::shared_ptr<optim::Optimizer>& optimizer() const { return engine->optimizer(); }
  bool isMain() const { return env().isMain(); }
  /// The loader's (and so the sampler's) epoch: call at the start of every epoch.
  void setEpoch(uint64_t epoch) { loader->setEpoch(epoch); }
};

/// Collective when the environment describes more than one rank.
PreparedJob prepare(std::shared_ptr<nn::Module> model, std::shared_ptr<optim::Optimizer> optimizer,
                    std::shared_ptr<data::Dataset> train_set, const PrepareOptions& options = {});

}  // namespace lockstep::parallel
