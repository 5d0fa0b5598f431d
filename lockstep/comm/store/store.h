#pragma once
// Key-value store through which ranks find each other (c10d's Store). Every implementation is
// thread-safe: any number of threads may call any method concurrently. No method is collective.
//
// Values are raw bytes. add() keeps its counter as a decimal ASCII string, so get() of a counter
// key returns e.g. "3", as in c10d.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::comm {

class Store {
 public:
  virtual ~Store() = default;

  /// Sets key to value, replacing any previous value, and wakes waiters on key.
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  /// Blocks until key exists (up to timeout()), TimeoutError naming the key otherwise.
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  /// Atomically adds delta to the integer stored at key (created as 0) and returns the new value.
  /// ValueError when key holds something that is not a decimal integer.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// Sets key to desired if its current value equals expected (or key is absent and expected is
  /// empty); returns the value after the call (empty when the key is still absent).
  virtual std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                          const std::vector<uint8_t>& desired) = 0;
  /// Blocks until every key exists; TimeoutError listing the missing keys after timeout.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  /// wait() with this store's timeout().
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  /// True when all keys exist. Does not block.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  /// Removes key; true when it existed.
  virtual bool deleteKey(const std::string& key) = 0;
  /// Number of keys currently stored (for a PrefixStore: in the whole underlying store).
  virtual int64_t numKeys() = 0;

  /// set() of a string's bytes.
  void setString(const std::string& key, const std::string& v);
  /// get() as a string.
  std::string getString(const std::string& key);

  /// Timeout of get() and of wait() without an explicit timeout. Not synchronised with
  /// concurrent callers: set it before sharing the store.
  std::chrono::milliseconds timeout() const { return timeout_; }
  void setTimeout(std::chrono::milliseconds t) { timeout_ = t; }

 protected:
  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
};

/// A store's declarations of the operations of Store above, written once: an implementation says
/// `LOCKSTEP_STORE_OPS_OVERRIDE` in its public section and defines them all (wait with a deadline;
/// the convenience overloads stay visible).
#define LOCKSTEP_STORE_OPS_OVERRIDE                                                             \
  void set(const std::string& key, const std::vector<uint8_t>& value) override;                 \
  std::vector<uint8_t> get(const std::string& key) override;                                    \
  int64_t add(const std::string& key, int64_t delta) override;                                  \
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected, \
                                  const std::vector<uint8_t>& desired) override;                \
  using ::lockstep::comm::Store::wait;                                                          \
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;  \
  bool check(const std::vector<std::string>& keys) override;                                    \
  bool deleteKey(const std::string& key) override;                                              \
  int64_t numKeys() override;

namespace detail {
/// "a, b, c" for error messages.
std::string joinKeys(const std::vector<std::string>& keys);
/// Parses a counter value stored by add(); ValueError naming key when malformed.
int64_t parseCounter(const std::string& key, const std::vector<uint8_t>& value);
/// The counter value plus delta (what add() stores); ValueError naming key when the value is
/// malformed or the sum overflows 64 bits.
int64_t addToCounter(const std::string& key, const std::vector<uint8_t>& value, int64_t delta);
/// The decimal bytes of v.
std::vector<uint8_t> formatCounter(int64_t v);
}  // namespace detail

}  // namespace lockstep::comm
