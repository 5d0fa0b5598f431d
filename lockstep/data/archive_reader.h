#pragma once
// The files inside a tar archive, plain or compressed (gzip, bzip2, xz), read with libarchive:
// data sets that are distributed as one .tar.gz can be read where they were downloaded, as
// Paddle's and torchvision's loaders read CIFAR-10's (data/datasets/cifar.h).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::data {

struct ArchiveMember {
  std::string path;  // as stored in the archive, e.g. "cifar-10-batches-py/data_batch_1"
  std::vector<uint8_t> bytes;
};

/// The regular files of the tar archive `path` whose stored path `want` accepts, each read whole,
/// in the archive's order. IoError naming the archive when it cannot be opened, is not a tar
/// archive, is corrupt or truncated, or when a wanted member is larger than `max_member_bytes`
/// (a decompression bomb cannot fill memory).
std::vector<ArchiveMember> readArchiveMembers(const std::string& path,
                                              const std::function<bool(std::string_view)>& want,
                                              uint64_t max_member_bytes = uint64_t{1} << 30);

/// Whether `path`'s name ends like a tar archive lockstep reads (.tar, .tar.gz, .tgz, .tar.bz2,
/// .tar.xz).
bool looksLikeTarArchive(std::string_view path);

}  // namespace lockstep::data
