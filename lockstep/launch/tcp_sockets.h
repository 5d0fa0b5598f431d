#pragma once
// The TCP sockets a process holds, from /proc: its descriptors' socket inodes matched in its
// network namespace's tables (/proc/PID/net/tcp and tcp6). How the watchdog sees a worker join the
// store rank 0 hosts (PyTorch's env://), which the agent takes no part in.
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::launch {

/// The kernel's TCP states as /proc/net/tcp numbers them.
constexpr int kTcpEstablished = 1;
constexpr int kTcpListen = 10;

struct TcpSocket {
  uint64_t inode = 0;
  int local_port = 0;
  int remote_port = 0;
  int state = 0;  ///< kTcpEstablished, kTcpListen, ...
};

/// The rows of a /proc/net/tcp or tcp6 table (the header line and malformed rows are skipped). Pure.
std::vector<TcpSocket> parseProcNetTcp(const std::string& table);

/// The TCP sockets process pid and its descendants have open (a worker started through a wrapper
/// script holds them in a child); empty when it is gone or its /proc cannot be read.
std::vector<TcpSocket> processTcpSockets(int pid);

}  // namespace lockstep::launch
