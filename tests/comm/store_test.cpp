// Store semantics, identical for every implementation, plus TCPStore/FileStore robustness.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include "comm/raw_socket.h"
#include "lockstep/comm/store/file_store.h"
#include "lockstep/comm/store/hash_store.h"
#include "lockstep/comm/store/prefix_store.h"
#include "lockstep/comm/store/tcp_store.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {
namespace {

using namespace std::chrono_literals;
using ::lockstep::comm::testing::rawConnect;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

// Makes several client handles onto one logical store.
struct StoreKind {
  std::string name;
  std::function<std::function<std::shared_ptr<Store>()>()> make;  // returns a client factory
};

std::string tempPath(const std::string& stem) {
  static std::atomic<int> n{0};
  return (std::filesystem::temp_directory_path() /
          (stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++)))
      .string();
}

std::vector<StoreKind> kinds() {
  return {
      {"Hash",
       [] {
         auto s = std::make_shared<HashStore>();
         return std::function<std::shared_ptr<Store>()>([s] { return s; });
       }},
      {"Tcp",
       [] {
         TCPStoreOptions o;
         o.port = 0;
         o.is_server = true;
         o.timeout = 10s;
         auto server = std::make_shared<TCPStore>(o);
         return std::function<std::shared_ptr<Store>()>([server]() -> std::shared_ptr<Store> {
           TCPStoreOptions c;
           c.port = server->port();
           c.timeout = 10s;
           // Keep the hosting instance alive as long as any client.
           auto client = std::make_shared<TCPStore>(c);
           return std::shared_ptr<Store>(client.get(), [client, server](Store*) {});
         });
       }},
      {"File",
       [] {
         std::string path = tempPath("lockstep_filestore");
         // Removes the log when the last client factory copy goes away.
         auto cleanup = std::shared_ptr<void>(nullptr, [path](void*) { std::filesystem::remove(path); });
         return std::function<std::shared_ptr<Store>()>(
             [path, cleanup] { return std::make_shared<FileStore>(path, 0); });
       }},
      {"Prefix",
       [] {
         auto base = std::make_shared<HashStore>();
         return std::function<std::shared_ptr<Store>()>(
             [base] { return std::make_shared<PrefixStore>("job7", base); });
       }},
  };
}

class StoreTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override { factory_ = GetParam().make(); }
  std::shared_ptr<Store> client() {
    auto s = factory_();
    s->setTimeout(5s);
    return s;
  }
  std::function<std::shared_ptr<Store>()> factory_;
};

TEST_P(StoreTest, set_get_across_clients) {
  auto a = client();
  auto b = client();
  a->set("k", bytes("v1"));
  EXPECT_EQ(b->get("k"), bytes("v1"));
  b->setString("k", "v2");
  EXPECT_EQ(a->getString("k"), "v2");
  a->set("empty", {});
  EXPECT_TRUE(b->get("empty").empty());
  std::vector<uint8_t> big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7);
  a->set("big", big);
  EXPECT_EQ(b->get("big"), big);
}

TEST_P(StoreTest, get_blocks_until_another_client_sets) {
  auto a = client();
  auto b = client();
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    b->setString("late", "here");
  });
  EXPECT_EQ(a->getString("late"), "here");
  t.join();
}

TEST_P(StoreTest, get_timeout_names_key) {
  auto a = client();
  a->setTimeout(100ms);
  try {
    a->get("never_set_key");
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("never_set_key"), std::string::npos) << e.what();
  }
}

TEST_P(StoreTest, add_is_a_counter) {
  auto a = client();
  EXPECT_EQ(a->add("c", 5), 5);
  EXPECT_EQ(a->add("c", -2), 3);
  EXPECT_EQ(a->getString("c"), "3");
  a->setString("not_int", "abc");
  EXPECT_THROW(a->add("not_int", 1), ValueError);
  a->setString("c", "-4");  // a counter set by hand keeps counting
  EXPECT_EQ(a->add("c", 1), -3);
}

