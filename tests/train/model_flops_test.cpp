// MFU's two halves (train/monitor/model_flops.h): a language model's FLOPs per training token by
// nanoGPT's estimate, the GPU peak table and its override, and what summary.json makes of them.
#include "lockstep/train/monitor/model_flops.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "lockstep/nn/models/model_zoo.h"
#include "lockstep/train/monitor/run_summary.h"

namespace lockstep::train {
namespace {

std::shared_ptr<nn::Module> model(const std::string& name, const std::string& type, int64_t vocab,
                                  int64_t block) {
  nn::ModelOptions o;
  o.model_type = type;
  o.vocab_size = vocab;
  o.block_size = block;
  return nn::makeModel(name, o);
}

int64_t count(const nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.tensor().numel();
  return n;
}

TEST(ModelFlops, gpt2_small_is_nanogpts_estimate) {
  // GPT-2 small with its 50,257-token vocabulary and tied embeddings: 124,439,808 parameters, of
  // which 786,432 are the position embeddings nanoGPT leaves out; T = 1024.
  auto gpt2 = model("gpt", "gpt2", 50257, 1024);
  ASSERT_EQ(count(*gpt2), 124439808);
  const double want = 6.0 * (124439808 - 1024 * 768) + 12.0 * 12 * 768 * 1024;
  EXPECT_DOUBLE_EQ(*trainingFlopsPerToken(*gpt2, 1024), want);
}

TEST(ModelFlops, llama_counts_every_parameter_and_the_queries_width) {
  auto llama = model("llama", "llama-tiny", 256, 64);
  EXPECT_DOUBLE_EQ(*trainingFlopsPerToken(*llama, 64), 6.0 * count(*llama) + 12.0 * 4 * 128 * 64);
  EXPECT_FALSE(trainingFlopsPerToken(*nn::makeModel("mnist_cnn"), 1).has_value());
}

TEST(ModelFlops, gpu_peaks_by_name_and_the_override) {
  ::unsetenv("LOCKSTEP_GPU_PEAK_TFLOPS");
  EXPECT_DOUBLE_EQ(*denseBf16PeakFlops("NVIDIA H100 80GB HBM3"), 989.4e12);
  EXPECT_DOUBLE_EQ(*denseBf16PeakFlops("NVIDIA H100 PCIe"), 756e12);
  EXPECT_DOUBLE_EQ(*denseBf16PeakFlops("NVIDIA H200"), 989.4e12);
  EXPECT_DOUBLE_EQ(*denseBf16PeakFlops("NVIDIA H200 NVL"), 835e12);
  EXPECT_DOUBLE_EQ(*denseBf16PeakFlops("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_FALSE(denseBf16PeakFlops("Tesla T4").has_value());
  ::setenv("LOCKSTEP_GPU_PEAK_TFLOPS", "100", 1);
  EXPECT_DOUBLE_EQ(*denseBf16PeakFlops("Tesla T4"), 100e12);
  ::setenv("LOCKSTEP_GPU_PEAK_TFLOPS", "fast", 1);
  EXPECT_THROW(denseBf16PeakFlops("Tesla T4"), ValueError);
  ::unsetenv("LOCKSTEP_GPU_PEAK_TFLOPS");
}

TEST(ModelFlops, summary_reports_model_flops_and_mfu_per_gpu) {
  TrainSummary s;
  s.world_size = 2;
  s.samples_per_second = 10;
  s.tokens_per_sample = 100;  // 1,000 tokens/s over both ranks
  s.flops_per_token = 1e9;
  nlohmann::json cpu = toJson(s);
  EXPECT_DOUBLE_EQ(cpu["model_flops_per_second"].get<double>(), 1e12);
  EXPECT_FALSE(cpu.contains("mfu"));  // no GPU peak: no MFU
  s.peak_flops = 1e13;
  s.peak_gpu = "NVIDIA H200";
  nlohmann::json gpu = toJson(s);
  EXPECT_DOUBLE_EQ(gpu["mfu"].get<double>(), 0.05);  // 1e12 over two GPUs of 1e13
  EXPECT_EQ(gpu["mfu_gpu"], "NVIDIA H200");
}

}  // namespace
}  // namespace lockstep::train
