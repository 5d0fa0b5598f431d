#include "lockstep/launch/failure_report.h"

#include <gtest/gtest.h>

#include <csignal>
#include <fstream>

#include "lockstep/launch/output_sink.h"
#include "process_harness.h"

using namespace lockstep::launch;

TEST(LaunchFailureReport, names_rank_code_host_and_stderr) {
  WorkerFailure f;
  f.rank = 5;
  f.local_rank = 1;
  f.group_rank = 2;
  f.host = "node7";
  f.pid = 1234;
  f.exit_code = 3;
  f.stderr_tail = "loading\nboom";
  std::string r = formatRootCause(f);
  EXPECT_NE(
      r.find("root cause: rank 5 (local rank 1 on host 'node7', node rank 2, pid 1234) exited with code 3"),
      std::string::npos)
      << r;
  EXPECT_NE(r.find("    boom\n"), std::string::npos) << r;
  f.signal = SIGKILL;
  EXPECT_NE(formatRootCause(f).find("was killed by signal SIGKILL (9)"), std::string::npos);
  EXPECT_EQ(signalName(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signalName(63), "signal 63");
}

TEST(LaunchFailureReport, includes_the_error_file) {
  lockstep::launch::testing::TempDir dir;
  std::string path = dir / "error.json";
  std::ofstream(path) << "{\"message\": \"oops\"}\n";
  WorkerFailure f;
  f.error_file = path;
  f.error_content = readErrorFile(path);
  EXPECT_EQ(f.error_content, "{\"message\": \"oops\"}");
  EXPECT_NE(formatRootCause(f).find("error file " + path + ":\n    {\"message\": \"oops\"}"),
            std::string::npos);
  EXPECT_EQ(readErrorFile(dir / "missing"), "");
  std::ofstream(dir / "big") << std::string(100, 'x');
  EXPECT_NE(readErrorFile(dir / "big", 10).find("(truncated)"), std::string::npos);
}

TEST(LaunchOutputSink, keeps_the_last_lines_and_writes_the_file) {
  lockstep::launch::testing::TempDir dir;
  OutputSinkOptions o;
  o.file_path = dir / "a/b/stderr.log";
  o.tail_lines = 2;
  {
    OutputSink sink(o);
    std::string text = "one\ntwo\nthr";
    sink.write(text.data(), text.size());
    sink.write("ee\nfour", 7);
    EXPECT_EQ(sink.tail(), "three\nfour");
  }
  EXPECT_EQ(lockstep::launch::testing::readAll(dir / "a/b/stderr.log"), "one\ntwo\nthree\nfour");
}
