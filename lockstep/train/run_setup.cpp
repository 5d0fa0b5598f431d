#include "lockstep/train/run_setup.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>

#include "lockstep/comm/device_sharing.h"
#include "lockstep/comm/worker_environment.h"
#include "lockstep/data/datasets/registry.h"
#include "lockstep/kernels/threads.h"
#include "lockstep/launch/launch_options.h"
#include "lockstep/launch/worker_env.h"
#include "lockstep/nn/models/language_model.h"
#include "lockstep/nn/models/model_zoo.h"
#include "lockstep/optim/registry.h"
#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/train/language_model_run.h"
#include "lockstep/train/monitor/metrics_log.h"
#include "lockstep/train/monitor/progress.h"
#include "lockstep/train/monitor/run_files.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/runtime.h"
#endif

namespace lockstep::train {

namespace {

nn::ModelOptions modelOptions(const TrainConfig& c, Generator* gen) {
  nn::ModelOptions mo = c.model_options;
  mo.generator = gen;
  if (data::findDataset(c.data.dataset).shape_from_options) {  // size linear/mlp to the data unless told
    if (mo.in_features == 0) {
      mo.in_features = std::accumulate(c.data.input_shape.begin(), c.data.input_shape.end(), int64_t{1},
                                       std::multiplies<>());
    }
    if (mo.out_features == 0) mo.out_features = c.data.num_classes;
  }
  return mo;
}

}  // namespace

std::chrono::milliseconds commTimeout(const TrainConfig& c) {
  if (!c.comm_timeout_seconds) return comm::kGroupTimeout;  // LOCKSTEP_TIMEOUT, else the default
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(*c.comm_timeout_seconds * 1000.0)));
}

Device trainingDevice(const TrainConfig& c) {
  Device d = c.device;
  if (c.device_per_local_rank) {
    const int local_rank = comm::workerEnvironment().local_rank, gpus = cudaDeviceCount();
    d.index = gpus > 0 ? comm::localRankDevice(local_rank, gpus) : std::max(local_rank, 0);
  }
  checkDeviceAvailable(d);
  return d;
}

int gpuRankHostThreads(const Device& device, int cores, int local_world_size) {
  if (!device.isCuda() || env::get("LOCKSTEP_NUM_THREADS").has_value()) return 0;
  // The launcher's 1, for this many local workers, and still in force (not a later export's).
  if (env::get(launch::kDefaultedOmpThreads).value_or("") != std::to_string(local_world_size) ||
      env::get("OMP_NUM_THREADS").value_or("") != "1") {
    return 0;
  }
  return std::max(1, cores / std::max(1, local_world_size));
}

void useGpuRankHostThreads(const Device& device) {
  const comm::WorkerEnvironment& w = comm::workerEnvironment();
  const int cores = launch::availableCores();
  const int n = gpuRankHostThreads(device, cores, w.local_world_size);
  if (n == 0) return;
  kernels::setNumThreads(n);
  if (w.local_rank <= 0)
    std::fprintf(
        stderr,
        "lockstep: %d host threads per GPU rank (%d cores / %d local ranks; the launcher's "
        "OMP_NUM_THREADS=1 is for CPU ranks: set OMP_NUM_THREADS or LOCKSTEP_NUM_THREADS to choose)\n",
        n, cores, w.local_world_size);
}

std::string deviceDescription(const Device& d) {
  std::string text = deviceName(d);
#if LOCKSTEP_WITH_CUDA
  if (d.isCuda()) text += " (" + cuda::describeDevice(d.index) + ")";
#endif
  return text;
}

parallel::EngineOptions engineOptions(const TrainConfig& c, int64_t total_steps, Device device) {
  parallel::EngineOptions eo;
  eo.optimizer = c.optimizer;
  eo.scheduler = c.scheduler;
  eo.total_steps = total_steps;
  eo.gradient_accumulation_steps = c.batch.gradient_accumulation_steps;
  eo.gradient_clipping = c.gradient_clipping;
  eo.ddp = c.ddp;
  eo.backend = c.backend;
  eo.timeout = commTimeout(c);
  eo.precision = c.precision;
  eo.loss_scaler = c.loss_scaler;
  eo.auto_cast = c.auto_cast;
  // DeepSpeed's bf16/fp16 sections cast the module to 16 bits (its master weights start from the
  // rounded values); torch_autocast leaves it f32.
  eo.round_initial_parameters = c.precision != parallel::Precision::fp32 && !c.torch_autocast;
  eo.zero_stage = c.zero.stage;
  // DeepSpeed's bf16 section at ZeRO stages 1 and 2 (stage_1_and_2.py's check_grad_overflow); not
  // torch_autocast alone, whose gradients DeepSpeed does not check.
  eo.skip_nonfinite_steps = c.precision == parallel::Precision::bf16 && !c.torch_autocast &&
                            (c.zero.stage == 1 || c.zero.stage == 2) && c.bf16_check_grad_overflow;
  eo.zero = c.zero.options;
  // ZeRO stage 3 on a GPU (zero.Init): the model built on the host, each rank's partition taken to
  // the GPU (ZeRO-3 Offload, ZeRO-Infinity: kept on the host, or on NVMe), layers gathered on the
  // GPU: the whole model is never on it, not even while the run starts.
  if (device.isCuda() && c.zero.stage == 3) eo.zero.gather_device = device;
  return eo;
}

