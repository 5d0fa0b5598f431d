// The TensorBoard event encoder: CRC32C known answers, and the file decoded by an independent
// Python reader (struct + its own CRC32C), since TensorBoard itself is not installed.
#include "lockstep/train/monitor/event_writer.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "lockstep/train/monitor/progress.h"
#include "lockstep/util/error.h"

using namespace lockstep::train;
namespace fs = std::filesystem;

TEST(EventWriter, crc32c_known_answers) {
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8a9136aau);  // RFC 3720 B.4
  EXPECT_EQ(maskCrc(0), 0xa282ead8u);
}

TEST(EventWriter, record_framing) {
  std::string r = encodeRecord("abc");
  ASSERT_EQ(r.size(), 8u + 4u + 3u + 4u);
  uint64_t len;
  std::memcpy(&len, r.data(), 8);
  EXPECT_EQ(len, 3u);
  uint32_t dcrc;
  std::memcpy(&dcrc, r.data() + 15, 4);
  EXPECT_EQ(dcrc, maskCrc(crc32c("abc", 3)));
}

TEST(EventWriter, formats_durations) {
  EXPECT_EQ(formatDuration(5), "5s");
  EXPECT_EQ(formatDuration(125), "2m05s");
  EXPECT_EQ(formatDuration(3700), "1h01m");
  EXPECT_EQ(formatDuration(-1), "?");
}

namespace {
const char* kReader = R"PY(
import struct, sys, glob
def crc32c(data):
    crc = 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82f63b78 if crc & 1 else 0)
    return crc ^ 0xffffffff
def mask(c):
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
def varint(b, i):
    v = s = 0
    while True:
        x = b[i]; i += 1; v |= (x & 0x7f) << s; s += 7
        if x < 0x80: return v, i
def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i); f, w = key >> 3, key & 7
        if w == 0: v, i = varint(b, i)
        elif w == 1: v = b[i:i+8]; i += 8
        elif w == 5: v = b[i:i+4]; i += 4
        elif w == 2: n, i = varint(b, i); v = b[i:i+n]; i += n
        else: raise SystemExit('bad wire type %d' % w)
        yield f, w, v
assert crc32c(b'123456789') == 0xe3069283
(path,) = glob.glob(sys.argv[1] + '/events.out.tfevents.*')
data = open(path, 'rb').read()
i = 0; first = True
while i < len(data):
    hdr = data[i:i+8]; (n,) = struct.unpack('<Q', hdr)
    (lc,) = struct.unpack('<I', data[i+8:i+12]); assert lc == mask(crc32c(hdr)), 'length crc'
    ev = data[i+12:i+12+n]; (dc,) = struct.unpack('<I', data[i+12+n:i+16+n]); assert dc == mask(crc32c(ev)), 'data crc'
    i += 16 + n
    step = 0
    for f, w, v in fields(ev):
        if f == 1: assert w == 1 and struct.unpack('<d', v)[0] > 1e9
        if f == 2: step = v
        if f == 3: assert first and v == b'brain.Event:2'; print('version', v.decode())
        if f == 5:
            for _, _, val in fields(v):
                tag = value = None
                for vf, vw, vv in fields(val):
                    if vf == 1: tag = vv.decode()
                    if vf == 2: assert vw == 5; value = struct.unpack('<f', vv)[0]
                print('%d %s %g' % (step, tag, value))
    first = False
)PY";
}  // namespace

TEST(EventWriter, python_reader_decodes_the_file) {
  std::string dir = (fs::temp_directory_path() / ("lockstep-ev-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  {
    EventWriter w(dir);
    w.addScalars(1, {{"train/loss", 2.5f}, {"train/lr", 0.125f}});
    w.addScalars(300, {{"val/accuracy", 0.75f}});
  }
  std::string script = dir + "/reader.py", out = dir + "/out.txt";
  std::ofstream(script) << kReader;
  ASSERT_EQ(std::system(("python3 " + script + " " + dir + " > " + out + " 2>&1").c_str()), 0);
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "version brain.Event:2\n1 train/loss 2.5\n1 train/lr 0.125\n300 val/accuracy 0.75\n");
  fs::remove_all(dir);
}

// Writers started in the same second (a quick --resume, a restart) each get a file of their own,
// named as PyTorch's SummaryWriter names it; none truncates another's.
TEST(EventWriter, writers_in_the_same_second_keep_their_own_files) {
  std::string dir = (fs::temp_directory_path() / ("lockstep-ev2-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  std::vector<std::string> paths;
  for (int i = 0; i < 3; ++i) {
    EventWriter w(dir);
    w.addScalars(i, {{"train/loss", 1.0f}});
    paths.push_back(w.path());
  }
  EXPECT_EQ(std::set<std::string>(paths.begin(), paths.end()).size(), 3u);
  for (const std::string& p : paths) {
    EXPECT_NE(p.find("." + std::to_string(::getpid()) + "."), std::string::npos) << p;
    EXPECT_GT(fs::file_size(p), 40u) << p;  // the version event and a scalar each
  }
  fs::remove_all(dir);
}

// A full disk (here: the file size limit, EFBIG, without root for a small tmpfs) ends the run with
// the file named, as metrics.csv's does; it was dropped silently.
TEST(EventWriter, a_write_that_fails_is_an_error_naming_the_file) {
  std::string dir = (fs::temp_directory_path() / ("lockstep-ev3-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error;
  try {
    EventWriter w(dir);
    for (int i = 0; i < 1000; ++i) w.addScalars(i, {{"train/loss", 1.0f}, {"train/lr", 0.5f}});
    w.flush();
  } catch (const lockstep::IoError& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(error.find("cannot write the TensorBoard event file " + dir + "/events.out.tfevents."),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("tensorboard.output_path"), std::string::npos) << error;
  fs::remove_all(dir);
}
