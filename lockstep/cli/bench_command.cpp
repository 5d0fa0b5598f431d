// `lockstep bench allreduce`: allreduce bandwidth/latency of a backend, nccl-tests style.
//
//   lockstep bench allreduce --backend shm --nproc 2 --sizes 4096,67108864
//
// The command starts --nproc local ranks itself (re-executing this binary with --worker; for
// mpi through mpirun), hosts the TCPStore they meet in, and rank 0 prints one line per size:
//   bytes=<n> time_us=<t> algbw_GBps=<a> busbw_GBps=<b>
// with busbw = algbw * 2(n-1)/n as nccl-tests defines it for allreduce.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "lockstep/cli/command.h"
#include "lockstep/comm.h"
#include "lockstep/util/error.h"

extern char** environ;

namespace {

using namespace lockstep;
using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string what = "allreduce";
  std::string backend = "shm";
  int nproc = 2;
  std::vector<size_t> sizes = {4096, 67108864};
  int iters = 0;  // 0: chosen per size
  int warmup = 5;
  bool worker = false;
  std::string dtype = "f32";
};

int itersFor(size_t bytes) {
  // About 0.5 GB of traffic per size, between 20 and 2000 iterations.
  return static_cast<int>(std::clamp<size_t>((512u << 20) / std::max<size_t>(bytes, 1), 20, 2000));
}

int workerMain(const BenchArgs& a) {
  comm::InitOptions init;
  init.backend = a.backend;
  auto pg = comm::initProcessGroup(init);
  const DType dt = dtypeFromName(a.dtype);
  const size_t es = dtypeSize(dt);
  const int n = pg->size();
  for (size_t bytes : a.sizes) {
    const size_t count = bytes / es;
    std::vector<uint8_t> buf(count * es + 64);
    // Check once: ones summed over n ranks.
    visitDType(dt, [&](auto tag) {
      using T = decltype(tag);
      auto* p = reinterpret_cast<T*>(buf.data());
      for (size_t i = 0; i < count; ++i) p[i] = T(1.0f);
      pg->allreduce(p, count, dt)->wait();
      for (size_t i = 0; i < count; i += std::max<size_t>(1, count / 97)) {
        LOCKSTEP_ENFORCE(static_cast<float>(p[i]) == static_cast<float>(n), InternalError,
                         "bench: wrong allreduce result at ", i, ": ", static_cast<float>(p[i]));
      }
    });
    const int iters = a.iters > 0 ? a.iters : itersFor(bytes);
    for (int i = 0; i < a.warmup; ++i) pg->allreduce(buf.data(), count, dt)->wait();
    pg->barrier()->wait();
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) pg->allreduce(buf.data(), count, dt)->wait();
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
    pg->allreduce(&us, 1, DType::f64, {.op = comm::ReduceOp::max})->wait();  // slowest rank
    if (pg->rank() == 0) {
      double algbw = static_cast<double>(count * es) / (us * 1e-6) / 1e9;
      double busbw = algbw * 2.0 * (n - 1) / n;
      std::printf("bytes=%zu time_us=%.2f algbw_GBps=%.3f busbw_GBps=%.3f\n", count * es, us, algbw, busbw);
      std::fflush(stdout);
    }
  }
  pg->barrier()->wait();
  return 0;
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<char*> av, ev;
  for (const auto& s : argv) av.push_back(const_cast<char*>(s.c_str()));
  av.push_back(nullptr);
  for (const auto& s : env) ev.push_back(const_cast<char*>(s.c_str()));
  ev.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, argv[0].c_str(), nullptr, nullptr, av.data(), ev.data());
  LOCKSTEP_ENFORCE(rc == 0, IoError, "bench: cannot start '", argv[0], "': ", std::strerror(rc));
  return pid;
}

int launcherMain(const BenchArgs& a) {
  char exe[4096] = {};
  ssize_t len = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  LOCKSTEP_ENFORCE(len > 0, IoError, "bench: cannot find this executable (/proc/self/exe)");
  std::string sizes;
  for (size_t s : a.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
  std::vector<std::string> args = {exe, "bench", a.what, "--worker", "--backend", a.backend,
                                   "--sizes", sizes, "--iters", std::to_string(a.iters),
                                   "--warmup", std::to_string(a.warmup), "--dtype", a.dtype};
  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) base_env.emplace_back(*e);
  std::vector<pid_t> pids;
  std::unique_ptr<comm::TCPStore> store;
  if (a.backend == "mpi") {
    std::vector<std::string> cmd = {"mpirun", "-np", std::to_string(a.nproc), "--allow-run-as-root",
                                    "--oversubscribe"};
    cmd.insert(cmd.end(), args.begin(), args.end());
    pids.push_back(spawn(cmd, base_env));
  } else {
    comm::TCPStoreOptions so;
    so.port = 0;
    so.is_server = true;
    store = std::make_unique<comm::TCPStore>(so);
    for (int r = 0; r < a.nproc; ++r) {
      auto env = base_env;
      env.push_back("RANK=" + std::to_string(r));
      env.push_back("LOCAL_RANK=" + std::to_string(r));
      env.push_back("WORLD_SIZE=" + std::to_string(a.nproc));
      env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(a.nproc));
      env.push_back("MASTER_ADDR=127.0.0.1");
      env.push_back("MASTER_PORT=" + std::to_string(store->port()));
      env.push_back("LOCKSTEP_USE_AGENT_STORE=1");
      pids.push_back(spawn(args, env));
    }
  }
  int rc = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    pid_t done = ::wait(&status);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && rc == 0) {
      rc = 1;
      std::fprintf(stderr, "lockstep bench: a rank (pid %d) failed; stopping the others\n", done);
      for (pid_t p : pids) {
        if (p != done) ::kill(p, SIGTERM);
      }
    }
  }
  return rc;
}

int benchMain(int argc, char** argv) {
  CLI::App app{"Communication benchmarks. Prints bytes=, time_us=, algbw_GBps=, busbw_GBps= per size."};
  BenchArgs a;
  app.add_option("what", a.what, "benchmark to run")->check(CLI::IsMember({"allreduce"}))->required();
  app.add_option("--backend", a.backend, "shm, gloo, mpi or auto")
      ->check(CLI::IsMember({"shm", "gloo", "mpi", "auto"}));
  app.add_option("--nproc", a.nproc, "local ranks to start")->check(CLI::Range(1, 256));
  app.add_option("--sizes", a.sizes, "message sizes in bytes, comma separated")->delimiter(',');
  app.add_option("--iters", a.iters, "timed iterations per size (0: about 0.5 GB of traffic)");
  app.add_option("--warmup", a.warmup, "untimed iterations per size");
  app.add_option("--dtype", a.dtype, "element type")->check(CLI::IsMember({"f32", "f64", "bf16", "f16", "i32", "i64", "u8"}));
  app.add_flag("--worker", a.worker, "internal: run as one rank");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return a.worker ? workerMain(a) : launcherMain(a);
}

static lockstep::cli::Registration reg{"bench", "communication benchmarks (allreduce bandwidth)", &benchMain};

}  // namespace
