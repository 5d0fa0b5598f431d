#include "lockstep/data/samplers/sampler.h"

#include <nlohmann/json.hpp>

#include "lockstep/tensor/generator.h"
#include "lockstep/util/error.h"

namespace lockstep::data {

nlohmann::json SamplerState::toJson() const { return {{"epoch", epoch}, {"position", position}}; }

SamplerState SamplerState::fromJson(const nlohmann::json& j) {
  SamplerState s;
  for (const char* key : {"epoch", "position"}) {
    LOCKSTEP_ENFORCE(j.is_object() && j.contains(key) && j.at(key).is_number_integer(), ValueError,
                     "sampler state: field \"", key, "\" is missing or not an integer in ", j.dump());
  }
  LOCKSTEP_ENFORCE(j.at("epoch").get<int64_t>() >= 0 || j.at("epoch").is_number_unsigned(), ValueError,
                   "sampler state: negative epoch in ", j.dump());
  s.epoch = j.at("epoch").get<uint64_t>();
  s.position = j.at("position").get<int64_t>();
  return s;
}

std::vector<int64_t> Sampler::remainingIndices() const {
  std::vector<int64_t> all = epochIndices(epoch_);
  return std::vector<int64_t>(all.begin() + position_, all.end());
}

void Sampler::setEpoch(uint64_t epoch) {
  epoch_ = epoch;
  position_ = 0;
}

void Sampler::advance(int64_t n) {
  LOCKSTEP_ENFORCE(n >= 0 && position_ + n <= size(), ValueError, "sampler: cannot advance by ", n,
                   " from position ", position_, " in an epoch of ", size(), " indices");
  position_ += n;
}

void Sampler::loadState(const SamplerState& state) {
  LOCKSTEP_ENFORCE(state.position >= 0 && state.position <= size(), ValueError, "sampler: saved position ",
                   state.position, " is outside 0..", size(), " (was the dataset or world size changed?)");
  epoch_ = state.epoch;
  position_ = state.position;
}

std::vector<int64_t> randomPermutation(int64_t n, uint64_t seed) {
  LOCKSTEP_ENFORCE(n >= 0, ValueError, "randomPermutation: negative n ", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  Generator gen(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(gen.nextBelow(static_cast<uint64_t>(i + 1)));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

}  // namespace lockstep::data
