#include "lockstep/train/monitor/run_info.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/threads.h"
#include "lockstep/train/config/config_backends.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"
#include "lockstep/util/version.h"

namespace lockstep::train {

int64_t peakRssBytes() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

namespace {

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string hostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

nlohmann::json describeEnvironment(int world_size, const std::string& backend) {
  const bool onednn = kernels::backendFor(DType::f32) == kernels::Backend::onednn;
  return {{"world_size", world_size},
          {"backend", backend},
          {"host", hostName()},
          {"cpu_model", cpuModel()},
          {"cpu_cores", std::thread::hardware_concurrency()},
          {"kernels", onednn ? "oneDNN" : "reference"},
          {"isa", onednn ? kernels::kernelIsa() : "none (plain loops)"},
          {"bf16_kernels", kernels::precisionPath(DType::bf16)},
          {"f16_kernels", kernels::precisionPath(DType::f16)},
          {"threads_per_rank", kernels::numThreads()},
          {"lockstep_version", lockstepVersion()},
          {"lockstep_commit", lockstepCommit()},
          {"onednn_version", kernels::kernelLibraryVersion()},
          {"compiler", __VERSION__}};
}

nlohmann::json describeRun(const TrainConfig& c, const RunFacts& f) {
  nlohmann::json run;
  run["start_time"] =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<std::string> overrides;
  if (f.invocation.contains("overrides"))
    overrides = f.invocation["overrides"].get<std::vector<std::string>>();
  if (f.invocation.contains("config")) {
    const std::string path = f.invocation["config"].get<std::string>();
    run["config_file"] = path;
    run["config"] = c.document;  // the file as parsed, --set overrides applied
  }
  run["overrides"] = overrides;
  run["resolved"] = {{"model", c.model},
                     {"dataset", c.data.dataset},
                     {"train_batch_size", c.batch.train_batch_size},
                     {"train_micro_batch_size_per_gpu", c.batch.micro_batch_size},
                     {"gradient_accumulation_steps", c.batch.gradient_accumulation_steps},
                     {"epochs", c.epochs},
                     {"steps_per_epoch", f.steps_per_epoch},
                     {"total_steps", f.total_steps},
                     {"steps_per_print", c.steps_per_print},
                     {"seed", c.seed},
                     {"checkpoint_dir", f.checkpoint_dir}};
  if (!f.classes.empty()) {
    nlohmann::json class_to_idx = nlohmann::json::object();
    for (size_t i = 0; i < f.classes.size(); ++i) class_to_idx[f.classes[i]] = i;
    run["class_to_idx"] = class_to_idx;
  }
  run["environment"] = describeEnvironment(f.world_size, f.backend);
  run["environment"]["device"] = f.device;
  // The GPU math switches in force (config_backends.h), defaults included: whether a GPU run may use
  // TF32 or nondeterministic algorithms is part of where it ran (no effect on a CPU run).
  run["environment"]["backends"] = backendsJson(c.gpu_math);
  return run;
}

}  // namespace lockstep::train
