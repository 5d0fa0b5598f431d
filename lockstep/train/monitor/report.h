#pragma once
// `lockstep report`: one self-contained HTML page (report_page.html with Chart.js and the runs'
// data inlined; it opens with no network) showing one or more runs overlaid: loss, accuracy,
// learning rate, throughput, loss scale, memory, the per-rank step-time breakdown, and the
// config, environment, summary and checkpoints as tables. docs/train.md describes it.
#include <string>
#include <vector>

#include "lockstep/train/monitor/run_record.h"

namespace lockstep::train {

/// The page for `runs` (one or more, overlaid in that order).
std::string renderReport(const std::vector<RunRecord>& runs);

/// Reads every dir (loadRunRecord) and writes the page to out atomically. ValueError naming a dir
/// that is not a run; IoError naming out when it cannot be written.
void writeReport(const std::vector<std::string>& dirs, const std::string& out);

}  // namespace lockstep::train
