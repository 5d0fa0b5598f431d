// The rendezvous protocol over an in-memory store, agents as threads.
#include "lockstep/launch/rendezvous.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/free_port.h"
#include "lockstep/comm/store/hash_store.h"
#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::launch;
using namespace std::chrono_literals;

namespace {

RendezvousOptions opts(int nnodes, std::optional<int> node_rank, std::chrono::milliseconds timeout = 5s) {
  RendezvousOptions o;
  o.nnodes = nnodes;
  o.node_rank = node_rank;
  o.run_id = "t";
  o.timeout = timeout;
  o.hostname = "host" + std::to_string(node_rank.value_or(-1));
  return o;
}

}  // namespace

TEST(LaunchRendezvous, arrival_order_assigns_node_ranks_and_they_stay_across_rounds) {
  auto store = std::make_shared<comm::HashStore>();
  const int n = 3;
  const std::vector<int> nprocs = {2, 1, 3};
  std::vector<std::unique_ptr<Rendezvous>> agents;
  for (int i = 0; i < n; ++i) agents.push_back(std::make_unique<Rendezvous>(opts(n, std::nullopt), store));
  std::vector<RendezvousResult> results(n), again(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      // Agent i announces nprocs[i]; later rounds keep the node rank of the first.
      results[static_cast<size_t>(i)] =
          *agents[static_cast<size_t>(i)]->join(0, nprocs[static_cast<size_t>(i)], {});
      again[static_cast<size_t>(i)] =
          *agents[static_cast<size_t>(i)]->join(1, nprocs[static_cast<size_t>(i)], {});
    });
  }
  for (auto& t : threads) t.join();
  std::vector<bool> seen(n, false);
  for (int i = 0; i < n; ++i) {
    const auto& l = results[static_cast<size_t>(i)].layout;
    EXPECT_FALSE(seen[static_cast<size_t>(l.group_rank)]);
    seen[static_cast<size_t>(l.group_rank)] = true;
    EXPECT_EQ(l.world_size, 6);
    EXPECT_EQ(l.local_world_size, nprocs[static_cast<size_t>(i)]);
    EXPECT_EQ(again[static_cast<size_t>(i)].layout.group_rank, l.group_rank);
    EXPECT_EQ(again[static_cast<size_t>(i)].layout.first_rank, l.first_rank);
    // Every node gives its workers node 0's MASTER_ADDR/MASTER_PORT for rank 0's own store.
    EXPECT_EQ(results[static_cast<size_t>(i)].worker_master_addr, "127.0.0.1");
    EXPECT_GT(results[static_cast<size_t>(i)].worker_master_port, 0);
    EXPECT_EQ(results[static_cast<size_t>(i)].worker_master_port, results[0].worker_master_port);
  }
}

TEST(LaunchRendezvous, node_0_publishes_whether_rank_0s_store_is_open) {
  auto store = std::make_shared<comm::HashStore>();
  Rendezvous node0(opts(2, 0), store), node1(opts(2, 1), store);
  EXPECT_FALSE(node1.workerStore(0).has_value());
  node0.publishWorkerStore(0, "open");
  EXPECT_EQ(node1.workerStore(0), "open");
  EXPECT_FALSE(node1.workerStore(1).has_value());  // each round its own
  node0.publishWorkerStore(0, "closed");
  EXPECT_EQ(node1.workerStore(0), "closed");
}

TEST(LaunchRendezvous, missing_node_times_out_naming_it) {
  auto store = std::make_shared<comm::HashStore>();
  Rendezvous r(opts(3, 0, 200ms), store);
  Rendezvous other(opts(3, 2, 200ms), store);
  std::thread t([&] {
    try {
      other.join(0, 1, {});
    } catch (const TimeoutError&) {
    }
  });
  try {
    r.join(0, 1, {});
    FAIL() << "expected a timeout";
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("node ranks present: 0, 2; missing: 1"), std::string::npos) << m;
    EXPECT_NE(m.find("--rdzv-timeout"), std::string::npos) << m;
  }
  t.join();
}

TEST(LaunchRendezvous, interrupt_and_duplicate_node_rank) {
  auto store = std::make_shared<comm::HashStore>();
  Rendezvous a(opts(2, 0), store);
  EXPECT_FALSE(a.join(0, 1, [] { return true; }).has_value());
  Rendezvous b(opts(2, 0), store);
  try {
    b.join(0, 1, {});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("node rank 0"), std::string::npos) << e.what();
  }
}

