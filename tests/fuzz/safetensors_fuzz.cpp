// libFuzzer target: the safetensors decoder (train/checkpoint/safetensors.h) on arbitrary bytes. A file it
// accepts must also be usable: every tensor's bytes are read, and re-encoding then decoding it
// gives the same names, shapes and bytes.
#include <cstdint>
#include <cstring>
#include <string>

#include "lockstep/train/checkpoint/safetensors.h"
#include "lockstep/util/error.h"

uint8_t lockstep_fuzz_sink = 0;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  train::SafetensorsFile f;
  try {
    f = train::decodeSafetensors(std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
  } catch (const IoError&) {
    return 0;
  }
  uint8_t sum = 0;
  for (const auto& [name, t] : f.tensors) {
    const auto* p = static_cast<const uint8_t*>(t.numel() ? t.dataPtr() : nullptr);
    for (size_t i = 0; i < t.nbytes(); ++i) sum = static_cast<uint8_t>(sum + p[i]);
  }
  const train::SafetensorsFile back =
      train::decodeSafetensors(train::encodeSafetensors(f.tensors, f.metadata), "fuzz.reencoded");
  LOCKSTEP_CHECK(back.tensors.size() == f.tensors.size());
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const Tensor& a = f.tensors[i].second;
    const Tensor& b = back.tensors[i].second;
    LOCKSTEP_CHECK(back.tensors[i].first == f.tensors[i].first && a.shape() == b.shape() &&
                   a.nbytes() == b.nbytes());
    if (a.nbytes()) LOCKSTEP_CHECK(std::memcmp(a.dataPtr(), b.dataPtr(), a.nbytes()) == 0);
  }
  lockstep_fuzz_sink = sum;  // the bytes were read
  return 0;
}
