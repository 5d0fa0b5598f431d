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
#include <numeric>
#include <optional>

#include "lockstep/autograd.h"
#include "lockstep/comm/device_sharing.h"
#include "lockstep/data.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"
#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/tensor/allocator.h"
#include "lockstep/train/checkpoint/checkpoint.h"
#include "lockstep/train/config/config_backends.h"
#include "lockstep/train/language_model_run.h"
#include "lockstep/train/monitor/progress.h"
#include "lockstep/train/monitor/report.h"
#include "lockstep/train/checkpoint/resume.h"
#include "lockstep/train/monitor/run_info.h"
#include "lockstep/train/train_data.h"
#include "lockstep/train/checkpoint/training_state.h"
#include "lockstep/train/checkpoint/zero_checkpoint.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/runtime.h"
#endif

namespace lockstep::parallel {
// summary.json's ddp_timings entries, and what ranks send rank 0: the fields by their own names.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ReducerTimings, iterations, forward_compute_ms, backward_compute_ms,
                                   backward_comm_ms, backward_compute_comm_overlap_ms, backward_comm_wait_ms)
}  // namespace lockstep::parallel

namespace lockstep::train {

namespace fs = std::filesystem;

nlohmann::json toJson(const TrainSummary& s) {
  nlohmann::json j = {{"world_size", s.world_size},
                      {"epochs", s.epochs},
                      {"steps", s.steps},
                      {"global_batch_size", s.global_batch_size},
                      {"samples_per_second", s.samples_per_second},
                      {"train_seconds", s.train_seconds},
                      {"eval_seconds", s.eval_seconds},
                      {"checkpoint_seconds", s.checkpoint_seconds},
                      {"wall_seconds", s.wall_seconds},
                      {"test_accuracy", s.test_accuracy},
                      {"test_loss", s.test_loss}};
  j["precision"] = s.precision;
  if (!s.precision_path.empty()) j["precision_path"] = s.precision_path;
  if (s.has_loss_scale) {
    j["loss_scale"] = s.loss_scale;
    j["skipped_steps"] = s.skipped_steps;
  }
  if (!s.ddp_timings.empty()) j["ddp_timings"] = s.ddp_timings;
  if (s.tokens_per_sample > 0)
    j["tokens_per_second"] = s.samples_per_second * static_cast<double>(s.tokens_per_sample);
  if (s.val_loss) {
    j["val_loss"] = *s.val_loss;
    j["val_perplexity"] = std::exp(*s.val_loss);
  }
  if (!s.samples.is_null()) j["samples"] = s.samples;
  if (!s.checkpoint_profile.is_null()) j["activation_checkpointing_profile"] = s.checkpoint_profile;
  j["memory"] = nlohmann::json::array();
  for (size_t r = 0; r < s.memory.size(); ++r) {
    j["memory"].push_back({{"rank", r},
                           {"parameters", s.memory[r].parameters},
                           {"gradients", s.memory[r].gradients},
                           {"optimizer_states", s.memory[r].optimizer_states}});
  }
  return j;
}

void prepareOutputDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw ValueError("cannot create the output dir " + dir + ": " + ec.message());
  std::string probe = dir + "/.lockstep-write-test-" + std::to_string(::getpid());
  {
    std::ofstream f(probe);
    if (!f || !(f << "x") || !f.flush()) throw ValueError("the output dir " + dir + " is not writable");
  }
  fs::remove(probe, ec);
}

namespace {

std::chrono::milliseconds commTimeout(const TrainConfig& c) {
  if (!c.comm_timeout_seconds) return comm::kGroupTimeout;  // LOCKSTEP_TIMEOUT, else the default
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(*c.comm_timeout_seconds * 1000.0)));
}

/// The device this rank trains on: "cuda" is cuda:LOCAL_RANK (torchrun's convention) while the
/// machine has a GPU per local rank; with more local ranks than GPUs they share them round robin
/// (comm::localRankDevice), and the process group then moves GPU buffers through the host. Checked
/// to exist here before anything is built on it.
Device trainingDevice(const TrainConfig& c) {
  Device d = parseDevice(c.device);
  if (d.isCuda() && c.device == "cuda") {
    const int local_rank = comm::workerEnvironment().local_rank, gpus = cudaDeviceCount();
    d.index = gpus > 0 ? comm::localRankDevice(local_rank, gpus) : std::max(local_rank, 0);
  }
  checkDeviceAvailable(d);
  return d;
}

