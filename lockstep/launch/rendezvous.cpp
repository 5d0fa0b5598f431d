#include "lockstep/launch/rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include "lockstep/comm/store/prefix_store.h"
#include "lockstep/comm/store/tcp_store.h"
#include "lockstep/util/error.h"

namespace lockstep::launch {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollPause = std::chrono::milliseconds(5);

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

// A JobEnd in the store: the exit code, a newline, the report.
std::vector<uint8_t> encode(const JobEnd& end) {
  return bytes(std::to_string(end.exit_code) + "\n" + end.report);
}
JobEnd decode(const std::string& value) {
  const size_t nl = value.find('\n');
  const std::string code = value.substr(0, nl);
  if (nl == std::string::npos || code.empty() || code.size() > 3 ||
      code.find_first_not_of("0123456789") != std::string::npos) {
    return {value, 1};
  }
  return {value.substr(nl + 1), std::stoi(code)};
}

bool portInUse(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  bool in_use = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return in_use;
}

std::string randomToken() {
  std::random_device rd;
  std::ostringstream os;
  os << std::hex << rd() << rd();
  return os.str();
}

}  // namespace

bool isLocalAddress(const std::string& addr) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(addr.c_str(), nullptr, &hints, &res) != 0) return false;
  bool local = false;
  for (addrinfo* ai = res; ai != nullptr && !local; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    local = ::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;  // port 0 in the resolved address
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return local;
}

std::string localAddressToward(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port > 0 ? port : 9);
  if (::getaddrinfo(addr.c_str(), service.c_str(), &hints, &res) != 0) return addr;
  std::string out = addr;
  for (addrinfo* ai = res; ai != nullptr && out == addr; ai = ai->ai_next) {
    // Connecting a UDP socket sends nothing: it only asks the kernel for the route.
    int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char host[NI_MAXHOST] = {};
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&local), len, host, sizeof host, nullptr, 0,
                      NI_NUMERICHOST) == 0)
      out = host;
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return out;
}

int freeTcpPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  LOCKSTEP_ENFORCE(fd >= 0, IoError, "cannot create a socket to find a free port: ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  int e = errno;
  ::close(fd);
  LOCKSTEP_ENFORCE(ok, IoError,
                   "cannot find a free TCP port for the workers' MASTER_PORT: ", std::strerror(e));
  return ntohs(a.sin_port);
}

