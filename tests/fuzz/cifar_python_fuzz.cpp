// libFuzzer target: the pickle reader (data/pickle_reader.h) and the CIFAR-10 python batch decoder
// (data/datasets/cifar.h) on arbitrary bytes: every object of an accepted pickle is described and
// tried as a numpy array; a decoded batch has N images of 3072 bytes and N labels in 0..9.
#include <cstdint>

#include "lockstep/data/datasets/cifar.h"
#include "lockstep/data/pickle_reader.h"
#include "lockstep/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  try {
    const data::Pickle p = data::Pickle::parse(data, size, "fuzz.pkl");
    LOCKSTEP_CHECK(p.root() >= 0 && static_cast<size_t>(p.root()) < p.size());
    for (size_t id = 0; id < p.size(); ++id) {
      (void)p.describe(static_cast<int32_t>(id));
      try {
        if (auto a = data::numpyArray(p, static_cast<int32_t>(id)); a && !a->data.empty()) {
          // Both ends of the view are readable (ASan checks the reads).
          volatile char ends = static_cast<char>(a->data.front() ^ a->data.back());
          (void)ends;
        }
      } catch (const IoError&) {
      }
    }
  } catch (const IoError&) {
  }
  try {
    const data::CifarRaw raw = data::decodeCifarPython(data, size, "fuzz-batch");
    LOCKSTEP_CHECK(raw.images.nbytes() == static_cast<size_t>(raw.labels.size(0)) * 3072);
    for (int64_t l : raw.labels.toVector<int64_t>()) LOCKSTEP_CHECK(l >= 0 && l <= 9, l);
  } catch (const IoError&) {
  }
  return 0;
}
