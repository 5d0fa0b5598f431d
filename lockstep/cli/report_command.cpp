// `lockstep report RUN_DIR [RUN_DIR ...] [-o FILE.html]`: one self-contained HTML page of one or
// more training runs, overlaid (lockstep/train/monitor/report.h, docs/train.md).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lockstep/cli/command.h"
#include "lockstep/train/monitor/report.h"
#include "lockstep/util/error.h"

namespace {

int reportMain(int argc, char** argv) {
  std::vector<std::string> dirs;
  std::string out = "report.html";
  CLI::App app{"Write one self-contained HTML page (plots and tables) of training runs, overlaid",
               "lockstep report"};
  app.add_option("run_dirs", dirs, "output dirs of `lockstep train` runs (--output-dir)")->required();
  app.add_option("-o,--output", out, "the HTML file to write (default: report.html)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    lockstep::train::writeReport(dirs, out);
  } catch (const lockstep::ValueError& e) {
    std::fprintf(stderr, "lockstep report: error: %s\n", e.what());
    return 2;
  } catch (const nlohmann::json::exception& e) {
    // A run.json or summary.json whose values are not what lockstep train writes.
    std::string runs;
    for (const auto& d : dirs) runs += (runs.empty() ? "" : ", ") + d;
    std::fprintf(
        stderr,
        "lockstep report: error: a run.json or summary.json of %s holds a value of another type than "
        "lockstep train writes (%s); was it edited by hand?\n",
        runs.c_str(), e.what());
    return 2;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s (%zu run%s) in %.0f ms\n", out.c_str(), dirs.size(), dirs.size() == 1 ? "" : "s", ms);
  return 0;
}

static lockstep::cli::Registration reg{"report", "write an HTML report (plots, config, environment) of runs",
                                       &reportMain};

}  // namespace