Rendezvous::Rendezvous(const RendezvousOptions& options)
    : options_(options), round_nodes_(options.nnodes), token_(randomToken()) {
  bool want_host = options_.nnodes == 1 || (options_.node_rank && *options_.node_rank == 0) ||
                   (!options_.node_rank && isLocalAddress(options_.master_addr));
  comm::TCPStoreOptions so;
  so.host = options_.master_addr;
  so.port = static_cast<uint16_t>(options_.master_port);
  so.timeout = options_.timeout;
  so.join_token = options_.join_token;
  std::shared_ptr<comm::TCPStore> tcp;
  // A port freed a moment ago by another process, or two local agents racing for it in arrival
  // mode, can make listen() fail once: try a few times before deciding.
  for (int attempt = 0; want_host && !tcp && attempt < 10; ++attempt) {
    so.is_server = true;
    // The hosting agent's own client connects over loopback (the server listens on every
    // address): at once, whatever --master-addr says. Connecting to a --master-addr that does not
    // resolve, or to an address routed elsewhere, kept it waiting the whole rendezvous timeout with
    // its signals blocked.
    so.host = "127.0.0.1";
    try {
      // The server thread inherits this mask: the agent's signals then always reach the main
      // thread, whose loop watches for them.
      sigset_t block, old;
      sigemptyset(&block);
      for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&block, s);
      ::pthread_sigmask(SIG_BLOCK, &block, &old);
      try {
        tcp = std::make_shared<comm::TCPStore>(so);
      } catch (...) {
        ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
        throw;
      }
      ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
      hosts_ = true;
    } catch (const IoError& e) {
      bool in_use = options_.master_port != 0 && portInUse(options_.master_port);
      // In arrival mode another local agent may host it already: join that one.
      if (in_use && !options_.node_rank && options_.nnodes > 1) break;
      if (!in_use && attempt + 1 < 10) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      // Two agents given --node-rank 0 on one host meet here, before any rendezvous key could say so.
      const bool master_twice = options_.nnodes > 1 && options_.node_rank == 0;
      LOCKSTEP_ENFORCE(!in_use, ValueError, "master port ", options_.master_port,
                       " is already in use on this host, so the rendezvous store cannot start there",
                       master_twice
                           ? " (is another agent with --node-rank 0 running here? node rank 0 is the "
                             "master's, and every host needs its own --node-rank)"
                           : "",
                       "; choose another --master-port, use --standalone for a free one, or stop the"
                       " process that holds it");
      throw;
    }
  }
  if (!tcp) {
    LOCKSTEP_ENFORCE(options_.master_port != 0, ValueError,
                     "a node that does not host the store needs --master-port or --rdzv-endpoint");
    so.is_server = false;
    try {
      tcp = std::make_shared<comm::TCPStore>(so);
    } catch (const TimeoutError& e) {
      throw TimeoutError("rendezvous '" + options_.run_id + "': the master agent's store at " +
                         options_.master_addr + ":" + std::to_string(options_.master_port) +
                         " could not be reached within --rdzv-timeout (" + e.what() +
                         "); start node rank 0 on the master host and check --master-addr/--master-port");
    }
  }
  // After connecting, operations should fail fast when the host is gone.
  tcp->setTimeout(std::min(options_.timeout, options_.op_timeout));
  port_ = tcp->port();
  tcp_ = tcp.get();
  base_ = tcp;
  store_ = std::make_shared<comm::PrefixStore>("lockstep/run/" + options_.run_id, base_);
}

Rendezvous::Rendezvous(const RendezvousOptions& options, std::shared_ptr<comm::Store> store)
    : options_(options),
      base_(std::move(store)),
      port_(options.master_port),
      round_nodes_(options.nnodes),
      token_(randomToken()) {
  store_ = std::make_shared<comm::PrefixStore>("lockstep/run/" + options_.run_id, base_);
}

std::string Rendezvous::key(int round, const std::string& name) const {
  return "round" + std::to_string(round) + "/" + name;
}

std::optional<RendezvousResult> Rendezvous::join(int round, int nproc,
                                                 const std::function<bool()>& interrupted) {
  checkSameNodeCount(round);
  return elastic() ? joinElastic(round, nproc, interrupted) : joinFixed(round, nproc, interrupted);
}

void Rendezvous::checkSameNodeCount(int round) {
  // Every agent of a job must be started with the same --nnodes: the first to come writes its
  // value, the others compare. One that differs says so and leaves word for those waiting, who
  // would otherwise start workers with another world size, or wait out --rdzv-timeout.
  const std::string mine = elastic()
                               ? std::to_string(options_.min_nodes) + ":" + std::to_string(options_.nnodes)
                               : std::to_string(options_.nnodes);
  const std::string first = text(store_->compareSet("nnodes", {}, bytes(mine)));
  if (first == mine) return;
  const std::string why = "rendezvous '" + options_.run_id + "': host '" + options_.hostname +
                          "' was started with --nnodes=" + mine +
                          ", the agents there before it with --nnodes=" + first +
                          "; start every host's `lockstep run` with the same --nnodes";
  // Word for this round's waiting agents only: a stray agent does not fail a later round (a
  // restart) of a job that formed without it.
  store_->set(key(round, "refused"), bytes(why));
  throw ValueError(why);
}

void Rendezvous::throwIfRefused(int round) {
  if (store_->check({key(round, "refused")})) throw ValueError(store_->getString(key(round, "refused")));
}