TEST_P(StoreTest, compare_set) {
  auto a = client();
  EXPECT_TRUE(a->compareSet("cas", bytes("x"), bytes("y")).empty());  // absent, expected "x"
  EXPECT_FALSE(a->check({"cas"}));
  EXPECT_EQ(a->compareSet("cas", {}, bytes("first")), bytes("first"));  // absent, expected empty
  EXPECT_EQ(a->compareSet("cas", bytes("wrong"), bytes("second")), bytes("first"));
  EXPECT_EQ(a->compareSet("cas", bytes("first"), bytes("second")), bytes("second"));
  EXPECT_EQ(a->getString("cas"), "second");
}

TEST_P(StoreTest, wait_check_delete_num_keys) {
  auto a = client();
  auto b = client();
  int64_t base = a->numKeys();
  EXPECT_FALSE(a->check({"w1", "w2"}));
  std::thread t([&] {
    b->setString("w1", "1");
    std::this_thread::sleep_for(30ms);
    b->setString("w2", "2");
  });
  a->wait({"w1", "w2"});
  t.join();
  EXPECT_TRUE(a->check({"w1", "w2"}));
  EXPECT_EQ(a->numKeys(), base + 2);
  EXPECT_TRUE(a->deleteKey("w1"));
  EXPECT_FALSE(a->deleteKey("w1"));
  EXPECT_FALSE(b->check({"w1"}));
  EXPECT_EQ(a->numKeys(), base + 1);
  EXPECT_TRUE(a->check({}));
}

TEST_P(StoreTest, wait_timeout_lists_missing_keys) {
  auto a = client();
  a->setString("present", "1");
  try {
    a->wait({"present", "absent_a", "absent_b"}, 100ms);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("absent_a"), std::string::npos) << m;
    EXPECT_NE(m.find("absent_b"), std::string::npos) << m;
    EXPECT_EQ(m.find("'present'"), std::string::npos) << m;
  }
}

TEST_P(StoreTest, concurrent_adds_are_atomic) {
  constexpr int kThreads = 4, kAdds = 100;
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < kThreads; ++i)
    clients.push_back(i % 2 ? client() : clients.empty() ? client() : clients[0]);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < kAdds; ++j) clients[i]->add("counter", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(clients[0]->add("counter", 0), kThreads * kAdds);
}

TEST_P(StoreTest, blocked_get_does_not_block_other_threads_of_same_client) {
  auto a = client();
  std::thread t([&] { EXPECT_EQ(a->getString("x"), "1"); });
  std::this_thread::sleep_for(20ms);
  a->setString("x", "1");  // same instance, while the other thread's get() is outstanding
  t.join();
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest, ::testing::ValuesIn(kinds()),
                         [](const auto& info) { return info.param.name; });

TEST(PrefixStore, keys_are_namespaced) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base), b("b", base);
  a.setString("k", "from a");
  b.setString("k", "from b");
  EXPECT_EQ(a.getString("k"), "from a");
  EXPECT_EQ(base->getString("b/k"), "from b");
  EXPECT_EQ(a.numKeys(), 2);
}

// --- TCPStore robustness ---

TCPStoreOptions serverOptions() {
  TCPStoreOptions o;
  o.port = 0;
  o.is_server = true;
  o.timeout = 5s;
  return o;
}

TEST(TCPStore, garbage_and_oversized_frames_do_not_kill_server) {
  TCPStore server(serverOptions());
  server.setString("alive", "yes");
  // Pure garbage, an oversized length, a truncated frame then disconnect, an unknown command,
  // a key length beyond its bound.
  std::vector<std::vector<uint8_t>> attacks = {
      {0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8},
      {0xff, 0xff, 0xff, 0x7f, 1},
      {100, 0, 0, 0, 1, 2},
      {1, 0, 0, 0, 99},
      {9, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0x0f, 'a', 'b', 'c', 'd'},
      {0, 0, 0, 0},
  };
  for (const auto& attack : attacks) {
    int fd = rawConnect(server.port());
    ASSERT_GE(fd, 0) << "could not connect to the store";
    ASSERT_EQ(::send(fd, attack.data(), attack.size(), MSG_NOSIGNAL), static_cast<ssize_t>(attack.size()));
    ::close(fd);
  }
  // A client that sends a garbage header and keeps the socket open must be disconnected.
  int fd = rawConnect(server.port());
  ASSERT_GE(fd, 0) << "could not connect to the store";
  uint8_t junk[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
  ::send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, 0), 0);  // server closed it
  ::close(fd);
  TCPStoreOptions co;
  co.port = server.port();
  co.timeout = 5s;
  TCPStore client(co);
  EXPECT_EQ(client.getString("alive"), "yes");
  EXPECT_EQ(client.add("n", 1), 1);
}

