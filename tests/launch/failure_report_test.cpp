#include "lockstep/launch/failure_report.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

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
  EXPECT_NE(formatRootCause(f).find("error file " + path + ":\n    oops\n"), std::string::npos);
  f.error_content = "not json";  // shown as written
  EXPECT_NE(formatRootCause(f).find("error file " + path + ":\n    not json\n"), std::string::npos);
  EXPECT_EQ(readErrorFile(dir / "missing"), "");
  std::ofstream(dir / "big") << std::string(100, 'x');
  EXPECT_NE(readErrorFile(dir / "big", 10).find("(truncated)"), std::string::npos);
}

TEST(LaunchFailureReport, shows_the_exception_and_traceback_pytorch_record_wrote) {
  // What torch.distributed.elastic.multiprocessing.errors.record writes for an uncaught exception.
  const std::string content =
      R"({"message": {"message": "ValueError: bad batch", "extraInfo": {"py_callstack": )"
      R"("Traceback (most recent call last):\n  File \"train.py\", line 9, in main\n    )"
      R"(raise ValueError(\"bad batch\")\nValueError: bad batch\n", "timestamp": "1764158400"}}})";
  auto record = parseErrorFile(content);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->message, "ValueError: bad batch");
  EXPECT_EQ(record->time_s, 1764158400.0);
  WorkerFailure f;
  f.rank = 1;
  f.exit_code = 1;
  f.error_file = "/run/1/error.json";
  f.error_content = content;
  f.stderr_tail = "Traceback (most recent call last):";
  std::string r = formatRootCause(f);
  EXPECT_NE(r.find("exited with code 1\n  ValueError: bad batch\n"
                   "  traceback (error file /run/1/error.json, written 2025-11-26 12:00:00 UTC):\n"
                   "    Traceback (most recent call last):\n"
                   "      File \"train.py\", line 9, in main\n"
                   "        raise ValueError(\"bad batch\")\n"
                   "    ValueError: bad batch\n"),
            std::string::npos)
      << r;
  EXPECT_EQ(r.find("last lines of its stderr"), std::string::npos) << r;  // the same traceback again
  EXPECT_FALSE(reportsLostPeer(content));
  EXPECT_TRUE(reportsLostPeer(
      R"({"message": {"message": "RuntimeError: [../gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:3988"}})"));
  EXPECT_FALSE(parseErrorFile("{\"other\": 1}").has_value());
  EXPECT_FALSE(parseErrorFile("Traceback ...").has_value());
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

namespace {
// A file standing in for the console, and sink options that write to it with `prefix`.
struct Console {
  lockstep::launch::testing::TempDir dir;
  std::string path = dir / "console.txt";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ~Console() {
    if (fd >= 0) ::close(fd);
  }
  OutputSinkOptions options(const std::string& prefix) const {
    OutputSinkOptions o;
    o.console_fd = fd;
    o.console_prefix = prefix;
    return o;
  }
  std::string text() const { return lockstep::launch::testing::readAll(path); }
};
}  // namespace

// The console gets each line with the rank's prefix once: a line the worker labelled itself
// (ddp_toy_linear prints "[rank 1] Epoch ..." for mpirun and srun) is not labelled again.
TEST(LaunchOutputSink, labels_console_lines_once) {
  Console console;
  ASSERT_GE(console.fd, 0);
  {
    OutputSink sink(console.options("[rank 1] "));
    const std::string text = "[rank 1] Epoch 0 | Batchsize 32\nloss 0.5\n[rank 10] other\n";
    sink.write(text.data(), text.size());
  }
  EXPECT_EQ(console.text(), "[rank 1] Epoch 0 | Batchsize 32\n[rank 1] loss 0.5\n[rank 1] [rank 10] other\n");
}

// A progress bar redraws its line with "\r": each redraw reaches the console when written (not
// when the bar ends), with the prefix; "\r\n" stays one line end; the tail keeps the last state.
// A second sink on the same file starts it afresh (a later launch with the same run id).
TEST(LaunchOutputSink, forwards_carriage_return_redraws_at_once) {
  Console console;
  ASSERT_GE(console.fd, 0);
  OutputSinkOptions o = console.options("[rank 0] ");
  o.file_path = console.dir / "stderr.log";
  {
    OutputSink sink(o);
    sink.write(" 20%\r", 5);  // a newline may still follow
    EXPECT_EQ(console.text(), "");
    const std::string rest = " 40%\r100%\r\ndone\r";
    sink.write(rest.data(), rest.size());
    sink.write("\n", 1);  // "\r\n" split across two reads is one line end
    EXPECT_EQ(sink.tail(), "100%\ndone");
    // tqdm's way: "\r" first, then the bar, which shows at once.
    sink.write("\r 50%", 5);
    EXPECT_EQ(console.text(),
              "[rank 0]  20%\r[rank 0]  40%\r[rank 0] 100%\r\n[rank 0] done\r\n\r[rank 0]  50%");
    sink.write("\r 60%", 5);
    EXPECT_EQ(sink.tail(), "100%\ndone\n 60%");
  }
  EXPECT_EQ(console.text(),
            "[rank 0]  20%\r[rank 0]  40%\r[rank 0] 100%\r\n[rank 0] done\r\n\r[rank 0]  50%\r[rank 0]  60%");
  {
    o.console_fd = -1;
    OutputSink again(o);
    again.write("second\n", 7);
  }
  EXPECT_EQ(lockstep::launch::testing::readAll(console.dir / "stderr.log"), "second\n");
}

// A line longer than max_line reaches the console in pieces with the prefix once (a long JSON
// dump of rank 1 stays one parseable line).
TEST(LaunchOutputSink, a_long_line_is_prefixed_once) {
  Console console;
  ASSERT_GE(console.fd, 0);
  {
    OutputSinkOptions o = console.options("[rank 1] ");
    o.max_line = 8;
    OutputSink sink(o);
    const std::string text = std::string(20, 'z') + "\nshort\n";
    sink.write(text.data(), text.size());
  }
  EXPECT_EQ(console.text(), "[rank 1] " + std::string(20, 'z') + "\n[rank 1] short\n");
}

// A rank that reported an error but had not exited (0 so far), or one that exited 0, still makes
// the job fail: exit code 1, as torchrun's.
TEST(LaunchFailureReport, a_failed_job_never_exits_0) {
  WorkerFailure f;
  f.still_running = true;
  EXPECT_EQ(exitCodeOf(f), 1);
  f.still_running = false;
  EXPECT_EQ(exitCodeOf(f), 1);
  f.exit_code = 3;
  EXPECT_EQ(exitCodeOf(f), 3);
  f.signal = 9;
  EXPECT_EQ(exitCodeOf(f), 137);
}
