#pragma once
// Blocking TCP helpers with deadlines, shared by the TCPStore client and server. Internal.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep::comm::detail {

using Clock = std::chrono::steady_clock;

/// Connects to host:port, retrying (refused, unreachable, unresolvable) until deadline; then
/// TimeoutError naming host:port and the last error. Returns a blocking fd with TCP_NODELAY.
int connectWithRetry(const std::string& host, uint16_t port, Clock::time_point deadline,
                     const std::string& what);
/// Listens on all interfaces at port (0: any free port); IoError naming host:port when taken.
/// Returns the fd; *actual_port receives the bound port.
int listenOn(const std::string& host, uint16_t port, uint16_t* actual_port);
/// Sends all n bytes before deadline: TimeoutError at the deadline, PeerError when the peer left.
void sendAll(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& what);
/// Receives exactly n bytes before deadline: TimeoutError / PeerError as sendAll.
void recvAll(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what);
/// Milliseconds until deadline for poll(), at least 0, at most INT32_MAX.
int pollTimeoutMs(Clock::time_point deadline);

}  // namespace lockstep::comm::detail