std::string Rendezvous::record(int nproc) const {
  // Where rank 0 would host the workers' own store if this node turns out to be node 0: the
  // address the other nodes already reach it by (the master address when it hosts the agents' store).
  const std::string addr = hosts_ ? options_.master_addr : localAddressToward(options_.master_addr, port_);
  return std::to_string(nproc) + "\n" + options_.hostname + "\n" + token_ + "\n" + addr + "\n" +
         std::to_string(freeTcpPort()) + "\n" + std::to_string(group_rank_.value_or(-1));
}

RendezvousResult Rendezvous::agree(int round, const std::vector<std::string>& records,
                                   const std::vector<int>& order, int my_slot) const {
  RendezvousResult r;
  r.round = round;
  std::vector<int> nprocs;
  int mine = 0;
  for (int slot : order) {
    if (slot == my_slot) mine = static_cast<int>(nprocs.size());
    std::istringstream in(records[static_cast<size_t>(slot)]);
    std::string count, host, token, addr, port;
    std::getline(in, count);
    std::getline(in, host);
    std::getline(in, token);
    std::getline(in, addr);
    std::getline(in, port);
    nprocs.push_back(std::stoi(count));
    r.hosts.push_back(host);
    r.members.push_back(token);
    if (r.worker_master_port == 0) {  // node 0's
      r.worker_master_addr = addr;
      r.worker_master_port = std::stoi(port);
    }
  }
  r.layout = computeRankLayout(nprocs, mine);
  r.nprocs = nprocs;
  return r;
}

std::optional<RendezvousResult> Rendezvous::joinFixed(int round, int nproc,
                                                      const std::function<bool()>& interrupted) {
  const int n = options_.nnodes;
  if (!group_rank_) {
    if (options_.node_rank) {
      group_rank_ = options_.node_rank;
    } else {
      int64_t arrival = store_->add(key(round, "arrived"), 1) - 1;
      LOCKSTEP_ENFORCE(arrival < n, ValueError, "more than --nnodes=", n, " agents joined rendezvous '",
                       options_.run_id, "' at ", options_.master_addr, ":", port_,
                       "; is another job using the same --rdzv-id and endpoint?");
      group_rank_ = static_cast<int>(arrival);
    }
  }
  const int g = *group_rank_;
  std::string mine = record(nproc);
  auto now = text(store_->compareSet(key(round, "node/" + std::to_string(g)), {}, bytes(mine)));
  if (now != mine) {
    std::istringstream in(now);
    std::string other_nproc, other_host;
    std::getline(in, other_nproc);
    std::getline(in, other_host);
    throw ValueError("node rank " + std::to_string(g) + " of rendezvous '" + options_.run_id +
                     "' is already taken by host '" + other_host +
                     "'; give every host a distinct --node-rank (or omit it everywhere)");
  }
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(key(round, "node/" + std::to_string(i)));
  auto deadline = Clock::now() + options_.timeout;
  while (!store_->check(keys)) {
    if (interrupted && interrupted()) return std::nullopt;
    throwIfRefused(round);
    if (Clock::now() >= deadline) {
      std::string present, missing;
      for (int i = 0; i < n; ++i) {
        std::string& list = store_->check({keys[static_cast<size_t>(i)]}) ? present : missing;
        list += (list.empty() ? "" : ", ") + std::to_string(i);
      }
      throw TimeoutError("rendezvous '" + options_.run_id + "' at " + options_.master_addr + ":" +
                         std::to_string(port_) + " timed out after " +
                         std::to_string(options_.timeout.count() / 1000.0).substr(0, 6) +
                         " s: " + "node ranks present: " + (present.empty() ? "none" : present) +
                         "; missing: " + missing + " (of --nnodes=" + std::to_string(n) +
                         "). Start `lockstep run` on every host with the same --nnodes, --rdzv-id and "
                         "--rdzv-endpoint/--master-addr, or raise --rdzv-timeout");
    }
    std::this_thread::sleep_for(kPollPause);
  }
  std::vector<std::string> records;
  std::vector<int> order;
  for (int i = 0; i < n; ++i) {
    records.push_back(store_->getString(keys[static_cast<size_t>(i)]));
    order.push_back(i);
  }
  round_nodes_ = n;
  return agree(round, records, order, g);
}

