#pragma once
// DeepSpeed's zero.Init for ZeRO stage 3: a model built inside the scope never has all of its
// parameters in memory at once, so a model larger than a rank's memory can be built whole on every
// rank and then partitioned.
//
//   std::shared_ptr<nn::Module> model;
//   { parallel::ZeroInit scope(nvme_dir); model = nn::makeModel("mlp", options); }
//   parallel::Engine engine(model, {.zero_stage = 3, ...});   // each rank keeps its partition
//
// While the scope is alive, every parameter registered on this thread (nn::Module's
// registerParameter) is moved into a shared mapping of a scratch file under `dir` (created and
// unlinked at once, so it never outlives the process) and, when the next one is registered, the
// earlier ones' pages leave the process (madvise DONTNEED: the values stay in the file and its page
// cache, which the kernel writes back and reclaims as it needs). A constructor that writes a
// parameter after registering it (GPT's re-initialisation) writes the mapping, so every value
// is exactly what it would be without the scope. ZeRO stage 3 then takes each rank's pieces one
// bucket at a time (zero/parameter_coordinator.h) and the mappings go with the whole parameters.
// Used below stage 3 the parameters stay file-backed and behave as ordinary memory.
//
// Not thread-safe; scopes do not nest. Parameters of other devices, or not floating point, or
// empty, are left as they are.
#include <memory>
#include <string>

#include "lockstep/nn/module.h"

namespace lockstep::parallel {

class ZeroInit {
 public:
  /// dir: where the scratch file goes (empty: $TMPDIR, else /tmp). IoError naming dir when it
  /// cannot be created there.
  explicit ZeroInit(const std::string& dir = "");
  /// Drops the last parameters' pages and removes the hook.
  ~ZeroInit();
  ZeroInit(const ZeroInit&) = delete;
  ZeroInit& operator=(const ZeroInit&) = delete;

  /// Parameters moved so far, and their bytes.
  int64_t parameters() const;
  int64_t bytes() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
  nn::ParameterRegisteredHook previous_;
};

}  // namespace lockstep::parallel
