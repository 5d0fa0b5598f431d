#pragma once
// TensorBoard event files written in TensorBoard's own format, without TensorFlow:
//   file  = records, each: u64 length (LE), u32 masked CRC32C(length), data, u32 masked CRC32C(data)
//   masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8
//   data  = an Event proto: wall_time=1 double, step=2 int64, file_version=3 string,
//           summary=5 Summary{ repeated Value value=1 { tag=1 string, simple_value=2 float } }
// The first record carries file_version "brain.Event:2".
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace lockstep::train {

/// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78); crc32c("123456789") = 0xe3069283.
uint32_t crc32c(const void* data, size_t n);
/// TFRecord's masking of a CRC.
uint32_t maskCrc(uint32_t crc);
/// One TFRecord: length, masked length CRC, data, masked data CRC.
std::string encodeRecord(const std::string& data);
/// Serialized Event{wall_time, file_version}.
std::string encodeFileVersionEvent(double wall_time);
/// Serialized Event{wall_time, step, summary{value{tag, simple_value}...}}.
struct Scalar {
  std::string tag;
  float value = 0;
};
std::string encodeScalarsEvent(double wall_time, int64_t step, const std::vector<Scalar>& scalars);

/// Appends scalar summaries to a new DIR/events.out.tfevents.<time>.<host>.<pid>.<n> (PyTorch's
/// SummaryWriter's name; n counts the writers of this process). Thread-compatible.
class EventWriter {
 public:
  /// Creates dir when missing; IoError naming the path when it cannot be written.
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;
  /// IoError naming the file when it cannot be written (a full disk shows at flush at the latest).
  void addScalars(int64_t step, const std::vector<Scalar>& scalars);
  void flush();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void failed() const;

  std::string path_;
  FILE* file_ = nullptr;
};

}  // namespace lockstep::train