parallel::EngineOptions engineOptions(const TrainConfig& c, int64_t total_steps) {
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
  eo.zero_stage = c.zero.stage;
  eo.zero = c.zero.options;
  return eo;
}

nn::ModelOptions modelOptions(const TrainConfig& c, Generator* gen) {
  nn::ModelOptions mo = c.model_options;
  mo.generator = gen;
  if (c.data.dataset == "synthetic") {  // size linear/mlp to the synthetic data unless told
    if (mo.in_features == 0) {
      mo.in_features = std::accumulate(c.data.input_shape.begin(), c.data.input_shape.end(), int64_t{1},
                                       std::multiplies<>());
    }
    if (mo.out_features == 0) mo.out_features = c.data.num_classes;
  }
  return mo;
}

}  // namespace

TrainSummary runTraining(const TrainConfig& c, const TrainerOptions& o) {
  const Device device = trainingDevice(c);  // before the process group: NCCL needs the GPU
  kernels::setGpuMathOptions(c.gpu_math);  // before any GPU kernel chooses an algorithm
#if LOCKSTEP_WITH_CUDA
  std::optional<cuda::DeviceGuard> on_gpu;
  if (device.isCuda()) on_gpu.emplace(device.index);
#endif
  parallel::DistributedEnvironment dist = parallel::initFromEnvironment(c.backend, commTimeout(c));
  const int rank = dist.rank(), world = dist.worldSize();
  const bool chief = dist.isMain();
  const std::string ckpt_dir = c.checkpoint_dir.empty() ? o.output_dir + "/checkpoints" : c.checkpoint_dir;

  TrainData data = loadTrainData(c.data, c.seed);
  manualSeed(c.seed);  // dropout and other draws during training
  Generator init_gen(c.seed);
  nn::ModelOptions mo = modelOptions(c, &init_gen);
  if (c.data.isLanguage() && mo.vocab_size == 0) mo.vocab_size = data.vocab_size;
  std::shared_ptr<nn::Module> model;
  {
    // ZeRO stage 3 builds the model under zero.Init (as DeepSpeed's Hugging Face integration does):
    // its parameters go to a file as they are made, and each rank then takes its partition one
    // bucket at a time, so the whole model is never in memory. The file is where the partition is
    // offloaded to, else $TMPDIR.
    std::optional<parallel::ZeroInit> zero_init;
    if (c.zero.stage == 3 && device.isCpu()) {
      const parallel::ZeroOptions& z = c.zero.options;
      zero_init.emplace(!z.offload_param_nvme_path.empty() ? z.offload_param_nvme_path
                                                           : z.offload_optimizer.nvme_path);
    }
    model = nn::makeModel(c.model, mo);
  }
  model->to(device);  // built on the host with the seeded generator, so every device starts alike
  auto* language_model = dynamic_cast<nn::LanguageModel*>(model.get());
  if (language_model && chief) {
    std::fprintf(stderr, "model: %s, %lld parameters\n", model->extraRepr().c_str(),
                 static_cast<long long>(model->numParameters()));
    std::string note =
        activationCheckpointingNote(c.activation_checkpointing, language_model->checkpointEvery(),
                                    language_model->numLayers(), c.model, device.isCuda());
    if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  }
  if (c.activation_checkpointing.profile) autograd::resetCheckpointProfile();

  data::DataLoaderOptions lo;
  lo.batch_size = c.batch.micro_batch_size;
  lo.num_workers = c.data.num_workers;
  data::DataLoader loader(data.train, parallel::makeTrainSampler(dist, data.train->size(), true, c.seed), lo);
  const int64_t accum = c.batch.gradient_accumulation_steps;
  const int64_t steps_per_epoch = loader.size() / accum;
  if (steps_per_epoch == 0) {
    throw ValueError("the training set (" + std::to_string(data.train->size()) +
                     " samples) is smaller than one step (" + std::to_string(c.batch.train_batch_size) +
                     " samples)");
  }
  int64_t total_steps = steps_per_epoch * c.epochs;
  if (c.max_steps > 0) total_steps = std::min(total_steps, c.max_steps);
  // Language models take weight decay on their Linear weights only (minGPT's configure_optimizers):
  // the optimizer gets a second group with weight_decay 0 for biases, norms and embeddings.
  std::shared_ptr<optim::Optimizer> lm_optimizer;
  if (language_model) {
    nn::WeightDecayGroups groups = nn::weightDecayGroups(*model);
    lm_optimizer = optim::makeOptimizer(c.optimizer, groups.decay);
    if (!groups.no_decay.empty()) lm_optimizer->addParamGroup(groups.no_decay, {{"weight_decay", 0.0}});
  }
  parallel::Engine engine(model, lm_optimizer, engineOptions(c, total_steps), dist);
  nn::Module& net = *engine.module();
  optim::Optimizer& opt = *engine.optimizer();
  nn::CrossEntropyLoss criterion;

  nlohmann::json config_record = o.config_json;
  config_record["document"] = c.document;
  TrainingParts parts{model.get(),   &opt,  engine.scheduler(), &loader, &defaultGenerator(),
                      config_record, world, engine.lossScaler()};
  // ZeRO: each rank writes its own partition of the checkpoint (zero_checkpoint.h), nothing
  // gathered; a load reshards to this run's world size and stage.
  parts.zero = engine.zero();
  RunIdentity identity{newRunId(),
                       c.identity_hash,
                       c.seed,
                       world,
                       c.batch.train_batch_size,
                       c.batch.micro_batch_size,
                       c.batch.gradient_accumulation_steps};
  auto log = [&](const char* what, const std::vector<std::string>& lines) {
    if (chief) {
      for (const auto& l : lines) std::fprintf(stderr, "%s: %s\n", what, l.c_str());
    }
  };
  // ZeRO stage 3: the model's parameters hold their whole values only while gathered (collective;
  // a no-op below stage 3); a restored checkpoint's values go back into each rank's partition. A
  // fresh start gathers nothing: the whole model is never resident on a rank while training.
  auto gather_parameters = [&engine] {
    if (engine.zero()) engine.zero()->gatherParameters();
  };
  const bool resuming = o.resume || !o.resume_from.empty();
  if (resuming) gather_parameters();
  if (resuming) {
    // A restarted worker of a job started --resume-from takes the job's own newer checkpoints
    // first, and --resume-from again when there are none yet.
    ResumePick pick;
    if (o.resume)
      pick = pickResumeCheckpoint({ckpt_dir, "", o.resume_required && o.resume_from.empty(), identity});
    if (!pick.data && !o.resume_from.empty()) {
      ResumePick from = pickResumeCheckpoint({ckpt_dir, o.resume_from, true, identity});
      from.notes.insert(from.notes.begin(), pick.notes.begin(), pick.notes.end());
      pick = std::move(from);
    }
    log("warning", pick.notes);
    if (pick.data) {
      std::string note = restoreTrainingState(*pick.data, parts);
      engine.setGlobalSteps(pick.data->step);
      // Resuming continues that run (its pruning and identity), unless it was another's on purpose.
      if (incompatibility(pick.data->identity, identity).empty())
        identity.run_id = pick.data->identity.run_id;
      if (chief) {
        std::fprintf(stderr, "resuming from %s (step %lld)\n", pick.path.c_str(),
                     static_cast<long long>(pick.data->step));
        if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
      }
    } else if (chief) {
      std::fprintf(stderr, "warning: --resume: no checkpoint to resume in %s, starting from scratch\n",
                   ckpt_dir.c_str());
    }
  } else {
    log("note", freshStartNotes(ckpt_dir, identity));
  }
  if (resuming && engine.zero()) {  // stage 3: back to the partitions alone, holding what was restored
    engine.zero()->adoptGatheredParameters();
    engine.zero()->releaseParameters();
  }

  // Throughput counts training alone: evaluation and checkpoint writes are timed apart.
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  double eval_seconds = 0, checkpoint_seconds = 0;
  const auto t0 = Clock::now();
  auto train_seconds = [&] { return since(t0) - eval_seconds - checkpoint_seconds; };

  int64_t last_saved = engine.globalSteps();
  auto save = [&] {
    const auto t = Clock::now();
    CheckpointOptions co;
    co.keep_last = c.checkpoint_keep_last;
    co.die_in_save_at_step = o.die_in_zero_save_at_step;
    if (engine.zero() && engine.globalSteps() != last_saved) {  // collective: every rank writes
      CheckpointData d = captureTrainingState(parts, engine.globalSteps());
      d.identity = identity;
      saveZeroCheckpoint(ckpt_dir, d, *engine.zero(), dist.group.get(), co);
    } else if (chief && engine.globalSteps() != last_saved) {
      CheckpointData d = captureTrainingState(parts, engine.globalSteps());
      d.identity = identity;
      saveCheckpoint(ckpt_dir, d, co);
    }
    last_saved = engine.globalSteps();
    checkpoint_seconds += since(t);
  };
  // Stage 3 evaluates as it trains: each layer gathered for its forward alone (collective).
  auto evaluate_gathering_layers = [&](const std::shared_ptr<data::Dataset>& ds) {
    if (engine.zero() && !engine.zero()->parametersGathered()) engine.zero()->beginStep();
    EvalResult v = evaluate(net, ds, dist.group.get(), rank, world);
    if (engine.zero()) engine.zero()->releaseParameters();
    return v;
  };
  auto validate = [&](const std::shared_ptr<data::Dataset>& ds) {
    const auto t = Clock::now();
    EvalResult v = evaluate_gathering_layers(ds);
    eval_seconds += since(t);
    return v;
  };

  std::unique_ptr<Progress> progress;
  if (chief) {
    ProgressOptions po;
    po.epochs = c.epochs;
    po.total_steps = total_steps;
    po.steps_per_print = c.steps_per_print;
    po.tty = ::isatty(2) == 1;
    if (c.csv_monitor.enabled) {
      std::string dir = c.csv_monitor.output_path.empty() ? o.output_dir : c.csv_monitor.output_path;
      po.csv_path =
          dir + (c.csv_monitor.output_path.empty() ? "" : "/" + c.csv_monitor.job_name) + "/metrics.csv";
    } else {
      po.csv_path = o.output_dir + "/metrics.csv";
    }
    if (c.tensorboard.enabled) {
      std::string dir =
          c.tensorboard.output_path.empty() ? o.output_dir + "/tensorboard" : c.tensorboard.output_path;
      po.tensorboard_dir = dir + "/" + c.tensorboard.job_name;
    }
    progress = std::make_unique<Progress>(po);
    RunFacts facts;
    facts.invocation = o.config_json;
    facts.world_size = world;
    facts.backend = dist.group ? dist.group->backendName() : "none";
    facts.device = deviceName(device);
#if LOCKSTEP_WITH_CUDA
    if (device.isCuda()) facts.device += " (" + cuda::describeDevice(device.index) + ")";
#endif
    facts.steps_per_epoch = steps_per_epoch;
    facts.total_steps = total_steps;
    facts.checkpoint_dir = ckpt_dir;
    nlohmann::json run = describeRun(c, facts);
    run["metrics_csv"] = po.csv_path;
    if (!po.tensorboard_dir.empty()) run["tensorboard_dir"] = po.tensorboard_dir;
    file::writeAtomic(o.output_dir + "/run.json", run.dump(2) + "\n");
  }
  // DIR/report.html at every evaluation and at the end: reloading it during a run is a live view.
  // Its time counts as evaluation's, not training's.
  auto report = [&] {
    if (!chief) return;
    const auto t = Clock::now();
    try {
      writeReport({o.output_dir}, o.output_dir + "/report.html");
    } catch (const Error& e) {
      std::fprintf(stderr, "warning: could not write %s/report.html: %s\n", o.output_dir.c_str(), e.what());
    }
    eval_seconds += since(t);
  };

  TrainSummary s;
  // The memory report (collective): every rank's model-state bytes, printed once at the start.
  s.memory = parallel::gatherModelStateBytes(dist.group.get(), engine.memory());
  if (chief) {
    for (size_t r = 0; r < s.memory.size(); ++r) {
      const parallel::ModelStateBytes& m = s.memory[r];
      std::fprintf(
          stderr,
          "memory: rank %zu: parameters %lld B, gradients %lld B, optimizer states %lld B (ZeRO stage "
          "%d)\n",
          r, static_cast<long long>(m.parameters), static_cast<long long>(m.gradients),
          static_cast<long long>(m.optimizer_states), c.zero.stage);
    }
    log("note", c.notes);
    log("note", c.zero.notes);
    log("note", backendsNotes(c.gpu_math, c.document.contains("backends"), device.isCuda()));
  }
  // What setup allocated and freed (initialisation, the first broadcast, a resumed checkpoint) is of
  // sizes training may never ask for again: hand it back before the first step sets the high-water
  // mark of memory.
  CachingAllocator::instance().emptyCache();
  std::unique_ptr<parallel::StepGraph> step_graph;
  if (device.isCuda() && c.cuda_graph != "false") {
    const std::string why = parallel::stepGraphBlocker(engine);
    if (why.empty()) {
      step_graph = std::make_unique<parallel::StepGraph>(
          engine, [&](const autograd::Variable& out, const Tensor& target) {
            return criterion(flattenPositions(out), flattenPositions(target));
          });
    } else if (c.cuda_graph == "true") {
      throw ValueError("cuda_graph: true, but this training step cannot be replayed as a CUDA graph: " + why +
                       " (set cuda_graph: auto to run it eagerly then)");
    } else {
      log("note", {"cuda_graph: the step runs eagerly: " + why});
    }
  }
  s.world_size = world;
  s.global_batch_size = c.batch.train_batch_size;
  int64_t samples = 0;
  EvalResult last_val;
  int64_t last_val_step = -1;
  bool done = c.max_steps > 0 && engine.globalSteps() >= c.max_steps;
  for (uint64_t e = loader.epoch(); e < static_cast<uint64_t>(c.epochs) && !done; ++e) {
    if (loader.state().position == 0) loader.setEpoch(e);
    s.epochs = static_cast<int64_t>(e) + 1;
    engine.discardPartialAccumulation();  // an epoch's last micro-batches that fill no step
    double window_loss = 0;
    for (data::Batch& b : loader) {
      const Tensor input = b.input.to(device, /*non_blocking=*/true);
      const Tensor target = b.target.to(device, /*non_blocking=*/true);
      if (step_graph) {
        window_loss += step_graph->step(input, target).itemDouble();
      } else {
        autograd::Variable loss =
            criterion(flattenPositions(engine.forward(autograd::Variable(input))), flattenPositions(target));
        window_loss += loss.item() / static_cast<double>(accum);
        engine.backward(loss);
        if (!engine.step()) continue;
      }
      const int64_t step = engine.globalSteps();
      samples += c.batch.train_batch_size;
      if (dist.group && step % c.steps_per_print == 0) {
        // The logged loss is the mean over all ranks' micro-batches (what one process with the
        // global batch would report), not rank 0's share of it: every rank takes part.
        window_loss = parallel::allreduceScalar(*dist.group, window_loss, comm::ReduceOp::avg);
      }
      if (progress) {
        progress->onStep({static_cast<int64_t>(e), step, window_loss, opt.paramGroups()[0].lr(),
                          static_cast<double>(samples) / train_seconds(), samples,
                          engine.lossScaler() != nullptr, engine.lossScale(), engine.skippedSteps()});
      }
      window_loss = 0;
      if (c.checkpoint_every_steps > 0 && step % c.checkpoint_every_steps == 0) save();
      if (o.crash_after_step > 0 && step == o.crash_after_step) {
        std::fprintf(stderr, "rank %d: crashing after step %lld (fault injection)\n", rank,
                     static_cast<long long>(step));
        std::_Exit(3);
      }
      if (c.max_steps > 0 && step >= c.max_steps) {
        done = true;
        break;
      }
    }
    if (loader.state().position >= loader.size()) loader.setEpoch(e + 1);  // the epoch is complete
    if (static_cast<int64_t>(e + 1) % c.eval_every_epochs == 0 || done) {
      EvalResult v = validate(data.val ? data.val : data.test);
      last_val = v;
      last_val_step = engine.globalSteps();
      if (data.val) s.val_loss = v.loss;
      if (progress) progress->onValidation(static_cast<int64_t>(e), engine.globalSteps(), v.loss, v.accuracy);
    }
    save();
    if (static_cast<int64_t>(e + 1) % c.eval_every_epochs == 0 || done) report();
  }
  // One clock reading for both, so that train + eval + checkpoint is wall exactly (two readings
  // drift apart when the machine is loaded).
  s.wall_seconds = since(t0);
  s.train_seconds = s.wall_seconds - eval_seconds - checkpoint_seconds;
  s.eval_seconds = eval_seconds;
  s.checkpoint_seconds = checkpoint_seconds;
  s.steps = engine.globalSteps();
  s.precision = c.precision;
  if (auto low = parallel::precisionDType(c.precision)) s.precision_path = kernels::precisionPath(*low);
  s.has_loss_scale = engine.lossScaler() != nullptr;
  s.loss_scale = engine.lossScale();
  s.skipped_steps = engine.skippedSteps();
  s.samples_per_second = s.train_seconds > 0 ? static_cast<double>(samples) / s.train_seconds : 0;
  if (engine.ddp()) {
    for (const std::string& r :
         parallel::allgatherBytes(*dist.group, nlohmann::json(engine.ddp()->timings()).dump())) {
      s.ddp_timings.push_back(nlohmann::json::parse(r).get<parallel::ReducerTimings>());
    }
  }
  // Language data tests on its validation windows: a validation of these very weights is reused.
  EvalResult t = data.test == data.val && last_val_step == engine.globalSteps()
                     ? last_val
                     : evaluate_gathering_layers(data.test);
  // Stage 3: the samples need the whole weights (generation runs the model token by token); the
  // model file is written one gathered bucket at a time, so without samples the whole model is
  // never resident on a rank.
  if (language_model && c.sample.max_new_tokens > 0) gather_parameters();
  const bool partitioned_save = engine.zero() && !engine.zero()->parametersGathered();
  if (partitioned_save)
    saveModelPartitioned(o.output_dir + "/model.safetensors", *model, *engine.zero(), chief);
  s.test_loss = t.loss;
  s.test_accuracy = t.accuracy;
  if (language_model) {
    s.tokens_per_sample = c.data.block_size;
    if (chief) s.samples = sampleText(*language_model, c.sample, c.seed);
  }
  if (c.activation_checkpointing.profile) {
    autograd::CheckpointProfile p = autograd::checkpointProfile();
    s.checkpoint_profile = {{"segments", p.segments},
                            {"forward_seconds", p.forward_seconds},
                            {"recomputes", p.recomputes},
                            {"recompute_seconds", p.recompute_seconds},
                            {"backward_seconds", p.backward_seconds},
                            {"stash_reuses", p.stash_reuses}};
    if (chief) {
      std::fprintf(
          stderr,
          "activation checkpointing profile: %lld segment forwards %.2f s, %lld recomputations %.2f s, "
          "backward through them %.2f s\n",
          static_cast<long long>(p.segments), p.forward_seconds, static_cast<long long>(p.recomputes),
          p.recompute_seconds, p.backward_seconds);
    }
  }
  if (chief) {
    progress->finishLine();
    progress->onTest(s.epochs - 1, s.steps, t.loss, t.accuracy);
    if (!s.samples.is_null()) {
      std::fprintf(stderr, "sample (greedy) after %s:\n%s\nsample (temperature %g, top-k %lld):\n%s\n",
                   c.sample.prompt == "\n" ? "a newline" : c.sample.prompt.c_str(),
                   s.samples["greedy"].get<std::string>().c_str(), c.sample.temperature,
                   static_cast<long long>(c.sample.top_k), s.samples["sampled"].get<std::string>().c_str());
    }
    if (!partitioned_save) saveModel(o.output_dir + "/model.safetensors", *model);
    file::writeAtomic(o.output_dir + "/summary.json", toJson(s).dump(2) + "\n");
    report();
  }
  return s;
}

}  // namespace lockstep::train
