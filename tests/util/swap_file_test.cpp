// SwapFile: io_uring reads and writes of a scratch file that never outlives its owner, and clear
// errors for a directory that cannot hold it.
#include "lockstep/util/swap_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "lockstep/util/error.h"

using namespace lockstep;
using lockstep::file::SwapFile;
using lockstep::file::SwapFileOptions;

namespace {

namespace fs = std::filesystem;

struct ScratchDir {
  ScratchDir() {
    std::string t = (fs::temp_directory_path() / "lockstep-swap-test-XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~ScratchDir() { fs::remove_all(path); }
  bool empty() const { return fs::is_empty(path); }
  std::string path;
};

std::unique_ptr<char, void (*)(void*)> aligned(size_t bytes) {
  return {static_cast<char*>(std::aligned_alloc(SwapFile::kAlignment, bytes)), std::free};
}

std::string errorOf(const SwapFileOptions& o) {
  try {
    SwapFile f(o);
  } catch (const IoError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(SwapFile, reads_back_what_it_wrote_across_chunks_and_leaves_no_file) {
  ScratchDir dir;
  // 72 MiB: more than one 64 MiB chunk, at an offset past the first region.
  const size_t bytes = size_t{72} << 20, offset = 3 * SwapFile::kAlignment;
  {
    SwapFile f({.dir = dir.path, .prefix = "t", .bytes = static_cast<int64_t>(bytes + offset)});
    EXPECT_TRUE(dir.empty());  // unlinked at once: nothing to clean up, whatever happens next
    auto out = aligned(bytes), in = aligned(bytes);
    for (size_t i = 0; i < bytes; ++i) out.get()[i] = static_cast<char>(i * 131 + 7);
    auto w = f.write(static_cast<int64_t>(offset), out.get(), bytes);
    // A second request in flight at the same time, to another region.
    auto small = aligned(SwapFile::kAlignment);
    std::fill_n(small.get(), SwapFile::kAlignment, 'x');
    auto w2 = f.write(0, small.get(), SwapFile::kAlignment);
    f.wait(w2);
    f.wait(w);
    f.wait(w);  // a finished ticket returns at once
    f.wait(f.read(static_cast<int64_t>(offset), in.get(), bytes));
    EXPECT_EQ(std::memcmp(in.get(), out.get(), bytes), 0);
    f.wait(f.read(0, in.get(), SwapFile::kAlignment));
    EXPECT_EQ(in.get()[SwapFile::kAlignment - 1], 'x');
    EXPECT_EQ(f.bytesWritten(), static_cast<int64_t>(bytes + SwapFile::kAlignment));
    EXPECT_EQ(f.bytesRead(), static_cast<int64_t>(bytes + SwapFile::kAlignment));
    std::printf("[ swap ] O_DIRECT in %s: %s\n", dir.path.c_str(), f.direct() ? "yes" : "no (buffered)");
  }
  EXPECT_TRUE(dir.empty());
}

TEST(SwapFile, buffered_io_and_tmpfs_work_too) {
  // Buffered I/O (what a file system without O_DIRECT gets), and a tmpfs, which has O_DIRECT on
  // recent kernels only.
  ScratchDir dir;
  for (const std::string& where : {dir.path, std::string("/dev/shm")}) {
    if (!fs::is_directory(where)) continue;
    SwapFile f({.dir = where, .prefix = "lockstep-swap-test", .bytes = 8192, .direct = where == "/dev/shm"});
    EXPECT_TRUE(where == "/dev/shm" || !f.direct());
    auto buf = aligned(8192);
    std::fill_n(buf.get(), 8192, 'q');
    f.wait(f.write(0, buf.get(), 8192));
    std::fill_n(buf.get(), 8192, 0);
    f.wait(f.read(0, buf.get(), 8192));
    EXPECT_EQ(buf.get()[8191], 'q') << where;
    std::printf("[ swap ] O_DIRECT in %s: %s\n", where.c_str(), f.direct() ? "yes" : "no (buffered)");
  }
  EXPECT_TRUE(dir.empty());
}

TEST(SwapFile, a_directory_that_cannot_hold_it_is_an_io_error_naming_it) {
  const std::string missing = "/nonexistent-lockstep-dir/sub";
  std::string e = errorOf({.dir = missing, .bytes = 4096});
  EXPECT_NE(e.find("cannot create a swap file in '" + missing + "'"), std::string::npos) << e;
  e = errorOf({.dir = "/etc/hostname", .bytes = 4096});  // a file, not a directory
  EXPECT_NE(e.find("'/etc/hostname'"), std::string::npos) << e;
  // More than the disk holds: refused at creation (fallocate), not at some write mid-run.
  ScratchDir dir;
  e = errorOf({.dir = dir.path, .bytes = int64_t{1} << 52});
  EXPECT_NE(e.find("cannot reserve 4503599627370496 bytes for a swap file in '" + dir.path + "'"),
            std::string::npos)
      << e;
  EXPECT_TRUE(dir.empty());
}
