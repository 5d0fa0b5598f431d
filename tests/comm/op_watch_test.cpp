// The op table between a worker and its agent (comm/op_watch.h): what a worker's ops publish, as
// the agent reads it through the inherited descriptor.
#include "lockstep/comm/op_watch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "lockstep/comm/process_group.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {
namespace {

OpContext op(OpType type, uint64_t seq, std::chrono::milliseconds timeout) {
  OpContext c;
  c.type = type;
  c.seq = seq;
  c.timeout = timeout;
  return c;
}

// One test per process (ctest runs each alone): the worker side attaches at its first op.
TEST(OpWatch, ops_publish_the_oldest_in_progress_and_count_the_finished) {
  OpWatchTable table(3);
  ::setenv(kOpWatchFdVariable, std::to_string(table.fd()).c_str(), 1);
  ::setenv("LOCAL_RANK", "2", 1);
  EXPECT_FALSE(table.read(2).busy());
  EXPECT_EQ(table.read(2).pid, 0);
  {
    OpWatchScope outer(op(OpType::allreduce, 7, std::chrono::seconds(20)));
    const int64_t after_outer = monotonicNs();
    OpWatchSnapshot s = table.read(2);
    EXPECT_EQ(s.pid, ::getpid());
    ASSERT_TRUE(s.busy());
    EXPECT_EQ(s.op, "allreduce #7");
    EXPECT_EQ(s.timeout_ms, 20000);
    EXPECT_LE(s.busy_since_ns, after_outer);
    {
      OpWatchScope inner(op(OpType::recv, 3, std::chrono::seconds(1)));  // a nested op: the outer stays
      EXPECT_EQ(table.read(2).op, "allreduce #7");
      EXPECT_EQ(table.read(2).timeout_ms, 20000);
    }
    EXPECT_EQ(table.read(2).ops_finished, 1u);
    EXPECT_TRUE(table.read(2).busy());
  }
  OpWatchSnapshot idle = table.read(2);
  EXPECT_FALSE(idle.busy());
  EXPECT_EQ(idle.ops_finished, 2u);
  EXPECT_FALSE(table.read(0).busy());  // other ranks' slots untouched
  EXPECT_EQ(table.read(0).pid, 0);
  {
    OpWatchScope p2p(op(OpType::send, 4, std::chrono::seconds(1)));
    EXPECT_EQ(table.read(2).op, "send (p2p #4)");
  }
  table.reset();
  EXPECT_EQ(table.read(2).pid, 0);
  EXPECT_THROW(table.read(3), ValueError);
}

TEST(OpWatch, a_process_without_an_agent_publishes_nothing_and_a_bad_descriptor_is_said_once) {
  ::setenv(kOpWatchFdVariable, "987", 1);  // not open in this process
  ::testing::internal::CaptureStderr();
  { OpWatchScope a(op(OpType::barrier, 1, std::chrono::seconds(1))); }
  { OpWatchScope b(op(OpType::barrier, 2, std::chrono::seconds(1))); }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("LOCKSTEP_OP_WATCH_FD=987 is not usable"), std::string::npos) << err;
  EXPECT_EQ(err.find("not usable"), err.rfind("not usable")) << err;
}

}  // namespace
}  // namespace lockstep::comm
