// The config's `backends` section (torch.backends' GPU math switches): defaults, parsing, errors
// naming the key, what a run logs about them and where run.json records them. Pure; the GPU side
// (that the kernels obey them) is tests/kernels/gpu_math_options_test.cpp and gpu_train_test.cpp.
#include "lockstep/train/config/config_backends.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "lockstep/kernels/gpu_math_options.h"
#include "lockstep/train/config/config.h"
#include "lockstep/train/monitor/run_info.h"
#include "lockstep/util/error.h"
#include "train/config_test_util.h"

using namespace lockstep;
using namespace lockstep::train;
using namespace lockstep::test;

namespace {

const char* kBase = "train_micro_batch_size_per_gpu: 8\n";

}  // namespace

TEST(BackendsConfig, defaults_are_deterministic_with_pytorchs_tf32_defaults) {
  const kernels::GpuMathOptions o = parseTrainConfig(kBase, {}, 1).gpu_math;
  EXPECT_TRUE(o.cudnn_deterministic);  // lockstep's choice; PyTorch's default is False
  EXPECT_FALSE(o.cudnn_benchmark);
  EXPECT_TRUE(o.cudnn_allow_tf32);    // torch.backends.cudnn.allow_tf32
  EXPECT_FALSE(o.matmul_allow_tf32);  // torch.backends.cuda.matmul.allow_tf32
  EXPECT_TRUE(o.cudnn_sdp);           // torch.backends.cuda.enable_cudnn_sdp
  EXPECT_EQ(o, kernels::GpuMathOptions{});
}

TEST(BackendsConfig, every_key_parses_to_its_option) {
  const kernels::GpuMathOptions o = parseTrainConfig(std::string(kBase) + R"(
backends:
  cudnn: {deterministic: false, benchmark: true, allow_tf32: false}
  cuda: {matmul: {allow_tf32: true}, enable_cudnn_sdp: false}
)",
                                                     {}, 1)
                                        .gpu_math;
  EXPECT_FALSE(o.cudnn_deterministic);
  EXPECT_TRUE(o.cudnn_benchmark);
  EXPECT_FALSE(o.cudnn_allow_tf32);
  EXPECT_TRUE(o.matmul_allow_tf32);
  EXPECT_FALSE(o.cudnn_sdp);
  // JSON, and --set overrides of single keys (the rest keep their defaults).
  const kernels::GpuMathOptions j =
      parseTrainConfig(
          R"({"train_micro_batch_size_per_gpu": 8, "backends": {"cudnn": {"allow_tf32": false}}})",
          {"backends.cuda.matmul.allow_tf32=true"}, 1)
          .gpu_math;
  EXPECT_TRUE(j.cudnn_deterministic);
  EXPECT_FALSE(j.cudnn_allow_tf32);
  EXPECT_TRUE(j.matmul_allow_tf32);
  const kernels::GpuMathOptions s =
      parseTrainConfig(kBase, {"backends.cudnn.deterministic=false"}, 1).gpu_math;
  EXPECT_FALSE(s.cudnn_deterministic);
  EXPECT_TRUE(s.cudnn_allow_tf32);
}

TEST(BackendsConfig, unknown_keys_and_wrong_types_name_the_key) {
  std::string m = errorOf(std::string(kBase) + "backends: {cudnn: {determinstic: false}}\n");
  EXPECT_TRUE(has(m, "unknown key backends.cudnn.determinstic") && has(m, "backends.cudnn.deterministic"))
      << m;
  m = errorOf(std::string(kBase) + "backends: {cuda: {matmul: {allow_fp16: true}}}\n");
  EXPECT_TRUE(has(m, "unknown key backends.cuda.matmul.allow_fp16")) << m;
  m = errorOf(std::string(kBase) + "backends: {mps: {enabled: true}}\n");
  EXPECT_TRUE(has(m, "unknown key backends.mps")) << m;
  m = errorOf(std::string(kBase) + "backends: {cudnn: {benchmark: fast}}\n");
  EXPECT_TRUE(has(m, "backends.cudnn.benchmark: expected a boolean, got 'fast'")) << m;
  m = errorOf(std::string(kBase) + "backends: {cuda: {matmul: true}}\n");
  EXPECT_TRUE(has(m, "backends.cuda.matmul must be a mapping")) << m;
  m = errorOf(std::string(kBase) + "backends: true\n");
  EXPECT_TRUE(has(m, "backends must be a mapping")) << m;
  m = errorOf(kBase, {"backends.cudnn.allow_tf32=maybe"});
  EXPECT_TRUE(has(m, "backends.cudnn.allow_tf32: expected a boolean")) << m;
}

