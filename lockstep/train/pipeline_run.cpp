#include "lockstep/train/pipeline_run.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <unordered_set>

#include "lockstep/autograd.h"
#include "lockstep/data.h"
#include "lockstep/kernels/finite.h"
#include "lockstep/nn.h"
#include "lockstep/optim/registry.h"
#include "lockstep/parallel.h"
#include "lockstep/parallel/pipeline/pipeline_grid.h"
#include "lockstep/parallel/pipeline/pipeline_stage.h"
#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/tensor.h"
#include "lockstep/train/checkpoint/pipeline_checkpoint.h"
#include "lockstep/train/checkpoint/zero_checkpoint.h"
#include "lockstep/train/config/config_backends.h"
#include "lockstep/train/language_model_run.h"
#include "lockstep/train/monitor/model_flops.h"
#include "lockstep/train/monitor/notes.h"
#include "lockstep/train/monitor/run_clock.h"
#include "lockstep/train/monitor/run_info.h"
#include "lockstep/train/run_setup.h"
#include "lockstep/train/stop_signals.h"
#include "lockstep/train/train_data.h"
#include "lockstep/util/error.h"
#include "lockstep/util/json.h"

namespace lockstep::train {

namespace {

/// The stage's optimizer: the whole model's groups with their options, each holding the stage's
/// members of it (possibly none), so that every stage's scheduler and checkpoint see the same groups.
std::unique_ptr<optim::Optimizer> stageOptimizer(const TrainConfig& c, const WholeOptimizerLayout& layout,
                                                 const parallel::PipelineStage& stage) {
  std::unordered_set<const autograd::VariableImpl*> mine;
  for (const auto& p : stage.parameters()) mine.insert(p.impl().get());
  std::unique_ptr<optim::Optimizer> opt = optim::makeOptimizer(c.optimizer, {});
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    std::vector<autograd::Variable> members;
    for (const auto& p : layout.groups[g])
      if (mine.count(p.impl().get())) members.push_back(p);
    opt->addParamGroup(members, layout.options[g]);
  }
  return opt;
}

/// The model is built deferred (tensor/deferred_init.h): no layer has memory until the stage's
/// layers' parameters and buffers are taken into memory (materializeStage), initialised as a whole
/// build would have them. The other stages' stay without memory for the whole run (their shapes
/// stay, as ZeRO stage 3 releases a parameter's bytes): the model file is put together from the
/// checkpoint's files and a language model samples through the stages.
void materializeStage(const parallel::PipelineStage& stage) {
  for (const nn::Module* layer : stage.layers())
    for (const auto& [name, t] : layer->stateDict())
      if (t.storage()) t.storage()->materialize();
}

/// The bytes of model state this rank keeps in memory.
int64_t residentModelBytes(const nn::Module& model) {
  std::set<const Storage*> seen;
  int64_t bytes = 0;
  for (const auto& [name, t] : model.stateDict())
    if (t.storage() && t.storage()->resident() && seen.insert(t.storage().get()).second)
      bytes += static_cast<int64_t>(t.storage()->nbytes());
  return bytes;
}

/// What the loop works with; runPipelineTraining owns the parts.
struct PipelineRun {
  const TrainConfig& config;
  const TrainerOptions& options;
  const TrainData& data;
  comm::ProcessGroup& world;
  const parallel::PipelineGrid& grid;
  /// The stage, its optimizer and scheduler, the loader, the model.
  PipelineCheckpointParts& parts;
  RunObservers& observers;
  const StopSignals& stop;
  Device device;
  RunIdentity identity;
  std::string checkpoint_dir;
  RunClock clock{};
  nn::CrossEntropyLoss criterion{};
  int64_t step = 0, last_saved = 0;
  std::string last_checkpoint{};  // the newest checkpoint of this run's weights
  int64_t samples = 0;
  double idle_sum = 0;
  std::vector<double> forward_sum{}, backward_sum{};  // by chunk, over the timed steps
  int64_t timed_steps = 0;
  EvalResult last_val{};
  int64_t last_val_step = -1;
  TrainSummary summary{};
  int stop_signal = 0;
  size_t build_peak_bytes = 0;  // the host allocator's peak once the stage was built
};

bool isFirst(const PipelineRun& r) { return r.grid.stage == 0; }
bool isLast(const PipelineRun& r) { return r.grid.stage + 1 == r.grid.stages; }

void saveCheckpoint(PipelineRun& r) {
  if (r.step == r.last_saved && !r.last_checkpoint.empty()) return;
  r.last_saved = r.step;
  CheckpointOptions co;
  co.keep_last = r.config.checkpoint_keep_last;
  co.die_in_save_at_step = r.options.die_in_zero_save_at_step;
  r.clock.timeCheckpoint(
      [&] { r.last_checkpoint = savePipelineCheckpoint(r.checkpoint_dir, r.parts, r.step, r.identity, co); });
  r.observers.onCheckpoint({r.step, r.last_checkpoint});
}

/// The mean loss over every replica's micro-batches (the last stages hold it), and the stop signal
/// any rank received: collective, every step.
std::pair<double, int> agreeAfterStep(PipelineRun& r, double loss) {
  double sum = isLast(r) ? loss : 0.0;
  r.world.allreduce(&sum, 1, DType::f64)->wait();
  double signal = r.stop.received();
  comm::AllreduceOptions o;
  o.op = comm::ReduceOp::max;
  r.world.allreduce(&signal, 1, DType::f64, o)->wait();
  return {sum / static_cast<double>(r.grid.replicas), static_cast<int>(signal)};
}

/// What stage 0 feeds its layers: with bf16/fp16's auto_cast, an f32 input in the autocast dtype
/// (Engine::forward's rule).
Tensor stageInput(const PipelineRun& r, const Tensor& input) {
  const std::optional<DType> autocast = parallel::precisionDType(r.config.precision);
  return autocast && r.config.auto_cast && input.dtype() == DType::f32 ? input.to(*autocast) : input;
}

/// fp16: the stage's gradients unscaled, and whether any rank's held an inf or nan (agreed by the
/// whole job, so that every stage and replica skips the same steps).
bool unscaleAndCheckOverflow(PipelineRun& r) {
  const double inverse = 1.0 / r.parts.loss_scaler->scale();
  bool overflow = false;
  for (const autograd::Variable& p : r.parts.stage->parameters()) {
    if (!p.hasGrad()) continue;
    Tensor g = p.grad();
    overflow = kernels::scaleAndCheckNonFinite(g, inverse) || overflow;
  }
  return parallel::allreduceScalar(r.world, overflow ? 1.0 : 0.0, comm::ReduceOp::max) != 0.0;
}

/// One optimizer step over the micro-batches gathered.
void trainStep(PipelineRun& r, const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
               uint64_t epoch) {
  optim::LossScaler* scaler = r.parts.loss_scaler;
  const double loss = r.parts.stage->trainStep(
      inputs, targets,
      [&](const autograd::Variable& out, const Tensor& target) {
        return r.criterion(flattenPositions(out), flattenPositions(target));
      },
      nullptr, scaler ? scaler->scale() : 1.0);
  // DeepSpeed's order (as Engine's): on an overflow the scale shrinks and neither the optimizer nor
  // the schedule steps; the next step's trainStep drops the gradients.
  const bool overflow = scaler && unscaleAndCheckOverflow(r);
  if (scaler) scaler->update(overflow);
  if (!overflow) {
    if (r.config.gradient_clipping > 0) r.parts.stage->clipGradNorm(r.config.gradient_clipping);
    if (r.parts.zero)
      r.parts.zero->step();  // this replica's partition, then the updated parameters all-gathered
    else
      r.parts.optimizer->step();
    if (r.parts.scheduler) r.parts.scheduler->step();
  }
  ++r.step;
  const parallel::PipelineStepTimes& times = r.parts.stage->lastStepTimes();
  r.idle_sum += times.idleFraction();
  r.forward_sum.resize(times.forward_s.size());
  r.backward_sum.resize(times.backward_s.size());
  for (size_t c = 0; c < times.forward_s.size(); ++c) {
    r.forward_sum[c] += times.forward_s[c];
    r.backward_sum[c] += times.backward_s[c];
  }
  ++r.timed_steps;
  r.samples += r.config.batch.train_batch_size;
  const auto [mean_loss, signal] = agreeAfterStep(r, loss);
  r.stop_signal = signal;
  r.observers.onStep({static_cast<int64_t>(epoch), r.step, mean_loss,
                      r.parts.optimizer->paramGroups()[0].lr(),
                      static_cast<double>(r.samples) / r.clock.trainSeconds(), r.samples, false, 1.0, 0,
                      r.parts.loader->waitSeconds()});
}

/// Collective: `ds` through the stages, each replica its shard.
EvalResult evaluateOn(PipelineRun& r, const std::shared_ptr<data::Dataset>& ds) {
  r.parts.stage->train(false);
  const EvalResult v = evaluateWith(
      ds, {static_cast<int>(r.grid.replica), static_cast<int>(r.grid.replicas), &r.world}, r.device,
      [&](const Tensor& input) { return r.parts.stage->forwardOnly(input); }, r.data.vocab_size);
  r.parts.stage->train(true);
  return v;
}

/// Collective: the validation pass after the step r.step of epoch e.
Evaluation validate(PipelineRun& r, uint64_t e) {
  r.clock.timeEvaluation([&] { r.last_val = evaluateOn(r, r.data.val ? r.data.val : r.data.test); });
  r.last_val_step = r.step;
  if (r.data.val) r.summary.val_loss = r.last_val.loss;
  return Evaluation{static_cast<int64_t>(e), r.step, r.last_val.loss, r.last_val.accuracy};
}

/// The steps of epoch e (its rest, when resumed mid-epoch); true when max_steps is reached or a
/// stop signal ends the run.
bool trainEpoch(PipelineRun& r, uint64_t e) {
  if (r.parts.loader->state().position == 0) r.parts.loader->setEpoch(e);
  r.summary.epochs = static_cast<int64_t>(e) + 1;
  const auto m = static_cast<size_t>(r.config.batch.gradient_accumulation_steps);
  std::vector<Tensor> inputs, targets;
  size_t gathered = 0;
  for (data::Batch& b : *r.parts.loader) {
    // Stage 0 feeds the inputs and the last stage the targets; every stage walks the loader, so
    // that its position (a checkpoint's) is the same on all.
    if (isFirst(r)) inputs.push_back(stageInput(r, b.input.to(r.device)));
    if (isLast(r)) targets.push_back(b.target.to(r.device));
    if (++gathered < m) continue;
    trainStep(r, inputs, targets, e);
    inputs.clear();
    targets.clear();
    gathered = 0;
    // eval.every_steps, as the trainer's (the step max_steps reaches is endEpoch's to validate).
    const bool last = r.config.max_steps > 0 && r.step >= r.config.max_steps;
    if (r.config.eval_every_steps > 0 && r.step % r.config.eval_every_steps == 0 && !last) {
      const Evaluation v = validate(r, e);
      r.clock.timeEvaluation([&] { r.observers.onEvaluation(v); });
    }
    if (r.config.checkpoint_every_steps > 0 && r.step % r.config.checkpoint_every_steps == 0)
      saveCheckpoint(r);
    crashIfAsked(r.options, r.world.rank(), r.step);
    if (r.config.max_steps > 0 && r.step >= r.config.max_steps) return true;
    if (r.stop_signal != 0) return true;
  }
  return false;  // an epoch's last micro-batches that fill no step are dropped
}

void endEpoch(PipelineRun& r, uint64_t e, bool done) {
  if (r.parts.loader->state().position >= r.parts.loader->size()) r.parts.loader->setEpoch(e + 1);
  std::optional<Evaluation> v;
  const bool fresh = r.last_val_step == r.step && r.step > 0;  // eval.every_steps validated it already
  if ((static_cast<int64_t>(e + 1) % r.config.eval_every_epochs == 0 || done) && !fresh) v = validate(r, e);
  if (v) r.clock.timeEvaluation([&] { r.observers.onEvaluation(*v); });  // before: see trainer.cpp
  saveCheckpoint(r);
}

/// The idle fraction each stage's schedule would have with the stages' measured forward and backward
/// times (per micro-batch and chunk, averaged over replicas) and transfers that take no time: the
/// part of the measured bubble that is the cut's imbalance. ranks: summary.json's rank entries.
std::vector<double> ranksIdleForStageCosts(const PipelineRun& r, const nlohmann::json& ranks) {
  const auto stages = static_cast<size_t>(r.grid.stages);
  const auto chunks = static_cast<size_t>(std::max<int64_t>(1, r.config.pipeline.virtual_stages));
  parallel::PipelineCosts costs;
  costs.stage_forward.assign(stages, std::vector<double>(chunks, 0.0));
  costs.stage_backward.assign(stages, std::vector<double>(chunks, 0.0));
  std::vector<double> replicas(stages, 0.0);
  for (const auto& rank : ranks) {
    const auto stage = rank["stage"].get<size_t>();
    const auto forward = rank["forward_ms"].get<std::vector<double>>(),
               backward = rank["backward_ms"].get<std::vector<double>>();
    if (forward.size() != chunks || backward.size() != chunks) return {};  // no timed step
    for (size_t c = 0; c < chunks; ++c) {
      costs.stage_forward[stage][c] += forward[c];
      costs.stage_backward[stage][c] += backward[c];
    }
    replicas[stage] += 1;
  }
  for (size_t s = 0; s < stages; ++s) {
    for (size_t c = 0; c < chunks; ++c) {
      costs.stage_forward[s][c] /= std::max(1.0, replicas[s]);
      costs.stage_backward[s][c] /= std::max(1.0, replicas[s]);
    }
  }
  return parallel::idleForStageCosts(
      parallel::parsePipelineSchedule(r.config.pipeline.schedule),
      {r.grid.stages, r.config.batch.gradient_accumulation_steps, r.config.pipeline.virtual_stages}, costs);
}

/// summary.json's "pipeline": the layout and every rank's bubble, activation slots and peak RSS
/// (collective).
nlohmann::json pipelineSummary(const PipelineRun& r) {
  // Each chunk's forward and backward of one micro-batch, mean over the timed steps.
  auto perMicroBatchMs = [&](const std::vector<double>& sums) {
    std::vector<double> ms;
    const double n = static_cast<double>(r.timed_steps * r.config.batch.gradient_accumulation_steps);
    for (double v : sums) ms.push_back(n > 0 ? 1e3 * v / n : 0.0);
    return ms;
  };
  const nlohmann::json mine = {
      {"rank", r.world.rank()},
      {"stage", r.grid.stage},
      {"replica", r.grid.replica},
      {"layers", r.parts.stage->layerRanges()},
      {"idle_fraction", r.timed_steps > 0 ? r.idle_sum / static_cast<double>(r.timed_steps) : 0.0},
      {"forward_ms", perMicroBatchMs(r.forward_sum)},
      {"backward_ms", perMicroBatchMs(r.backward_sum)},
      {"activation_slots", r.parts.stage->activationSlots()},
      // The last step's gradient buckets over the stage's replicas, and how many of them left
      // while its last backwards ran (DDP's overlap).
      {"replica_buckets", r.parts.stage->lastStepTimes().replica_buckets},
      {"replica_buckets_launched_in_backward",
       r.parts.stage->lastStepTimes().replica_buckets_launched_in_backward},
      {"model_state_bytes_resident", residentModelBytes(*r.parts.model)},
      {"build_peak_bytes", r.build_peak_bytes},
      {"peak_rss_bytes", peakRssBytes()}};
  nlohmann::json ranks = nlohmann::json::array();
  for (const std::string& s : parallel::allgatherBytes(r.world, mine.dump())) ranks.push_back(json::parse(s));
  const std::vector<double> ideal = ranksIdleForStageCosts(r, ranks);
  for (auto& rank : ranks) {
    if (!ideal.empty()) rank["idle_fraction_for_stage_costs"] = ideal[rank["stage"].get<size_t>()];
  }
  return {{"stages", r.grid.stages},
          {"replicas", r.grid.replicas},
          {"schedule", r.config.pipeline.schedule},
          {"micro_batches", r.config.batch.gradient_accumulation_steps},
          {"partition_method",
           r.config.pipeline.boundaries.empty() ? r.config.pipeline.partition_method : "boundaries"},
          {"boundaries", r.parts.stage->boundaries()},
          {"virtual_stages", r.config.pipeline.virtual_stages},
          {"theoretical_bubble",
           parallel::theoreticalBubble({r.grid.stages, r.config.batch.gradient_accumulation_steps,
                                        r.config.pipeline.virtual_stages})},
          {"ranks", ranks}};
}

/// DIR/model.safetensors from the run's last checkpoint (the stages' files put together, by rank
/// 0), and a language model's samples, generated through the stages (collective: each replica's
/// pipeline runs every context forward, its last stage picks the token and tells the others), so
/// no rank ever holds the other stages' layers.
void saveModelAndSample(PipelineRun& r, nn::Module& model) {
  if (r.world.rank() == 0) {
    // The model file comes from the checkpoint's files, one parameter at a time: no layer of the
    // other stages is needed, and the whole model is never in memory.
    CheckpointSelection model_only;  // a DDP checkpoint resumed and not saved since: not its optimizer
    model_only.optimizer = [](const std::string&) { return false; };
    saveCheckpointModel(loadCheckpoint(r.last_checkpoint, model_only),
                        r.options.output_dir + "/model.safetensors", {{"format", "pt"}});
    writeHuggingFaceConfig(r.options.output_dir, model);
  }
  auto* lm = dynamic_cast<nn::LanguageModel*>(&model);
  if (!lm) return;
  // Every stage takes the same branch (the samples' generation is collective).
  if (const std::string note = noSamplesNote(r.config.data, r.data.tokenizer); !note.empty()) {
    if (r.world.rank() == 0) std::fprintf(stderr, "%s\n", note.c_str());
    return;
  }
  parallel::PipelineStage& stage = *r.parts.stage;
  const int last = static_cast<int>(r.grid.stages - 1);
  auto generate = [&](const std::vector<int64_t>& prompt, const nn::GenerateOptions& o) {
    return nn::generateWith(
        prompt, lm->vocabSize(), lm->blockSize(), o,
        [&](const std::vector<int64_t>& ctx) {
          const auto t = static_cast<int64_t>(ctx.size());
          const autograd::Variable out = stage.forwardOnly(Tensor::fromVector(ctx, {1, t}).to(r.device));
          if (!out.defined()) return Tensor();
          return out.tensor().select(0).select(t - 1).to(Device::cpu()).to(DType::f32).contiguous();
        },
        [&](int64_t mine) {
          Tensor token = Tensor::fromVector(std::vector<int64_t>{mine}, {1});
          parallel::broadcast(*r.grid.pipe, token, last);
          return token.data<int64_t>()[0];
        });
  };
  stage.train(false);
  const nlohmann::json samples = sampleTextWith(r.config.sample, r.config.seed, generate);
  stage.train(true);
  if (r.world.rank() != 0) return;
  r.summary.tokens_per_sample = r.config.data.block_size;
  r.summary.flops_per_token = trainingFlopsPerToken(*lm, r.config.data.block_size);
  r.summary.samples = samples;
}

std::string describeLayout(const parallel::PipelineGrid& grid, const TrainConfig& c,
                           const std::vector<int64_t>& bounds) {
  std::string s =
      "pipeline: " + std::to_string(grid.stages) + " stages x " + std::to_string(grid.replicas) +
      (grid.replicas == 1 ? " replica" : " replicas") + ", schedule " + c.pipeline.schedule +
      (c.pipeline.virtual_stages > 1 ? " (" + std::to_string(c.pipeline.virtual_stages) + " chunks per stage)"
                                     : std::string()) +
      ", " + std::to_string(c.batch.gradient_accumulation_steps) + " micro-batches of " +
      std::to_string(c.batch.micro_batch_size) + " per replica; layers";
  for (size_t i = 0; i + 1 < bounds.size(); ++i)
    s += (i ? ", " : " ") + std::string("[") + std::to_string(bounds[i]) + ", " +
         std::to_string(bounds[i + 1]) + ") on stage " +
         std::to_string(static_cast<int64_t>(i) % grid.stages);
  return s;
}

}  // namespace

