#include "lockstep/nn/dropout.h"

#include "lockstep/autograd/ops/dropout.h"

namespace lockstep::nn {

Dropout::Dropout(const DropoutOptions& options)
    : Module("Dropout"),
      options_(options),
      gen_(options.seed ? *options.seed : defaultGenerator().nextU64()) {
  LOCKSTEP_ENFORCE(options.p >= 0.0 && options.p <= 1.0, ValueError, "Dropout: p must be in [0, 1], got ",
                   options.p);
}

Variable Dropout::forward(const Variable& x) { return autograd::dropout(x, options_.p, isTraining(), gen_); }

std::string Dropout::extraRepr() const { return detail::concat("p=", options_.p); }

}  // namespace lockstep::nn
