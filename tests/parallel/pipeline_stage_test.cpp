// A model split by layers across ranks (ranks as threads over the shm backend's send/recv),
// trained by GPipe and 1F1B over micro-batches: after a few SGD steps every stage's weights and
// the losses match one process training the whole model on the whole batch.
#include "lockstep/parallel/pipeline/pipeline_stage.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "lockstep/autograd.h"
#include "lockstep/kernels/shape.h"
#include "lockstep/kernels/threads.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel/environment.h"
#include "lockstep/parallel/pipeline/pipeline_grid.h"
#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/parallel/zero/optimizer.h"
#include "parallel/process_util.h"
#include "parallel/thread_ranks.h"

using namespace lockstep;
using autograd::Variable;
using parallel::PipelineScheduleKind;
using parallel::PipelineStage;

namespace {

constexpr int kSteps = 3;
constexpr int64_t kBatch = 8, kMicroBatches = 4;
constexpr double kLr = 0.05;

// These problems are tiny: one intra-op thread per rank avoids OpenMP barriers that dominate when
// ranks share a loaded 2-core machine (omp_set_num_threads is per thread: each rank sets its own).
struct OneThread {
  int prev = kernels::numThreads();
  OneThread() { kernels::setNumThreads(1); }
  ~OneThread() { kernels::setNumThreads(prev); }
};

struct Job {
  std::string model;
  nn::ModelOptions options;
  // The step's whole batch: inputs and targets.
  std::function<std::pair<Tensor, Tensor>(int step)> batch;
  PipelineStage::Loss loss;
  // Batch norm normalises over what one forward sees: the reference then accumulates over the same
  // micro-batches (as DeepSpeed's pipelines do too) instead of running the whole batch at once.
  bool batch_norm = false;
};

Variable flatCrossEntropy(const Variable& out, const Tensor& target) {
  if (out.dim() == 2) return autograd::crossEntropy(out, target);
  return autograd::crossEntropy(autograd::reshape(out, {out.size(0) * out.size(1), out.size(2)}),
                                target.reshape({target.numel()}));
}

std::shared_ptr<nn::Module> build(const Job& job) {
  Generator gen(42);
  nn::ModelOptions o = job.options;
  o.generator = &gen;
  return nn::makeModel(job.model, o);
}

Job mnistJob() {
  Job job{"mnist_cnn", {}, nullptr, flatCrossEntropy};
  job.batch = [](int step) {
    Tensor x = Tensor::empty({kBatch, 1, 28, 28});
    Generator g(1000 + static_cast<uint64_t>(step));
    g.normal(x, 0.0, 1.0);
    std::vector<int64_t> y;
    for (int64_t i = 0; i < kBatch; ++i) y.push_back((i * 7 + step) % 10);
    return std::make_pair(x, Tensor::fromVector<int64_t>(y, {kBatch}));
  };
  return job;
}

Job resnetJob() {
  Job job{"resnet18_cifar", {}, nullptr, flatCrossEntropy, true};
  job.batch = [](int step) {
    // Small images keep it fast: the adaptive pool takes any size.
    Tensor x = Tensor::empty({kBatch, 3, 8, 8});
    Generator g(2000 + static_cast<uint64_t>(step));
    g.normal(x, 0.0, 1.0);
    std::vector<int64_t> y;
    for (int64_t i = 0; i < kBatch; ++i) y.push_back((i * 3 + step) % 10);
    return std::make_pair(x, Tensor::fromVector<int64_t>(y, {kBatch}));
  };
  return job;
}

Job gptJob() {
  nn::ModelOptions o;
  o.model_type = "gpt-nano";
  o.vocab_size = 32;
  o.block_size = 8;
  o.dropout = 0.0;
  Job job{"gpt", o, nullptr, flatCrossEntropy};
  job.batch = [](int step) {
    std::vector<int64_t> ids, next;
    for (int64_t i = 0; i < kBatch * 9; ++i) ids.push_back((i * 13 + step * 5 + i / 7) % 32);
    std::vector<int64_t> x, y;
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t t = 0; t < 8; ++t) {
        x.push_back(ids[static_cast<size_t>(b * 9 + t)]);
        y.push_back(ids[static_cast<size_t>(b * 9 + t + 1)]);
      }
    return std::make_pair(Tensor::fromVector<int64_t>(x, {kBatch, 8}),
                          Tensor::fromVector<int64_t>(y, {kBatch, 8}));
  };
  return job;
}

