#pragma once
// Files embedded into the binary at build time (cmake/EmbedFiles.cmake), so that `lockstep report`
// needs nothing at run time: Debian's Chart.js (libjs-chart.js, /usr/share/javascript/chart.js/
// chart.min.js) and lockstep/train/monitor/report_page.html. NUL-terminated (asText() views them as text).
#include <string_view>

namespace lockstep::train {

extern const unsigned char kChartJs[];
extern const unsigned char kReportPageTemplate[];

inline std::string_view asText(const unsigned char* nul_terminated) {
  return reinterpret_cast<const char*>(nul_terminated);
}

}  // namespace lockstep::train
