// libFuzzer target: the bounded gunzip (data/gzip_reader.h) on arbitrary bytes, read in pieces
// whose sizes come from the input's first byte; never more than 4 MiB is asked for, and the
// reader must never return more than asked.
#include <cstdint>
#include <vector>

#include "lockstep/data/gzip_reader.h"
#include "lockstep/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  if (size < 1) return 0;
  const size_t piece = 1 + (static_cast<size_t>(data[0]) << 8);
  try {
    data::GzipReader gz(data + 1, size - 1, "fuzz.gz");
    std::vector<uint8_t> out;
    while (!gz.finished() && out.size() < (4u << 20)) {
      const size_t before = out.size();
      const size_t got = gz.read(out, piece);
      LOCKSTEP_CHECK(got <= piece && out.size() == before + got, got, " ", piece);
      if (got < piece) LOCKSTEP_CHECK(gz.finished());
    }
  } catch (const IoError&) {
  }
  return 0;
}