std::vector<Tensor> split(const Tensor& t) {
  std::vector<Tensor> parts;
  const int64_t rows = t.size(0) / kMicroBatches;
  for (int64_t m = 0; m < kMicroBatches; ++m) parts.push_back(t.slice(m * rows, (m + 1) * rows).contiguous());
  return parts;
}

// One process, the whole batch: the reference weights and losses.
std::pair<std::map<std::string, Tensor>, std::vector<double>> trainAlone(const Job& job) {
  auto model = build(job);
  optim::SGD sgd(model->parameters(), {.lr = kLr});
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = job.batch(step);
    sgd.zeroGrad();
    if (job.batch_norm) {
      auto xs = split(x), ys = split(y);
      double sum = 0;
      for (size_t m = 0; m < xs.size(); ++m) {
        Variable loss = job.loss(model->forward(Variable(xs[m])), ys[m]);
        sum += loss.tensor().item<double>();
        loss.backward(Tensor::full({}, 1.0 / static_cast<double>(xs.size())));
      }
      losses.push_back(sum / static_cast<double>(xs.size()));
    } else {
      Variable loss = job.loss(model->forward(Variable(x)), y);
      losses.push_back(loss.tensor().item<double>());
      loss.backward();
    }
    sgd.step();
  }
  std::map<std::string, Tensor> weights;
  for (auto& [name, p] : model->namedParameters()) weights.emplace(name, p.tensor().clone());
  return {weights, losses};
}

