#pragma once
// The side channel from rank 0 to the agent that owns the terminal: rank 0 sends ProgressReports
// as datagrams on a Unix socket in the abstract namespace (no file to clean up, no path length
// limit), named to the worker by LOCKSTEP_PROGRESS_SOCKET; the agent draws them on its Console.
// Datagrams never block the sender and never arrive half: a slow terminal only drops updates.
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "lockstep/launch/console.h"
#include "lockstep/launch/progress_line.h"

namespace lockstep::launch {

/// The variable naming the socket to rank 0 ("@name": abstract namespace).
constexpr const char* kProgressSocketEnv = "LOCKSTEP_PROGRESS_SOCKET";

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

/// Rank 0's end. Not thread-safe.
class ProgressSender {
 public:
  /// nullptr when LOCKSTEP_PROGRESS_SOCKET is unset or empty (no agent is drawing).
  static std::unique_ptr<ProgressSender> fromEnvironment();
  explicit ProgressSender(const std::string& address);
  ~ProgressSender();
  ProgressSender(const ProgressSender&) = delete;
  ProgressSender& operator=(const ProgressSender&) = delete;

  /// Sends without blocking; a report the agent cannot take now is dropped.
  void send(const ProgressReport& r);

 private:
  int fd_ = -1;
};

}  // namespace lockstep::launch
