#pragma once
// What runTraining builds from a TrainConfig before its first step: the device, the model, the
// engine's and the loader's options, the run's length, its checkpoint policy and identity, and
// rank 0's outputs. Pure functions of the config except where said.
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lockstep/data/data_loader.h"
#include "lockstep/nn/module.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/parallel/engine.h"
#include "lockstep/train/checkpoint/run_checkpoints.h"
#include "lockstep/train/monitor/progress.h"
#include "lockstep/train/monitor/run_observer.h"
#include "lockstep/train/train_data.h"
#include "lockstep/train/trainer.h"

namespace lockstep::train {

/// comm_timeout_seconds, else comm::kGroupTimeout (LOCKSTEP_TIMEOUT, else the default).
std::chrono::milliseconds commTimeout(const TrainConfig& c);

/// The device this rank trains on: `device: cuda` is cuda:LOCAL_RANK (torchrun's convention) while the
/// machine has a GPU per local rank; with more local ranks than GPUs they share them round robin
/// (comm::localRankDevice), and the process group then moves GPU buffers through the host. Checked
/// to exist here (NotSupportedError) before anything is built on it.
Device trainingDevice(const TrainConfig& c);
/// Intra-op threads for a rank that trains on `device`, or 0 to leave the count as it is. When the
/// launcher gave each of several local workers OMP_NUM_THREADS=1 itself (torchrun's rule, made so
/// that CPU ranks do not oversubscribe the host; launch::kDefaultedOmpThreads says so, naming
/// local_world_size), OMP_NUM_THREADS is still 1 and LOCKSTEP_NUM_THREADS is unset, a rank on a GPU
/// takes its share, cores / local_world_size (at
/// least 1): its host work, ZeRO-Offload's optimizer step and clipping above all, would otherwise
/// run on one core while the others idle (DeepSpeed's launcher splits the cores likewise with
/// --bind_cores_to_rank). A CPU rank, or a count the user set, keeps its count.
int gpuRankHostThreads(const Device& device, int cores, int local_world_size);
/// Sets gpuRankHostThreads' count for this worker (its CPU affinity, LOCAL_WORLD_SIZE) where it
/// gives one, and local rank 0 says so on stderr once.
void useGpuRankHostThreads(const Device& device);
/// run.json's device: "cuda:0 (NVIDIA H100 80GB HBM3, sm_90, ...)", or "cpu".
std::string deviceDescription(const Device& d);

/// total_steps: 0 until the loader says how long the run is.
/// device: the training device (ZeRO-3 Offload on a GPU gathers the host-built model there).
parallel::EngineOptions engineOptions(const TrainConfig& c, int64_t total_steps, Device device);

/// The model c names, sized to the data, built on the host with the seeded generator (so every
/// device starts alike; ZeRO stage 3 under zero.Init) and moved to device.
std::shared_ptr<nn::Module> buildModel(const TrainConfig& c, const TrainData& data, Device device);

/// Rank 0's log of a language model (stderr): its size and how activation checkpointing runs.
void describeModel(const TrainConfig& c, nn::Module& model, Device device);

/// Language models take weight decay on their Linear weights only (minGPT's configure_optimizers):
/// a second group with weight_decay 0 for biases, norms and embeddings. nullptr for other models:
/// the engine makes the config's optimizer.
std::shared_ptr<optim::Optimizer> languageModelOptimizer(const TrainConfig& c, nn::Module& model);

data::DataLoaderOptions loaderOptions(const TrainConfig& c);

struct RunLength {
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
  /// When an epoch's micro-batches are not a whole number of steps: that its last ones are left out
  /// (and that DeepSpeed's engine would carry them into the next epoch's first step); else empty.
  std::vector<std::string> notes;
};
/// Optimizer steps per epoch of this rank's loader, and in all (epochs, max_steps). ValueError when
/// the training set (train_size samples) is smaller than one step.
RunLength runLength(const TrainConfig& c, const data::DataLoader& loader, int64_t train_size);

/// The config's checkpoint dir, else OUTPUT/checkpoints.
std::string checkpointDir(const TrainConfig& c, const TrainerOptions& o);
RunCheckpointsOptions checkpointOptions(const TrainConfig& c, const TrainerOptions& o);
/// What a checkpoint's config.json holds: the invocation and the config document.
nlohmann::json configRecord(const TrainConfig& c, const TrainerOptions& o);
/// Collective: ValueError on every rank, naming the ranks, unless every rank of `group` trains with
/// the same config (the document after --set, but for what may differ between hosts: data.root,
/// data.num_workers, checkpoint.dir, the monitors' output paths and the NVMe offloads' nvme_path). Ranks with
/// another seed, learning rate or batch size would train on silently, apart (a stale copy of the file on a
/// host). Nothing when group is null (one rank).
void checkSameConfigOnEveryRank(const TrainConfig& c, comm::ProcessGroup* group);
/// A fresh run's identity (a new run id) in a world of `world` ranks.
RunIdentity runIdentity(const TrainConfig& c, int world);

/// Fault injection for tests of --max-restarts: after step o.crash_after_step this process exits
/// with code 3 as if it had crashed (on rank o.crash_rank only, when that is set).
void crashIfAsked(const TrainerOptions& o, int rank, int64_t step);

/// Rank 0's outputs, told in this order: the metrics files first (the report reads them), the
/// progress line, then the run files. Opens the metrics files (IoError naming one that cannot be
/// written).
void addOutputs(RunObservers& outputs, const TrainConfig& c, const TrainerOptions& o, const RunLength& length,
                const ModelThroughput& throughput);

}  // namespace lockstep::train
