// libFuzzer target: the CIFAR-10 binary batch reader (data/datasets/cifar.h) on arbitrary bytes.
#include <cstdint>

#include "lockstep/data/datasets/cifar.h"
#include "lockstep/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  try {
    const data::CifarRaw raw = data::decodeCifarBinary(data, size, "fuzz-cifar.bin");
    LOCKSTEP_CHECK(raw.images.nbytes() + static_cast<size_t>(raw.labels.size(0)) == size);
    for (int64_t l : raw.labels.toVector<int64_t>()) LOCKSTEP_CHECK(l >= 0 && l <= 9, l);
  } catch (const IoError&) {
  }
  return 0;
}
