// The TCPStore's join token (tcp_store_auth.h, docs/security.md): real sockets, a real server.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>

#include "comm/raw_socket.h"
#include "lockstep/comm/shm/shm_segment.h"
#include "lockstep/comm/store/tcp_store.h"
#include "lockstep/comm/store/tcp_store_auth.h"
#include "lockstep/comm/store/tcp_store_protocol.h"
#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::comm;
using namespace std::chrono_literals;
using lockstep::comm::testing::rawConnect;

namespace {

const std::string kToken = "0123456789abcdef0123456789abcdef";

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::unique_ptr<TCPStore> server(const std::string& token) {
  TCPStoreOptions o;
  o.port = 0;
  o.is_server = true;
  o.join_token = token;
  o.timeout = 5s;
  return std::make_unique<TCPStore>(o);
}

std::unique_ptr<TCPStore> client(uint16_t port, const std::string& token) {
  TCPStoreOptions o;
  o.port = port;
  o.join_token = token;
  o.timeout = 5s;
  return std::make_unique<TCPStore>(o);
}

// Sends a well-formed `set key value` without any handshake; returns what came back before the
// server closed (or 1 s passed).
std::vector<uint8_t> rawSet(uint16_t port, const std::string& key, const std::string& value) {
  int fd = rawConnect(port);
  if (fd < 0) return {};
  comm::detail::FrameWriter w;
  w.u8(static_cast<uint8_t>(comm::detail::StoreCmd::set)).str(key).str(value);
  auto& f = w.finish();
  [[maybe_unused]] ssize_t n = ::send(fd, f.data(), f.size(), MSG_NOSIGNAL);
  timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::vector<uint8_t> got;
  uint8_t buf[4096];
  for (ssize_t r; (r = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.insert(got.end(), buf, buf + r);
  ::close(fd);
  return got;
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

}  // namespace

TEST(TCPStoreAuth, proof_depends_on_token_and_nonce) {
  auto n1 = comm::detail::authNonce(), n2 = comm::detail::authNonce();
  EXPECT_NE(n1, n2);
  auto p = comm::detail::authProof(kToken, n1);
  EXPECT_TRUE(comm::detail::authProofMatches(kToken, n1, p));
  EXPECT_FALSE(comm::detail::authProofMatches(kToken, n2, p));
  EXPECT_FALSE(comm::detail::authProofMatches(kToken + "x", n1, p));
  p[0] ^= 1;
  EXPECT_FALSE(comm::detail::authProofMatches(kToken, n1, p));
  EXPECT_EQ(randomJoinToken().size(), 64u);
  EXPECT_NE(randomJoinToken(), randomJoinToken());
}

TEST(TCPStoreAuth, client_with_the_token_reads_and_writes) {
  auto s = server(kToken);
  auto c = client(s->port(), kToken);
  c->set("k", bytes("v"));
  EXPECT_EQ(s->getString("k"), "v");
  EXPECT_EQ(c->add("n", 2), 2);
  EXPECT_EQ(c->compareSet("k", bytes("v"), bytes("w")), bytes("w"));
}

TEST(TCPStoreAuth, client_without_the_token_gets_nothing_and_changes_nothing) {
  auto s = server(kToken);
  s->set("secret", bytes("value"));
  auto before = s->numKeys();
  auto c = client(s->port(), "");  // connecting proves nothing yet; every request is refused
  auto refused = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return contains(e.what(), "join token");
    }
    return false;
  };
  EXPECT_TRUE(refused([&] { c->get("secret"); }));
  EXPECT_TRUE(refused([&] { c->check({"secret"}); }));
  EXPECT_TRUE(refused([&] { c->set("secret", bytes("forged")); }));
  EXPECT_TRUE(refused([&] { c->add("lockstep/run/x/round0/arrived", 1); }));
  EXPECT_TRUE(refused([&] { c->compareSet("lockstep/run/x/round0/node/1", {}, bytes("1\nrogue\n")); }));
  EXPECT_TRUE(refused([&] { c->deleteKey("secret"); }));
  EXPECT_TRUE(refused([&] { c->numKeys(); }));
  // A raw client speaking the protocol without the handshake gets only the refusal.
  auto reply = rawSet(s->port(), "secret", "forged");
  ASSERT_GE(reply.size(), 5u);
  EXPECT_EQ(reply[4], static_cast<uint8_t>(comm::detail::StoreStatus::error));
  EXPECT_EQ(s->getString("secret"), "value");
  EXPECT_EQ(s->numKeys(), before);
  EXPECT_FALSE(s->check({"lockstep/run/x/round0/node/1"}));
}

TEST(TCPStoreAuth, wrong_token_is_refused_at_connect) {
  auto s = server(kToken);
  try {
    client(s->port(), "another-token-of-enough-length");
    FAIL() << "a wrong token connected";
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "refused this process's join token")) << e.what();
  }
}

