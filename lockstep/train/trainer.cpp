#include "lockstep/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "lockstep/autograd.h"
#include "lockstep/data.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/nn.h"
#include "lockstep/parallel.h"
#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/tensor/allocator.h"
#include "lockstep/train/checkpoint/run_checkpoints.h"
#include "lockstep/train/checkpoint/training_state.h"
#include "lockstep/train/config/config_backends.h"
#include "lockstep/train/language_model_run.h"
#include "lockstep/train/monitor/model_flops.h"
#include "lockstep/train/monitor/notes.h"
#include "lockstep/train/monitor/run_clock.h"
#include "lockstep/train/monitor/run_info.h"
#include "lockstep/train/pipeline_run.h"
#include "lockstep/train/run_setup.h"
#include "lockstep/train/stop_signals.h"
#include "lockstep/train/train_data.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/allocator.h"
#include "lockstep/tensor/cuda/runtime.h"
#endif

namespace lockstep::train {

namespace fs = std::filesystem;

void prepareWritableDir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw ValueError("cannot create " + what + " " + dir + ": " + ec.message());
  std::string probe = dir + "/.lockstep-write-test-" + std::to_string(::getpid());
  {
    std::ofstream f(probe);
    if (!f || !(f << "x") || !f.flush()) throw ValueError(what + " " + dir + " is not writable");
  }
  fs::remove(probe, ec);
}

void prepareOutputDir(const std::string& dir) { prepareWritableDir(dir, "the output dir"); }

namespace {

using Clock = std::chrono::steady_clock;

/// What the loop works with: runTraining owns the parts, the loop borrows them.
struct Run {
  const TrainConfig& config;
  const TrainerOptions& options;
  const TrainData& data;
  parallel::Engine& engine;
  data::DataLoader& loader;
  RunCheckpoints& checkpoints;
  RunObserver& observers;
  const StopSignals& stop;
  Device device;
  RunClock clock{};
  nn::CrossEntropyLoss criterion{};
  std::unique_ptr<parallel::StepGraph> step_graph{};
  bool step_graph_fallback_said = false;  // cuda_graph: auto's word on a capture CUDA refused
  int64_t samples = 0;                    // training samples of all ranks, in this process
  EvalResult last_val{};
  int64_t last_val_step = -1;  // the step whose weights last_val evaluated
  TrainSummary summary{};
  int stop_signal = 0;  // the signal all ranks agreed stops the run after the current step
  // When the ranks next compare stop signals (agreedStopSignal), and the step and time of the last
  // comparison, from which the next one is spaced.
  int64_t next_stop_check = 0, last_stop_check = 0;
  Clock::time_point last_stop_check_at = Clock::now();
};

/// The current GPU for the run's life, when it trains on one.
class OnDevice {
 public:
  explicit OnDevice([[maybe_unused]] Device d) {
#if LOCKSTEP_WITH_CUDA
    if (d.isCuda()) guard_.emplace(d.index);
#endif
  }