std::shared_ptr<nn::Module> buildModel(const TrainConfig& c, const TrainData& data, Device device) {
  Generator init_gen(c.seed);
  nn::ModelOptions mo = modelOptions(c, &init_gen);
  if (c.data.isLanguage() && mo.vocab_size == 0) mo.vocab_size = data.vocab_size;
  // A vocabulary below the data's would end the run at the first window holding a larger id.
  LOCKSTEP_ENFORCE(!c.data.isLanguage() || data.vocab_size == 0 || mo.vocab_size >= data.vocab_size,
                   ValueError, "model.vocab_size ", mo.vocab_size, " is smaller than the vocabulary of ",
                   c.data.dataset, " ", c.data.root, " (", data.vocab_size,
                   " tokens): set model.vocab_size to at least ", data.vocab_size,
                   ", or leave it out to take the data's");
  // A labelled folder's classes must fit the model's outputs (fewer is torch's habit and fine): a
  // label past them would end the first step with the cross entropy's message instead of this.
  const int64_t outputs = nn::classifierOutputs(c.model, mo);
  const int64_t classes = std::max(static_cast<int64_t>(data.classes.size()), data.label_count);
  if (outputs > 0 && classes > outputs) {
    const bool linear = c.model == "linear" || c.model == "mlp";
    const bool lists = !c.data.train_list.empty() || !c.data.val_list.empty();
    throw ValueError(c.data.dataset + " " + c.data.root +
                     (lists ? "'s image lists (data.train_list, data.val_list) hold labels up to " +
                                  std::to_string(classes - 1) + ", " + std::to_string(classes)
                            : " holds " + std::to_string(classes)) +
                     " classes but the model " + c.model + " outputs " + std::to_string(outputs) +
                     "; set model." + (linear ? "out_features" : "num_classes") + ": " +
                     std::to_string(classes));
  }
  std::shared_ptr<nn::Module> model = parallel::Engine::buildModel(
      engineOptions(c, 0, device), device, [&] { return nn::makeModel(c.model, mo); });
  // The text sampled at the end: its prompt's bytes are its token ids (the byte tokenizer), said
  // before training rather than failing a finished run.
  const auto* lm = dynamic_cast<const nn::LanguageModel*>(model.get());
  if (lm && data.tokenizer == "byte") {
    for (const unsigned char ch : c.sample.prompt)
      LOCKSTEP_ENFORCE(ch < lm->vocabSize(), ValueError, "sample.prompt: byte ", static_cast<int>(ch),
                       " is outside the model's vocabulary of ", lm->vocabSize(),
                       " tokens (a prompt's bytes are its token ids); give a prompt of bytes below ",
                       lm->vocabSize());
  }
  return model;
}

void describeModel(const TrainConfig& c, nn::Module& model, Device device) {
  auto* lm = dynamic_cast<nn::LanguageModel*>(&model);
  if (!lm) return;
  std::fprintf(stderr, "model: %s, %lld parameters\n", model.extraRepr().c_str(),
               static_cast<long long>(model.numParameters()));
  const std::string note = activationCheckpointingNote(c.activation_checkpointing, lm->checkpointEvery(),
                                                       lm->numLayers(), c.model, device.isCuda());
  if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
}

std::shared_ptr<optim::Optimizer> languageModelOptimizer(const TrainConfig& c, nn::Module& model) {
  if (!dynamic_cast<nn::LanguageModel*>(&model)) return nullptr;
  nn::WeightDecayGroups groups = nn::weightDecayGroups(model);
  std::shared_ptr<optim::Optimizer> opt = optim::makeOptimizer(c.optimizer, groups.decay);
  if (!groups.no_decay.empty()) opt->addParamGroup(groups.no_decay, {{"weight_decay", 0.0}});
  return opt;
}

data::DataLoaderOptions loaderOptions(const TrainConfig& c) {
  data::DataLoaderOptions lo;
  lo.batch_size = c.batch.micro_batch_size;
  lo.num_workers = c.data.num_workers;
  return lo;
}

