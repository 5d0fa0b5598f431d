// A worker program for the launcher tests: does what its flags say, so tests can make a rank
// fail, hang, leave grandchildren behind or report its environment. Every process it creates
// appends its pid to --pidfile, so tests can check that none survives the agent.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

std::string g_pidfile;

int envInt(const char* name, int def) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : def;
}

void appendLine(const std::string& path, const std::string& line) {
  if (path.empty()) return;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  std::string l = line + "\n";
  ssize_t r = ::write(fd, l.data(), l.size());
  (void)r;
  ::close(fd);
}

void writeFile(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return;
  std::fputs(text.c_str(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());  // readers never see a half-written file
}

void sleepMs(long ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

void spawnGrandchild(bool escape) {
  pid_t p = ::fork();
  if (p == 0) {
    if (escape) ::setsid();  // leaves the worker's process group
    appendLine(g_pidfile, std::to_string(::getpid()));
    for (;;) sleepMs(1000);
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto nowNs = std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  const int rank = envInt("RANK", -1);
  const int attempt = envInt("LOCKSTEP_RESTART_COUNT", 0);
  int fail_rank = -1, code = 1, only_attempt = -1, victim_rank = -1, hang_in_attempt = -1;
  long sleep_ms = 0, fail_after_ms = 0;
  bool hang = false, grandchild = false, escape = false, error_file = false, ignore_term = false;
  std::string env_out, stdout_line, timestamp_dir, victim_dir;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--pidfile")
      g_pidfile = next();
    else if (a == "--fail-rank")
      fail_rank = std::atoi(next().c_str());
    else if (a == "--code")
      code = std::atoi(next().c_str());
    else if (a == "--only-attempt")
      only_attempt = std::atoi(next().c_str());
    else if (a == "--fail-after-ms")
      fail_after_ms = std::atol(next().c_str());
    else if (a == "--sleep-ms")
      sleep_ms = std::atol(next().c_str());
    else if (a == "--hang")
      hang = true;
    else if (a == "--hang-in-attempt")
      hang_in_attempt = std::atoi(next().c_str());
    else if (a == "--grandchild")
      grandchild = true;
    else if (a == "--escaping-grandchild")
      grandchild = escape = true;
    else if (a == "--error-file")
      error_file = true;
    else if (a == "--ignore-term")
      ignore_term = true;
    else if (a == "--env-out")
      env_out = next();
    else if (a == "--stdout")
      stdout_line = next();
    else if (a == "--timestamp-dir")
      timestamp_dir = next();
    else if (a == "--victim-rank")
      victim_rank = std::atoi(next().c_str());
    else if (a == "--victim-dir")
      victim_dir = next();
    else {
      std::fprintf(stderr, "test_worker: unknown argument '%s'\n", a.c_str());
      return 64;
    }
  }
  if (!timestamp_dir.empty())
    writeFile(timestamp_dir + "/start." + std::to_string(rank), std::to_string(nowNs));
  appendLine(g_pidfile, std::to_string(::getpid()));
  if (ignore_term) ::signal(SIGTERM, SIG_IGN);
  if (grandchild) spawnGrandchild(escape);
  if (!env_out.empty()) {
    std::string text;
    for (const char* k : {"RANK",
                          "LOCAL_RANK",
                          "WORLD_SIZE",
                          "LOCAL_WORLD_SIZE",
                          "GROUP_RANK",
                          "MASTER_ADDR",
                          "MASTER_PORT",
                          "LOCKSTEP_STORE_ADDR",
                          "LOCKSTEP_STORE_PORT",
                          "TORCHELASTIC_USE_AGENT_STORE",
                          "LOCKSTEP_RUN_ID",
                          "LOCKSTEP_RESTART_COUNT",
                          "TORCHELASTIC_RESTART_COUNT",
                          "GROUP_WORLD_SIZE",
                          "LOCKSTEP_MAX_RESTARTS",
                          "OMP_NUM_THREADS",
                          "LOCKSTEP_DEFAULTED_OMP_NUM_THREADS",
                          "LOCKSTEP_ERROR_FILE",
                          "TORCHELASTIC_ERROR_FILE",
                          "LOCKSTEP_STORE_PREFIX",
                          "LOCKSTEP_TIMEOUT",
                          "LOCKSTEP_JOIN_TOKEN"}) {
      const char* v = std::getenv(k);
      text += std::string(k) + "=" + (v ? v : "<unset>") + "\n";
    }
    writeFile(env_out + "/env." + std::to_string(rank) + "." + std::to_string(attempt), text);
  }
  if (!stdout_line.empty()) std::printf("%s from rank %d\n", stdout_line.c_str(), rank);
  std::fflush(stdout);
  std::fprintf(stderr, "rank %d started (attempt %d)\n", rank, attempt);
  if (victim_rank == rank && attempt == 0) {
    writeFile(victim_dir + "/victim", std::to_string(::getpid()));
    for (;;) sleepMs(1000);  // until the test kills it with SIGKILL
  }
  if (rank == fail_rank && (only_attempt < 0 || only_attempt == attempt)) {
    sleepMs(fail_after_ms);
    std::fprintf(stderr, "rank %d: failing on purpose with code %d\n", rank, code);
    if (error_file) {
      if (const char* path = std::getenv("LOCKSTEP_ERROR_FILE")) {
        writeFile(path, "{\"message\": \"ValueError: bad batch on rank " + std::to_string(rank) + "\"}\n");
      }
    }
    return code;
  }
  if (hang || hang_in_attempt == attempt) {
    for (;;) sleepMs(1000);
  }
  sleepMs(sleep_ms);
  return 0;
}
