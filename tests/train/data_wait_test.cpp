// The training loop's wait for data as its outputs report it: metrics.csv's train/data_wait_ms
// (the mean per step since the last logged step), the plain progress line's "data N%" (the share
// of its rate window spent waiting) and summary.json's data_wait_seconds and data_wait_fraction.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/train/monitor/metrics_log.h"
#include "lockstep/train/monitor/progress.h"
#include "lockstep/train/monitor/run_summary.h"

namespace lockstep::train {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> rowsWith(const std::string& path, const std::string& tag) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) {
    if (line.find("," + tag + ",") != std::string::npos) out.push_back(line.substr(0, line.rfind(',')));
  }
  return out;
}

TEST(DataWait, metrics_log_the_mean_wait_per_step_since_the_last_logged_step) {
  const fs::path dir = fs::temp_directory_path() / ("lockstep-data-wait-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string csv = (dir / "metrics.csv").string();
  {
    MetricsLog log({csv, "", ""}, 2);
    // Cumulative waits: 0.010 s, 0.030 s, 0.030 s, 0.050 s after steps 1..4.
    const double waits[] = {0.010, 0.030, 0.030, 0.050};
    for (int64_t step = 1; step <= 4; ++step)
      log.onStep({.epoch = 0, .step = step, .data_wait_seconds = waits[step - 1]});
  }
  EXPECT_EQ(rowsWith(csv, "train/data_wait_ms"),
            (std::vector<std::string>{"1,2,train/data_wait_ms,15", "1,4,train/data_wait_ms,10"}));
  fs::remove_all(dir);
}

TEST(DataWait, the_plain_progress_line_shows_the_share_of_time_waited) {
  ProgressLine line({.epochs = 1, .total_steps = 4, .steps_per_print = 2});
  testing::internal::CaptureStderr();
  line.onStep({.epoch = 0, .step = 1, .samples = 8, .data_wait_seconds = 0});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  line.onStep({.epoch = 0, .step = 2, .samples = 16, .data_wait_seconds = 0});  // no wait at all
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  line.onStep({.epoch = 0, .step = 3, .samples = 24, .data_wait_seconds = 0});
  // More waited than has passed (the share is capped at 100%), however slow the machine.
  line.onStep({.epoch = 0, .step = 4, .samples = 32, .data_wait_seconds = 1000});
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("step 2/4 loss 0.0000 lr 0 samples/s"), std::string::npos) << out;
  EXPECT_NE(out.find(" data 0% "), std::string::npos) << out;
  EXPECT_NE(out.find(" data 100% "), std::string::npos) << out;
}

// A language model's line adds tokens/s (samples/s times the block) and, with the GPUs' peak known,
// MFU: here 100 tokens per sample of 1e9 FLOPs against a 1e12 FLOP/s job.
TEST(DataWait, a_language_models_progress_line_shows_tokens_per_second_and_mfu) {
  ProgressOptions o{.epochs = 1, .total_steps = 2, .steps_per_print = 1};
  o.throughput = {.tokens_per_sample = 100, .flops_per_token = 1e9, .job_peak_flops = 1e12};
  ProgressLine line(o);
  testing::internal::CaptureStderr();
  line.onStep({.epoch = 0, .step = 1, .samples = 8});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  line.onStep({.epoch = 0, .step = 2, .samples = 16});
  const std::string out = testing::internal::GetCapturedStderr();
  // 8 samples in >= 50 ms: at most 160 samples/s, 16,000 tokens/s, 1.6% of the peak.
  const size_t at = out.find("step 2/2");
  ASSERT_NE(at, std::string::npos) << out;
  double samples = 0, tokens = 0, mfu = 0;
  ASSERT_EQ(std::sscanf(out.c_str() + out.find("samples/s", at), "samples/s %lf tokens/s %lf mfu %lf%%",
                        &samples, &tokens, &mfu),
            3)
      << out;
  EXPECT_NEAR(tokens, 100 * samples, 100);  // both printed rounded
  EXPECT_NEAR(mfu, 100 * tokens * 1e9 / 1e12, 0.06);
  EXPECT_GT(tokens, 0);
}

TEST(DataWait, summary_json_has_the_total_and_the_fraction_of_training_time) {
  TrainSummary s;
  s.train_seconds = 8;
  s.data_wait_seconds = 2;
  const nlohmann::json j = toJson(s);
  EXPECT_EQ(j["data_wait_seconds"], 2.0);
  EXPECT_EQ(j["data_wait_fraction"], 0.25);
}

}  // namespace
}  // namespace lockstep::train