TEST(TCPStore, client_disconnecting_during_blocking_get) {
  TCPStore server(serverOptions());
  {
    TCPStoreOptions co;
    co.port = server.port();
    co.timeout = 5s;
    TCPStore client(co);
    client.setTimeout(50ms);
    EXPECT_THROW(client.get("missing"), TimeoutError);
  }
  // Raw get request for a missing key with a long wait, then hang up.
  int fd = rawConnect(server.port());
  ASSERT_GE(fd, 0) << "could not connect to the store";
  std::vector<uint8_t> req = {0, 0, 0, 0, 2, 3, 0, 0, 0, 'a', 'b', 'c'};
  int64_t t = 60000;
  req.insert(req.end(), reinterpret_cast<uint8_t*>(&t), reinterpret_cast<uint8_t*>(&t) + 8);
  uint32_t len = static_cast<uint32_t>(req.size() - 4);
  std::memcpy(req.data(), &len, 4);
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(20ms);
  ::close(fd);
  server.setString("abc", "1");  // would answer the vanished waiter
  EXPECT_EQ(server.getString("abc"), "1");
}

TEST(TCPStore, port_in_use_is_a_clear_error) {
  TCPStore first(serverOptions());
  TCPStoreOptions o = serverOptions();
  o.port = first.port();
  try {
    TCPStore second(o);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(":" + std::to_string(first.port())), std::string::npos) << m;
    EXPECT_NE(m.find("in use"), std::string::npos) << m;
  }
}

TEST(TCPStore, connect_timeout_names_host_port) {
  uint16_t port;
  {
    TCPStore probe(serverOptions());  // find a port that is free once probe is gone
    port = probe.port();
  }
  TCPStoreOptions o;
  o.port = port;
  o.timeout = 300ms;
  auto start = std::chrono::steady_clock::now();
  try {
    TCPStore client(o);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << m;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(TCPStore, client_connects_to_server_started_later) {
  uint16_t port;
  {
    TCPStore probe(serverOptions());
    port = probe.port();
  }
  std::unique_ptr<TCPStore> server;
  std::thread t([&] {
    std::this_thread::sleep_for(150ms);
    TCPStoreOptions o = serverOptions();
    o.port = port;
    server = std::make_unique<TCPStore>(o);
    server->setString("hello", "world");
  });
  TCPStoreOptions o;
  o.port = port;
  o.timeout = 5s;
  TCPStore client(o);
  EXPECT_EQ(client.getString("hello"), "world");
  t.join();
}

TEST(TCPStore, server_gone_is_peer_error) {
  auto server = std::make_unique<TCPStore>(serverOptions());
  TCPStoreOptions o;
  o.port = server->port();
  o.timeout = 300ms;
  TCPStore client(o);
  client.setString("a", "1");
  server.reset();
  EXPECT_THROW(client.setString("b", "2"), Error);  // PeerError, or TimeoutError reconnecting
}

// --- FileStore across real processes ---

TEST(FileStore, two_processes) {
  std::string path = tempPath("lockstep_filestore_fork");
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    try {
      FileStore s(path, 2);
      s.setTimeout(10s);
      s.setString("child", "hi");
      for (int i = 0; i < 50; ++i) s.add("count", 1);
      if (s.getString("parent") != "hello") code = 2;
    } catch (...) {
      code = 1;
    }
    ::_exit(code);
  }
  {
    FileStore s(path, 2);
    s.setTimeout(10s);
    s.setString("parent", "hello");
    for (int i = 0; i < 50; ++i) s.add("count", 1);
    EXPECT_EQ(s.getString("child"), "hi");
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_EQ(s.add("count", 0), 100);
  }
  EXPECT_FALSE(std::filesystem::exists(path)) << "last worker removes the file";
}

TEST(FileStore, unwritable_path_is_io_error) {
  EXPECT_THROW(FileStore("/nonexistent_dir_lockstep/x", 1), IoError);
}

}  // namespace
}  // namespace lockstep::comm
