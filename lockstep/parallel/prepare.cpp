#include "lockstep/parallel/prepare.h"

namespace lockstep::parallel {

PreparedJob prepare(std::shared_ptr<nn::Module> model, std::shared_ptr<optim::Optimizer> optimizer,
                    std::shared_ptr<data::Dataset> train_set, const PrepareOptions& options) {
  LOCKSTEP_ENFORCE(model && optimizer && train_set, ValueError,
                   "prepare(): model, optimizer and dataset are required");
  PreparedJob job;
  job.engine = std::make_shared<Engine>(std::move(model), std::move(optimizer), options.engine,
                                        initFromEnvironment(options.engine.backend, options.engine.timeout));
  job.loader = job.engine->makeLoader(std::move(train_set), options.loader);
  return job;
}

}  // namespace lockstep::parallel
