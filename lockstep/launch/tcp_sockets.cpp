#include "lockstep/launch/tcp_sockets.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace lockstep::launch {

namespace {

// "0100007F:1F90" (or 32 hex digits of an IPv6 address before the colon) -> 8080.
int portOf(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) return -1;
  char* end = nullptr;
  long port = std::strtol(address.c_str() + colon + 1, &end, 16);
  return *end == '\0' && port >= 0 && port < 65536 ? static_cast<int>(port) : -1;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The names in a /proc directory.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') out.emplace_back(e->d_name);
  ::closedir(d);
  return out;
}

// Adds the inodes of the sockets among pid's descriptors ("socket:[12345]").
void addSocketInodes(int pid, std::set<uint64_t>& inodes) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  for (const std::string& fd : entries(dir)) {
    char target[64] = {};
    ssize_t n = ::readlink((dir + "/" + fd).c_str(), target, sizeof target - 1);
    if (n <= 0 || std::string(target, 8) != "socket:[") continue;
    inodes.insert(std::strtoull(target + 8, nullptr, 10));
  }
}

// pid and its descendants, through every thread's /proc/PID/task/TID/children.
std::vector<int> processTree(int pid) {
  constexpr size_t kMaxProcesses = 1024;  // a fork bomb under a worker must not stall the agent
  std::vector<int> tree = {pid};
  for (size_t i = 0; i < tree.size() && tree.size() < kMaxProcesses; ++i) {
    const std::string tasks = "/proc/" + std::to_string(tree[i]) + "/task";
    for (const std::string& tid : entries(tasks)) {
      std::istringstream children(readFile(tasks + "/" + tid + "/children"));
      for (int child; children >> child;) tree.push_back(child);
    }
  }
  return tree;
}

}  // namespace

std::vector<TcpSocket> parseProcNetTcp(const std::string& table) {
  std::vector<TcpSocket> out;
  std::istringstream in(table);
  std::string line;
  while (std::getline(in, line)) {
    // "sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ..."
    std::istringstream row(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    if (!(row >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >>
          inode))
      continue;
    if (slot.empty() || slot.back() != ':') continue;  // the header
    TcpSocket s;
    s.local_port = portOf(local);
    s.remote_port = portOf(remote);
    char* end = nullptr;
    s.state = static_cast<int>(std::strtol(state.c_str(), &end, 16));
    if (s.local_port < 0 || s.remote_port < 0 || *end != '\0') continue;
    s.inode = std::strtoull(inode.c_str(), &end, 10);
    if (*end != '\0') continue;
    out.push_back(s);
  }
  return out;
}

std::vector<TcpSocket> processTcpSockets(int pid) {
  std::vector<TcpSocket> out;
  std::set<uint64_t> inodes;
  for (int p : processTree(pid)) addSocketInodes(p, inodes);
  if (inodes.empty()) return out;
  for (const char* table : {"tcp", "tcp6"}) {
    for (const TcpSocket& s : parseProcNetTcp(readFile("/proc/" + std::to_string(pid) + "/net/" + table)))
      if (inodes.count(s.inode) != 0) out.push_back(s);
  }
  return out;
}

}  // namespace lockstep::launch