TEST(BackendsConfig, a_run_says_when_it_is_not_bitwise_repeatable) {
  kernels::GpuMathOptions o;
  EXPECT_TRUE(backendsNotes(o, true, true).empty());  // the defaults repeat bitwise
  o.cudnn_allow_tf32 = false;
  o.matmul_allow_tf32 = true;
  EXPECT_TRUE(backendsNotes(o, true, true).empty());  // TF32 is deterministic too
  o.cudnn_deterministic = false;
  auto notes = backendsNotes(o, true, true);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(has(notes[0], "backends.cudnn.deterministic: false") &&
              has(notes[0], "nondeterministic algorithms") && has(notes[0], "not bitwise repeatable"))
      << notes[0];
  o.cudnn_benchmark = true;
  notes = backendsNotes(o, true, true);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_TRUE(has(notes[1], "backends.cudnn.benchmark: true") && has(notes[1], "not bitwise repeatable"))
      << notes[1];
}

TEST(BackendsConfig, on_a_cpu_run_the_section_is_said_to_have_no_effect) {
  kernels::GpuMathOptions o;
  o.cudnn_deterministic = false;
  auto notes = backendsNotes(o, true, false);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(has(notes[0], "no effect on a CPU run")) << notes[0];
  EXPECT_TRUE(backendsNotes(o, false, false).empty());  // nothing asked, nothing said
}

TEST(BackendsConfig, run_json_records_the_options_in_force) {
  TrainConfig c = parseTrainConfig(std::string(kBase) + "backends: {cudnn: {allow_tf32: false}}\n", {}, 1);
  nlohmann::json run = describeRun(c, RunFacts{});
  const nlohmann::json& b = run.at("environment").at("backends");
  EXPECT_EQ(b["cudnn"]["deterministic"], true);
  EXPECT_EQ(b["cudnn"]["benchmark"], false);
  EXPECT_EQ(b["cudnn"]["allow_tf32"], false);
  EXPECT_EQ(b["cuda"]["matmul"]["allow_tf32"], false);
}

TEST(BackendsConfig, the_switches_do_not_change_the_runs_identity) {
  // As with device: how a GPU computes is not what is trained, so a run may resume another's
  // checkpoints with TF32 or determinism switched.
  const std::string a = parseTrainConfig(kBase, {}, 1).identity_hash;
  const std::string b =
      parseTrainConfig(std::string(kBase) + "backends: {cudnn: {deterministic: false, allow_tf32: false}}\n",
                       {}, 1)
          .identity_hash;
  EXPECT_EQ(a, b);
  EXPECT_NE(a, parseTrainConfig(std::string(kBase) + "gradient_clipping: 1.0\n", {}, 1).identity_hash);
}

TEST(GpuMathOptions, scoped_options_apply_and_restore) {
  const kernels::GpuMathOptions before = kernels::gpuMathOptions();
  {
    kernels::GpuMathOptions o;
    o.cudnn_deterministic = false;
    o.matmul_allow_tf32 = true;
    kernels::ScopedGpuMathOptions scope(o);
    EXPECT_EQ(kernels::gpuMathOptions(), o);
  }
  EXPECT_EQ(kernels::gpuMathOptions(), before);
}