double relativeDifference(const Tensor& a, const Tensor& b) {
  auto va = a.toVector<double>(), vb = b.toVector<double>();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    diff += (va[i] - vb[i]) * (va[i] - vb[i]);
    norm += vb[i] * vb[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// Rank `rank`'s stage trained kSteps steps; its weights and (last stage) losses checked against
// one process. Returns the names of the parameters it checked.
using Reference = std::pair<std::map<std::string, Tensor>, std::vector<double>>;

std::set<std::string> trainStageAndCompare(const Job& job, int rank,
                                           std::shared_ptr<comm::ProcessGroup> group,
                                           PipelineScheduleKind schedule, const Reference& one_process,
                                           int64_t checkpoint_interval = 0,
                                           std::shared_ptr<comm::ProcessGroup> data_group = nullptr,
                                           int64_t virtual_stages = 1) {
  const auto& [reference, reference_losses] = one_process;
  const int stages = group->size();
  auto model = build(job);
  parallel::PipelineStageOptions o;
  o.schedule = schedule;
  o.micro_batches = kMicroBatches;
  o.partition.stages = stages;
  o.activation_checkpoint_interval = checkpoint_interval;
  o.data_group = data_group;
  o.virtual_stages = virtual_stages;
  PipelineStage stage(*model, group, o);
  EXPECT_EQ(stage.chunks(), virtual_stages);
  optim::SGD sgd(stage.parameters(), {.lr = kLr});
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = job.batch(step);
    const bool first = rank == 0, last = rank + 1 == stages;
    double loss = stage.trainStep(first ? split(x) : std::vector<Tensor>{},
                                  last ? split(y) : std::vector<Tensor>{}, job.loss, &sgd);
    // With replicas, each last stage has its replica's mean: theirs together are the whole batch's.
    if (last && data_group)
      loss = parallel::allreduceScalar(*data_group, loss, comm::ReduceOp::sum) / data_group->size();
    if (last) {
      EXPECT_NEAR(loss, reference_losses[static_cast<size_t>(step)], 1e-6 * std::abs(loss))
          << "step " << step;
    }
  }
  // 1F1B holds at most S - s micro-batches' activations, GPipe all of them, interleaved 1F1B its
  // warm-up forwards' and one more (each a chunk's).
  int64_t held = schedule == PipelineScheduleKind::gpipe ? kMicroBatches
                                                         : std::min<int64_t>(stages - rank, kMicroBatches);
  if (schedule == PipelineScheduleKind::interleaved_1f1b)
    held =
        std::min(kMicroBatches * virtual_stages, 2 * (stages - rank - 1) + (virtual_stages - 1) * stages + 1);
  EXPECT_EQ(stage.activationSlots(), static_cast<size_t>(held)) << "stage " << rank;
  const parallel::PipelineStepTimes& times = stage.lastStepTimes();
  EXPECT_GT(times.compute_s, 0.0);
  EXPECT_GT(times.gradient_phase_s, 0.0);  // the optimizer step at least
  EXPECT_GE(times.wall_s, times.compute_s + times.gradient_phase_s);
  EXPECT_GE(times.idleFraction(), 0.0);
  EXPECT_LT(times.idleFraction(), 1.0);
  std::set<const autograd::VariableImpl*> mine;
  for (const auto& p : stage.parameters()) mine.insert(p.impl().get());
  std::set<std::string> checked;
  for (auto& [name, p] : model->namedParameters()) {
    if (!mine.count(p.impl().get())) continue;
    EXPECT_LE(relativeDifference(p.tensor(), reference.at(name)), 1e-6) << name << " on stage " << rank;
    checked.insert(name);
  }
  return checked;
}

void expectPipelineMatchesOneProcess(const Job& job, int stages, PipelineScheduleKind schedule,
                                     int64_t virtual_stages = 1) {
  OneThread one_thread;
  const Reference one_process = trainAlone(job);
  std::mutex mu;
  std::set<std::string> checked;
  lockstep::testing::runThreadRanks(stages, [&](int rank, std::shared_ptr<comm::ProcessGroup> group) {
    OneThread rank_thread;
    auto names = trainStageAndCompare(job, rank, group, schedule, one_process, 0, nullptr, virtual_stages);
    std::lock_guard<std::mutex> lock(mu);
    checked.insert(names.begin(), names.end());
  });
  // Together the stages hold every parameter.
  EXPECT_EQ(checked.size(), one_process.first.size());
}

// Pipeline x data parallel on the world's grid (DeepSpeed's topology, makePipelineGrid): replica d
// trains its part of the global batch (the job's batches step * replicas + d) through its pipeline,
// and each stage's gradients are averaged over the stage's replicas. One process on the whole
// global batch is the reference, its samples laid out as a strided DistributedSampler deals them:
// sample j of replica d's micro-batch m is sample j * replicas + d of the global micro-batch m
// (what a replica's share of one process's dropout masks assumes: Generator::BatchShare; thread
// ranks share the process's default generator, so dropout is checked with processes, in
// tests/train/train_pipeline_cli_test.cpp).
void expectGridMatchesOneProcess(const Job& job, int stages, int replicas, PipelineScheduleKind schedule,
                                 int64_t virtual_stages = 1) {
  OneThread one_thread;
  Job global = job;
  global.batch = [job, replicas](int step) {
    std::vector<std::pair<Tensor, Tensor>> parts;
    for (int d = 0; d < replicas; ++d) parts.push_back(job.batch(step * replicas + d));
    std::vector<Tensor> xs, ys;
    const int64_t micro = kBatch / kMicroBatches;
    for (int64_t m = 0; m < kMicroBatches; ++m)
      for (int64_t j = 0; j < micro; ++j)
        for (int d = 0; d < replicas; ++d) {
          xs.push_back(parts[static_cast<size_t>(d)].first.narrow(0, m * micro + j, 1));
          ys.push_back(parts[static_cast<size_t>(d)].second.narrow(0, m * micro + j, 1));
        }
    return std::make_pair(kernels::concat(xs, 0), kernels::concat(ys, 0));
  };
  const Reference one_process = trainAlone(global);
  std::mutex mu;
  std::set<std::string> checked;
  lockstep::testing::runThreadRanks(stages * replicas, [&](int, std::shared_ptr<comm::ProcessGroup> world) {
    OneThread rank_thread;
    const parallel::PipelineGrid grid = parallel::makePipelineGrid(*world, stages);
    EXPECT_EQ(grid.pipe->size(), stages);
    EXPECT_EQ(grid.data->size(), replicas);
    EXPECT_EQ(grid.pipe->rank(), grid.stage);
    EXPECT_EQ(world->rank(), grid.stage * replicas + grid.replica);  // the data axis innermost
    Job mine = job;
    mine.batch = [job, replicas, d = static_cast<int>(grid.replica)](int step) {
      return job.batch(step * replicas + d);
    };
    auto names = trainStageAndCompare(mine, static_cast<int>(grid.stage), grid.pipe, schedule, one_process, 0,
                                      grid.data, virtual_stages);
    std::lock_guard<std::mutex> lock(mu);
    checked.insert(names.begin(), names.end());
  });
  EXPECT_EQ(checked.size(), one_process.first.size());
}

// ZeRO stage 1 over each stage's replicas (DeepSpeed allows stage 1 with pipelines): each replica
// keeps Adam's state for half of its stage's parameters, steps that half with the averaged
// gradients and all-gathers the rest. Returns the stages' parameters after kSteps Adam steps, with
// or without ZeRO: a shard steps bitwise as the whole parameter would, so the two must be equal.
// buckets: the replicas' gradient buckets; launches (when given) gets, per rank, the last step's
// buckets launched during its backwards and all its buckets.
std::map<std::string, Tensor> trainGridWithAdam(
    const Job& job, int stages, int replicas, bool zero_stage_1,
    const parallel::BucketAssignmentOptions& buckets = {},
    std::map<int, std::pair<int64_t, int64_t>>* launches = nullptr) {
  std::mutex mu;
  std::map<std::string, Tensor> weights;
  lockstep::testing::runThreadRanks(stages * replicas, [&](int, std::shared_ptr<comm::ProcessGroup> world) {
    OneThread rank_thread;
    const parallel::PipelineGrid grid = parallel::makePipelineGrid(*world, stages);
    auto model = build(job);
    parallel::PipelineStageOptions o;
    o.micro_batches = kMicroBatches;
    o.partition.stages = stages;
    o.data_group = grid.data;
    o.buckets = buckets;
    PipelineStage stage(*model, grid.pipe, o);
    auto adam = std::make_shared<optim::Adam>(stage.parameters(), optim::AdamOptions{.lr = 1e-2});
    std::unique_ptr<parallel::ZeroOptimizer> zero;
    parallel::ZeroOptions zero_options;
    zero_options.stage = 1;
    if (zero_stage_1) zero = std::make_unique<parallel::ZeroOptimizer>(model, adam, grid.data, zero_options);
    const bool first = grid.stage == 0, last = grid.stage + 1 == stages;
    for (int step = 0; step < kSteps; ++step) {
      auto [x, y] = job.batch(step * replicas + static_cast<int>(grid.replica));
      stage.trainStep(first ? split(x) : std::vector<Tensor>{}, last ? split(y) : std::vector<Tensor>{},
                      job.loss, zero ? nullptr : adam.get());
      if (zero) zero->step();
    }
    std::set<const autograd::VariableImpl*> mine;
    for (const auto& p : stage.parameters()) mine.insert(p.impl().get());
    std::lock_guard<std::mutex> lock(mu);
    if (launches)
      (*launches)[world->rank()] = {stage.lastStepTimes().replica_buckets_launched_in_backward,
                                    stage.lastStepTimes().replica_buckets};
    for (auto& [name, p] : model->namedParameters()) {
      if (!mine.count(p.impl().get())) continue;
      auto [it, fresh] = weights.emplace(name, p.tensor().clone());
      if (!fresh) {  // every replica of a stage (and every stage holding a tied parameter) agrees
        EXPECT_EQ(it->second.toVector<double>(), p.tensor().toVector<double>())
            << name << " differs between replicas (stage " << grid.stage << ")";
      }
    }
  });
  return weights;
}

void expectZeroOneIsBitwiseThePlainGrid(const Job& job, int stages, int replicas) {
  OneThread one_thread;
  const auto plain = trainGridWithAdam(job, stages, replicas, false);
  const auto zero = trainGridWithAdam(job, stages, replicas, true);
  ASSERT_EQ(plain.size(), zero.size());
  for (const auto& [name, w] : plain) {
    EXPECT_EQ(zero.at(name).toVector<double>(), w.toVector<double>()) << name;
  }
  // And it trained: the weights moved from their initial values.
  auto initial = build(job);
  double moved = 0;
  for (auto& [name, p] : initial->namedParameters()) moved += relativeDifference(zero.at(name), p.tensor());
  EXPECT_GT(moved, 1e-3);
}

}  // namespace

