#pragma once
// Deferred initialisation: tensors created while a DeferredInit scope is alive on this thread get
// no memory until something uses them. The fills written to them meanwhile (a Generator's random
// initialisers, Tensor::fill and the zeros/ones/full built on it) are recorded with the generator
// state they drew from, and replayed when the storage is materialised; the generator's offset
// advances as if the values had been drawn, so whatever is built after them draws what it would
// have drawn. This is torchdistX's deferred_init (or a meta-device model with reset_parameters),
// and what lets a pipeline stage build a whole zoo model but allocate and initialise only its own
// layers, with every value the one a whole build gives.
//
//   std::shared_ptr<nn::Module> model;
//   { DeferredInit scope; model = nn::makeModel("gpt", options); }   // no parameter memory yet
//   for (auto& p : stage_parameters) p.storage()->materialize();     // exactly the eager values
//
// A deferred storage is materialised on first access to its data (Tensor::dataPtr/devicePtr) or by
// Storage::materialize(); any write the scope does not record (a copy, arange, a strided fill)
// therefore just materialises it first, so the values are always the eager ones. What is never
// touched costs nothing. Scopes nest; they are per thread. Materialising is not thread-safe: touch
// a deferred tensor from one thread at a time (construction and setup are single-threaded).
#include <cstddef>

namespace lockstep {

class DeferredInit {
 public:
  DeferredInit();
  ~DeferredInit();
  DeferredInit(const DeferredInit&) = delete;
  DeferredInit& operator=(const DeferredInit&) = delete;

  /// Whether a scope is alive on this thread (owned storages created now are deferred).
  static bool active();
};

}  // namespace lockstep
