// Failure behaviour: stuck peers time out, dead peers are reported within seconds, mismatched
// collectives are named, and a broken group fails fast. Each error names op, sequence number
// and the ranks that did not arrive.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>

#include "comm/comm_test_util.h"
#include "lockstep/comm/group_arrival.h"
#include "lockstep/comm/shm/shm_segment.h"
#include "lockstep/comm/store/file_store.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {
namespace {

using namespace std::chrono_literals;
using testing::makeGroup;
using testing::runRanks;

class FailureTest : public ::testing::TestWithParam<std::string> {};

// Runs op, which must throw E within `within`, with a message that contains every one of parts.
template <typename E>
void expectErrorNaming(const std::function<void()>& op, std::initializer_list<const char*> parts,
                       std::chrono::milliseconds within = std::chrono::hours(24)) {
  const auto start = std::chrono::steady_clock::now();
  try {
    op();
    ADD_FAILURE() << "expected an error naming " << *parts.begin();
  } catch (const E& e) {
    const std::string m = e.what();
    for (const char* part : parts) EXPECT_NE(m.find(part), std::string::npos) << m;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, within);
}

TEST_P(FailureTest, stuck_peer_times_out_naming_op_and_ranks) {
  auto store = std::make_shared<HashStore>();
  std::atomic<bool> done{false};
  runRanks(3, [&](int r) {
    auto pg = makeGroup(GetParam(), store, r, 3, 10s);
    int32_t v = 1;
    pg->allreduce(&v, 1, DType::i32)->wait();  // #1 succeeds everywhere
    if (r == 2) {                              // stuck: never issues #2
      while (!done) std::this_thread::sleep_for(5ms);
      return;
    }
    // Release rank 2 however this rank leaves.
    std::shared_ptr<void> release(nullptr, [&](void*) {
      if (r == 0) done = true;
    });
    auto start = std::chrono::steady_clock::now();
    try {
      pg->allreduce(&v, 1, DType::i32, {.timeout = 300ms})->wait();
      ADD_FAILURE() << "expected TimeoutError";
    } catch (const Error& e) {
      // The first rank to time out aborts; the other may learn of it from that abort (PeerError).
      std::string m = e.what();
      EXPECT_TRUE(dynamic_cast<const TimeoutError*>(&e) || m.find("aborted") != std::string::npos) << m;
      EXPECT_NE(m.find("allreduce #2"), std::string::npos) << m;
      EXPECT_NE(m.find("[2] did not arrive"), std::string::npos) << m;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    // The group is broken now: later ops fail at once, saying why.
    try {
      pg->barrier()->wait();
      ADD_FAILURE() << "expected PeerError";
    } catch (const PeerError& e) {
      EXPECT_NE(std::string(e.what()).find("failed earlier"), std::string::npos) << e.what();
    }
  });
}

TEST_P(FailureTest, different_collectives_in_same_slot) {
  auto store = std::make_shared<HashStore>();
  runRanks(2, [&](int r) {
    auto pg = makeGroup(GetParam(), store, r, 2, 10s);
    std::vector<float> v(8, 1.0f);
    expectErrorNaming<PeerError>(
        [&] {
          if (r == 0) {
            pg->allreduce(v.data(), 8, DType::f32)->wait();
          } else {
            pg->broadcast(v.data(), 8, DType::f32)->wait();
          }
        },
        {"different collectives", "allreduce #1", "broadcast #1"});
  });
}

TEST_P(FailureTest, different_counts_in_same_slot) {
  auto store = std::make_shared<HashStore>();
  runRanks(2, [&](int r) {
    auto pg = makeGroup(GetParam(), store, r, 2, 10s);
    std::vector<float> v(8, 1.0f);
    EXPECT_THROW(pg->allreduce(v.data(), r == 0 ? 8 : 7, DType::f32)->wait(), PeerError);
  });
}

TEST_P(FailureTest, work_wait_timeout_leaves_op_running) {
  auto store = std::make_shared<HashStore>();
  runRanks(2, [&](int r) {
    auto pg = makeGroup(GetParam(), store, r, 2, 10s);
    int32_t v = 1;
    if (r == 1) std::this_thread::sleep_for(300ms);
    auto work = pg->allreduce(&v, 1, DType::i32);
    if (r == 0) {
      EXPECT_THROW(work->wait(20ms), TimeoutError);
      EXPECT_FALSE(work->isCompleted());
    }
    work->wait();
    EXPECT_TRUE(work->isCompleted());
    EXPECT_EQ(work->exception(), nullptr);
    EXPECT_EQ(v, 2);
  });
}

TEST_P(FailureTest, invalid_arguments_are_value_errors) {
  auto store = std::make_shared<HashStore>();
  auto pg = makeGroup(GetParam(), store, 0, 1, 10s);
  int32_t v = 0;
  EXPECT_THROW(pg->broadcast(&v, 1, DType::i32, {.root = 1}), ValueError);
  EXPECT_THROW(pg->allgatherv(&v, &v, {1, 1}, DType::i32), ValueError);
}

// A rank that never starts: its peers give up at the group's timeout, not the store's (an hour
// here), naming it and the setting to raise.
TEST_P(FailureTest, rank_that_never_arrives_is_named_at_the_group_timeout) {
  auto store = std::make_shared<HashStore>();
  store->setTimeout(std::chrono::hours(1));
  runRanks(3, [&](int r) {
    if (r == 2) return;
    expectErrorNaming<TimeoutError>(
        [&] { makeGroup(GetParam(), store, r, 3, 500ms); },
        {"waited 0.5 s for rank 2 to join", "comm_timeout_seconds", "LOCKSTEP_TIMEOUT"}, 5s);
  });
}

// A rank process that dies: every survivor must fail within seconds, naming the rank.
// Forks rank 1 of a 2-rank group on `backend` (over a FileStore): it runs first(pg) and then dies
// abruptly, holding the group. Rank 0 (this process) runs first(pg), then then(pg), then reaps it.
void withPeerThatDies(const std::string& backend, const std::function<void(ProcessGroup&)>& first,
                      const std::function<void(ProcessGroup&)>& then) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("lockstep_dead_peer_" + backend + std::to_string(::getpid())))
                         .string();
  std::filesystem::remove(path);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      auto store = std::make_shared<FileStore>(path, 0);
      auto pg = makeGroup(backend, store, 1, 2, 60s);
      first(*pg);
    } catch (...) {
    }
    ::kill(::getpid(), SIGKILL);
  }
  auto store = std::make_shared<FileStore>(path, 0);
  store->setTimeout(20s);
  auto pg = makeGroup(backend, store, 0, 2, 60s);
  first(*pg);
  then(*pg);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::filesystem::remove(path);
}