TEST(PipelineStage, replica_buckets_launch_during_the_last_backward_and_average_bitwise_as_whole) {
  // DDP's overlap: with small buckets each stage's replica sums start while its last backward still
  // runs. The averages are elementwise, so the weights are bitwise those of one bucket per stage.
  OneThread one_thread;
  for (const Job& job : {mnistJob(), gptJob()}) {
    std::map<int, std::pair<int64_t, int64_t>> small_launches, whole_launches;
    const auto small = trainGridWithAdam(job, 2, 2, false, {.first_bucket_bytes = 1024, .bucket_bytes = 4096},
                                         &small_launches);
    const auto whole = trainGridWithAdam(
        job, 2, 2, false, {.first_bucket_bytes = size_t{1} << 30, .bucket_bytes = size_t{1} << 30},
        &whole_launches);
    ASSERT_EQ(small.size(), whole.size());
    for (const auto& [name, w] : whole)
      EXPECT_EQ(small.at(name).toVector<double>(), w.toVector<double>()) << name;
    ASSERT_EQ(small_launches.size(), 4u);
    for (const auto& [rank, counts] : small_launches) {
      EXPECT_GE(counts.second, 2) << "rank " << rank;
      // Every parameter is reached by the last backward: every bucket left while it ran.
      EXPECT_EQ(counts.first, counts.second) << "rank " << rank;
      EXPECT_EQ(whole_launches.at(rank).second, 1) << "rank " << rank;
    }
  }
}

