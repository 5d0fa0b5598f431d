// A worker that does what a training program does under `lockstep run`: initProcessGroup from
// the environment the agent set (connecting to the agent's store), one allreduce, a check.
// --fail-rank R: rank R exits 3 after the allreduce on the first attempt (restart tests).
// --attempt-prefix: build the store by hand, honouring LOCKSTEP_STORE_PREFIX.
// Watchdog tests: --backend B (default gloo), --loop-seconds S (allreduce --count elements over
// and over for S seconds), --pid-dir D (writes D/pid.RANK once the group is up). The collective
// timeout is the launcher's (LOCKSTEP_TIMEOUT).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "lockstep/comm/init.h"
#include "lockstep/comm/store/prefix_store.h"
#include "lockstep/comm/store/tcp_store.h"

namespace {

// What a worker under `lockstep run` should do (docs/launch.md): connect to the agent's store as
// a client and prefix its keys with LOCKSTEP_STORE_PREFIX, so a restarted attempt never reads
// keys (e.g. gloo addresses) left by the previous one.
std::shared_ptr<lockstep::comm::ProcessGroup> initWithAttemptPrefix() {
  auto env = [](const char* k) { return std::string(std::getenv(k) ? std::getenv(k) : ""); };
  lockstep::comm::TCPStoreOptions so;
  so.host = env("LOCKSTEP_STORE_ADDR");
  so.port = static_cast<uint16_t>(std::stoi(env("LOCKSTEP_STORE_PORT")));
  so.timeout = std::chrono::seconds(20);
  so.join_token = env("LOCKSTEP_JOIN_TOKEN");
  auto store = std::make_shared<lockstep::comm::PrefixStore>(env("LOCKSTEP_STORE_PREFIX"),
                                                             std::make_shared<lockstep::comm::TCPStore>(so));
  return lockstep::comm::createProcessGroup("gloo", store, std::stoi(env("RANK")),
                                            std::stoi(env("WORLD_SIZE")), std::chrono::seconds(20));
}

}  // namespace

int main(int argc, char** argv) {
  int fail_rank = -1;
  bool prefix = false;
  std::string backend = "gloo", pid_dir;
  double loop_seconds = 0;
  size_t count = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--fail-rank" && i + 1 < argc) fail_rank = std::atoi(argv[++i]);
    if (a == "--attempt-prefix") prefix = true;
    if (a == "--backend" && i + 1 < argc) backend = argv[++i];
    if (a == "--loop-seconds" && i + 1 < argc) loop_seconds = std::atof(argv[++i]);
    if (a == "--count" && i + 1 < argc) count = std::strtoull(argv[++i], nullptr, 10);
    if (a == "--pid-dir" && i + 1 < argc) pid_dir = argv[++i];
  }
  const char* attempt = std::getenv("LOCKSTEP_RESTART_COUNT");
  std::shared_ptr<lockstep::comm::ProcessGroup> pg;
  if (prefix) {
    pg = initWithAttemptPrefix();
  } else {
    lockstep::comm::InitOptions o;
    o.backend = backend;
    o.store_timeout = std::chrono::seconds(20);
    pg = lockstep::comm::initProcessGroup(o);
  }
  if (!pid_dir.empty()) {
    std::ofstream(pid_dir + "/pid." + std::to_string(pg->rank())) << ::getpid() << "\n";
  }
  if (loop_seconds > 0) {
    std::vector<float> data(count, 1.0f);
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(loop_seconds);
    while (std::chrono::steady_clock::now() < end) {
      pg->allreduce(data.data(), data.size(), lockstep::DType::f32)->wait();
      data.assign(count, 1.0f);
    }
  }
  double v = pg->rank() + 1.0;
  pg->allreduce(&v, 1, lockstep::DType::f64)->wait();
  const double n = pg->size();
  if (v != n * (n + 1) / 2) {
    std::fprintf(stderr, "rank %d: allreduce gave %g, expected %g\n", pg->rank(), v, n * (n + 1) / 2);
    return 1;
  }
  std::printf("rank %d of %d: allreduce ok (attempt %s)\n", pg->rank(), pg->size(), attempt ? attempt : "?");
  if (pg->rank() == fail_rank && attempt && std::string(attempt) == "0") {
    if (const char* path = std::getenv("LOCKSTEP_ERROR_FILE")) {
      if (FILE* f = std::fopen(path, "w")) {
        std::fprintf(f, "{\"message\": \"rank %d gives up on purpose\"}\n", pg->rank());
        std::fclose(f);
      }
    }
    return 3;  // its peers, still in barrier(), fail when its connections close
  }
  pg->barrier()->wait();
  return 0;
}
