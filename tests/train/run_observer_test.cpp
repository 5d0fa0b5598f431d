// The training loop's outputs as observers (train/monitor/run_observer.h): RunObservers tells each
// observer every event in the order they were added; where the metrics go (metricsPaths); and what
// MetricsLog records of each event in metrics.csv.
#include "lockstep/train/monitor/run_observer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/train/monitor/metrics_log.h"

using namespace lockstep::train;
namespace fs = std::filesystem;

namespace {

class Recorder final : public RunObserver {
 public:
  Recorder(std::string name, std::vector<std::string>& log) : name_(std::move(name)), log_(log) {}
  void onStart(const RunStart&) override { log_.push_back(name_ + " start"); }
  void onStep(const StepMetrics& m) override { log_.push_back(name_ + " step " + std::to_string(m.step)); }
  void onEvaluation(const Evaluation& e) override {
    log_.push_back(name_ + " eval " + std::to_string(e.step));
  }
  void onCheckpoint(const CheckpointSaved& c) override { log_.push_back(name_ + " ckpt " + c.path); }
  void onEnd(const TrainSummary& s) override { log_.push_back(name_ + " end " + std::to_string(s.steps)); }

 private:
  std::string name_;
  std::vector<std::string>& log_;
};

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// metrics.csv's rows less the wall time: "epoch,step,metric,value".
std::vector<std::string> csvRows(const std::string& path) {
  std::vector<std::string> rows;
  std::istringstream in(readFile(path));
  for (std::string line; std::getline(in, line);) rows.push_back(line.substr(0, line.rfind(',')));
  return rows;
}

}  // namespace

TEST(RunObservers, tell_every_observer_each_event_in_the_order_added) {
  std::vector<std::string> log;
  RunObservers all;
  all.add(std::make_unique<Recorder>("a", log));
  all.add(std::make_unique<Recorder>("b", log));
  TrainConfig c;
  all.onStart({&c, {}, {}});
  all.onStep({.epoch = 0, .step = 1});
  all.onEvaluation({.epoch = 0, .step = 1});
  all.onCheckpoint({1, "ckpt-1"});
  TrainSummary s;
  s.steps = 1;
  all.onEnd(s);
  EXPECT_EQ(log,
            (std::vector<std::string>{"a start", "b start", "a step 1", "b step 1", "a eval 1", "b eval 1",
                                      "a ckpt ckpt-1", "b ckpt ckpt-1", "a end 1", "b end 1"}));
}

TEST(MetricsPaths, follow_the_csv_monitor_and_tensorboard_sections) {
  TrainConfig c;
  MetricsPaths p = metricsPaths(c, "out");
  EXPECT_EQ(p.csv, "out/metrics.csv");
  EXPECT_EQ(p.tensorboard, "");
  c.csv_monitor = {true, "", "job"};
  c.tensorboard = {true, "", "job"};
  p = metricsPaths(c, "out");
  EXPECT_EQ(p.csv, "out/metrics.csv");  // no path of its own: the job name adds no directory
  EXPECT_EQ(p.tensorboard, "out/tensorboard/job");
  c.csv_monitor = {true, "/logs", "job"};
  c.tensorboard = {true, "/tb", "job"};
  p = metricsPaths(c, "out");
  EXPECT_EQ(p.csv, "/logs/job/metrics.csv");
  EXPECT_EQ(p.tensorboard, "/tb/job");
}

TEST(MetricsLog, records_print_steps_validations_and_the_test_and_appends_when_resumed) {
  const fs::path dir = fs::temp_directory_path() / ("lockstep-metrics-log-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string csv = (dir / "sub" / "metrics.csv").string();
  {
    MetricsLog log({csv, "", ""}, 2);
    log.onStep({.epoch = 0, .step = 1, .loss = 0.5});  // not a print step: nothing
    log.onStep({.epoch = 0, .step = 2, .loss = 0.25, .lr = 0.1, .samples_per_sec = 8});
    log.onEvaluation({.epoch = 0, .step = 2, .loss = 0.75, .accuracy = 0.5});
  }
  auto rows = csvRows(csv);
  ASSERT_EQ(rows.size(), 8u) << readFile(csv);
  EXPECT_EQ(rows[0], "epoch,step,metric,value");
  EXPECT_EQ(rows[1], "1,2,train/loss,0.25");
  EXPECT_EQ(rows[2], "1,2,train/lr,0.1");
  EXPECT_EQ(rows[3], "1,2,train/samples_per_sec,8");
  EXPECT_EQ(rows[4], "1,2,train/data_wait_ms,0");
  EXPECT_EQ(rows[5].rfind("1,2,memory/max_rss_mib,", 0), 0u) << rows[5];
  EXPECT_EQ(rows[6], "1,2,val/loss,0.75");
  EXPECT_EQ(rows[7], "1,2,val/accuracy,0.5");
  {
    MetricsLog log({csv, "", ""}, 2);  // a resumed run: no second header
    TrainSummary s;
    s.epochs = 1;
    s.steps = 2;
    s.test_loss = 0.125;
    s.test_accuracy = 1;
    log.onEnd(s);
  }
  rows = csvRows(csv);
  ASSERT_EQ(rows.size(), 10u) << readFile(csv);
  EXPECT_EQ(rows[8], "1,2,test/loss,0.125");
  EXPECT_EQ(rows[9], "1,2,test/accuracy,1");
  fs::remove_all(dir);
}
