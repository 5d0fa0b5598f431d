#pragma once
// Hosts for the multi-host tests: each "host" is a network namespace with its own address on a
// bridge, and runs its own agent through `ip netns exec`. Needs root; tests skip with a message
// otherwise (SKIP_WITHOUT).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace lockstep::launch::testing {

inline bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

// n namespaces "host" i with address 10.200.S.(i+1)/24 on a bridge in a hub namespace; removed
// (with every process still inside) when destroyed, also when a test fails half-way.
class NetnsLab {
 public:
  explicit NetnsLab(int hosts) {
    const int id = static_cast<int>(::getpid() % 100000);
    subnet_ = "10.200." + std::to_string(id % 250 + 1) + ".";
    hub_ = "lsk" + std::to_string(id) + "hub";
    if (::geteuid() != 0) {
      why_not_ = "needs root to create network namespaces";
      return;
    }
    if (!sh("ip netns add " + hub_)) {
      why_not_ = "'ip netns add' failed (no permission or no netns support)";
      return;
    }
    created_.push_back(hub_);
    bool ok = sh("ip -n " + hub_ + " link add br0 type bridge") && sh("ip -n " + hub_ + " link set br0 up");
    for (int i = 0; ok && i < hosts; ++i) {
      std::string ns = "lsk" + std::to_string(id) + "h" + std::to_string(i);
      ok = sh("ip netns add " + ns);
      if (!ok) break;
      created_.push_back(ns);
      std::string port = "p" + std::to_string(i);
      ok = sh("ip link add " + port + " netns " + hub_ + " type veth peer name eth0 netns " + ns) &&
           sh("ip -n " + hub_ + " link set " + port + " master br0") &&
           sh("ip -n " + hub_ + " link set " + port + " up") &&
           sh("ip -n " + ns + " addr add " + address(i) + "/24 dev eth0") &&
           sh("ip -n " + ns + " link set eth0 up") && sh("ip -n " + ns + " link set lo up");
      names_.push_back(ns);
    }
    if (!ok) why_not_ = "could not set up namespaces, veth pairs and a bridge";
  }
  ~NetnsLab() {
    for (const auto& ns : created_) {
      sh("ip netns pids " + ns + " | xargs -r kill -9");
      sh("ip netns del " + ns);
    }
  }
  const std::string& whyNot() const { return why_not_; }
  /// Cuts host i off the bridge: its packets are dropped silently (no reset reaches anyone).
  bool cut(int i) const { return sh("ip -n " + hub_ + " link set p" + std::to_string(i) + " down"); }
  std::string address(int i) const { return subnet_ + std::to_string(i + 1); }
  /// Kills every process on host i at once (kill -9), as a host that dies or is preempted.
  bool killAll(int i) const {
    return sh("ip netns pids " + names_[static_cast<size_t>(i)] + " | xargs -r kill -9");
  }
  /// How many processes still run on host i.
  int processCount(int i) const {
    FILE* p = ::popen(("ip netns pids " + names_[static_cast<size_t>(i)] + " 2>/dev/null").c_str(), "r");
    if (p == nullptr) return -1;
    int n = 0;
    for (int c = std::fgetc(p); c != EOF; c = std::fgetc(p)) n += c == '\n';
    ::pclose(p);
    return n;
  }
  /// argv running argv on host i.
  std::vector<std::string> exec(int i, const std::vector<std::string>& argv) const {
    std::vector<std::string> a = {"ip", "netns", "exec", names_[static_cast<size_t>(i)]};
    a.insert(a.end(), argv.begin(), argv.end());
    return a;
  }
#ifdef LOCKSTEP_RUN_BIN
  /// argv running `lockstep run ARGS` on host i (named nodeI in reports).
  std::vector<std::string> agent(int i, const std::vector<std::string>& args) const {
    std::vector<std::string> a = {"env", "LOCKSTEP_HOSTNAME=node" + std::to_string(i), LOCKSTEP_RUN_BIN};
    a.insert(a.end(), args.begin(), args.end());
    return exec(i, a);
  }
#endif

 private:
  std::string subnet_, hub_, why_not_;
  std::vector<std::string> created_, names_;
};

}  // namespace lockstep::launch::testing

#define SKIP_WITHOUT(lab) \
  if (!(lab).whyNot().empty()) GTEST_SKIP() << "multi-host test skipped: " << (lab).whyNot()
