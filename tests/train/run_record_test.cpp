// Reading a run back for `lockstep report`: metrics.csv in lockstep's long form and a wide form,
// what a live or crashed run leaves (a torn last line), rows a resumed run logged again, and a
// directory that is not a run.
#include "lockstep/train/monitor/run_record.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lockstep/train/monitor/report.h"
#include "lockstep/util/error.h"

using namespace lockstep::train;
namespace fs = std::filesystem;

TEST(RunRecord, parses_the_long_csv_with_wall_time) {
  auto m = parseMetricsCsv(
      "epoch,step,metric,value,wall_time\n1,10,train/loss,2.5,100.5\n1,10,train/lr,0.1,100.5\n"
      "1,20,train/loss,2.0,101.5\n1,20,val/accuracy,0.75,102\n",
      "m.csv");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m["train/loss"].step, (std::vector<int64_t>{10, 20}));
  EXPECT_EQ(m["train/loss"].value, (std::vector<double>{2.5, 2.0}));
  EXPECT_EQ(m["train/loss"].wall_time, (std::vector<double>{100.5, 101.5}));
  EXPECT_EQ(m["val/accuracy"].epoch, (std::vector<int64_t>{1}));
}

TEST(RunRecord, reads_csvs_without_wall_time_and_wide_ones) {
  auto old = parseMetricsCsv("epoch,step,metric,value\n1,3,train/loss,1.5\n", "old.csv");
  EXPECT_EQ(old["train/loss"].value, (std::vector<double>{1.5}));
  EXPECT_TRUE(old["train/loss"].wall_time.empty());
  // One column per metric (an empty cell: not logged at that step), e.g. loss_scale.
  auto wide = parseMetricsCsv("step,loss,loss_scale,skipped_steps\n1,2.0,65536,0\n2,1.9,,1\n", "w.csv");
  EXPECT_EQ(wide["loss"].step, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(wide["loss_scale"].value, (std::vector<double>{65536}));
  EXPECT_EQ(wide["skipped_steps"].value, (std::vector<double>{0, 1}));
  EXPECT_THROW(parseMetricsCsv("a,b\n1,2\n", "bad.csv"), lockstep::ValueError);
}

TEST(RunRecord, skips_a_torn_last_line_and_replaces_rows_logged_again_after_resume) {
  auto m = parseMetricsCsv(
      "epoch,step,metric,value,wall_time\n1,10,train/loss,3,1\n1,20,train/loss,2,2\n1,30,train/loss,1,3\n"
      "1,20,train/loss,2.1,9\n1,30,train/loss,1.1,10\n1,40,train/lo",
      "m.csv");
  EXPECT_EQ(m["train/loss"].step, (std::vector<int64_t>{10, 20, 30}));
  EXPECT_EQ(m["train/loss"].value, (std::vector<double>{3, 2.1, 1.1}));
  EXPECT_EQ(m["train/loss"].wall_time, (std::vector<double>{1, 9, 10}));
}

TEST(RunRecord, a_directory_that_is_not_a_run_is_an_error_naming_it) {
  std::string dir = (fs::temp_directory_path() / ("lockstep-notarun-" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  try {
    loadRunRecord(dir);
    FAIL() << "no error";
  } catch (const lockstep::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--output-dir"), std::string::npos) << e.what();
  }
  EXPECT_THROW(loadRunRecord(dir + "/missing"), lockstep::ValueError);
  std::ofstream(dir + "/summary.json") << "{not json";
  EXPECT_THROW(loadRunRecord(dir), lockstep::ValueError);
  // JSON of another shape than lockstep writes is named by its file, not a bare json type error.
  std::ofstream(dir + "/summary.json") << "{}";
  std::ofstream(dir + "/run.json") << "[1, 2]";
  try {
    loadRunRecord(dir);
    ADD_FAILURE() << "no error";
  } catch (const lockstep::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/run.json holds JSON array"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/run.json") << R"({"resolved": 5})";
  EXPECT_THROW(loadRunRecord(dir), lockstep::ValueError);
  fs::remove_all(dir);
}

// A row one cell short, whatever column the header puts last (a segfault when step came after
// wall_time): skipped like other short rows.
TEST(RunRecord, short_rows_are_skipped_wherever_the_header_puts_the_columns) {
  auto m = parseMetricsCsv("epoch,wall_time,step\n0,1.0\n1,2.0,7\n", "short.csv");
  EXPECT_TRUE(m.empty());  // a wide csv with no metric columns: nothing to plot, and no crash
  auto l = parseMetricsCsv("wall_time,metric,value,epoch,step\n1.0,loss,2.0,1\n2.0,loss,1.5,1,4\n", "l.csv");
  ASSERT_EQ(l.count("loss"), 1u);
  EXPECT_EQ(l.at("loss").step, std::vector<int64_t>{4});
}

TEST(Report, page_is_self_contained_and_escapes_the_data) {
  RunRecord r;
  r.dir = "/tmp/x/run1";
  r.metrics = parseMetricsCsv("epoch,step,metric,value\n1,1,train/loss,nan\n1,2,train/loss,1\n", "m.csv");
  r.run = {{"config", {{"note", "</script><script>alert(1)</script>"}}}};
  std::string page = renderReport({r});
  EXPECT_EQ(page.find("</script><script>alert"), std::string::npos);  // cannot end the data early
  EXPECT_NE(page.find("<\\/script>"), std::string::npos);
  EXPECT_NE(page.find("Chart.js v3"), std::string::npos);  // inlined, not fetched
  EXPECT_EQ(page.find("src=\"http"), std::string::npos);
  EXPECT_EQ(page.find("LOCKSTEP_DATA"), std::string::npos);
  EXPECT_NE(page.find("\"step\":[2]"), std::string::npos);  // the NaN point is left out
}

TEST(Report, runs_whose_dirs_share_a_name_are_told_apart_by_their_paths) {
  RunRecord a, b, c;
  a.dir = "/x/a/out";
  b.dir = "/x/b/out";
  c.dir = "/x/other";
  std::string page = renderReport({a, b, c});
  EXPECT_NE(page.find("\"name\":\"/x/a/out\""), std::string::npos);
  EXPECT_NE(page.find("\"name\":\"/x/b/out\""), std::string::npos);
  EXPECT_NE(page.find("\"name\":\"other\""), std::string::npos);
}