TEST(PipelineStage, zero_stage_1_over_each_stages_replicas_steps_bitwise_as_the_plain_grid) {
  expectZeroOneIsBitwiseThePlainGrid(mnistJob(), 2, 2);
  expectZeroOneIsBitwiseThePlainGrid(gptJob(), 2, 2);
}

TEST(PipelineStage, two_stages_by_two_replicas_match_one_process_on_the_global_batch) {
  expectGridMatchesOneProcess(mnistJob(), 2, 2, PipelineScheduleKind::one_f_one_b);
  expectGridMatchesOneProcess(mnistJob(), 2, 2, PipelineScheduleKind::gpipe);
  // GPT's embedding tied across the stages: summed over the stages, then averaged over the replicas.
  expectGridMatchesOneProcess(gptJob(), 2, 2, PipelineScheduleKind::one_f_one_b);
  // One stage, four replicas: plain data parallelism with gradient accumulation.
  expectGridMatchesOneProcess(mnistJob(), 1, 4, PipelineScheduleKind::gpipe);
}

TEST(PipelineStage, a_grid_whose_stages_do_not_divide_the_world_is_refused_naming_the_key) {
  lockstep::testing::runThreadRanks(3, [&](int, std::shared_ptr<comm::ProcessGroup> world) {
    try {
      parallel::makePipelineGrid(*world, 2);
      ADD_FAILURE() << "2 stages over 3 ranks were accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("pipeline.stages is 2 but the job has 3 ranks"), std::string::npos)
          << e.what();
    }
  });
}

TEST(PipelineStage, two_stages_gpipe_match_one_process) {
  expectPipelineMatchesOneProcess(mnistJob(), 2, PipelineScheduleKind::gpipe);
}

TEST(PipelineStage, one_stage_is_gradient_accumulation) {
  expectPipelineMatchesOneProcess(mnistJob(), 1, PipelineScheduleKind::one_f_one_b);
}

