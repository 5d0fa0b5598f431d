// send / recv progress: a receive posted ahead of its data holds no later op of the rank back, a
// transfer advances while nobody waits for it, and messages of every size and tag arrive in
// order whatever the order the ranks wait in. Ranks are threads over one store.
#include <gtest/gtest.h>

#include <atomic>
#include <random>

#include "comm/comm_test_util.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {
namespace {

using namespace std::chrono_literals;
using testing::makeGroup;
using testing::runRanks;

class PointToPointTest : public ::testing::TestWithParam<std::string> {};

std::vector<int32_t> pattern(size_t n, int32_t seed) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = seed * 1000003 + static_cast<int32_t>(i);
  return v;
}

// Rank 0 asks for rank 1's answer first, then sends the question the answer needs. Were the
// receive waiting in the group's queue, the send behind it would never leave: both time out.
TEST_P(PointToPointTest, a_receive_posted_ahead_holds_no_later_send_back) {
  auto store = std::make_shared<HashStore>();
  runRanks(2, [&](int r) {
    auto pg = makeGroup(GetParam(), store, r, 2, 5s);
    for (int round = 0; round < 20; ++round) {
      int32_t question = 7 + round, answer = 0;
      if (r == 0) {
        auto reply = pg->recv(&answer, 1, DType::i32, 1, {.tag = 1});
        auto ask = pg->send(&question, 1, DType::i32, 1, {.tag = 2});
        ask->wait();
        reply->wait();
        ASSERT_EQ(answer, 2 * (7 + round));
      } else {
        pg->recv(&question, 1, DType::i32, 0, {.tag = 2})->wait();
        answer = 2 * question;
        pg->send(&answer, 1, DType::i32, 0, {.tag = 1})->wait();
      }
    }
  });
}

