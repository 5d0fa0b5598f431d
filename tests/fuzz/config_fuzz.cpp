// libFuzzer target: the trainer's config parser (train/config/config.h) on arbitrary text, as a .json
// file when the first byte is odd and a .yaml file otherwise. Anything wrong must come out as a
// lockstep error (what `lockstep train` reports with exit 2); any other exception escaping, or a
// crash, is a finding.
#include <cstdint>
#include <string>

#include "lockstep/train/config/config.h"
#include "lockstep/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  if (size < 1) return 0;
  const std::string source = (data[0] & 1) ? "fuzz.json" : "fuzz.yaml";
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    train::parseTrainConfig(text, {}, 1, source);
  } catch (const Error&) {
  }
  return 0;
}
