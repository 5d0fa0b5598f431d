// `lockstep bench allreduce|reduce_scatter`: collective bandwidth/latency of a backend,
// nccl-tests style.
//
//   lockstep bench allreduce --backend shm --nproc 2 --sizes 4096,67108864
//   lockstep bench reduce_scatter --backend gloo --nproc 2 --sizes 4096,67108864
//
// The command starts --nproc local ranks itself (re-executing this binary with --worker; for
// mpi through mpirun), hosts the TCPStore they meet in, and rank 0 prints one line per size:
//   bytes=<S> time_us=<t> algbw_GBps=<a> busbw_GBps=<b> sent_bytes=<s> wchar_bytes=<w>
// S is each rank's input (reduce_scatter: all n output blocks), algbw = S / t, and as
// nccl-tests defines them busbw = algbw * 2(n-1)/n for allreduce and algbw * (n-1)/n for
// reduce_scatter. sent_bytes = busbw * t: what each rank must send at least (a ring sends
// exactly that). wchar_bytes is measured: bytes a rank's process wrote through system calls per
// op (/proc/self/io; the most of any rank), i.e. its socket traffic with gloo; shm moves data by
// memory copies and writes next to none.
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/cli/command.h"
#include "lockstep/comm.h"
#include "lockstep/util/error.h"

extern char** environ;

namespace {

using namespace lockstep;
using Clock = std::chrono::steady_clock;

const std::vector<std::string> kBenchmarks = {"allreduce", "reduce_scatter"};

struct BenchArgs {
  std::string what = "allreduce";
  std::string backend = "shm";
  int nproc = 2;
  std::vector<int64_t> sizes = {4096, 67108864};
  int iters = 0;  // 0: chosen per size
  int warmup = 5;
  bool worker = false;
  std::string dtype = "f32";
};

int itersFor(size_t bytes) {
  // About 0.5 GB of input per size, between 20 and 2000 iterations.
  return static_cast<int>(std::clamp<size_t>((512u << 20) / std::max<size_t>(bytes, 1), 20, 2000));
}

// Bytes this process has written through system calls (write, writev, send...): /proc/self/io.
double writtenBytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  double value = 0;
  while (io >> key >> value) {
    if (key == "wchar:") return value;
  }
  return 0;
}

// One benchmarked collective over a buffer of `bytes` input bytes per rank.
struct Collective {
  DType dtype;
  size_t count = 0;  // allreduce: elements; reduce_scatter: elements of each rank's output block
  size_t in_elems = 0;
  std::vector<uint8_t> in, out;

  Collective(const std::string& what, size_t bytes, DType dt, int n) : dtype(dt) {
    const size_t es = dtypeSize(dt);
    count = what == "allreduce" ? bytes / es : bytes / es / n;
    in_elems = what == "allreduce" ? count : count * n;
    in.resize(in_elems * es + 64);
    out.resize(what == "allreduce" ? 0 : count * es + 64);
  }
  std::shared_ptr<comm::Work> run(comm::ProcessGroup& pg) {
    if (out.empty()) return pg.allreduce(in.data(), count, dtype);
    return pg.reduceScatter(in.data(), out.data(), count, dtype);
  }
};

// The sizes each rank can run: at least one element per rank's block, and memory for them.
void checkSizes(const BenchArgs& a) {
  const auto es = static_cast<int64_t>(dtypeSize(dtypeFromName(a.dtype)));
  const int64_t per = a.what == "allreduce" ? es : es * a.nproc;
  for (int64_t bytes : a.sizes) {
    LOCKSTEP_ENFORCE(bytes >= per, ValueError, "--sizes ", bytes, ": less than one ", a.dtype, " element",
                     a.what == "allreduce" ? "" : " per rank", " (", per, " bytes); give sizes of at least ",
                     per, " bytes");
  }
}

int workerMain(const BenchArgs& a) {
  // Ends with the launcher, whatever stops it (SIGKILL included): no rank is left running alone.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (const char* parent = std::getenv("LOCKSTEP_BENCH_LAUNCHER");
      parent && std::to_string(::getppid()) != parent)
    return 1;  // the launcher was gone before the line above
  comm::InitOptions init;
  init.backend = a.backend;
  auto pg = comm::initProcessGroup(init);
  const DType dt = dtypeFromName(a.dtype);
  const int n = pg->size();
  const bool allreduce = a.what == "allreduce";
  for (int64_t size : a.sizes) {
    const auto bytes = static_cast<size_t>(size);
    std::optional<Collective> made;
    try {
      made.emplace(a.what, bytes, dt, n);
    } catch (const OutOfMemoryError&) {
      throw ValueError(::lockstep::detail::concat("--sizes ", size, ": cannot allocate the buffers of ", size,
                                                  " bytes on this host; give smaller sizes"));
    } catch (const std::bad_alloc&) {
      throw ValueError(::lockstep::detail::concat("--sizes ", size, ": cannot allocate the buffers of ", size,
                                                  " bytes on this host; give smaller sizes"));
    }
    Collective& c = *made;
    // Check once: ones summed over n ranks.
    visitDType(dt, [&](auto tag) {
      using T = decltype(tag);
      auto* p = reinterpret_cast<T*>(c.in.data());
      for (size_t i = 0; i < c.in_elems; ++i) p[i] = T(1.0f);
      c.run(*pg)->wait();
      const T* res = allreduce ? p : reinterpret_cast<const T*>(c.out.data());
      for (size_t i = 0; i < c.count; i += std::max<size_t>(1, c.count / 97)) {
        LOCKSTEP_ENFORCE(static_cast<float>(res[i]) == static_cast<float>(n), InternalError, "bench: wrong ",
                         a.what, " result at ", i, ": ", static_cast<float>(res[i]));
      }
    });
    const int iters = a.iters > 0 ? a.iters : itersFor(bytes);
    for (int i = 0; i < a.warmup; ++i) c.run(*pg)->wait();
    pg->barrier()->wait();
    const double w0 = writtenBytes();
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) c.run(*pg)->wait();
    double stats[2] = {std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters,
                       (writtenBytes() - w0) / iters};
    pg->allreduce(stats, 2, DType::f64, {.op = comm::ReduceOp::max})->wait();  // slowest rank, most bytes
    if (pg->rank() == 0) {
      const size_t total = c.in_elems * dtypeSize(dt);
      const double us = stats[0];
      const double algbw = static_cast<double>(total) / (us * 1e-6) / 1e9;
      const double bus = (allreduce ? 2.0 : 1.0) * (n - 1) / n;
      std::printf("bytes=%zu time_us=%.2f algbw_GBps=%.3f busbw_GBps=%.3f sent_bytes=%.0f wchar_bytes=%.0f\n",
                  total, us, algbw, algbw * bus, static_cast<double>(total) * bus, stats[1]);
      std::fflush(stdout);
    }
  }
  pg->barrier()->wait();
  return 0;
}

