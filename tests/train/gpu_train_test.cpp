// `lockstep train` on a GPU (device: cuda) gives the run the CPU gives: the seed CNN, a CIFAR
// ResNet-18 and a tiny GPT (AdamW, dropout) step for step on the same data, two identical GPU runs
// the same bits, and the device recorded in run.json. Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "common/gpu.h"
#include "train/train_cli.h"

using namespace lockstep::test;

namespace {

const char* kSeedCnn = R"(
model: {name: mnist_cnn}
data: {dataset: synthetic, size: 256, test_size: 64, input_shape: [1, 28, 28], num_classes: 10}
train_micro_batch_size_per_gpu: 32
optimizer: {type: SGD, params: {lr: 0.05, momentum: 0.9}}
epochs: 2
steps_per_print: 4
)";

double summaryNumber(const std::string& dir, const char* key) {
  auto j = nlohmann::json::parse(readFile(dir + "/summary.json"));
  return j.at(key).get<double>();
}

// f32 with TF32 off (backends.cudnn.allow_tf32: false; f32 matmuls are full f32 by default): the GPU
// computes what the CPU computes up to summation order and algorithm (cuDNN's GEMM, Winograd or FFT
// convolutions against oneDNN's), ~1e-7 relative per op. On this job that does not grow much in 16
// SGD steps: the CPU's two kernel sets (oneDNN and the reference loops, LOCKSTEP_KERNELS=reference,
// which sum in other orders) end 1.1e-7 apart (max |a - b| / max |b| of the weights), so the issue's
// 1e-5 leaves ~100x for cuDNN's algorithms.
constexpr double kF32Bound = 1e-5;

TEST_F(TrainCli, gpu_training_matches_the_cpu_run) {
  LOCKSTEP_REQUIRE_GPU();
  std::string cfg = writeConfig("c.yaml", kSeedCnn);
  Result cpu = run(cfg + " --output-dir " + dir_ + "/cpu");
  ASSERT_EQ(cpu.code, 0) << cpu.output;
  Result gpu =
      run(cfg + " --output-dir " + dir_ + "/gpu --set device=cuda --set backends.cudnn.allow_tf32=false");
  ASSERT_EQ(gpu.code, 0) << gpu.output;
  const double lc = summaryNumber(dir_ + "/cpu", "test_loss"), lg = summaryNumber(dir_ + "/gpu", "test_loss");
  EXPECT_NEAR(lg, lc, kF32Bound * std::max(1.0, std::abs(lc))) << gpu.output;
  EXPECT_LT(safetensorsRelDiff(dir_ + "/gpu/model.safetensors", dir_ + "/cpu/model.safetensors"), kF32Bound);
  auto run_json = nlohmann::json::parse(readFile(dir_ + "/gpu/run.json"));
  EXPECT_EQ(run_json["environment"]["backends"]["cudnn"]["allow_tf32"], false) << run_json.dump();
  // TF32 (the default, PyTorch's too): convolution inputs rounded to a 10-bit mantissa, ~5e-4
  // relative per op, which the f32 bound would not hold (issue 35 saw 8e-3 with TF32 and
  // nondeterministic algorithms): a TF32 bound.
  Result tf32 = run(cfg + " --output-dir " + dir_ + "/tf32 --set device=cuda");
  ASSERT_EQ(tf32.code, 0) << tf32.output;
  const double lt = summaryNumber(dir_ + "/tf32", "test_loss");
  EXPECT_NEAR(lt, lc, 3e-2 * std::max(1.0, std::abs(lc))) << tf32.output;
  EXPECT_LT(safetensorsRelDiff(dir_ + "/tf32/model.safetensors", dir_ + "/cpu/model.safetensors"), 3e-2);
}

// Two identical GPU runs give the same model bit for bit (deterministic cuDNN algorithms by default,
// cuBLASLt's are, lockstep's kernels use no atomics): the seed CNN and ResNet-18 with BatchNorm, with
// the default math (TF32 convolutions). tests/kernels/gpu_math_options_test.cpp checks the
// convolutions alone, bf16 included.
TEST_F(TrainCli, gpu_runs_repeat_bitwise) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string resnet = R"(
model: {name: resnet18_cifar}
data: {dataset: synthetic, size: 64, test_size: 32, input_shape: [3, 32, 32], num_classes: 10}
train_micro_batch_size_per_gpu: 16
optimizer: {type: SGD, params: {lr: 0.01, momentum: 0.9}}
max_steps: 3
)";
  const std::vector<std::pair<std::string, std::string>> jobs = {{"seed_cnn", kSeedCnn}, {"resnet", resnet}};
  for (const auto& [name, text] : jobs) {
    std::string cfg = writeConfig(name + ".yaml", text + "device: cuda\n");
    for (const char* r : {"a", "b"}) {
      Result res = run(cfg + " --output-dir " + dir_ + "/" + name + "_" + r);
      ASSERT_EQ(res.code, 0) << name << ": " << res.output;
    }
    const std::string a = dir_ + "/" + name + "_a", b = dir_ + "/" + name + "_b";
    EXPECT_TRUE(readFile(a + "/model.safetensors") == readFile(b + "/model.safetensors"))
        << name << ": the two runs' models differ, max relative difference "
        << safetensorsRelDiff(a + "/model.safetensors", b + "/model.safetensors");
    EXPECT_EQ(summaryNumber(a, "test_loss"), summaryNumber(b, "test_loss")) << name;
  }
}