 private:
#if LOCKSTEP_WITH_CUDA
  std::optional<cuda::DeviceGuard> guard_;
#endif
};

RunFacts runFacts(const Run& r, const RunLength& length) {
  const parallel::DistributedEnvironment& dist = r.engine.environment();
  RunFacts facts;
  facts.invocation = r.options.config_json;
  facts.world_size = dist.worldSize();
  facts.backend = dist.group ? dist.group->backendName() : "none";
  facts.device = deviceDescription(r.device);
  facts.steps_per_epoch = length.steps_per_epoch;
  facts.total_steps = length.total_steps;
  facts.checkpoint_dir = checkpointDir(r.config, r.options);
  facts.classes = r.data.classes;
  return facts;
}

/// The training step replayed as a CUDA graph when the config and the step allow it; nullptr:
/// the step runs eagerly.
std::unique_ptr<parallel::StepGraph> makeStepGraph(Run& r) {
  const TrainConfig& c = r.config;
  if (!r.device.isCuda() || c.cuda_graph == CudaGraph::never) return nullptr;
  const std::string why = parallel::stepGraphBlocker(r.engine);
  if (why.empty()) {
    // auto: a step CUDA refuses to capture runs eagerly (with the eager run's results); true: the
    // refusal ends the run (microStep names the key).
    return std::make_unique<parallel::StepGraph>(
        r.engine,
        [&r](const Tensor& input, const Tensor& target) {
          return microBatchLoss(r.engine, r.criterion, input, target);
        },
        3,
        c.cuda_graph == CudaGraph::always ? parallel::OnCaptureFailure::raise
                                          : parallel::OnCaptureFailure::run_eagerly);
  }
  if (c.cuda_graph == CudaGraph::always) {
    throw ValueError("cuda_graph: true, but this training step cannot be replayed as a CUDA graph: " + why +
                     " (set cuda_graph: auto to run it eagerly then)");
  }
  printNotes(r.engine.environment().isMain(), "note", {"cuda_graph: the step runs eagerly: " + why});
  return nullptr;
}

/// Before the first step: the memory report (collective), the outputs started, the config's
/// notes, and the step graph.
void startRun(Run& r, const RunLength& length) {
  const TrainConfig& c = r.config;
  const parallel::DistributedEnvironment& dist = r.engine.environment();
  TrainSummary& s = r.summary;
  s.world_size = dist.worldSize();
  s.global_batch_size = c.batch.train_batch_size;
  // A resumed run has trained the epochs before its data position (all of them, when it had
  // finished: then it trains nothing and only tests again).
  s.epochs = static_cast<int64_t>(r.loader.epoch()) + (r.loader.state().position > 0 ? 1 : 0);
  s.memory = parallel::gatherModelStateBytes(dist.group.get(), r.engine.memory());
  r.observers.onStart({&c, runFacts(r, length), s.memory});
  printNotes(dist.isMain(), "note", c.notes);
  printNotes(dist.isMain(), "note", c.zero.notes);
  printNotes(dist.isMain(), "note", length.notes);
  printNotes(dist.isMain(), "note",
             backendsNotes(c.gpu_math, c.document.contains("backends"), r.device.isCuda()));
  // What setup allocated and freed (initialisation, the first broadcast, a resumed checkpoint) is of
  // sizes training may never ask for again: hand it back before the first step sets the high-water
  // mark of memory.
  CachingAllocator::instance().emptyCache();
#if LOCKSTEP_WITH_CUDA
  // Likewise the GPU's (ZeRO's partitioning, master weights' first copies), and its peaks start
  // here: summary.json's GPU peaks are training's, not the setup's.
  if (r.device.isCuda()) {
    cuda::CudaCachingAllocator& gpu = cuda::CudaCachingAllocator::forDevice(r.device.index);
    gpu.emptyCache();
    gpu.resetPeakStats();
  }
#endif
  r.step_graph = makeStepGraph(r);
}

/// Forward and backward of one micro-batch, its share of the loss added to window_loss; true when
/// it completed an optimizer step.
bool microStep(Run& r, const data::Batch& b, double& window_loss) {
  const Tensor input = b.input.to(r.device, /*non_blocking=*/true);
  const Tensor target = b.target.to(r.device, /*non_blocking=*/true);
  if (r.step_graph) {
    try {
      window_loss += r.step_graph->step(input, target).itemDouble();
      if (!r.step_graph_fallback_said && !r.step_graph->eagerBecause().empty()) {
        r.step_graph_fallback_said = true;
        printNotes(r.engine.environment().isMain(), "warning",
                   {"cuda_graph: auto: CUDA could not capture step " +
                    std::to_string(r.engine.globalSteps()) + " as a graph (" + r.step_graph->eagerBecause() +
                    "); it and the steps after it run eagerly, with the same results"});
      }
    } catch (const Error& e) {
      // A failed capture under cuda_graph: true (or one auto could not step back from): the host's
      // side of that step is done and the GPU's is not; the run stops and names the key.
      if (!r.step_graph->captureFailed()) throw;
      const char* value = r.config.cuda_graph == CudaGraph::always ? "true" : "auto";
      throw Error(std::string(e.what()) + " [config cuda_graph: " + value +
                  "; set cuda_graph: false to train this step eagerly]");
    }
    return true;
  }
  autograd::Variable loss = microBatchLoss(r.engine, r.criterion, input, target);
  window_loss += loss.item() / static_cast<double>(r.config.batch.gradient_accumulation_steps);
  r.engine.backward(loss);
  return r.engine.step();
}

/// The logged loss at print steps is the mean over all ranks' micro-batches (what one process with
/// the global batch would report), not rank 0's share of it: collective then.
double loggedLoss(const Run& r, double window_loss, int64_t step) {
  const auto& group = r.engine.environment().group;
  if (!group || step % r.config.steps_per_print != 0) return window_loss;
  return parallel::allreduceScalar(*group, window_loss, comm::ReduceOp::avg);
}

StepMetrics stepMetrics(const Run& r, uint64_t epoch, double loss) {
  const parallel::Engine& en = r.engine;
  return {static_cast<int64_t>(epoch),
          en.globalSteps(),
          loss,
          en.optimizer()->paramGroups()[0].lr(),
          static_cast<double>(r.samples) / r.clock.trainSeconds(),
          r.samples,
          en.lossScaler() != nullptr,
          en.lossScale(),
          en.skippedSteps(),
          r.loader.waitSeconds()};
}

void saveCheckpoint(Run& r) {
  std::optional<std::string> path;
  r.clock.timeCheckpoint([&] { path = r.checkpoints.save(); });
  if (path) r.observers.onCheckpoint({r.engine.globalSteps(), *path});
}

/// How often the ranks compare stop signals: about this often, so that the comparison (a small
/// allreduce, some milliseconds on gloo) costs next to nothing beside the steps, yet a stop comes
/// well within a launcher's grace period.
constexpr double kStopCheckSeconds = 0.25;

/// The signal any rank received (StopSignals) by the end of `step`, or 0. Every rank gets the same
/// answer, so that all stop after the same step. Alone, every step; under DDP the ranks compare
/// after the first step and then every so many steps that about kStopCheckSeconds pass between
/// comparisons (each rank proposes a count from its own step time; the fewest wins, so all agree on
/// the next). Collective then, on the steps the ranks agreed.
int agreedStopSignal(Run& r, int64_t step) {
  const auto& group = r.engine.environment().group;
  if (!group) return r.stop.received();
  if (step < r.next_stop_check) return 0;
  const double step_seconds = secondsSince(r.last_stop_check_at) /
                              static_cast<double>(std::max<int64_t>(1, step - r.last_stop_check));
  const double every = std::clamp(std::floor(kStopCheckSeconds / std::max(step_seconds, 1e-9)), 1.0, 1000.0);
  // Under max: any rank's signal, and the fewest steps any rank proposes until the next comparison.
  double v[2] = {static_cast<double>(r.stop.received()), -every};
  comm::AllreduceOptions o;
  o.op = comm::ReduceOp::max;
  o.defer = true;  // waited for at once
  group->allreduce(v, 2, DType::f64, o)->wait();
  r.next_stop_check = step + static_cast<int64_t>(-v[1]);
  r.last_stop_check = step;
  r.last_stop_check_at = Clock::now();
  return static_cast<int>(v[0]);
}

Evaluation validate(Run& r, uint64_t e);

/// The steps of epoch e (its rest, when resumed mid-epoch); true when max_steps is reached or a
/// stop signal ends the run (r.stop_signal).
bool trainEpoch(Run& r, uint64_t e) {
  if (r.loader.state().position == 0) r.loader.setEpoch(e);
  r.summary.epochs = static_cast<int64_t>(e) + 1;
  r.engine.discardPartialAccumulation();  // an epoch's last micro-batches that fill no step
  double window_loss = 0;
  for (data::Batch& b : r.loader) {
    if (!microStep(r, b, window_loss)) continue;
    const int64_t step = r.engine.globalSteps();
    r.samples += r.config.batch.train_batch_size;
    r.observers.onStep(stepMetrics(r, e, loggedLoss(r, window_loss, step)));
    window_loss = 0;
    const bool last = r.config.max_steps > 0 && step >= r.config.max_steps;  // endEpoch validates it
    if (r.config.eval_every_steps > 0 && step % r.config.eval_every_steps == 0 && !last) {
      const Evaluation v = validate(r, e);
      r.clock.timeEvaluation([&] { r.observers.onEvaluation(v); });
    }
    if (r.checkpoints.dueAfterStep(step)) saveCheckpoint(r);
    crashIfAsked(r.options, r.engine.environment().rank(), step);
    if (r.config.max_steps > 0 && step >= r.config.max_steps) return true;
    r.stop_signal = agreedStopSignal(r, step);
    if (r.stop_signal != 0) return true;
  }
  return false;
}

/// Collective: stage 3 evaluates as it trains, each layer gathered for its forward alone.
EvalResult evaluateOn(Run& r, const std::shared_ptr<data::Dataset>& ds) {
  const parallel::DistributedEnvironment& env = r.engine.environment();
  EvalResult v;
  r.engine.syncBuffersForEvaluation();  // every rank evaluates the model rank 0 saves
  r.engine.evaluate([&] {
    v = evaluate(*r.engine.module(), ds, env.group.get(), env.rank(), env.worldSize(), r.data.vocab_size);
  });
  return v;
}

Evaluation validate(Run& r, uint64_t e) {
  r.clock.timeEvaluation([&] { r.last_val = evaluateOn(r, r.data.val ? r.data.val : r.data.test); });
  r.last_val_step = r.engine.globalSteps();
  if (r.data.val) r.summary.val_loss = r.last_val.loss;
  return {static_cast<int64_t>(e), r.last_val_step, r.last_val.loss, r.last_val.accuracy};
}

/// After epoch e's steps (or the run's last, at max_steps): the validation when due, told to the
/// outputs, then a checkpoint. (The other way round, a run killed between the checkpoint and the
/// outputs would resume past a validation that no output has.)
void endEpoch(Run& r, uint64_t e, bool done) {
  if (r.loader.state().position >= r.loader.size()) r.loader.setEpoch(e + 1);  // the epoch is complete
  std::optional<Evaluation> v;
  // (Not twice for one step: eval.every_steps may have validated the epoch's last already.)
  const bool fresh = r.last_val_step == r.engine.globalSteps() && r.last_val_step > 0;
  if ((static_cast<int64_t>(e + 1) % r.config.eval_every_epochs == 0 || done) && !fresh) v = validate(r, e);
  if (v) r.clock.timeEvaluation([&] { r.observers.onEvaluation(*v); });
  saveCheckpoint(r);
}

/// Collective: every rank's measured memory now (TrainSummary::measured_memory).
std::vector<TrainSummary::RankMemory> gatherMeasuredMemory(comm::ProcessGroup* group, const Device& device) {
  int64_t mine[4] = {peakRssBytes(), -1, -1, -1};
#if LOCKSTEP_WITH_CUDA
  if (device.isCuda()) {
    const cuda::MemoryStats st = cuda::CudaCachingAllocator::forDevice(device.index).stats();
    mine[1] = static_cast<int64_t>(st.allocated_peak);
    mine[2] = static_cast<int64_t>(st.reserved_peak);
    mine[3] = static_cast<int64_t>(st.allocated_current);
  }
#endif
  const int n = group ? group->size() : 1;
  std::vector<int64_t> all(static_cast<size_t>(n) * 4);
  if (group) {
    group->allgather(mine, all.data(), 4, DType::i64)->wait();
  } else {
    std::copy(mine, mine + 4, all.begin());
  }
  std::vector<TrainSummary::RankMemory> out(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) out[r] = {all[r * 4], all[r * 4 + 1], all[r * 4 + 2], all[r * 4 + 3]};
  return out;
}

/// The engine's part of the summary; each rank's DDP timings and measured memory are gathered
/// (collective).
void summarizeTraining(Run& r) {
  const parallel::Engine& en = r.engine;
  TrainSummary& s = r.summary;
  s.steps = en.globalSteps();
  s.precision = parallel::precisionName(r.config.precision);
  if (auto low = parallel::precisionDType(r.config.precision))
    s.precision_path = kernels::precisionPath(*low);
  s.has_loss_scale = en.lossScaler() != nullptr;
  s.loss_scale = en.lossScale();
  s.skipped_steps = en.skippedSteps();
  s.samples_per_second = s.train_seconds > 0 ? static_cast<double>(r.samples) / s.train_seconds : 0;
  s.data_wait_seconds = r.loader.waitSeconds();
  if (en.ddp()) s.ddp_timings = gatherReducerTimings(*en.environment().group, en.ddp()->timings());
  s.measured_memory = gatherMeasuredMemory(en.environment().group.get(), r.device);
}

/// Language data tests on its validation windows: a validation of these very weights is reused.
void test(Run& r) {
  const bool validated = r.data.test == r.data.val && r.last_val_step == r.engine.globalSteps();
  const EvalResult t = validated ? r.last_val : evaluateOn(r, r.data.test);
  r.summary.test_loss = t.loss;
  r.summary.test_accuracy = t.accuracy;
}

/// The GPU's name as CUDA reports it ("NVIDIA H200"); empty on the CPU.
std::string gpuName(const Device& device) {
#if LOCKSTEP_WITH_CUDA
  if (device.isCuda()) {
    const std::string d = cuda::describeDevice(device.index);
    return d.substr(0, d.find(", sm_"));
  }
#endif
  (void)device;
  return "";
}

/// A language model's tokens per sample, FLOPs per token and the job's GPUs' peak, for the progress
/// line (zeros for other models, and no peak on the CPU or an unknown GPU).
ModelThroughput modelThroughput(const TrainConfig& c, const nn::Module& model, const Device& device,
                                int world) {
  ModelThroughput t;
  if (!dynamic_cast<const nn::LanguageModel*>(&model)) return t;
  t.tokens_per_sample = c.data.block_size;
  t.flops_per_token = trainingFlopsPerToken(model, c.data.block_size).value_or(0.0);
  const std::string gpu = gpuName(device);
  if (!gpu.empty()) t.job_peak_flops = denseBf16PeakFlops(gpu).value_or(0.0) * world;
  return t;
}

/// DIR/model.safetensors, and a language model's samples. Stage 3: generation runs the model token
/// by token and needs the whole weights; without samples the model file is written one gathered
/// bucket at a time, so the whole model is never resident on a rank.
void saveModelAndSample(Run& r) {
  const bool chief = r.engine.environment().isMain();
  auto* lm = dynamic_cast<nn::LanguageModel*>(r.engine.model().get());
  saveModel(r.options.output_dir + "/model.safetensors", r.engine, chief);  // ZeRO-3: a bucket at a time
  // Beside it Hugging Face's config.json where its classes load the file as it is (llama), so that
  // from_pretrained(DIR) works.
  if (chief) writeHuggingFaceConfig(r.options.output_dir, *r.engine.model());
  if (!lm) return;
  r.summary.tokens_per_sample = r.config.data.block_size;
  r.summary.flops_per_token = trainingFlopsPerToken(*lm, r.config.data.block_size);
  r.summary.peak_gpu = gpuName(r.device);
  if (!r.summary.peak_gpu.empty()) r.summary.peak_flops = denseBf16PeakFlops(r.summary.peak_gpu);
  // Samples are text: a prompt's bytes in, bytes out (lockstep's byte tokenizer). Ids of another
  // tokenizer (a token directory from nanoGPT's scripts) would print as noise: none then, said.
  if (const std::string note = noSamplesNote(r.config.data, r.data.tokenizer); !note.empty()) {
    if (chief) std::fprintf(stderr, "%s\n", note.c_str());
    return;
  }
  // ZeRO stage 3 generates as it evaluates, each layer gathered for its forward (collective: every
  // rank generates the same tokens), so the whole model is never resident; else the chief alone.
  if (r.engine.parametersWhole()) {
    // Through evaluate() all the same: 16-bit master-weight parameters generate under autocast.
    if (chief)
      r.engine.evaluate([&] { r.summary.samples = sampleText(*lm, r.config.sample, r.config.seed); });
    return;
  }
  nlohmann::json samples;
  r.engine.evaluate([&] { samples = sampleText(*lm, r.config.sample, r.config.seed); });
  if (chief) r.summary.samples = std::move(samples);
}

nlohmann::json checkpointProfileJson() {
  const autograd::CheckpointProfile p = autograd::checkpointProfile();
  return {{"segments", p.segments},
          {"forward_seconds", p.forward_seconds},
          {"recomputes", p.recomputes},
          {"recompute_seconds", p.recompute_seconds},
          {"backward_seconds", p.backward_seconds},
          {"stash_reuses", p.stash_reuses}};
}

/// After the last step: the summary, the test, the model file, and the outputs' end.
TrainSummary finishRun(Run& r) {
  r.clock.fill(r.summary);
  summarizeTraining(r);
  test(r);
  saveModelAndSample(r);
  if (r.config.activation_checkpointing.profile) r.summary.checkpoint_profile = checkpointProfileJson();
  r.observers.onEnd(r.summary);
  return r.summary;
}

/// A stop signal ended the run after its current step: that step's checkpoint (collective under
/// ZeRO) and the summary so far. Neither the test nor the outputs' end: the run is not finished,
/// and --resume (or the launcher's restart) goes on from the checkpoint.
TrainSummary stopRun(Run& r) {
  saveCheckpoint(r);
  r.clock.fill(r.summary);
  r.summary.steps = r.engine.globalSteps();
  r.summary.stop_signal = r.stop_signal;
  return r.summary;
}

}  // namespace