// The ranks a signal to the launcher is passed on to (set before the handlers are installed).
pid_t g_ranks[256];
size_t g_rank_count = 0;

void forwardAndExit(int sig) {
  for (size_t i = 0; i < g_rank_count; ++i) ::kill(g_ranks[i], sig);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
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
  checkSizes(a);
  std::string sizes;
  for (int64_t s : a.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
  std::vector<std::string> args = {exe,         "bench",
                                   a.what,      "--worker",
                                   "--backend", a.backend,
                                   "--sizes",   sizes,
                                   "--iters",   std::to_string(a.iters),
                                   "--warmup",  std::to_string(a.warmup),
                                   "--dtype",   a.dtype};
  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) base_env.emplace_back(*e);
  std::vector<pid_t> pids;
  std::unique_ptr<comm::TCPStore> store;
  if (!comm::findBackend(a.backend).needs_store) {  // mpi: its ranks are mpirun's to start
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
      // The parent each rank checks (mpirun's ranks have mpirun's daemon as theirs: not set there).
      env.push_back("LOCKSTEP_BENCH_LAUNCHER=" + std::to_string(::getpid()));
      pids.push_back(spawn(args, env));
    }
  }
  // SIGINT, SIGTERM or SIGHUP to the launcher reach its ranks (mpirun among them) too.
  for (size_t i = 0; i < pids.size() && i < std::size(g_ranks); ++i) g_ranks[i] = pids[i];
  g_rank_count = std::min(pids.size(), std::size(g_ranks));
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, forwardAndExit);
  int rc = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    pid_t done = ::wait(&status);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && rc == 0) {
      rc = 1;
      if (WIFSIGNALED(status))
        std::fprintf(stderr,
                     "lockstep bench: a rank (pid %d) was killed by signal %d (%s); stopping the others\n",
                     done, WTERMSIG(status), strsignal(WTERMSIG(status)));
      else
        std::fprintf(stderr, "lockstep bench: a rank (pid %d) exited with code %d; stopping the others\n",
                     done, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
      for (pid_t p : pids) {
        if (p != done) ::kill(p, SIGTERM);
      }
    }
  }
  return rc;
}

int benchMain(int argc, char** argv) {
  CLI::App app{
      "Communication benchmarks. Prints bytes=, time_us=, algbw_GBps=, busbw_GBps=, sent_bytes=, "
      "wchar_bytes= per size."};
  BenchArgs a;
  app.add_option("what", a.what, "benchmark to run: allreduce or reduce_scatter")
      ->check(CLI::IsMember(kBenchmarks))
      ->required();
  app.add_option("--backend", a.backend, "process group backend: " + comm::backendNamesText())
      ->check([](const std::string& name) {
        try {
          comm::checkBackendName(name);
          return std::string();
        } catch (const ValueError& e) {
          return std::string(e.what());
        }
      });
  app.add_option("--nproc", a.nproc, "local ranks to start")->check(CLI::Range(1, 256));
  app.add_option("--sizes", a.sizes, "message sizes in bytes, comma separated (1 to 2^40)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--iters", a.iters, "timed iterations per size (0: about 0.5 GB of traffic)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup", a.warmup, "untimed iterations per size")->check(CLI::NonNegativeNumber);
  app.add_option("--dtype", a.dtype, "element type")
      ->check(CLI::IsMember({"f32", "f64", "bf16", "f16", "i32", "i64", "u8"}));
  app.add_flag("--worker", a.worker, "internal: run as one rank");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return a.worker ? workerMain(a) : launcherMain(a);
  } catch (const ValueError& e) {
    std::fprintf(stderr, "lockstep bench: error: %s\n", e.what());
    return 2;
  }
}

static lockstep::cli::Registration reg{
    "bench", "communication benchmarks (allreduce, reduce_scatter bandwidth)", &benchMain};

}  // namespace