TrainSummary runPipelineTraining(const TrainConfig& c, const TrainerOptions& o) {
  const Device device = trainingDevice(c);
  parallel::DistributedEnvironment dist = parallel::initFromEnvironment(c.backend, commTimeout(c));
  LOCKSTEP_ENFORCE(dist.group != nullptr, ValueError,
                   "pipeline: a pipeline needs at least 2 ranks; start the job with --nproc-per-node N");
  comm::ProcessGroup& world = *dist.group;
  const bool chief = dist.isMain();
  checkSameConfigOnEveryRank(c, &world);
  const parallel::PipelineGrid grid = parallel::makePipelineGrid(world, c.pipeline.stages);

  TrainData data = loadTrainData(c.data, c.seed);
  manualSeed(c.seed);
  std::shared_ptr<nn::Module> model;
  {
    // Only the stage's layers get memory and values (materializeStage): built on the host, where the
    // deferred values are made, and the stage's layers moved to a GPU below.
    DeferredInit deferred;
    model = buildModel(c, data, Device::cpu());
  }
  if (chief) describeModel(c, *model, device);
  parallel::PipelineStageOptions so;
  so.schedule = parallel::parsePipelineSchedule(c.pipeline.schedule);
  so.micro_batches = c.batch.gradient_accumulation_steps;
  so.partition.stages = c.pipeline.stages;
  so.partition.method = c.pipeline.partition_method;
  so.partition.boundaries = c.pipeline.boundaries;
  so.virtual_stages = c.pipeline.virtual_stages;
  so.activation_checkpoint_interval = c.pipeline.activation_checkpoint_interval;
  if (grid.replicas > 1) so.data_group = grid.data;
  so.buckets.bucket_bytes = static_cast<size_t>(c.ddp.bucket_cap_mb * 1024 * 1024);
  so.autocast = parallel::precisionDType(c.precision);
  so.device = device;  // a stage without parameters receives there too
  // A replica's share of one process's dropout masks is drawn per sample, on the host only.
  so.one_process_dropout = device.isCpu();
  parallel::PipelineStage stage(*model, grid.pipe, so);
  if (chief) std::fprintf(stderr, "%s\n", describeLayout(grid, c, stage.boundaries()).c_str());
  materializeStage(stage);
  for (nn::Module* layer : stage.layers()) layer->to(device);
  // DeepSpeed's bf16/fp16 sections cast the module to 16 bits before the optimizer takes its f32
  // weights from it: the stage starts from the rounded values (torch_autocast leaves them f32).
  if (const std::optional<DType> dt = parallel::precisionDType(c.precision); dt && !c.torch_autocast) {
    for (nn::Module* layer : stage.layers()) parallel::roundInPlace(layer->parameters(), *dt);
  }
  const size_t build_peak_bytes = CachingAllocator::instance().stats().peak_bytes_in_use;

  // The whole model's optimizer numbers the parameters (as a DDP run's would) and gives the groups.
  std::shared_ptr<optim::Optimizer> whole = languageModelOptimizer(c, *model);
  if (!whole) whole = optim::makeOptimizer(c.optimizer, model->parameters());
  const WholeOptimizerLayout layout = wholeOptimizerLayout(*whole, *model);
  whole.reset();
  std::shared_ptr<optim::Optimizer> optimizer = stageOptimizer(c, layout, stage);
  // ZeRO stage 1 over the stage's replicas: each keeps its partition of the stage's optimizer state
  // (the replicas' models are equal already: one seed; the other stages' layers have no memory).
  std::unique_ptr<parallel::ZeroOptimizer> zero;
  if (c.zero.stage == 1) {
    parallel::ZeroOptions zo = c.zero.options;
    zo.stage = 1;
    zo.broadcast_model = false;
    zero = std::make_unique<parallel::ZeroOptimizer>(model, optimizer,
                                                     grid.replicas > 1 ? grid.data : nullptr, zo);
  }

  // Each replica trains on its shard of every epoch, as a DDP rank does.
  parallel::DistributedEnvironment replica_env;
  replica_env.worker.rank = static_cast<int>(grid.replica);
  replica_env.worker.world_size = static_cast<int>(grid.replicas);
  if (grid.replicas > 1) replica_env.group = grid.data;
  // The stages that read the batches (the first its inputs, the last its targets) get them on the
  // GPU as a DDP rank does: pinned, copied a batch ahead on a side stream. The others walk the
  // loader on the host only to keep its position.
  data::DataLoaderOptions loader_options = loaderOptions(c);
  if (grid.stage == 0 || grid.stage + 1 == grid.stages) loader_options.device = device;
  data::DataLoader loader(
      data.train, parallel::makeTrainSampler(replica_env, data.train->size(), true, c.seed), loader_options);
  const RunLength length = runLength(c, loader, data.train->size());
  std::unique_ptr<optim::LRScheduler> scheduler =
      optim::makeScheduler(c.scheduler, *optimizer, length.total_steps);

  PipelineCheckpointParts parts;
  parts.model = model.get();
  parts.stage = &stage;
  parts.optimizer = optimizer.get();
  parts.zero = zero.get();
  // fp16: DeepSpeed's loss scaler (dynamic unless fp16.loss_scale is set), as Engine's: its
  // FP16_Optimizer's rules without ZeRO, DynamicLossScaler's with ZeRO stage 1.
  std::unique_ptr<optim::LossScaler> scaler;
  if (c.precision == parallel::Precision::fp16) {
    optim::LossScalerOptions ls = c.loss_scaler.value_or(optim::LossScalerOptions{});
    ls.fp16_optimizer = c.zero.stage == 0;
    scaler = std::make_unique<optim::LossScaler>(ls);
  }
  parts.loss_scaler = scaler.get();
  parts.layout = &layout;
  parts.scheduler = scheduler.get();
  parts.loader = &loader;
  parts.rng = &defaultGenerator();
  parts.config = configRecord(c, o);
  parts.replicas = grid.replicas;
  parts.replica = grid.replica;
  parts.world = &world;

  RunIdentity identity = runIdentity(c, world.size());
  const RunCheckpointsOptions co = checkpointOptions(c, o);
  // Of a DDP checkpoint (whole tensors) the stage's tensors only are read.
  const ResumePick pick = pickRunResume(co, identity, chief, pipelineCheckpointSelection(parts));
  int64_t step = 0;
  if (pick.data) {
    const std::string note = restorePipelineCheckpoint(*pick.data, parts);  // the stage's part only
    step = pick.data->step;
    if (incompatibility(pick.data->identity, identity).empty()) identity.run_id = pick.data->identity.run_id;
    reportResumed(pick, note, chief);
  }

  RunObservers outputs;  // rank 0's
  if (chief) {
    ModelThroughput throughput;
    if (auto* lm = dynamic_cast<const nn::LanguageModel*>(model.get())) {
      throughput.tokens_per_sample = c.data.block_size;
      throughput.flops_per_token = trainingFlopsPerToken(*lm, c.data.block_size).value_or(0.0);
    }
    addOutputs(outputs, c, o, length, throughput);
  }
  const StopSignals stop;
  PipelineRun run{c, o, data, world, grid, parts, outputs, stop, device, identity, co.dir};
  run.build_peak_bytes = build_peak_bytes;
  run.step = run.last_saved = step;
  if (pick.data) run.last_checkpoint = pick.path;
  TrainSummary& s = run.summary;
  s.world_size = world.size();
  s.global_batch_size = c.batch.train_batch_size;
  // The epochs a resumed run has trained already (trainer.cpp's startRun).
  s.epochs = static_cast<int64_t>(parts.loader->epoch()) + (parts.loader->state().position > 0 ? 1 : 0);
  s.memory = parallel::gatherModelStateBytes(
      &world, zero ? zero->memory() : parallel::replicatedModelStateBytes(*optimizer));
  RunFacts facts;
  facts.invocation = o.config_json;
  facts.world_size = world.size();
  facts.backend = world.backendName();
  facts.device = deviceDescription(device);
  facts.steps_per_epoch = length.steps_per_epoch;
  facts.total_steps = length.total_steps;
  facts.checkpoint_dir = co.dir;
  facts.classes = data.classes;
  outputs.onStart({&c, facts, s.memory});
  printNotes(chief, "note", c.notes);
  printNotes(chief, "note", length.notes);
  printNotes(chief, "note", backendsNotes(c.gpu_math, c.document.contains("backends"), device.isCuda()));

  bool done = c.max_steps > 0 && run.step >= c.max_steps;
  for (uint64_t e = loader.epoch(); e < static_cast<uint64_t>(c.epochs) && !done; ++e) {
    done = trainEpoch(run, e);
    if (run.stop_signal != 0) {
      saveCheckpoint(run);
      run.clock.fill(s);
      s.steps = run.step;
      s.stop_signal = run.stop_signal;
      return s;
    }
    endEpoch(run, e, done);
  }
  if (run.last_checkpoint.empty()) saveCheckpoint(run);  // nothing trained: the weights as they are

  run.clock.fill(s);
  s.steps = run.step;
  s.precision = parallel::precisionName(c.precision);
  s.samples_per_second = s.train_seconds > 0 ? static_cast<double>(run.samples) / s.train_seconds : 0;
  s.data_wait_seconds = loader.waitSeconds();
  const bool validated = data.test == data.val && run.last_val_step == run.step;
  const EvalResult t = validated ? run.last_val : evaluateOn(run, data.test);
  s.test_loss = t.loss;
  s.test_accuracy = t.accuracy;
  s.pipeline = pipelineSummary(run);
  saveModelAndSample(run, *model);
  outputs.onEnd(s);
  return s;
}

}  // namespace lockstep::train
