// A worker that does what a training program does under `lockstep run`: initProcessGroup from
// the environment the agent set (connecting to the agent's store), one allreduce, a check.
// --fail-rank R: rank R exits 3 after the allreduce on the first attempt (restart tests).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lockstep/comm/init.h"

int main(int argc, char** argv) {
  int fail_rank = argc > 2 && std::string(argv[1]) == "--fail-rank" ? std::atoi(argv[2]) : -1;
  const char* attempt = std::getenv("LOCKSTEP_RESTART_COUNT");
  lockstep::comm::InitOptions o;
  o.backend = "gloo";
  o.store_timeout = std::chrono::seconds(20);
  o.timeout = std::chrono::seconds(20);
  auto pg = lockstep::comm::initProcessGroup(o);
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
