#pragma once
// Two tiers of errors (after Gloo's docs/errors.md):
//  - typed exceptions for what a user or the world can cause (bad shape, bad file, bad flag, a peer
//    that is gone, a timeout). Their message names the thing and says what to do.
//  - LOCKSTEP_CHECK(cond, ...) for invariants of lockstep itself; it reports the failed condition,
//    the file and line, and the operand values given as extra arguments.
#include <sstream>
#include <stdexcept>
#include <string>

namespace lockstep {

/// Base of every lockstep exception.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// A value, shape, dtype or option the caller passed is not acceptable.
class ValueError : public Error {
  using Error::Error;
};
/// An index (a token id, a class, a position) is outside the range it indexes. A ValueError, so
/// that callers catching bad values catch it too.
class IndexError : public ValueError {
  using ValueError::ValueError;
};
/// A file or stream could not be read or written, or its content is malformed.
class IoError : public Error {
  using Error::Error;
};
/// An operation did not complete within its deadline.
class TimeoutError : public Error {
  using Error::Error;
};
/// A remote peer (another rank, the store) failed or went away.
class PeerError : public Error {
  using Error::Error;
};
/// An operation is not supported by this backend/kernel/configuration.
class NotSupportedError : public Error {
  using Error::Error;
};
/// The host or a GPU has no memory left for a request (the message names its size, where, and
/// what lockstep holds).
class OutOfMemoryError : public Error {
  using Error::Error;
};
/// An invariant of lockstep itself does not hold: a bug.
class InternalError : public Error {
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void checkFailed(const char* cond, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace lockstep

/// Throw InternalError unless cond holds. Extra arguments are streamed into the message.
#define LOCKSTEP_CHECK(cond, ...)                                                                 \
  do {                                                                                            \
    if (!(cond)) [[unlikely]] {                                                                   \
      ::lockstep::detail::checkFailed(#cond, __FILE__, __LINE__,                                  \
                                      ::lockstep::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                             \
  } while (0)

/// Throw the given exception type with a streamed message unless cond holds.
#define LOCKSTEP_ENFORCE(cond, ExcType, ...)                  \
  do {                                                        \
    if (!(cond)) [[unlikely]] {                               \
      throw ExcType(::lockstep::detail::concat(__VA_ARGS__)); \
    }                                                         \
  } while (0)