// Two agents given --node-rank 0 on one host: the second cannot host the store on the master port,
// and says that node rank 0 was given twice (a real TCP store: the port is what they share).
TEST(LaunchRendezvous, a_second_master_on_one_host_is_named) {
  RendezvousOptions o = opts(2, 0);
  o.master_addr = "127.0.0.1";
  o.master_port = lockstep::testing::freePort();
  Rendezvous first(o);
  try {
    Rendezvous second(o);
    FAIL() << "a second store on the same port";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("another agent with --node-rank 0"), std::string::npos) << e.what();
  }
  o.nnodes = 1;  // one node: only the port is named
  try {
    Rendezvous single(o);
    FAIL() << "a second store on the same port";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()).find("--node-rank"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("already in use"), std::string::npos) << e.what();
  }
}

// Agents started with different --nnodes: the one that differs is refused naming both values, and
// the one already waiting ends with the same error (it started workers with the wrong world size).
TEST(LaunchRendezvous, agents_with_different_nnodes_are_refused_on_both_sides) {
  auto store = std::make_shared<comm::HashStore>();
  Rendezvous first(opts(2, 0), store);
  std::string waited;
  std::thread t([&] {
    try {
      first.join(0, 1, {});
    } catch (const ValueError& e) {
      waited = e.what();
    }
  });
  std::this_thread::sleep_for(100ms);  // node 0 is waiting for node 1 by now
  Rendezvous other(opts(3, 1), store);
  try {
    other.join(0, 1, {});
    ADD_FAILURE() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(
        std::string(e.what()).find("was started with --nnodes=3, the agents there before it with --nnodes=2"),
        std::string::npos)
        << e.what();
  }
  t.join();
  EXPECT_NE(waited.find("--nnodes=3"), std::string::npos) << waited;
}

TEST(LaunchRendezvous, first_failure_wins_and_success_needs_every_node) {
  auto store = std::make_shared<comm::HashStore>();
  Rendezvous a(opts(2, 0), store);
  Rendezvous b(opts(2, 1), store);
  EXPECT_FALSE(a.failure(0));
  EXPECT_TRUE(a.publishFailure(0, {"rank 3 died", 137}));
  EXPECT_FALSE(b.publishFailure(0, {"rank 1 died", 1}));
  EXPECT_EQ(b.failure(0).value(), (JobEnd{"rank 3 died", 137}));
  EXPECT_FALSE(b.primaryFailure(0));
  EXPECT_FALSE(b.publishFailure(0, {"node 1 is silent\nsince 20 s", 143}, true));
  EXPECT_EQ(a.failure(0).value(), (JobEnd{"node 1 is silent\nsince 20 s", 143}));  // the primary wins
  EXPECT_FALSE(a.failure(1));
  a.markSucceeded(1);
  EXPECT_FALSE(b.allSucceeded(1));
  b.markSucceeded(1);
  EXPECT_TRUE(a.allSucceeded(1));
  EXPECT_FALSE(a.shutdown());
  b.publishShutdown({"ctrl-c on host1", 130});
  EXPECT_EQ(a.shutdown().value(), (JobEnd{"ctrl-c on host1", 130}));
}

namespace {

RendezvousOptions elastic(const std::string& host, int min_nodes, int max_nodes,
                          std::chrono::milliseconds last_call = 300ms,
                          std::chrono::milliseconds timeout = 10s) {
  RendezvousOptions o;
  o.nnodes = max_nodes;
  o.min_nodes = min_nodes;
  o.last_call = last_call;
  o.run_id = "e";
  o.timeout = timeout;
  o.hostname = host;
  return o;
}

// Joins `round` on a thread; the result once it is there.
struct Joining {
  Joining(Rendezvous& r, int round) : thread([&r, round, this] { result = r.join(round, 1, {}); }) {}
  RendezvousResult get() {
    thread.join();
    return result.value();
  }
  std::optional<RendezvousResult> result;
  std::thread thread;
};

}  // namespace

