#include "lockstep/data/transforms/image_transform.h"

namespace lockstep::data {

std::array<uint32_t, 4> imageRandom(const TransformContext& ctx, uint32_t block) {
  TransformContext c = ctx;
  c.epoch ^= static_cast<uint64_t>(block) << 48;
  return transformRandom(c);
}

}  // namespace lockstep::data