std::optional<RendezvousResult> Rendezvous::joinElastic(int round, int nproc,
                                                        const std::function<bool()>& interrupted) {
  const int lo = options_.min_nodes, hi = options_.nnodes;
  // A newcomer skips the rounds that closed before it came.
  int k = round;
  if (store_->check({"last_closed"})) k = std::max(k, std::stoi(store_->getString("last_closed")) + 1);
  const auto deadline = Clock::now() + options_.timeout;
  auto timedOut = [&](int arrived) {
    return TimeoutError("rendezvous '" + options_.run_id + "' at " + options_.master_addr + ":" +
                        std::to_string(port_) + " timed out after " +
                        std::to_string(options_.timeout.count() / 1000.0).substr(0, 6) + " s with " +
                        std::to_string(arrived) + " node(s) of the " + std::to_string(lo) +
                        " needed to start (--nnodes " + std::to_string(lo) + ":" + std::to_string(hi) +
                        "). Start more nodes with the same --rdzv-id and --rdzv-endpoint/--master-addr, or "
                        "raise --rdzv-timeout");
  };
  for (;; ++k) {
    // Counted in at once, so that the nodes of a running round see a node waiting (waiting()).
    const int slot = static_cast<int>(store_->add(key(k, "arrived"), 1) - 1);
    // Round k opens once round k - 1 ended: a node that came late waits here until then.
    while (k > 0 && !store_->check({key(k, "open")})) {
      if (interrupted && interrupted()) return std::nullopt;
      if (ended()) return std::nullopt;
      if (Clock::now() >= deadline) {
        throw TimeoutError("rendezvous '" + options_.run_id + "': this node waited " +
                           std::to_string(options_.timeout.count() / 1000.0).substr(0, 6) +
                           " s (--rdzv-timeout) for the running job to admit it, but the job, at its "
                           "maximum of " +
                           std::to_string(hi) + " nodes (--nnodes " + std::to_string(lo) + ":" +
                           std::to_string(hi) + "), neither ended nor lost a node");
      }
      std::this_thread::sleep_for(kPollPause * 4);
    }
    store_->set(key(k, "slot/" + std::to_string(slot)), bytes(record(nproc)));
    std::optional<Clock::time_point> min_since;
    int closed = -1;
    while (closed < 0) {
      if (store_->check({key(k, "closed")})) {
        closed = std::stoi(store_->getString(key(k, "closed")));
        break;
      }
      const int arrived = static_cast<int>(store_->add(key(k, "arrived"), 0));
      if (arrived >= lo && !min_since) min_since = Clock::now();
      if (arrived >= hi || (min_since && Clock::now() - *min_since >= options_.last_call)) {
        const int n = std::min(arrived, hi);
        const std::string v = std::to_string(n);
        if (text(store_->compareSet(key(k, "closed"), {}, bytes(v))) == v)
          store_->set("last_closed", bytes(std::to_string(k)));
        continue;
      }
      if (interrupted && interrupted()) return std::nullopt;
      if (ended()) return std::nullopt;
      if (Clock::now() >= deadline) throw timedOut(arrived);
      std::this_thread::sleep_for(kPollPause);
    }
    if (slot >= closed) continue;  // came after the close: wait for the next round
    std::vector<std::string> records;
    for (int i = 0; i < closed; ++i) {
      const std::string k_slot = key(k, "slot/" + std::to_string(i));
      while (!store_->check({k_slot})) {  // written right after its agent counted itself in
        if (Clock::now() >= deadline) throw timedOut(i);
        std::this_thread::sleep_for(kPollPause);
      }
      records.push_back(store_->getString(k_slot));
    }
    // The previous round's nodes keep their order (node 0 stays node 0 while it is there); the
    // newcomers follow in arrival order.
    std::vector<int> order(static_cast<size_t>(closed));
    std::vector<int> previous(static_cast<size_t>(closed));
    for (int i = 0; i < closed; ++i) {
      order[static_cast<size_t>(i)] = i;
      const std::string& rec = records[static_cast<size_t>(i)];
      previous[static_cast<size_t>(i)] = std::stoi(rec.substr(rec.rfind('\n') + 1));
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      const int pa = previous[static_cast<size_t>(a)], pb = previous[static_cast<size_t>(b)];
      return (pa < 0 ? INT32_MAX : pa) < (pb < 0 ? INT32_MAX : pb);
    });
    RendezvousResult r = agree(k, records, order, slot);
    group_rank_ = r.layout.group_rank;
    round_nodes_ = closed;
    return r;
  }
}

