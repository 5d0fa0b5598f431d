// csv_monitor writes what DeepSpeed's csv_monitor writes (deepspeed/monitor/csv_monitor.py): one
// CSV per tag under output_path/job_name, "step,<tag's last part>" then "<samples>,<value>" rows.
#include "lockstep/train/monitor/csv_monitor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/train/monitor/metrics_log.h"
#include "train/config_test_util.h"
#include "train/train_cli.h"

using namespace lockstep;
using namespace lockstep::train;
using namespace lockstep::test;

namespace {

std::vector<std::string> lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST(CsvMonitor, files_are_named_after_the_tag_with_the_last_part_as_the_header) {
  const fs::path dir = fs::temp_directory_path() / ("lockstep-csv-monitor-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  {
    CsvMonitor m((dir / "job").string());
    EXPECT_EQ(m.path("Train/Samples/train_loss"), (dir / "job" / "Train_Samples_train_loss.csv").string());
    m.write("Train/Samples/train_loss", 2.5, 16);
    m.write("Train/Samples/train_loss", 0.1, 32);
    m.write("my tag", 1e-5, 32);
  }
  EXPECT_EQ(lines((dir / "job" / "Train_Samples_train_loss.csv").string()),
            (std::vector<std::string>{"step,train_loss", "16,2.5", "32,0.1"}));
  EXPECT_EQ(lines((dir / "job" / "my_tag.csv").string()),
            (std::vector<std::string>{"step,my tag", "32,1e-05"}));
  {
    CsvMonitor again((dir / "job").string());  // a resumed run appends without a second header
    again.write("Train/Samples/train_loss", 0.05, 48);
  }
  EXPECT_EQ(lines((dir / "job" / "Train_Samples_train_loss.csv").string()),
            (std::vector<std::string>{"step,train_loss", "16,2.5", "32,0.1", "48,0.05"}));
  fs::remove_all(dir);
}

TEST(CsvMonitor, metrics_log_writes_deepspeeds_tags_every_step_at_the_samples_trained) {
  TrainConfig c;
  EXPECT_EQ(metricsPaths(c, "out").csv_monitor, "");
  c.csv_monitor = {true, "", "job"};
  EXPECT_EQ(metricsPaths(c, "out").csv_monitor, "out/job");
  const fs::path dir = fs::temp_directory_path() / ("lockstep-csv-monitor-log-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  c.csv_monitor = {true, dir.string(), "job"};
  c.batch.train_batch_size = 16;
  {
    MetricsLog log(metricsPaths(c, dir.string()), 10);
    RunStart start;
    start.config = &c;
    log.onStart(start);
    log.onStep({.step = 1, .loss = 2.25, .lr = 0.001, .has_loss_scale = true, .loss_scale = 65536});
    log.onStep({.step = 2, .loss = 2.0, .lr = 0.002, .has_loss_scale = true, .loss_scale = 32768});
  }
  const fs::path job = dir / "job";
  EXPECT_EQ(lines((job / "Train_Samples_train_loss.csv").string()),
            (std::vector<std::string>{"step,train_loss", "16,2.25", "32,2"}));
  EXPECT_EQ(lines((job / "Train_Samples_lr.csv").string()),
            (std::vector<std::string>{"step,lr", "16,0.001", "32,0.002"}));
  EXPECT_EQ(lines((job / "Train_Samples_loss_scale.csv").string()),
            (std::vector<std::string>{"step,loss_scale", "16,65536", "32,32768"}));
  EXPECT_TRUE(fs::exists(job / "metrics.csv"));  // lockstep's own long-form file stays beside them
  fs::remove_all(dir);
}

TEST_F(TrainCli, csv_monitor_writes_deepspeeds_files_under_output_path_and_job_name) {
  const std::string config = writeConfig("ds.json", R"({"train_batch_size": 8, "fp16": {"enabled": true},
      "csv_monitor": {"enabled": true, "output_path": ")" +
                                                        dir_ + R"(/logs", "job_name": "train_bert"}})");
  const Result r = run(config + " --set max_steps=3 --output-dir " + dir_ + "/out");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string job = dir_ + "/logs/train_bert/";
  for (const char* name :
       {"Train_Samples_train_loss.csv", "Train_Samples_lr.csv", "Train_Samples_loss_scale.csv"}) {
    const std::vector<std::string> rows = lines(job + name);
    ASSERT_EQ(rows.size(), 4u) << name;
    EXPECT_EQ(rows[1].rfind("8,", 0), 0u) << name << ": " << rows[1];
    EXPECT_EQ(rows[3].rfind("24,", 0), 0u) << name << ": " << rows[3];
  }
  EXPECT_EQ(lines(job + "Train_Samples_loss_scale.csv")[1], "8,65536");
}
