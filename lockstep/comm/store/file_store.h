#pragma once
// Store on a shared filesystem (c10d's FileStore): an append-only log of set/delete records,
// every operation under flock(), so it works across processes and hosts that see the same file.
// The last of num_workers instances to be destroyed removes the file.
#include <mutex>
#include <string>
#include <unordered_map>

#include "lockstep/comm/store/store.h"

namespace lockstep::comm {

/// Thread-safe and process-safe. get()/wait() poll the file (1 ms rising to 20 ms).
class FileStore : public Store {
 public:
  /// Opens (creating if needed) the log at path. num_workers <= 0: never remove the file.
  /// IoError naming the path when it cannot be opened.
  FileStore(std::string path, int num_workers);
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  LOCKSTEP_STORE_OPS_OVERRIDE

  const std::string& path() const { return path_; }

 private:
  class Lock;  // flock + mutex for one operation
  void refreshLocked();
  void appendLocked(uint8_t op, const std::string& key, const std::vector<uint8_t>& value);
  int64_t addLocked(const std::string& key, int64_t delta);
  std::vector<std::string> missing(const std::vector<std::string>& keys);

  std::string path_;
  int num_workers_;
  int fd_ = -1;
  std::mutex mutex_;
  int64_t offset_ = 0;  // bytes of the log already applied to cache_
  std::unordered_map<std::string, std::vector<uint8_t>> cache_;
};

}  // namespace lockstep::comm
