#pragma once
// The side channel from rank 0 to the agent that owns the terminal: rank 0 sends ProgressReports
// as datagrams on a Unix socket in the abstract namespace (no file to clean up, no path length
// limit), named to the worker by LOCKSTEP_PROGRESS_SOCKET; the agent draws them on its Console.
// Datagrams never block the sender and never arrive half: a slow terminal only drops updates.
// Rank 0's end is ProgressSender (progress_sender.h).
#include <sys/socket.h>
#include <sys/un.h>

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "lockstep/launch/console.h"
#include "lockstep/launch/progress_line.h"

namespace lockstep::launch {

/// The variable naming the socket to rank 0 ("@name": abstract namespace).
constexpr const char* kProgressSocketEnv = "LOCKSTEP_PROGRESS_SOCKET";

/// The sockaddr for "@name" (the abstract namespace); ValueError when the name is too long.
socklen_t progressSocketAddress(const std::string& address, sockaddr_un& sa);

/// Names the socket in the environment of rank 0 (when address is not empty) and removes it
/// from every other worker's, which must not draw.
void setProgressSocket(std::map<std::string, std::string>& env, int rank, const std::string& address);

/// The agent's end: binds the socket and, on its own thread, draws every report it receives.
class ProgressChannel {
 public:
  /// IoError when the socket cannot be made.
  explicit ProgressChannel(Console& console);
  ~ProgressChannel();
  ProgressChannel(const ProgressChannel&) = delete;
  ProgressChannel& operator=(const ProgressChannel&) = delete;

  /// The value of LOCKSTEP_PROGRESS_SOCKET for rank 0.
  const std::string& address() const { return address_; }

 private:
  void loop();

  Console& console_;
  std::string address_;
  int fd_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace lockstep::launch
