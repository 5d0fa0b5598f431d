#include "lockstep/train/monitor/report.h"

#include <cmath>
#include <filesystem>
#include <string_view>

#include "lockstep/train/monitor/report_assets.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"

namespace lockstep::train {

namespace {

nlohmann::json seriesJson(const MetricSeries& s) {
  nlohmann::json j = {{"step", s.step}, {"value", s.value}};
  if (!s.wall_time.empty()) j["wall_time"] = s.wall_time;
  return j;
}

nlohmann::json runJson(const RunRecord& r, size_t index) {
  nlohmann::json j;
  std::string name = std::filesystem::path(r.dir).lexically_normal().filename().string();
  if (name.empty() || name == ".")
    name = std::filesystem::path(r.dir).lexically_normal().parent_path().filename().string();
  j["name"] = name.empty() ? "run " + std::to_string(index + 1) : name;
  j["dir"] = r.dir;
  j["metrics"] = nlohmann::json::object();
  for (const auto& [tag, s] : r.metrics) {
    // A NaN or an infinity (a diverged run) is not JSON: such points are left out.
    MetricSeries finite;
    for (size_t i = 0; i < s.step.size(); ++i) {
      if (!std::isfinite(s.value[i])) continue;
      finite.step.push_back(s.step[i]);
      finite.value.push_back(s.value[i]);
      if (!s.wall_time.empty()) finite.wall_time.push_back(s.wall_time[i]);
    }
    j["metrics"][tag] = seriesJson(finite);
  }
  j["run"] = r.run;
  j["summary"] = r.summary;
  j["checkpoints"] = nlohmann::json::array();
  for (const auto& c : r.checkpoints)
    j["checkpoints"].push_back(
        {{"name", c.name}, {"step", c.step}, {"bytes", c.bytes}, {"mtime", c.mtime}, {"latest", c.latest}});
  return j;
}

constexpr std::string_view kChartMarker = "/*LOCKSTEP_CHART_JS*/";
constexpr std::string_view kDataMarker = "\"LOCKSTEP_DATA\"";

}  // namespace

std::string renderReport(const std::vector<RunRecord>& runs) {
  nlohmann::json data = {{"runs", nlohmann::json::array()}};
  for (size_t i = 0; i < runs.size(); ++i) data["runs"].push_back(runJson(runs[i], i));
  // Runs are told apart by their dir's name; where two share one (a/out, b/out), by the whole path.
  std::vector<bool> shared(runs.size(), false);
  for (size_t i = 0; i < runs.size(); ++i)
    for (size_t j = 0; j < runs.size(); ++j)
      shared[i] = shared[i] || (i != j && data["runs"][i]["name"] == data["runs"][j]["name"]);
  for (size_t i = 0; i < runs.size(); ++i)
    if (shared[i]) data["runs"][i]["name"] = data["runs"][i]["dir"];
  // Inside <script>, "</" could end the element early; "<\/" is the same JSON string.
  std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string escaped;
  escaped.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    escaped += json[i];
    if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/') escaped += '\\';
  }
  // Markers are found in the template alone, never in what is inserted.
  const std::string_view tmpl = asText(kReportPageTemplate), chart_js = asText(kChartJs);
  const size_t chart = tmpl.find(kChartMarker), at = tmpl.find(kDataMarker);
  LOCKSTEP_CHECK(chart != std::string_view::npos && at != std::string_view::npos && chart < at,
                 "the report page template lacks its markers");
  std::string page;
  page.reserve(tmpl.size() + chart_js.size() + escaped.size());
  page += tmpl.substr(0, chart);
  page += chart_js;
  page += tmpl.substr(chart + kChartMarker.size(), at - chart - kChartMarker.size());
  page += escaped;
  page += tmpl.substr(at + kDataMarker.size());
  return page;
}

void writeReport(const std::vector<std::string>& dirs, const std::string& out) {
  LOCKSTEP_ENFORCE(!dirs.empty(), ValueError, "no RUN_DIR given");
  std::vector<RunRecord> runs;
  for (const auto& d : dirs) runs.push_back(loadRunRecord(d));
  file::writeAtomic(out, renderReport(runs));
}

}  // namespace lockstep::train