// --nnodes 2:3: the first round closes with two nodes once the last call has passed; a third node
// that comes later waits until the running round ends (here: re-forms to admit it), then is the last
// node rank while the others keep theirs; a failure re-forms the survivors without it.
TEST(LaunchRendezvous, elastic_rounds_admit_newcomers_and_reform_without_the_lost) {
  auto store = std::make_shared<comm::HashStore>();
  Rendezvous a(elastic("a", 2, 3), store), b(elastic("b", 2, 3), store), c(elastic("c", 2, 3), store);
  const auto t0 = std::chrono::steady_clock::now();
  Joining ja(a, 0), jb(b, 0);
  RendezvousResult ra = ja.get(), rb = jb.get();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 300ms);  // the last call for a third node
  EXPECT_EQ(ra.round, 0);
  EXPECT_EQ(ra.layout.world_size, 2);
  EXPECT_EQ(ra.hosts, rb.hosts);
  EXPECT_EQ(ra.members, rb.members);
  EXPECT_NE(ra.layout.group_rank, rb.layout.group_rank);
  EXPECT_EQ(a.waiting(0), 0);

  // The newcomer waits for round 1, which opens when round 0 ends.
  Joining jc(c, 0);
  while (a.waiting(0) == 0) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(a.waiting(0), 1);
  EXPECT_FALSE(a.reformRequested(0));
  a.requestReform(0, "a node waits");
  EXPECT_EQ(b.reformRequested(0), "a node waits");
  const auto t1 = std::chrono::steady_clock::now();
  Joining ja1(a, 1), jb1(b, 1);
  RendezvousResult rc = jc.get(), ra1 = ja1.get(), rb1 = jb1.get();
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 300ms);  // MAX nodes: no last call
  EXPECT_EQ(rc.round, 1);
  EXPECT_EQ(rc.layout.world_size, 3);
  EXPECT_EQ(rc.layout.group_rank, 2);  // the newcomer comes last
  EXPECT_EQ(ra1.layout.group_rank, ra.layout.group_rank);
  EXPECT_EQ(rb1.layout.group_rank, rb.layout.group_rank);
  EXPECT_EQ(rc.hosts.back(), "c");
  EXPECT_EQ(ra1.members, rc.members);

  // c is lost: a's watchdog publishes the failure, which opens round 2 for the survivors.
  a.publishFailure(1, {"node 'c' has sent no heartbeat", 143}, true);
  Joining ja2(a, 2), jb2(b, 2);
  RendezvousResult ra2 = ja2.get(), rb2 = jb2.get();
  EXPECT_EQ(ra2.layout.world_size, 2);
  EXPECT_EQ(ra2.hosts, (std::vector<std::string>{ra.hosts[0], ra.hosts[1]}));
  EXPECT_EQ(ra2.layout.group_rank, ra.layout.group_rank);
  EXPECT_EQ(ra2.members, rb2.members);
  EXPECT_FALSE(a.allSucceeded(2));
  a.markSucceeded(2);
  b.markSucceeded(2);
  EXPECT_TRUE(a.allSucceeded(2));  // two nodes in this round, not --nnodes' three
}

// A node that waits while the job runs at its maximum ends with the job: nullopt, and ended() says
// it succeeded. Fewer than MIN nodes time out, saying how many came.
TEST(LaunchRendezvous, elastic_waiter_ends_with_the_job_and_too_few_nodes_time_out) {
  auto store = std::make_shared<comm::HashStore>();
  Rendezvous a(elastic("a", 1, 1 + 1, 100ms), store), b(elastic("b", 1, 2, 100ms), store),
      late(elastic("late", 1, 2, 100ms), store);
  Joining ja(a, 0), jb(b, 0);
  EXPECT_EQ(ja.get().layout.world_size, 2);
  EXPECT_EQ(jb.get().layout.world_size, 2);
  std::optional<RendezvousResult> waited;
  std::thread t([&] { waited = late.join(0, 1, {}); });
  while (a.waiting(0) == 0) std::this_thread::sleep_for(5ms);
  a.publishComplete();
  t.join();
  EXPECT_FALSE(waited.has_value());
  ASSERT_TRUE(late.ended().has_value());
  EXPECT_EQ(late.ended()->exit_code, 0);

  auto other = std::make_shared<comm::HashStore>();
  Rendezvous alone(elastic("alone", 2, 4, 100ms, 300ms), other);
  try {
    alone.join(0, 1, {});
    FAIL() << "joined without the minimum";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("with 1 node(s) of the 2 needed to start (--nnodes 2:4)"),
              std::string::npos)
        << e.what();
  }
}
