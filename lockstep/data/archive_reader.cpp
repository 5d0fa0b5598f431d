#include "lockstep/data/archive_reader.h"

#include <archive.h>
#include <archive_entry.h>

#include <memory>

#include "lockstep/util/error.h"

namespace lockstep::data {

namespace {

struct ArchiveFree {
  void operator()(archive* a) const { archive_read_free(a); }
};

std::string errorOf(archive* a) {
  const char* e = archive_error_string(a);
  return e != nullptr ? e : "unknown error";
}

}  // namespace

std::vector<ArchiveMember> readArchiveMembers(const std::string& path,
                                              const std::function<bool(std::string_view)>& want,
                                              uint64_t max_member_bytes) {
  std::unique_ptr<archive, ArchiveFree> a(archive_read_new());
  LOCKSTEP_ENFORCE(a != nullptr, IoError, path, ": libarchive could not start");
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_bzip2(a.get());
  archive_read_support_filter_xz(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), 1 << 16) != ARCHIVE_OK) {
    throw IoError(
        path + ": cannot be read as a tar archive (.tar, .tar.gz, .tar.bz2, .tar.xz): " + errorOf(a.get()));
  }
  std::vector<ArchiveMember> members;
  archive_entry* entry = nullptr;
  int r = ARCHIVE_OK;
  while ((r = archive_read_next_header(a.get(), &entry)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
    const char* name = archive_entry_pathname(entry);
    if (archive_entry_filetype(entry) != AE_IFREG || name == nullptr || !want(name)) continue;
    ArchiveMember m{name, {}};
    uint8_t chunk[1 << 16];
    while (true) {
      const la_ssize_t got = archive_read_data(a.get(), chunk, sizeof chunk);
      if (got == 0) break;
      if (got < 0) {
        throw IoError(path + ": corrupt or truncated archive while reading " + m.path + ": " +
                      errorOf(a.get()));
      }
      LOCKSTEP_ENFORCE(m.bytes.size() + static_cast<uint64_t>(got) <= max_member_bytes, IoError, path, ": ",
                       m.path, " is larger than ", max_member_bytes,
                       " bytes, more than this data set's files can be");
      m.bytes.insert(m.bytes.end(), chunk, chunk + got);
    }
    members.push_back(std::move(m));
  }
  if (r != ARCHIVE_EOF) throw IoError(path + ": corrupt or truncated archive: " + errorOf(a.get()));
  return members;
}

bool looksLikeTarArchive(std::string_view path) {
  for (std::string_view ext : {".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz"}) {
    if (path.size() >= ext.size() && path.substr(path.size() - ext.size()) == ext) return true;
  }
  return false;
}

}  // namespace lockstep::data
