#include "lockstep/parallel/prepare.h"

#include "lockstep/data/distributed_sampler.h"
#include "lockstep/data/random_sampler.h"
#include "lockstep/data/sequential_sampler.h"

namespace lockstep::parallel {

PreparedJob prepare(std::shared_ptr<nn::Module> model, std::shared_ptr<optim::Optimizer> optimizer,
                    std::shared_ptr<data::Dataset> train_set, const PrepareOptions& options) {
  LOCKSTEP_ENFORCE(model && optimizer && train_set, ValueError, "prepare(): model, optimizer and dataset are required");
  PreparedJob job;
  job.env = initFromEnvironment(options.backend);
  job.optimizer = std::move(optimizer);
  data::DataLoaderOptions lo = options.loader;
  std::shared_ptr<data::Sampler> sampler;
  if (job.env.group) {
    job.model = std::make_shared<DistributedDataParallel>(std::move(model), job.env.group, options.ddp);
    data::DistributedSamplerOptions so;
    so.num_replicas = job.env.world_size;
    so.rank = job.env.rank;
    so.shuffle = lo.shuffle;
    so.seed = lo.seed;
    so.drop_last = lo.drop_last;
    sampler = std::make_shared<data::DistributedSampler>(train_set->size(), so);
  } else {
    job.model = std::move(model);
    if (lo.shuffle) {
      sampler = std::make_shared<data::RandomSampler>(train_set->size(), lo.seed);
    } else {
      sampler = std::make_shared<data::SequentialSampler>(train_set->size());
    }
  }
  lo.shuffle = false;  // the sampler decides the order
  job.loader = std::make_shared<data::DataLoader>(std::move(train_set), std::move(sampler), lo);
  return job;
}

}  // namespace lockstep::parallel