TEST_P(FailureTest, dead_peer_process_is_reported_within_seconds) {
  int32_t v = 1;
  withPeerThatDies(
      GetParam(), [&](ProcessGroup& pg) { pg.allreduce(&v, 1, DType::i32)->wait(); },
      [&](ProcessGroup& pg) {
        EXPECT_EQ(v, 2);
        expectErrorNaming<PeerError>([&] { pg.allreduce(&v, 1, DType::i32)->wait(); },
                                     {"allreduce #2", "[1]"}, 10s);
      });
}

TEST_P(FailureTest, send_recv) {
  auto store = std::make_shared<HashStore>();
  runRanks(3, [&](int r) {
    auto pg = makeGroup(GetParam(), store, r, 3);
    std::vector<int64_t> buf(1000);
    if (r == 0) {
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<int64_t>(i);
      pg->send(buf.data(), buf.size(), DType::i64, 2, {.tag = 7})->wait();
    } else if (r == 2) {
      pg->recv(buf.data(), buf.size(), DType::i64, 0, {.tag = 7})->wait();
      for (size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf[i], static_cast<int64_t>(i));
    }
    int32_t x = 1;  // p2p ops do not shift collective numbering
    pg->allreduce(&x, 1, DType::i32)->wait();
    EXPECT_EQ(x, 3);
  });
}

