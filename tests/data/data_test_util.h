#pragma once
// Helpers shared by the data tests: scratch directories and exception-message checks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace lockstep::data::testing {

/// A fresh directory under the system temp dir, removed with its content on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("lockstep_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

/// A python3 that can import `module` (Debian's /usr/bin/python3 first, then PATH's), or "" when none
/// can: tests that compare with Pillow or torchvision skip then.
inline std::string pythonWith(const std::string& module) {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    const std::string cmd = std::string(py) + " -c 'import " + module + "' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

/// Runs fn, expects an exception of type E whose message contains every string in `parts`.
template <typename E, typename Fn>
::testing::AssertionResult throwsWith(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) {
      if (msg.find(p) == std::string::npos) {
        return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << msg;
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "wrong exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "no exception thrown";
}

}  // namespace lockstep::data::testing
