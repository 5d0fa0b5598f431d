// The progress line rank 0 reports and the agent draws: its format at every terminal width, its
// wire format, and the real side channel (a Unix datagram socket) into a Console.
#include "lockstep/launch/progress_channel.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "lockstep/launch/console.h"
#include "lockstep/launch/progress_line.h"
#include "lockstep/launch/progress_sender.h"
#include "process_harness.h"

using namespace lockstep::launch;

namespace {

ProgressReport sample() {
  ProgressReport r;
  r.epoch = 2;
  r.epochs = 5;
  r.step = 1234;
  r.total_steps = 9375;
  r.loss = 0.43215;
  r.samples_per_sec = 5321.4;
  r.eta_seconds = 65;
  return r;
}

std::string readAvailable(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

TEST(ProgressLine, fits_every_width_and_keeps_rate_and_eta_where_they_fit) {
  for (int width = 1; width <= 240; ++width) {
    std::string line = formatProgressLine(sample(), width);
    EXPECT_LT(line.size(), static_cast<size_t>(std::max(width, 1))) << width << ": " << line;
    EXPECT_EQ(line.find('\n'), std::string::npos);
  }
  std::string at80 = formatProgressLine(sample(), 80);
  EXPECT_NE(at80.find("step 1234/9375"), std::string::npos) << at80;
  EXPECT_NE(at80.find("5321 samples/s"), std::string::npos) << at80;
  EXPECT_NE(at80.find("ETA 1m05s"), std::string::npos) << at80;
  EXPECT_NE(at80.find("epoch 2/5 ["), std::string::npos) << at80;  // the bar fits at 80
  std::string at50 = formatProgressLine(sample(), 50);
  EXPECT_EQ(at50.find('['), std::string::npos) << at50;  // no room for a bar: it goes first
  EXPECT_NE(at50.find("ETA"), std::string::npos) << at50;
  std::string wide = formatProgressLine(sample(), 200);
  EXPECT_NE(wide.find("[===>                          ]"), std::string::npos) << wide;  // 1234/9375 of 30
}

TEST(ProgressLine, wire_format_round_trips_and_rejects_garbage) {
  auto r = decodeProgressReport(encodeProgressReport(sample()));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 1234);
  EXPECT_EQ(r->total_steps, 9375);
  EXPECT_EQ(r->epochs, 5);
  EXPECT_DOUBLE_EQ(r->loss, 0.43215);
  EXPECT_DOUBLE_EQ(r->samples_per_sec, 5321.4);
  EXPECT_FALSE(decodeProgressReport("").has_value());
  EXPECT_FALSE(decodeProgressReport("v2 step=1").has_value());
  EXPECT_FALSE(decodeProgressReport("v1 step=abc epoch=1").has_value());
  EXPECT_FALSE(decodeProgressReport("v1 step=3").has_value());  // fields missing
}

TEST(ProgressChannel, draws_what_rank_0_sends_and_keeps_worker_lines_above_it) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_NONBLOCK), 0);
  {
    Console console(fds[1]);
    ProgressChannel channel(console);
    ASSERT_EQ(channel.address().rfind("@lockstep-progress-", 0), 0u) << channel.address();
    ProgressSender sender(channel.address());
    sender.send(sample());
    std::string seen;
    for (int i = 0; i < 200 && seen.find("step 1234/9375") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      seen += readAvailable(fds[0]);
    }
    EXPECT_NE(seen.find("\r\033[K"), std::string::npos);
    EXPECT_NE(seen.find("step 1234/9375"), std::string::npos) << seen;
    // A worker's line: the drawn line is cleared, the line written, the progress line redrawn.
    writeConsole(fds[1], "[rank 1] warning: something\n");
    std::string after = readAvailable(fds[0]);
    EXPECT_EQ(after.rfind("\r\033[K[rank 1] warning: something\n\r\033[K", 0), 0u) << after;
    EXPECT_NE(after.find("step 1234/9375"), std::string::npos) << after;
  }
  // Gone with the console: output goes straight through again.
  EXPECT_EQ(Console::active(), nullptr);
  writeConsole(fds[1], "plain\n");
  EXPECT_EQ(readAvailable(fds[0]).substr(0, 1), "\n");  // finish() left the last line in place
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(ProgressChannel, a_sender_without_an_agent_sends_into_the_void) {
  ProgressSender sender("@lockstep-progress-nobody-listens");
  sender.send(sample());  // no exception, no block, no SIGPIPE
  setenv(kProgressSocketEnv, "", 1);
  EXPECT_EQ(ProgressSender::fromEnvironment(), nullptr);
  unsetenv(kProgressSocketEnv);
  EXPECT_EQ(ProgressSender::fromEnvironment(), nullptr);
}

TEST(ProgressChannel, only_rank_0_is_told_the_socket) {
  std::map<std::string, std::string> env{{kProgressSocketEnv, "@inherited"}};
  setProgressSocket(env, 1, "@x");
  EXPECT_EQ(env.count(kProgressSocketEnv), 0u);
  setProgressSocket(env, 0, "@x");
  EXPECT_EQ(env[kProgressSocketEnv], "@x");
  setProgressSocket(env, 0, "");  // not on a terminal: nobody draws
  EXPECT_EQ(env.count(kProgressSocketEnv), 0u);
}

TEST(ProgressChannel, other_ranks_lines_reach_the_console_prefixed_with_their_rank) {
  lockstep::launch::testing::TempDir dir;
  auto r = lockstep::launch::testing::runAgent(
      {"--nproc-per-node", "3", "--standalone", LOCKSTEP_TEST_WORKER}, dir / "out");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0 started (attempt 0)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[rank 0]"), std::string::npos) << r.output;  // rank 0 speaks for the job
  EXPECT_NE(r.output.find("[rank 1] rank 1 started (attempt 0)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 2] rank 2 started (attempt 0)"), std::string::npos) << r.output;
}