RunLength runLength(const TrainConfig& c, const data::DataLoader& loader, int64_t train_size) {
  RunLength l;
  l.steps_per_epoch = loader.size() / c.batch.gradient_accumulation_steps;
  if (l.steps_per_epoch == 0) {
    throw ValueError("the training set (" + std::to_string(train_size) +
                     " samples) is smaller than one step (" + std::to_string(c.batch.train_batch_size) +
                     " samples)");
  }
  // A micro-batch past the whole training set trains every step on a partial batch while the run
  // reports the configured one. (A rank's last batch short of a micro-batch is torch's DataLoader's
  // habit too, and fine.)
  if (train_size < c.batch.micro_batch_size) {
    throw ValueError("the training set (" + std::to_string(train_size) +
                     " samples) is smaller than one micro-batch (train_micro_batch_size_per_gpu " +
                     std::to_string(c.batch.micro_batch_size) + ")");
  }
  const int64_t left = loader.size() % c.batch.gradient_accumulation_steps;
  if (left > 0) {
    l.notes.push_back(
        "each epoch's last " + std::to_string(left) + " of its " + std::to_string(loader.size()) +
        " micro-batches per rank fill no step (gradient_accumulation_steps " +
        std::to_string(c.batch.gradient_accumulation_steps) +
        ") and are left out, where DeepSpeed's engine would carry them into the next epoch's first "
        "step; to train on every sample make the micro-batches per epoch a multiple of it");
  }
  l.total_steps = l.steps_per_epoch * c.epochs;
  if (c.max_steps > 0) l.total_steps = std::min(l.total_steps, c.max_steps);
  return l;
}

std::string checkpointDir(const TrainConfig& c, const TrainerOptions& o) {
  return c.checkpoint_dir.empty() ? o.output_dir + "/checkpoints" : c.checkpoint_dir;
}

RunCheckpointsOptions checkpointOptions(const TrainConfig& c, const TrainerOptions& o) {
  RunCheckpointsOptions co;
  co.dir = checkpointDir(c, o);
  co.keep_last = c.checkpoint_keep_last;
  co.every_steps = c.checkpoint_every_steps;
  co.resume = o.resume;
  co.resume_required = o.resume_required;
  co.resume_from = o.resume_from;
  co.die_in_save_at_step = o.die_in_zero_save_at_step;
  return co;
}

nlohmann::json configRecord(const TrainConfig& c, const TrainerOptions& o) {
  nlohmann::json record = o.config_json;
  record["document"] = c.document;
  return record;
}

void checkSameConfigOnEveryRank(const TrainConfig& c, comm::ProcessGroup* group) {
  if (group == nullptr || group->size() == 1) return;
  nlohmann::json doc = c.document;
  auto drop = [&](const char* section, const char* key) {
    if (doc.contains(section) && doc[section].is_object()) doc[section].erase(key);
  };
  drop("data", "root");
  drop("data", "num_workers");
  drop("checkpoint", "dir");
  drop("tensorboard", "output_path");
  drop("csv_monitor", "output_path");
  // Where each host mounts its NVMe (DeepSpeed's /local_nvme) for ZeRO-Infinity's swap files.
  for (const char* offload : {"offload_optimizer", "offload_param"}) {
    if (doc.contains("zero_optimization") && doc["zero_optimization"].is_object() &&
        doc["zero_optimization"].contains(offload) && doc["zero_optimization"][offload].is_object())
      doc["zero_optimization"][offload].erase("nvme_path");
  }
  char mine[16];
  std::snprintf(mine, sizeof(mine), "%08x",
                file::crc32(doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  const std::vector<std::string> all = parallel::allgatherBytes(*group, mine);
  std::vector<int> other;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0]) other.push_back(static_cast<int>(r));
  if (other.empty()) return;
  std::string ranks;
  for (int r : other) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  throw ValueError("the ranks do not train with the same config: rank" +
                   std::string(other.size() > 1 ? "s " : " ") + ranks +
                   (other.size() > 1 ? " have" : " has") + " another (config hash " + all[other.front()] +
                   ") than rank 0's (" + all[0] +
                   "); give every rank the same config file and --set flags (a stale copy of the file on one "
                   "host?)");
}

RunIdentity runIdentity(const TrainConfig& c, int world) {
  return {newRunId(),
          c.identity_hash,
          c.seed,
          world,
          c.batch.train_batch_size,
          c.batch.micro_batch_size,
          c.batch.gradient_accumulation_steps};
}

void crashIfAsked(const TrainerOptions& o, int rank, int64_t step) {
  if (o.crash_after_step <= 0 || step != o.crash_after_step) return;
  if (o.crash_rank >= 0 && o.crash_rank != rank) return;
  std::fprintf(stderr, "rank %d: crashing after step %lld (fault injection)\n", rank,
               static_cast<long long>(step));
  std::_Exit(3);
}

void addOutputs(RunObservers& outputs, const TrainConfig& c, const TrainerOptions& o, const RunLength& length,
                const ModelThroughput& throughput) {
  const MetricsPaths paths = metricsPaths(c, o.output_dir);
  outputs.add(std::make_unique<MetricsLog>(paths, c.steps_per_print));
  ProgressOptions po;
  po.epochs = c.epochs;
  po.total_steps = length.total_steps;
  po.steps_per_print = c.steps_per_print;
  po.tty = ::isatty(2) == 1;
  po.throughput = throughput;
  outputs.add(std::make_unique<ProgressLine>(po));
  outputs.add(std::make_unique<RunFiles>(o.output_dir, paths));
}

}  // namespace lockstep::train