TEST(TCPStoreAuth, client_with_a_token_refuses_a_server_without_one) {
  auto s = server("");
  try {
    client(s->port(), kToken);
    FAIL() << "connected to a server that asks for no token";
  } catch (const PeerError& e) {
    EXPECT_TRUE(contains(e.what(), "asks for no join token")) << e.what();
  }
}

// Many hostile connections at once (garbage, unauthenticated requests, wrong proofs, idle ones)
// while the job's clients count: every count is exact and no forged key appears.
TEST(TCPStoreAuth, flood_of_hostile_connections_leaves_results_exact) {
  auto s = server(kToken);
  const uint16_t port = s->port();
  std::atomic<bool> stop{false};
  std::vector<std::thread> hostile;
  for (int t = 0; t < 4; ++t) {
    hostile.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(t));
      std::vector<int> idle;
      for (int i = 0; !stop && i < 400; ++i) {
        switch (i % 4) {
          case 0: {  // garbage bytes
            int fd = rawConnect(port);
            if (fd < 0) break;
            std::vector<uint8_t> junk(1 + rng() % 2000);
            for (auto& b : junk) b = static_cast<uint8_t>(rng());
            [[maybe_unused]] ssize_t n = ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
            ::close(fd);
            break;
          }
          case 1:
            rawSet(port, "forged/" + std::to_string(t), "x");
            break;
          case 2: {  // a wrong proof
            try {
              client(port, "wrong-token-wrong-token-wrong");
            } catch (const Error&) {
            }
            break;
          }
          default: {  // connects and says nothing
            int fd = rawConnect(port);
            if (fd >= 0) idle.push_back(fd);
          }
        }
      }
      for (int fd : idle) ::close(fd);
    });
  }
  std::vector<std::thread> job;
  for (int t = 0; t < 4; ++t) {
    job.emplace_back([&] {
      auto c = client(port, kToken);
      for (int i = 0; i < 300; ++i) c->add("counter", 1);
    });
  }
  for (auto& t : job) t.join();
  stop = true;
  for (auto& t : hostile) t.join();
  EXPECT_EQ(s->add("counter", 0), 1200);
  for (int t = 0; t < 4; ++t) EXPECT_FALSE(s->check({"forged/" + std::to_string(t)}));
  EXPECT_EQ(s->numKeys(), 1);
}

TEST(ShmSegmentPermissions, segments_are_private_to_the_jobs_user) {
  const std::string name = "/lockstep_perm_test_" + std::to_string(::getpid());
  auto seg = shm::ShmSegment::create(name, 4096);
  struct stat st {};
  ASSERT_EQ(::stat(("/dev/shm" + name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_NO_THROW(shm::ShmSegment::open(name, 4096));
  // Widened by someone: refused, naming the segment and its mode.
  ASSERT_EQ(::chmod(("/dev/shm" + name).c_str(), 0666), 0);
  try {
    shm::ShmSegment::open(name, 4096);
    FAIL() << "a world-writable segment was mapped";
  } catch (const PeerError& e) {
    EXPECT_TRUE(contains(e.what(), name)) << e.what();
    EXPECT_TRUE(contains(e.what(), "mode 0666")) << e.what();
  }
}