int Rendezvous::waiting(int round) { return static_cast<int>(store_->add(key(round + 1, "arrived"), 0)); }

void Rendezvous::requestReform(int round, const std::string& why) {
  store_->compareSet(key(round, "reform"), {}, bytes(why));
  store_->set(key(round + 1, "open"), bytes("1"));
}

std::optional<std::string> Rendezvous::reformRequested(int round) {
  std::string k = key(round, "reform");
  if (!store_->check({k})) return std::nullopt;
  return store_->getString(k);
}

void Rendezvous::publishComplete() { store_->compareSet("complete", {}, encode({"the job succeeded", 0})); }

std::optional<JobEnd> Rendezvous::ended() {
  if (auto s = shutdown()) return s;
  if (!store_->check({"complete"})) return std::nullopt;
  return decode(store_->getString("complete"));
}

bool Rendezvous::publishFailure(int round, const JobEnd& failure, bool primary) {
  if (elastic()) store_->set(key(round + 1, "open"), bytes("1"));  // the survivors re-form there
  if (primary) store_->compareSet(key(round, "failure_primary"), {}, encode(failure));
  auto now = store_->compareSet(key(round, "failure"), {}, encode(failure));
  return now == encode(failure);
}

std::optional<JobEnd> Rendezvous::failure(int round) {
  std::string k = key(round, "failure");
  if (!store_->check({k})) return std::nullopt;
  if (auto p = primaryFailure(round)) return p;
  return decode(store_->getString(k));
}

std::optional<JobEnd> Rendezvous::primaryFailure(int round) {
  std::string k = key(round, "failure_primary");
  if (!store_->check({k})) return std::nullopt;
  return decode(store_->getString(k));
}

void Rendezvous::beat(int round, int64_t counter) {
  store_->set(key(round, "alive/" + std::to_string(group_rank_.value_or(0))), bytes(std::to_string(counter)));
}

std::vector<std::string> Rendezvous::heartbeats(int round) {
  std::vector<std::string> out;
  for (int i = 0; i < round_nodes_; ++i) {
    std::string k = key(round, "alive/" + std::to_string(i));
    out.push_back(store_->check({k}) ? store_->getString(k) : std::string());
  }
  return out;
}

void Rendezvous::publishWorkerStore(int round, const std::string& state) {
  store_->set(key(round, "workers_store"), bytes(state));
}

std::optional<std::string> Rendezvous::workerStore(int round) {
  std::string k = key(round, "workers_store");
  if (!store_->check({k})) return std::nullopt;
  return store_->getString(k);
}

void Rendezvous::publishShutdown(const JobEnd& why) { store_->compareSet("shutdown", {}, encode(why)); }

std::optional<JobEnd> Rendezvous::shutdown() {
  if (!store_->check({"shutdown"})) return std::nullopt;
  return decode(store_->getString("shutdown"));
}

void Rendezvous::markSucceeded(int round) { store_->add(key(round, "succeeded"), 1); }

bool Rendezvous::allSucceeded(int round) { return store_->add(key(round, "succeeded"), 0) >= round_nodes_; }

void Rendezvous::leave(int round, std::chrono::milliseconds linger) {
  int64_t left = store_->add(key(round, "left"), 1);
  if (!hosts_) return;
  auto deadline = Clock::now() + linger;
  while (left < round_nodes_ && Clock::now() < deadline) {
    std::this_thread::sleep_for(kPollPause);
    left = store_->add(key(round, "left"), 0);
  }
}

}  // namespace lockstep::launch