TrainSummary runTraining(const TrainConfig& c, const TrainerOptions& o) {
  const Device device = trainingDevice(c);  // before the process group: NCCL needs the GPU
  kernels::setGpuMathOptions(c.gpu_math);   // before any GPU kernel chooses an algorithm
  useGpuRankHostThreads(device);            // before any host kernel starts its threads
  const OnDevice on_device(device);
  if (c.pipeline.enabled()) return runPipelineTraining(c, o);
  parallel::DistributedEnvironment dist = parallel::initFromEnvironment(c.backend, commTimeout(c));
  const bool chief = dist.isMain();
  checkSameConfigOnEveryRank(c, dist.group.get());

  TrainData data = loadTrainData(c.data, c.seed);
  manualSeed(c.seed);  // dropout and other draws during training
  std::shared_ptr<nn::Module> model = buildModel(c, data, device);
  if (chief) describeModel(c, *model, device);
  if (c.activation_checkpointing.profile) autograd::resetCheckpointProfile();
  data::DataLoaderOptions loader_options = loaderOptions(c);
  loader_options.device = device;  // on a GPU: pinned batches, copied a batch ahead on a side stream
  data::DataLoader loader(data.train, parallel::makeTrainSampler(dist, data.train->size(), true, c.seed),
                          loader_options);
  const RunLength length = runLength(c, loader, data.train->size());
  parallel::Engine engine(model, languageModelOptimizer(c, *model),
                          engineOptions(c, length.total_steps, device), dist);

  RunCheckpoints checkpoints(checkpointOptions(c, o), engine, loader, configRecord(c, o),
                             runIdentity(c, dist.worldSize()));
  checkpoints.resume();
  RunObservers outputs;  // rank 0's
  if (chief) addOutputs(outputs, c, o, length, modelThroughput(c, *model, device, dist.worldSize()));
  // From here on a stop signal ends the run at a step boundary, with a checkpoint; before (setup,
  // data loading), it ends the process at once, as there is nothing to save.
  const StopSignals stop;
  Run run{c, o, data, engine, loader, checkpoints, outputs, stop, device};
  startRun(run, length);
  run.last_stop_check = engine.globalSteps();
  run.next_stop_check = engine.globalSteps() + 1;
  run.last_stop_check_at = Clock::now();

  bool done = c.max_steps > 0 && engine.globalSteps() >= c.max_steps;
  for (uint64_t e = loader.epoch(); e < static_cast<uint64_t>(c.epochs) && !done; ++e) {
    done = trainEpoch(run, e);
    if (run.stop_signal != 0) return stopRun(run);
    endEpoch(run, e, done);
  }
  return finishRun(run);
}

}  // namespace lockstep::train
