// Startup latency of `lockstep run`: from the moment `lockstep run` is started to the moment its
// last worker has entered main(), on one host. Target: < 100 ms.
//
//   build/bench/bench_launch_startup [--lockstep build/lockstep] [--nproc 4] [--reps 20]
//
// The benchmark is its own worker: started with LOCKSTEP_BENCH_STAMPS set, it writes the time
// it entered main() and exits. It also times spawning the same workers directly (fork+exec, no
// launcher), so the launcher's own share can be read off the difference.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int workerMain(const char* dir) {
  int64_t t = nowNs();
  const char* rank = std::getenv("RANK");
  std::string path = std::string(dir) + "/" + (rank ? rank : "x");
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return 1;
  std::fprintf(f, "%lld\n", static_cast<long long>(t));
  std::fclose(f);
  return 0;
}

int runAndWait(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env) {
  pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& e : extra_env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Milliseconds from t0 to the latest worker stamp in dir, or -1 if a stamp is missing.
double latestStampMs(const std::string& dir, int nproc, int64_t t0) {
  int64_t latest = 0;
  for (int r = 0; r < nproc; ++r) {
    std::ifstream in(dir + "/" + std::to_string(r));
    long long t = 0;
    if (!(in >> t)) return -1;
    latest = std::max<int64_t>(latest, t);
  }
  return static_cast<double>(latest - t0) / 1e6;
}

struct Stats {
  double median, min, max;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* dir = std::getenv("LOCKSTEP_BENCH_STAMPS")) return workerMain(dir);
  std::string self = std::filesystem::canonical("/proc/self/exe").string();
  std::string lockstep = (std::filesystem::path(self).parent_path().parent_path() / "lockstep").string();
  int nproc = 4;
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--lockstep")
      lockstep = argv[i + 1];
    else if (a == "--nproc")
      nproc = std::atoi(argv[i + 1]);
    else if (a == "--reps")
      reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--lockstep PATH] [--nproc N] [--reps R]\n", argv[0]);
      return 2;
    }
  }
  std::string dir = "/tmp/lockstep-bench-" + std::to_string(::getpid());
  std::vector<double> launched, direct, total;
  for (int rep = 0; rep < reps; ++rep) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::vector<std::string> env = {"LOCKSTEP_BENCH_STAMPS=" + dir};
    int64_t t0 = nowNs();
    int code =
        runAndWait({lockstep, "run", "--standalone", "--nproc-per-node", std::to_string(nproc), self}, env);
    int64_t t1 = nowNs();
    double ms = latestStampMs(dir, nproc, t0);
    if (code != 0 || ms < 0) {
      std::fprintf(stderr, "lockstep run failed (exit %d); is %s built?\n", code, lockstep.c_str());
      return 1;
    }
    launched.push_back(ms);
    total.push_back(static_cast<double>(t1 - t0) / 1e6);
    // The same workers spawned directly, one after another, without a launcher.
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    t0 = nowNs();
    for (int r = 0; r < nproc; ++r)
      runAndWait({self}, {"LOCKSTEP_BENCH_STAMPS=" + dir, "RANK=" + std::to_string(r)});
    direct.push_back(latestStampMs(dir, nproc, t0));
  }
  std::filesystem::remove_all(dir);
  auto l = stats(launched), d = stats(direct), t = stats(total);
  std::printf("lockstep run --standalone --nproc-per-node %d, %d repetitions (%s)\n", nproc, reps,
              lockstep.c_str());
  std::printf("  start -> all workers in main():  median %.1f ms  (min %.1f, max %.1f)   target < 100 ms\n",
              l.median, l.min, l.max);
  std::printf("  start -> agent exited:           median %.1f ms  (min %.1f, max %.1f)\n", t.median, t.min,
              t.max);
  std::printf("  same workers, direct fork+exec:  median %.1f ms  (min %.1f, max %.1f)\n", d.median, d.min,
              d.max);
  return 0;
}
