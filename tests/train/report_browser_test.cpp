// `lockstep report` opened in a real browser: Debian's chromium, headless, loads the page written
// for two real runs (no network: everything is inline), and the DOM it builds must hold every
// chart with the run's data points and every table; a screenshot must not be blank.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "train/train_cli.h"

using namespace lockstep::test;

namespace {

// The attributes of the element with data-chart="name" (or id="name" for tables) in a DOM dump.
std::map<std::string, std::string> attributesOf(const std::string& dom, const std::string& selector) {
  std::map<std::string, std::string> out;
  auto at = dom.find(selector);
  if (at == std::string::npos) return out;
  auto open = dom.rfind('<', at), close = dom.find('>', at);
  std::string tag = dom.substr(open, close - open);
  static const std::regex attr(R"re(([a-z-]+)="([^"]*)")re");
  for (std::sregex_iterator it(tag.begin(), tag.end(), attr), end; it != end; ++it) out[(*it)[1]] = (*it)[2];
  return out;
}

size_t rowsOf(const std::string& csv, const std::string& metric) {
  size_t n = 0;
  for (size_t at = csv.find("," + metric + ","); at != std::string::npos;
       at = csv.find("," + metric + ",", at + 1))
    ++n;
  return n;
}

uint32_t be32(const std::string& s, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + at);
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

// Decodes an 8-bit RGB/RGBA non-interlaced PNG (what chromium writes) and counts its pixels that
// are not the page's white, and its distinct colours.
struct PngStats {
  size_t width = 0, height = 0, non_white = 0, colours = 0;
};
PngStats pngStats(const std::string& png) {
  PngStats st;
  if (png.size() < 33 || png.compare(1, 3, "PNG") != 0) return st;
  std::string idat;
  int channels = 0;
  for (size_t at = 8; at + 8 <= png.size();) {
    uint32_t len = be32(png, at);
    std::string type = png.substr(at + 4, 4);
    if (type == "IHDR") {
      st.width = be32(png, at + 8);
      st.height = be32(png, at + 12);
      const int colour_type = static_cast<unsigned char>(png[at + 17]);
      channels = colour_type == 6 ? 4 : colour_type == 2 ? 3 : 0;
      if (png[at + 16] != 8 || png[at + 20] != 0) channels = 0;
    }
    if (type == "IDAT") idat += png.substr(at + 8, len);
    at += 12 + len;
  }
  if (channels == 0) return st;
  const size_t stride = st.width * channels;
  std::vector<unsigned char> raw(st.height * (stride + 1));
  uLongf n = raw.size();
  if (uncompress(raw.data(), &n, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK) return st;
  std::vector<unsigned char> prev(stride, 0), cur(stride);
  std::set<uint32_t> colours;
  for (size_t y = 0; y < st.height; ++y) {
    const unsigned char filter = raw[y * (stride + 1)];
    const unsigned char* in = &raw[y * (stride + 1) + 1];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<size_t>(channels) ? cur[i - channels] : 0, b = prev[i],
                c = i >= static_cast<size_t>(channels) ? prev[i - channels] : 0;
      int pred = 0;
      if (filter == 1) pred = a;
      if (filter == 2) pred = b;
      if (filter == 3) pred = (a + b) / 2;
      if (filter == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      cur[i] = static_cast<unsigned char>(in[i] + pred);
    }
    for (size_t x = 0; x < st.width; ++x) {
      const unsigned char* px = &cur[x * channels];
      if (px[0] < 250 || px[1] < 250 || px[2] < 250) ++st.non_white;
      if (colours.size() < 100000) colours.insert(uint32_t{px[0]} << 16 | uint32_t{px[1]} << 8 | px[2]);
    }
    prev = cur;
  }
  st.colours = colours.size();
  return st;
}

}  // namespace

TEST_F(TrainCli, report_opens_in_chromium_with_every_chart_and_table) {
  ASSERT_EQ(std::system("command -v chromium > /dev/null 2>&1"), 0)
      << "this test needs Debian's chromium (apt install chromium; scripts/install-deps.sh does)";
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  Result two = run(cfg + " --nproc-per-node 2 --output-dir " + dir_ + "/two");
  ASSERT_EQ(two.code, 0) << two.output;
  Result one = run(cfg + " --output-dir " + dir_ + "/one --set optimizer.params.lr=0.002");
  ASSERT_EQ(one.code, 0) << one.output;
  // The trainer's own live page is there, and `lockstep report` overlays both runs.
  EXPECT_TRUE(fs::exists(dir_ + "/two/report.html"));
  const std::string page = dir_ + "/both.html";
  std::string cmd = std::string(LOCKSTEP_BIN) + " report " + dir_ + "/two " + dir_ + "/one -o " + page +
                    " > " + dir_ + "/report.txt 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << readFile(dir_ + "/report.txt");
  const std::string chromium =
      "chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
      "--no-first-run --user-data-dir=" +
      dir_ + "/profile --virtual-time-budget=5000 ";
  ASSERT_EQ(std::system((chromium + "--dump-dom file://" + page + " > " + dir_ + "/dom.html 2> " + dir_ +
                         "/chromium.log")
                            .c_str()),
            0)
      << readFile(dir_ + "/chromium.log");
  const std::string dom = readFile(dir_ + "/dom.html");
  ASSERT_NE(dom.find("data-report-ready=\"1\""), std::string::npos) << "the page's script did not finish\n"
                                                                    << dom.substr(0, 2000);
  const std::string csv_two = readFile(dir_ + "/two/metrics.csv"),
                    csv_one = readFile(dir_ + "/one/metrics.csv");
  auto both = [&](std::initializer_list<const char*> metrics) {
    size_t n = 0;
    for (const char* m : metrics) n += rowsOf(csv_two, m) + rowsOf(csv_one, m);
    return std::to_string(n);
  };
  // Every chart drew every point the two runs logged (the curves of both runs, overlaid).
  const std::map<std::string, std::string> expected = {
      {"loss", both({"train/loss", "val/loss", "test/loss"})},
      {"accuracy", both({"val/accuracy", "test/accuracy"})},
      {"lr", both({"train/lr"})},
      {"throughput", both({"train/samples_per_sec"})},
      {"memory", both({"memory/max_rss_mib"})},
      {"step_time", "6"}};  // 2 ranks of the DDP run x (forward, backward, comm); none for one rank
  for (const auto& [chart, points] : expected) {
    auto a = attributesOf(dom, "data-chart=\"" + chart + "\"");
    ASSERT_FALSE(a.empty()) << "no chart " << chart;
    EXPECT_EQ(a["data-points"], points) << chart;
    EXPECT_NE(points, "0") << chart;
  }
  EXPECT_EQ(attributesOf(dom, "data-chart=\"loss\"")["data-series"], "6");  // 2 runs x train, val, test
  EXPECT_EQ(dom.find("data-chart=\"loss_scale\""), std::string::npos);      // full precision: none
  for (const char* t :
       {"summary-table", "config-table", "resolved-table", "environment-table", "checkpoints-table"}) {
    auto a = attributesOf(dom, std::string("id=\"") + t + "\"");
    ASSERT_FALSE(a.empty()) << t;
    EXPECT_NE(a["data-rows"], "0") << t;
  }
  // The tables hold the run's own values.
  auto summary = nlohmann::json::parse(readFile(dir_ + "/two/summary.json"));
  EXPECT_NE(dom.find(">world_size</th>"), std::string::npos);
  EXPECT_NE(dom.find(">ckpt-20</th>"), std::string::npos);
  EXPECT_NE(dom.find(">cpu_model</th>"), std::string::npos);
  EXPECT_NE(dom.find(">optimizer.params.lr</th>"), std::string::npos);
  EXPECT_NE(dom.find(">0.002</td>"), std::string::npos);  // the second run's override
  EXPECT_EQ(summary["steps"], 12);                        // 2 ranks: 3 steps an epoch, 4 epochs

  // On the wall-time axis (report.html#x=time) and the samples axis every point is drawn too.
  for (const char* axis : {"time", "samples"}) {
    ASSERT_EQ(std::system((chromium + "--dump-dom 'file://" + page + "#x=" + axis + "' > " + dir_ +
                           "/dom2.html 2>> " + dir_ + "/chromium.log")
                              .c_str()),
              0);
    const std::string dom2 = readFile(dir_ + "/dom2.html");
    EXPECT_EQ(attributesOf(dom2, "data-chart=\"loss\"")["data-points"], expected.at("loss")) << axis;
    EXPECT_NE(dom2.find(std::string("data-x-axis=\"") + axis + "\""), std::string::npos) << axis;
  }

  // A screenshot shows charts: many non-white pixels in several colours.
  ASSERT_EQ(std::system((chromium + "--hide-scrollbars --window-size=1200,1600 --screenshot=" + dir_ +
                         "/shot.png file://" + page + " > /dev/null 2>> " + dir_ + "/chromium.log")
                            .c_str()),
            0)
      << readFile(dir_ + "/chromium.log");
  PngStats st = pngStats(readFile(dir_ + "/shot.png"));
  EXPECT_EQ(st.width, 1200u);
  EXPECT_GT(st.non_white, st.width * st.height / 50) << "blank screenshot";
  EXPECT_GT(st.colours, 20u) << "blank screenshot";
}

namespace {
// `lockstep report DIR/RUN` opened by chromium: the page's DOM after its script ran.
std::string reportDom(const std::string& dir, const std::string& run) {
  const std::string page = dir + "/" + run + ".html";
  EXPECT_EQ(
      std::system((std::string(LOCKSTEP_BIN) + " report " + dir + "/" + run + " -o " + page + " > /dev/null")
                      .c_str()),
      0);
  EXPECT_EQ(
      std::system(("chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir=" +
                   dir + "/profile --virtual-time-budget=5000 --dump-dom file://" + page + " > " + dir +
                   "/dom.html 2> /dev/null")
                      .c_str()),
      0);
  return readFile(dir + "/dom.html");
}
}  // namespace

// A run with one evaluation: the accuracy chart stays within [0, 1] and the step axis has whole
// steps only (a one-point series once got an axis to 1.3 and ticks at 99.5, 100.5).
TEST_F(TrainCli, report_of_one_evaluation_keeps_accuracy_in_range_and_steps_whole) {
  ASSERT_EQ(std::system("command -v chromium > /dev/null 2>&1"), 0)
      << "needs chromium (scripts/install-deps.sh)";
  fs::create_directories(dir_ + "/one");
  std::ofstream(dir_ + "/one/metrics.csv") << "epoch,step,metric,value,wall_time\n"
                                              "1,100,train/loss,0.4,100\n1,100,val/loss,0.5,101\n"
                                              "1,100,val/accuracy,0.87,101\n";
  std::ofstream(dir_ + "/one/summary.json") << R"({"steps": 100})";
  const std::string dom = reportDom(dir_, "one");
  for (const char* chart : {"accuracy", "loss"}) {
    auto a = attributesOf(dom, std::string("data-chart=\"") + chart + "\"");
    ASSERT_EQ(a["data-points"], chart == std::string("loss") ? "2" : "1") << chart;
    std::istringstream range(a["data-y-range"]);
    double lo = -1, hi = -1;
    range >> lo >> hi;
    EXPECT_LE(lo, chart == std::string("loss") ? 0.4 : 0.8) << chart << " " << a["data-y-range"];
    EXPECT_GE(hi, chart == std::string("loss") ? 0.5 : 0.9) << chart << " " << a["data-y-range"];
    if (chart == std::string("accuracy")) {
      EXPECT_GE(lo, 0.0) << a["data-y-range"];
      EXPECT_LE(hi, 1.0) << a["data-y-range"];
    }
    std::istringstream ticks(a["data-x-ticks"]);
    int n = 0;
    for (double t; ticks >> t; ++n) EXPECT_EQ(t, std::floor(t)) << chart << " x ticks " << a["data-x-ticks"];
    EXPECT_GT(n, 0) << chart;
  }
}

TEST_F(TrainCli, report_shows_loss_scale_when_a_run_records_it) {
  ASSERT_EQ(std::system("command -v chromium > /dev/null 2>&1"), 0)
      << "needs chromium (scripts/install-deps.sh)";
  fs::create_directories(dir_ + "/mp");
  std::ofstream(dir_ + "/mp/metrics.csv")
      << "epoch,step,metric,value,wall_time\n"
         "1,10,train/loss,2.0,100\n1,10,train/loss_scale,65536,100\n"
         "1,10,train/skipped_steps,1,100\n1,20,train/loss,1.5,101\n"
         "1,20,train/loss_scale,32768,101\n1,20,train/skipped_steps,2,101\n";
  std::ofstream(dir_ + "/mp/summary.json") << R"({"steps": 20, "loss_scale": 32768, "skipped_steps": 2})";
  const std::string dom = reportDom(dir_, "mp");
  EXPECT_EQ(attributesOf(dom, "data-chart=\"loss_scale\"")["data-points"], "2");
  EXPECT_EQ(attributesOf(dom, "data-chart=\"skipped_steps\"")["data-points"], "2");
  EXPECT_NE(dom.find(">loss_scale</th>"), std::string::npos);  // summary.json's key in the table
}

TEST_F(TrainCli, report_of_a_directory_that_is_not_a_run_exits_2_naming_it) {
  std::string out = dir_ + "/o.txt";
  int status = std::system(
      (std::string(LOCKSTEP_BIN) + " report " + dir_ + "/nothing -o " + dir_ + "/x.html > " + out + " 2>&1")
          .c_str());
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(readFile(out).find(dir_ + "/nothing"), std::string::npos) << readFile(out);
  EXPECT_FALSE(fs::exists(dir_ + "/x.html"));
}