// A send many times the channel (shm: 4 x 64 KiB) goes on while its rank waits for something
// else, and (shm: gloo's Works complete in wait()) a receive that is only polled completes.
TEST_P(PointToPointTest, transfers_advance_while_nobody_waits_for_them) {
  auto store = std::make_shared<HashStore>();
  const size_t n = 3 << 18;  // 3 MiB of i32
  runRanks(2, [&](int r) {
    auto pg = makeGroup(GetParam(), store, r, 2, 20s);
    int32_t ack = 0;
    if (r == 0) {
      std::vector<int32_t> big = pattern(n, 5);
      auto sending = pg->send(big.data(), n, DType::i32, 1, {.tag = 3});
      pg->recv(&ack, 1, DType::i32, 1, {.tag = 4})->wait();  // sent only once the big one arrived
      EXPECT_EQ(ack, 1);
      if (GetParam() == "shm") {
        EXPECT_TRUE(sending->isCompleted());
      }
      sending->wait();
    } else {
      std::vector<int32_t> big(n);
      auto receiving = pg->recv(big.data(), n, DType::i32, 0, {.tag = 3});
      if (GetParam() == "shm") {
        const auto until = std::chrono::steady_clock::now() + 15s;
        while (!receiving->isCompleted() && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(1ms);
        ASSERT_TRUE(receiving->isCompleted()) << "a polled receive never completed";
      }
      receiving->wait();
      EXPECT_EQ(big, pattern(n, 5));
      ack = 1;
      pg->send(&ack, 1, DType::i32, 0, {.tag = 4})->wait();
    }
  });
}

// Both ranks post a random mix of sends and receives (sizes from empty to several channels, a
// few tags), in an order that agrees per tag, and wait for them in a random order: every
// receive gets the oldest unreceived message of its tag, intact.
TEST_P(PointToPointTest, random_traffic_both_ways_arrives_in_order_per_tag) {
  auto store = std::make_shared<HashStore>();
  constexpr int kMessages = 60;
  // Message k from rank s: its tag and size, the same on both sides.
  auto tagOf = [](int s, int k) { return (k * 7 + s) % 3; };
  auto sizeOf = [](int s, int k) {
    const size_t sizes[] = {0, 1, 1000, 16368, 16369, 70000, 200000};
    return sizes[(k * 5 + s * 3) % 7];
  };
  runRanks(2, [&](int r) {
    auto pg = makeGroup(GetParam(), store, r, 2, 20s);
    const int peer = 1 - r;
    std::vector<std::vector<int32_t>> out(kMessages), in(kMessages);
    std::vector<std::shared_ptr<Work>> works;
    std::mt19937 rng(static_cast<unsigned>(r + 11));
    // Receives are posted per tag in message order (so the k-th receive of tag t takes the k-th
    // message of tag t), interleaved with the sends at random.
    int next_send = 0, next_recv = 0;
    while (next_send < kMessages || next_recv < kMessages) {
      const bool send = next_recv == kMessages || (next_send < kMessages && rng() % 2 == 0);
      if (send) {
        const int k = next_send++;
        out[k] = pattern(sizeOf(r, k), r * 1000 + k);
        works.push_back(pg->send(out[k].data(), out[k].size(), DType::i32, peer, {.tag = tagOf(r, k)}));
      } else {
        const int k = next_recv++;
        in[k].assign(sizeOf(peer, k), -1);
        works.push_back(pg->recv(in[k].data(), in[k].size(), DType::i32, peer, {.tag = tagOf(peer, k)}));
      }
    }
    std::shuffle(works.begin(), works.end(), rng);
    for (auto& w : works) w->wait();
    for (int k = 0; k < kMessages; ++k) ASSERT_EQ(in[k], pattern(sizeOf(peer, k), peer * 1000 + k)) << k;
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, PointToPointTest, ::testing::Values("shm", "gloo"),
                         [](const auto& info) { return info.param; });

// A group destroyed with a send still in flight lets it finish: the receiver gets it all.
TEST(ShmPointToPoint, a_send_in_flight_finishes_when_its_group_is_destroyed) {
  auto store = std::make_shared<HashStore>();
  const size_t n = 1 << 19;
  std::atomic<bool> destroyed{false};
  runRanks(2, [&](int r) {
    auto pg = makeGroup("shm", store, r, 2, 20s);
    if (r == 0) {
      std::vector<int32_t> big = pattern(n, 9);
      pg->send(big.data(), n, DType::i32, 1, {.tag = 0});  // not waited for
      pg.reset();                                          // waits for the transfer
      destroyed = true;
    } else {
      std::this_thread::sleep_for(100ms);  // rank 0 is in its destructor by now
      EXPECT_FALSE(destroyed);
      std::vector<int32_t> big(n);
      pg->recv(big.data(), n, DType::i32, 0, {.tag = 0})->wait();
      EXPECT_EQ(big, pattern(n, 9));
    }
  });
  EXPECT_TRUE(destroyed);
}

// A send that waits for room in the channel fails, naming the receiver, when it never drains;
// the group's later ops fail at once.
TEST(ShmPointToPoint, a_send_the_receiver_never_takes_times_out_naming_it) {
  auto store = std::make_shared<HashStore>();
  std::atomic<bool> done{false};
  runRanks(2, [&](int r) {
    auto pg = makeGroup("shm", store, r, 2, 10s);
    if (r == 1) {
      while (!done) std::this_thread::sleep_for(5ms);
      return;
    }
    std::vector<int32_t> big(1 << 20);
    const auto start = std::chrono::steady_clock::now();
    try {
      pg->send(big.data(), big.size(), DType::i32, 1, {.tag = 6, .timeout = 300ms})->wait();
      ADD_FAILURE() << "expected TimeoutError";
    } catch (const TimeoutError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("send (p2p #1)"), std::string::npos) << m;
      EXPECT_NE(m.find("waiting for rank 1 to receive (tag 6)"), std::string::npos) << m;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    int32_t v = 0;
    try {
      pg->send(&v, 1, DType::i32, 1, {.tag = 7})->wait();
      ADD_FAILURE() << "expected PeerError";
    } catch (const PeerError& e) {
      EXPECT_NE(std::string(e.what()).find("failed"), std::string::npos) << e.what();
    }
    done = true;
  });
}

}  // namespace
}  // namespace lockstep::comm