TEST_P(FailureTest, send_recv_large_messages_both_ways) {
  // 3 MB each way: many times shm's channel (4 x 64 KiB), so the sender waits for the receiver.
  auto store = std::make_shared<HashStore>();
  runRanks(2, [&](int r) {
    auto pg = makeGroup(GetParam(), store, r, 2);
    const size_t n = 3 << 18;
    std::vector<float> out(n), in(n, -1.0f);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(i % 100003) + 0.25f * static_cast<float>(r);
    const int peer = 1 - r;
    for (int round = 0; round < 3; ++round) {
      // Rank 0 sends first, rank 1 receives first: no deadlock however big the message.
      if (r == 0) {
        pg->send(out.data(), n, DType::f32, peer, {.tag = round})->wait();
        pg->recv(in.data(), n, DType::f32, peer, {.tag = round})->wait();
      } else {
        pg->recv(in.data(), n, DType::f32, peer, {.tag = round})->wait();
        pg->send(out.data(), n, DType::f32, peer, {.tag = round})->wait();
      }
      for (size_t i = 0; i < n; i += 997) {
        ASSERT_EQ(in[i], static_cast<float>(i % 100003) + 0.25f * static_cast<float>(peer)) << i;
      }
      ASSERT_EQ(in[n - 1], static_cast<float>((n - 1) % 100003) + 0.25f * static_cast<float>(peer));
    }
    // Empty messages are messages too.
    if (r == 0) pg->send(nullptr, 0, DType::u8, 1, {.tag = 9})->wait();
    if (r == 1) pg->recv(nullptr, 0, DType::u8, 0, {.tag = 9})->wait();
  });
}

