#pragma once
// Dropout (torch.nn.Dropout): zeroes elements with probability p and scales the rest by 1/(1-p)
// in training mode; the identity in eval mode. Masks come from the module's own counter-based
// Generator, so a run is reproducible from its seed.
#include <cstdint>
#include <optional>

#include "lockstep/nn/module.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::nn {

struct DropoutOptions {
  double p = 0.5;
  /// Seed of this module's generator. Unset: drawn from defaultGenerator() at construction, so
  /// lockstep::manualSeed() before building the model fixes it.
  std::optional<uint64_t> seed{};
};

class Dropout : public Module {
 public:
  explicit Dropout(const DropoutOptions& options = {});
  Variable forward(const Variable& x) override;
  std::string extraRepr() const override;

  /// The mask generator; its (seed, offset) is the whole state, e.g. for checkpoints.
  Generator& generator() { return gen_; }
  const DropoutOptions& options() const { return options_; }

 private:
  DropoutOptions options_;
  Generator gen_;
};

}  // namespace lockstep::nn