TEST_F(TrainCli, gpu_resnet_with_batch_norm_matches_the_cpu_run) {
  LOCKSTEP_REQUIRE_GPU();
  std::string cfg = writeConfig("c.yaml", R"(
model: {name: resnet18_cifar}
data: {dataset: synthetic, size: 64, test_size: 32, input_shape: [3, 32, 32], num_classes: 10}
train_micro_batch_size_per_gpu: 16
optimizer: {type: SGD, params: {lr: 0.01, momentum: 0.9}}
max_steps: 3
)");
  Result cpu = run(cfg + " --output-dir " + dir_ + "/cpu");
  ASSERT_EQ(cpu.code, 0) << cpu.output;
  Result gpu = run(cfg + " --output-dir " + dir_ + "/gpu --set device=cuda");
  ASSERT_EQ(gpu.code, 0) << gpu.output;
  EXPECT_LT(safetensorsRelDiff(dir_ + "/gpu/model.safetensors", dir_ + "/cpu/model.safetensors"), 1e-3);
}

TEST_F(TrainCli, gpu_language_model_training_matches_the_cpu_run) {
  LOCKSTEP_REQUIRE_GPU();
  {
    std::ofstream text(dir_ + "/corpus.txt");
    for (int i = 0; i < 200; ++i) text << "the quick brown fox jumps over the lazy dog " << i % 7 << ".\n";
  }
  // Dropout (the GPU draws the CPU's Philox masks), AdamW with minGPT's weight decay groups,
  // clipping, a validation loss and the greedy sample at the end.
  std::string cfg = writeConfig("gpt.yaml", "data: {dataset: text, root: " + dir_ + "/corpus.txt}\n" + R"(
model: {name: gpt, n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, dropout: 0.1}
train_micro_batch_size_per_gpu: 8
optimizer: {type: AdamW, params: {lr: 1.0e-3, betas: [0.9, 0.95], weight_decay: 0.1}}
gradient_clipping: 1.0
max_steps: 6
steps_per_print: 2
sample: {prompt: "the quick", max_new_tokens: 8, temperature: 0}
)");
  Result cpu = run(cfg + " --output-dir " + dir_ + "/cpu");
  ASSERT_EQ(cpu.code, 0) << cpu.output;
  Result gpu = run(cfg + " --output-dir " + dir_ + "/gpu --set device=cuda");
  ASSERT_EQ(gpu.code, 0) << gpu.output;
  const double lc = summaryNumber(dir_ + "/cpu", "val_loss"), lg = summaryNumber(dir_ + "/gpu", "val_loss");
  EXPECT_NEAR(lg, lc, 1e-4 * std::max(1.0, std::abs(lc))) << gpu.output;
  EXPECT_GT(summaryNumber(dir_ + "/gpu", "tokens_per_second"), 0);
  EXPECT_LT(safetensorsRelDiff(dir_ + "/gpu/model.safetensors", dir_ + "/cpu/model.safetensors"), 1e-3);
  auto samples = nlohmann::json::parse(readFile(dir_ + "/gpu/summary.json")).at("samples");
  EXPECT_EQ(samples["prompt"], "the quick");
  EXPECT_FALSE(samples["greedy"].get<std::string>().empty()) << samples.dump();
  // `lockstep generate` from the GPU run, on the GPU.
  Result g =
      runLockstep(dir_, "generate " + dir_ + "/gpu --device cuda --prompt 'the quick' --max-new-tokens 8");
  EXPECT_EQ(g.code, 0) << g.output;
  EXPECT_NE(g.output.find("the quick"), std::string::npos) << g.output;
}

TEST_F(TrainCli, gpu_run_records_its_device) {
  LOCKSTEP_REQUIRE_GPU();
  std::string cfg = writeConfig("c.yaml", std::string(kSeedCnn) + "device: cuda\nmax_steps: 2\n");
  Result r = run(cfg + " --output-dir " + dir_ + "/o");
  ASSERT_EQ(r.code, 0) << r.output;
  auto run_json = nlohmann::json::parse(readFile(dir_ + "/o/run.json"));
  const std::string device = run_json["environment"]["device"];
  EXPECT_EQ(device.rfind("cuda:0 (", 0), 0u) << device;
  EXPECT_NE(device.find("sm_"), std::string::npos) << device;
}