TEST(PipelineStage, micro_batches_of_different_shapes_are_refused_before_any_transfer) {
  lockstep::testing::runThreadRanks(1, [](int, std::shared_ptr<comm::ProcessGroup> group) {
    Generator gen(1);
    auto model = nn::makeModel("mnist_cnn", {.generator = &gen});
    parallel::PipelineStageOptions o;
    o.micro_batches = 2;
    PipelineStage stage(*model, group, o);
    std::vector<Tensor> x = {Tensor::zeros({2, 1, 28, 28}), Tensor::zeros({1, 1, 28, 28})};
    std::vector<Tensor> y = {Tensor::zeros({2}, DType::i64), Tensor::zeros({1}, DType::i64)};
    try {
      stage.trainStep(x, y, flatCrossEntropy);
      ADD_FAILURE() << "micro-batches of 2 and 1 rows";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("pipeline micro-batch 1's input is f32 [1, 1, 28, 28]"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(PipelineStage, two_and_three_stages_1f1b_match_one_process) {
  expectPipelineMatchesOneProcess(mnistJob(), 2, PipelineScheduleKind::one_f_one_b);
  expectPipelineMatchesOneProcess(mnistJob(), 3, PipelineScheduleKind::one_f_one_b);
}

TEST(PipelineStage, gpt_with_its_embedding_tied_across_stages_matches_one_process) {
  expectPipelineMatchesOneProcess(gptJob(), 2, PipelineScheduleKind::one_f_one_b);
  expectPipelineMatchesOneProcess(gptJob(), 3, PipelineScheduleKind::gpipe);
}

TEST(PipelineStage, interleaved_1f1b_chunks_go_round_the_stages_and_match_one_process) {
  // gpt-nano: 5 layers in 4 parts, the embedding on stage 0's chunk 0 tied to the head on stage
  // 1's chunk 1; ResNet-18's batch norm in every part, 2 stages x 3 chunks and 4 x 2.
  expectPipelineMatchesOneProcess(gptJob(), 2, PipelineScheduleKind::interleaved_1f1b, 2);
  expectPipelineMatchesOneProcess(resnetJob(), 2, PipelineScheduleKind::interleaved_1f1b, 3);
  expectPipelineMatchesOneProcess(resnetJob(), 4, PipelineScheduleKind::interleaved_1f1b, 2);
  expectGridMatchesOneProcess(gptJob(), 2, 2, PipelineScheduleKind::interleaved_1f1b, 2);
}

TEST(PipelineStage, resnet18_with_batch_norm_matches_one_process_accumulating_the_micro_batches) {
  expectPipelineMatchesOneProcess(resnetJob(), 2, PipelineScheduleKind::one_f_one_b);
}

TEST(PipelineStage, stages_other_than_the_group_size_are_refused_naming_the_key) {
  lockstep::testing::runThreadRanks(2, [](int, std::shared_ptr<comm::ProcessGroup> group) {
    Generator gen(1);
    auto model = nn::makeModel("mnist_cnn", {.generator = &gen});
    parallel::PipelineStageOptions o;
    o.partition.stages = 3;
    try {
      PipelineStage stage(*model, group, o);
      ADD_FAILURE() << "3 stages on 2 ranks";
    } catch (const ValueError& e) {
      EXPECT_NE(
          std::string(e.what()).find("pipeline.stages is 3 but the pipeline's process group has 2 ranks"),
          std::string::npos);
    }
  });
}

// One rank of the real multi-process runs below: started by them as a child process with a
// launcher's variables (RANK, WORLD_SIZE, MASTER_ADDR, ...) and the schedule in
// LOCKSTEP_TEST_PIPELINE_SCHEDULE and the activation checkpoint interval in
// LOCKSTEP_TEST_PIPELINE_CHECKPOINT; not run on its own.
TEST(PipelineProcesses, DISABLED_rank) {
  const char* schedule = std::getenv("LOCKSTEP_TEST_PIPELINE_SCHEDULE");
  const char* checkpoint = std::getenv("LOCKSTEP_TEST_PIPELINE_CHECKPOINT");
  ASSERT_TRUE(schedule && checkpoint) << "run by PipelineProcesses.two_processes_match_one_process";
  parallel::DistributedEnvironment env = parallel::initFromEnvironment("gloo");
  // gpt: its tied embedding crosses the processes.
  const Job job = std::string(checkpoint) == "0" ? mnistJob() : gptJob();
  trainStageAndCompare(job, env.worker.rank, env.group, parallel::parsePipelineSchedule(schedule),
                       trainAlone(job), std::atoi(checkpoint));
}

TEST(PipelineProcesses, two_processes_match_one_process_with_gpipe_1f1b_and_activation_checkpoints) {
  using namespace lockstep::test;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  // {schedule, activation checkpoint interval}
  for (auto [schedule, checkpoint] :
       {std::pair{"gpipe", "0"}, std::pair{"1f1b", "0"}, std::pair{"1f1b", "1"}}) {
    const int port = freePort();
    std::vector<Rank> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.push_back(spawnWithEnv(
          {self, "--gtest_filter=PipelineProcesses.DISABLED_rank", "--gtest_also_run_disabled_tests"},
          {{"RANK", std::to_string(r)},
           {"LOCAL_RANK", std::to_string(r)},
           {"WORLD_SIZE", "2"},
           {"LOCAL_WORLD_SIZE", "2"},
           {"MASTER_ADDR", "127.0.0.1"},
           {"MASTER_PORT", std::to_string(port)},
           {"OMP_NUM_THREADS", "1"},
           {"LOCKSTEP_TEST_PIPELINE_SCHEDULE", schedule},
           {"LOCKSTEP_TEST_PIPELINE_CHECKPOINT", checkpoint}},
          ::testing::TempDir() + "pipeline_" + schedule + "_checkpoint" + checkpoint + "_rank" +
              std::to_string(r) + ".log"));
    }
    for (auto& rank : ranks) {
      EXPECT_EQ(waitFor(rank.pid, std::chrono::seconds(60)), 0) << schedule << ":\n" << slurp(rank.log);
      EXPECT_NE(slurp(rank.log).find("[  PASSED  ] 1 test"), std::string::npos) << slurp(rank.log);
    }
  }
}
