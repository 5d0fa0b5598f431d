#pragma once
// Rank 0's end of the progress side channel (progress_channel.h): sends ProgressReports to the
// agent that draws them, without ever blocking.
#include <memory>
#include <string>

#include "lockstep/launch/progress_line.h"

namespace lockstep::launch {

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
