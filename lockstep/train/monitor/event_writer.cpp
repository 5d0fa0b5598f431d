#include "lockstep/train/monitor/event_writer.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "lockstep/util/error.h"

namespace lockstep::train {

namespace {

std::array<uint32_t, 256> makeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}

void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <typename T>
void putFixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(b, sizeof(T));
}

void putTag(std::string& out, int field, int wire) {
  putVarint(out, static_cast<uint64_t>(field << 3 | wire));
}

void putBytes(std::string& out, int field, const std::string& bytes) {
  putTag(out, field, 2);
  putVarint(out, bytes.size());
  out += bytes;
}

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = makeTable();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t maskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string encodeRecord(const std::string& data) {
  std::string out;
  std::string len;
  putFixed<uint64_t>(len, data.size());
  out += len;
  putFixed<uint32_t>(out, maskCrc(crc32c(len.data(), len.size())));
  out += data;
  putFixed<uint32_t>(out, maskCrc(crc32c(data.data(), data.size())));
  return out;
}

std::string encodeFileVersionEvent(double wall_time) {
  std::string e;
  putTag(e, 1, 1);
  putFixed<double>(e, wall_time);
  putBytes(e, 3, "brain.Event:2");
  return e;
}

std::string encodeScalarsEvent(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;
  for (const auto& s : scalars) {
    std::string value;
    putBytes(value, 1, s.tag);
    putTag(value, 2, 5);
    putFixed<float>(value, s.value);
    putBytes(summary, 1, value);
  }
  std::string e;
  putTag(e, 1, 1);
  putFixed<double>(e, wall_time);
  putTag(e, 2, 0);
  putVarint(e, static_cast<uint64_t>(step));
  putBytes(e, 5, summary);
  return e;
}

EventWriter::EventWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  // PyTorch's SummaryWriter's name: time, host, pid and a count within the process, so that runs
  // started in one second (a quick --resume, a restart) each get their own file; "x" never
  // truncates another's.
  // A name taken already (a restarted container's process with the same pid, in the same second)
  // takes the next count.
  static std::atomic<int> made{0};
  const std::string stem = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now())) + "." +
                           host + "." + std::to_string(::getpid()) + ".";
  for (int attempt = 0; attempt < 1000; ++attempt) {
    path_ = stem + std::to_string(made++);
    file_ = std::fopen(path_.c_str(), "wbx");
    if (file_ || errno != EEXIST) break;
  }
  if (!file_) throw IoError("cannot write the TensorBoard event file " + path_ + ": " + std::strerror(errno));
  std::string rec = encodeRecord(encodeFileVersionEvent(now()));
  try {
    if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size()) failed();
    flush();
  } catch (...) {
    std::fclose(file_);  // no destructor runs for a constructor that throws
    file_ = nullptr;
    throw;
  }
}

EventWriter::~EventWriter() {
  if (file_) std::fclose(file_);
}

void EventWriter::addScalars(int64_t step, const std::vector<Scalar>& scalars) {
  std::string rec = encodeRecord(encodeScalarsEvent(now(), step, scalars));
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size()) failed();
}

// A full disk shows here (the writes before went to stdio's buffer): as metrics.csv's, an error
// that ends the run, not events silently lost.
void EventWriter::flush() {
  if (std::fflush(file_) != 0) failed();
}

void EventWriter::failed() const {
  throw IoError("cannot write the TensorBoard event file " + path_ + ": " + std::strerror(errno) +
                " (free space there, or point tensorboard.output_path elsewhere)");
}

}  // namespace lockstep::train
