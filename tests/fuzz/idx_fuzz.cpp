// libFuzzer target: the IDX reader (data/datasets/idx_file.h) on arbitrary bytes, raw or gzip (an input
// starting with 1f 8b takes the bounded gunzip path). An accepted file holds exactly the bytes
// its dims describe.
#include <cstdint>

#include "lockstep/data/datasets/idx_file.h"
#include "lockstep/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  try {
    const data::IdxArray a = data::decodeIdx(data, size, "fuzz-idx");
    uint64_t n = 1;
    for (int64_t d : a.dims) n *= static_cast<uint64_t>(d);
    LOCKSTEP_CHECK(n == a.data.size(), n, " ", a.data.size());
  } catch (const IoError&) {
  }
  return 0;
}