// Ranks whose shm settings differ (LOCKSTEP_SHM_SLOTS on one host's rank only) lay their segments
// out apart, here at the same size: both are told so, by name (one blamed "another user or job" for
// a segment of another size; one of the same size was read as garbage).
// And a segment a killed rank left behind (its creator gone, older than a minute) is removed when
// the next group is made.
TEST(ShmBackend, ranks_with_other_shm_settings_are_told_so_and_leftovers_are_removed) {
  const std::string leftover = "/lockstep_" + shm::pidNamespaceTag() + "_999999999_leftover_0";
  const int fd = ::shm_open(leftover.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  const auto old = std::filesystem::file_time_type::clock::now() - std::chrono::minutes(5);
  std::filesystem::last_write_time("/dev/shm" + leftover, old);
  auto store = std::make_shared<HashStore>();
  store->setTimeout(std::chrono::seconds(30));
  std::vector<std::string> errors(2);
  runRanks(2, [&](int r) {
    ShmOptions o;
    o.timeout = std::chrono::seconds(30);
    o.num_slots = r == 0 ? 8 : 16;  // and half the block: the same segment size, another layout
    o.block_bytes = r == 0 ? size_t{1} << 20 : size_t{1} << 19;
    try {
      ShmProcessGroup pg(store, r, 2, o);
    } catch (const PeerError& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("the ranks' shm settings differ (LOCKSTEP_SHM_SLOTS"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + leftover));
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))  // the two failed ranks' own
    EXPECT_EQ(e.path().filename().string().find("lockstep_" + shm::pidNamespaceTag() + "_" +
                                                std::to_string(::getpid()) + "_"),
              std::string::npos)
        << e.path();
}

TEST(ShmBackend, recv_matches_by_tag_and_buffers_the_others) {
  auto store = std::make_shared<HashStore>();
  runRanks(2, [&](int r) {
    auto pg = makeGroup("shm", store, r, 2);
    if (r == 0) {
      for (int32_t tag : {1, 2, 1}) {
        int32_t v = 100 * tag;
        pg->send(&v, 1, DType::i32, 1, {.tag = tag})->wait();
      }
      std::vector<int32_t> big(50000);
      for (int i = 0; i < 50000; ++i) big[i] = i;
      pg->send(big.data(), big.size(), DType::i32, 1, {.tag = 3})->wait();
    } else {
      // Tag 3 first: the three small messages ahead of it are buffered, then matched in order.
      std::vector<int32_t> big(50000);
      pg->recv(big.data(), big.size(), DType::i32, 0, {.tag = 3})->wait();
      EXPECT_EQ(big[49999], 49999);
      int32_t a = 0, b = 0, c = 0;
      pg->recv(&b, 1, DType::i32, 0, {.tag = 2})->wait();
      pg->recv(&a, 1, DType::i32, 0, {.tag = 1})->wait();
      pg->recv(&c, 1, DType::i32, 0, {.tag = 1})->wait();
      EXPECT_EQ(a, 100);
      EXPECT_EQ(b, 200);
      EXPECT_EQ(c, 100);
    }
  });
}

TEST(ShmBackend, send_recv_mismatch_and_missing_sender_are_named) {
  auto store = std::make_shared<HashStore>();
  runRanks(2, [&](int r) {
    auto pg = makeGroup("shm", store, r, 2, 10s);
    if (r == 0) {
      int32_t v[10] = {};
      pg->send(v, 10, DType::i32, 1, {.tag = 4})->wait();
      return;
    }
    int32_t v[5];
    expectErrorNaming<PeerError>([&] { pg->recv(v, 5, DType::i32, 0, {.tag = 4})->wait(); },
                                 {"10 x i32", "expects 5 x i32"});
  });
  auto store2 = std::make_shared<HashStore>();
  runRanks(2, [&](int r) {
    auto pg = makeGroup("shm", store2, r, 2, 10s);
    if (r == 0) return;  // never sends
    int32_t v = 0;
    expectErrorNaming<TimeoutError>(
        [&] { pg->recv(&v, 1, DType::i32, 0, {.tag = 5, .timeout = 300ms})->wait(); },
        {"recv (p2p #1)", "waiting for rank 0 to send (tag 5)"}, 5s);
  });
}

TEST(ShmBackend, recv_from_a_dead_peer_is_reported) {
  withPeerThatDies(
      "shm", [](ProcessGroup& pg) { pg.barrier()->wait(); },  // rank 1 then dies without sending
      [](ProcessGroup& pg) {
        int32_t v = 0;
        expectErrorNaming<PeerError>([&] { pg.recv(&v, 1, DType::i32, 1, {.tag = 2})->wait(); },
                                     {"waiting for rank 1 to send (tag 2)", "rank 1 died"}, 10s);
      });
}

TEST(ShmBackend, send_to_a_dead_peer_is_reported) {
  std::vector<int32_t> big(1 << 20);  // 16 times the channel: waits for the receiver to drain it
  withPeerThatDies(
      "shm", [](ProcessGroup& pg) { pg.barrier()->wait(); },  // rank 1 then dies without receiving
      [&](ProcessGroup& pg) {
        expectErrorNaming<PeerError>(
            [&] { pg.send(big.data(), big.size(), DType::i32, 1, {.tag = 3})->wait(); },
            {"send (p2p #1)", "waiting for rank 1 to receive (tag 3)", "rank 1 died"}, 10s);
      });
}

// reduce_scatter has its own data path in every backend (not an allreduce underneath): its
// stuck, dead and mismatched peers must be named like allreduce's.
TEST_P(FailureTest, reduce_scatter_stuck_peer_times_out_naming_op_and_ranks) {
  auto store = std::make_shared<HashStore>();
  std::atomic<bool> done{false};
  runRanks(3, [&](int r) {
    auto pg = makeGroup(GetParam(), store, r, 3, 10s);
    std::vector<float> in(3 * 5000, 1.0f), out(5000);
    pg->reduceScatter(in.data(), out.data(), 5000, DType::f32)->wait();  // #1 everywhere
    EXPECT_EQ(out[4999], 3.0f);
    if (r == 2) {
      while (!done) std::this_thread::sleep_for(5ms);
      return;
    }
    std::shared_ptr<void> release(nullptr, [&](void*) {
      if (r == 0) done = true;
    });
    const auto start = std::chrono::steady_clock::now();
    try {
      pg->reduceScatter(in.data(), out.data(), 5000, DType::f32, {.timeout = 300ms})->wait();
      ADD_FAILURE() << "expected TimeoutError";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_TRUE(dynamic_cast<const TimeoutError*>(&e) || m.find("aborted") != std::string::npos) << m;
      EXPECT_NE(m.find("reduce_scatter #2"), std::string::npos) << m;
      EXPECT_NE(m.find("[2] did not arrive"), std::string::npos) << m;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  });
}

TEST_P(FailureTest, reduce_scatter_dead_peer_is_reported_within_seconds) {
  std::vector<int32_t> in(2 * 3000, 1), out(3000);
  withPeerThatDies(
      GetParam(),
      [&](ProcessGroup& pg) { pg.reduceScatter(in.data(), out.data(), 3000, DType::i32)->wait(); },
      [&](ProcessGroup& pg) {
        EXPECT_EQ(out[2999], 2);
        expectErrorNaming<PeerError>(
            [&] { pg.reduceScatter(in.data(), out.data(), 3000, DType::i32)->wait(); },
            {"reduce_scatter #2", "[1]"}, 10s);
      });
}

TEST_P(FailureTest, reduce_scatter_against_another_collective_is_named) {
  auto store = std::make_shared<HashStore>();
  runRanks(2, [&](int r) {
    auto pg = makeGroup(GetParam(), store, r, 2, 10s);
    std::vector<float> in(16, 1.0f), out(8);
    expectErrorNaming<PeerError>(
        [&] {
          if (r == 0) {
            pg->reduceScatter(in.data(), out.data(), 8, DType::f32)->wait();
          } else {
            pg->allreduce(in.data(), 8, DType::f32)->wait();
          }
        },
        {"different collectives", "reduce_scatter #1", "allreduce #1"});
  });
  auto store2 = std::make_shared<HashStore>();
  runRanks(2, [&](int r) {
    auto pg = makeGroup(GetParam(), store2, r, 2, 10s);
    std::vector<float> in(16, 1.0f), out(8);
    EXPECT_THROW(pg->reduceScatter(in.data(), out.data(), r == 0 ? 8 : 7, DType::f32)->wait(), PeerError);
  });
}

TEST(GlooBackend, reduce_scatter_ring_stops_at_the_op_deadline_without_op_checks) {
  // Without the descriptor exchange the ring's own waits must end at the op's deadline, not at a
  // connection-wide timeout (the group's here is 30 s).
  auto store = std::make_shared<HashStore>();
  std::atomic<bool> done{false};
  runRanks(2, [&](int r) {
    GlooOptions o;
    o.hostname = "127.0.0.1";
    o.timeout = 30s;
    o.check_ops = false;
    GlooProcessGroup pg(store, r, 2, o);
    std::vector<float> in(2 * 300'000, 1.0f), out(300'000);
    pg.reduceScatter(in.data(), out.data(), 300'000, DType::f32)->wait();  // #1 everywhere
    EXPECT_EQ(out[299'999], 2.0f);
    if (r == 1) {
      while (!done) std::this_thread::sleep_for(5ms);
      return;
    }
    expectErrorNaming<TimeoutError>(
        [&] { pg.reduceScatter(in.data(), out.data(), 300'000, DType::f32, {.timeout = 300ms})->wait(); },
        {"reduce_scatter #2", "timed out after 300 ms"}, 5s);
    done = true;
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, FailureTest, ::testing::Values("shm", "gloo"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace lockstep::comm

namespace lockstep::comm {
namespace {

using testing::runRanks;

// Processes started by hand with torchrun's variables that disagree: a WORLD_SIZE that differs, or
// two processes given the same RANK. They waited for a rank that would never come and then blamed
// it; now every process that can tell says what differs.
TEST(GroupArrival, a_world_size_that_differs_or_a_rank_given_twice_is_named) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::string> errors(2);
  runRanks(2, [&](int r) {
    try {
      awaitGroupArrival(*store, "sizes", "gloo", r, r == 0 ? 2 : 3, std::chrono::seconds(2));
    } catch (const ValueError& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  EXPECT_NE(
      errors[0].find("rank 1 was started for a world of 3 ranks, rank 0 for one of 2: WORLD_SIZE differs"),
      std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("rank 0 was started for a world of 2 ranks, rank 1 for one of 3"),
            std::string::npos)
      << errors[1];
  std::vector<std::string> twins(3);
  runRanks(3, [&](int t) {
    const int rank = t == 2 ? 0 : 1;  // threads 0 and 1 both rank 1; rank 0 comes once both joined
    while (t == 2 && store->add("twins/joined/1", 0) < 2)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    try {
      awaitGroupArrival(*store, "twins", "gloo", rank, 2, std::chrono::seconds(5));
    } catch (const ValueError& e) {
      twins[static_cast<size_t>(t)] = e.what();
    }
  });
  for (int t : {0, 1})
    EXPECT_NE(twins[static_cast<size_t>(t)].find("2 processes joined the process group as rank 1"),
              std::string::npos)
        << twins[static_cast<size_t>(t)];
}

}  // namespace
}  // namespace lockstep::comm