// Several ranks on one GPU (issue 35): --nproc-per-node 2 with device: cuda where there are fewer
// GPUs than ranks (CUDA_VISIBLE_DEVICES=0 makes one of any machine) puts both ranks on cuda:0
// (cuda:LOCAL_RANK % GPUs). NCCL cannot run two ranks on one device, so backend auto moves the
// gradients through the host (shm), the run says so once, and it trains as the CPU's 2-rank run
// within the f32 bound (TF32 off). backend nccl asked for by name is refused before any rank starts.
TEST_F(TrainCli, two_ranks_sharing_one_gpu_train_as_the_cpu_two_rank_run) {
  LOCKSTEP_REQUIRE_GPU();
  std::string cfg = writeConfig("c.yaml", kSeedCnn);
  Result cpu = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/cpu");
  ASSERT_EQ(cpu.code, 0) << cpu.output;
  struct OneGpu {  // for the runs started below, not for this process
    OneGpu() { ::setenv("CUDA_VISIBLE_DEVICES", "0", 1); }
    ~OneGpu() { ::unsetenv("CUDA_VISIBLE_DEVICES"); }
  } one_gpu;
  Result gpu = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ +
                   "/gpu --set device=cuda --set backends.cudnn.allow_tf32=false");
  ASSERT_EQ(gpu.code, 0) << gpu.output;
  const std::string note = "ranks 0 and 1 share cuda:0: GPU collectives go through the host (shm), not NCCL";
  const size_t first = gpu.output.find(note);
  EXPECT_NE(first, std::string::npos) << gpu.output;
  EXPECT_EQ(first, gpu.output.rfind(note)) << "said more than once:\n" << gpu.output;
  const double lc = summaryNumber(dir_ + "/cpu", "test_loss"), lg = summaryNumber(dir_ + "/gpu", "test_loss");
  EXPECT_NEAR(lg, lc, kF32Bound * std::max(1.0, std::abs(lc))) << gpu.output;
  EXPECT_LT(safetensorsRelDiff(dir_ + "/gpu/model.safetensors", dir_ + "/cpu/model.safetensors"), kF32Bound);
  auto run_json = nlohmann::json::parse(readFile(dir_ + "/gpu/run.json"));
  const std::string device = run_json["environment"]["device"];
  EXPECT_EQ(device.rfind("cuda:0 (", 0), 0u) << device;

  Result nccl =
      run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/nccl --set device=cuda --set backend=nccl");
  EXPECT_EQ(nccl.code, 2) << nccl.output;
  EXPECT_NE(nccl.output.find("backend nccl: ranks 0 and 1 share cuda:0, but NCCL runs one rank per GPU"),
            std::string::npos)
      << nccl.output;
  EXPECT_NE(nccl.output.find("use backend auto (or gloo, shm)"), std::string::npos) << nccl.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/nccl/run.json")) << nccl.output;
}

// A pipeline on a GPU (issue 42): two stages sharing cuda:0 (their activations and gradients through
// the host, as the shared GPU's collectives go) train as the CPU pipeline does, with 1F1B and with
// interleaved 1F1B; the model file holds both stages' weights.
TEST_F(TrainCli, gpu_pipeline_trains_as_the_cpu_pipeline) {
  LOCKSTEP_REQUIRE_GPU();
  std::string cfg = writeConfig(
      "c.yaml", std::string(kSeedCnn) +
                    "gradient_accumulation_steps: 4\npipeline: {stages: 2, partition_method: uniform}\n");
  struct OneGpu {  // for the runs started below, not for this process
    OneGpu() { ::setenv("CUDA_VISIBLE_DEVICES", "0", 1); }
    ~OneGpu() { ::unsetenv("CUDA_VISIBLE_DEVICES"); }
  } one_gpu;
  for (const std::string schedule : {"1f1b", "interleaved_1f1b"}) {
    const std::string set =
        " --nproc-per-node 2 --set train_micro_batch_size_per_gpu=8 --set pipeline.schedule=" + schedule +
        (schedule == "1f1b" ? "" : " --set pipeline.virtual_stages=2");
    Result cpu = run(cfg + set + " --output-dir " + dir_ + "/cpu-" + schedule);
    ASSERT_EQ(cpu.code, 0) << cpu.output;
    Result gpu = run(cfg + set + " --output-dir " + dir_ + "/gpu-" + schedule +
                     " --set device=cuda --set backends.cudnn.allow_tf32=false");
    ASSERT_EQ(gpu.code, 0) << gpu.output;
    const double lc = summaryNumber(dir_ + "/cpu-" + schedule, "test_loss"),
                 lg = summaryNumber(dir_ + "/gpu-" + schedule, "test_loss");
    EXPECT_NEAR(lg, lc, kF32Bound * std::max(1.0, std::abs(lc))) << gpu.output;
    EXPECT_LT(safetensorsRelDiff(dir_ + "/gpu-" + schedule + "/model.safetensors",
                                 dir_ + "/cpu-" + schedule + "/model.safetensors"),
              kF32Bound)
        << schedule;
  }
}

}  // namespace
