#pragma once
// The random draws of a training step captured as a CUDA graph (parallel/step_graph.h). Dropout and
// attention's dropout draw Philox counters from a Generator whose offset the host advances per call;
// a captured kernel would replay the capture's offsets forever, so each replay would drop the same
// elements. While a PhiloxCapture is active, kernels::philoxState hands the kernels a slot of
// device memory per generator ({key, base}) and the counters drawn since the capture began; before
// each launch of the graph the host writes each generator's current state into its slot and
// advances the generator past the step's draws, exactly as the eager step would. The masks of a
// replay are therefore the eager step's, and the generators are where the eager run leaves them
// (PyTorch's philox_cuda_state with a captured offset does the same).
//
// Not thread-safe; one capture per thread at a time, on the thread that captures.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "lockstep/kernels/dropout.h"

namespace lockstep::kernels {

class PhiloxCapture {
 public:
  /// Room for up to max_generators generators on GPU `device`, allocated now (before the capture).
  explicit PhiloxCapture(const Device& device, int64_t max_generators = 256);
  ~PhiloxCapture();
  PhiloxCapture(const PhiloxCapture&) = delete;
  PhiloxCapture& operator=(const PhiloxCapture&) = delete;

  /// Around the captured step: philoxState() gives kernels on this capture's device the slots.
  /// end() writes each generator's state as the capture found it into its slot (queued on the
  /// device's current stream, outside the capture: the graph's first launch is the captured step).
  void begin();
  void end();
  /// For a capture that failed (its kernels never ran): ends it and sets each generator back to
  /// the state the capture found it in, so that the step can run eagerly with the same draws.
  void rollBack();
  /// Before each later launch of the graph, on the stream it is launched on: writes each
  /// generator's current state into its slot and advances the generator past the step's draws.
  void prepareReplay();

  /// The generators the captured step drew from.
  size_t generators() const { return entries_.size(); }
  const Device& device() const { return device_; }

  /// For kernels::philoxState: the capture active on this thread, or nullptr.
  static PhiloxCapture* active();
  /// gen's slot (made on first use) and the counters gen drew since the capture began.
  PhiloxState stateOf(Generator& gen);

 private:
  struct Entry {
    Generator* gen;
    uint64_t seed, start, drawn;
  };
  void writeSlots(const std::vector<uint64_t>& words);

  Device device_;
  Tensor slots_;  // i64 [max_generators, 2]: {key, base} per generator
  int64_t capacity_;
  std::vector<Entry> entries_;
  std::unordered_map<const Generator*, size_t> index_;
  bool recording_ = false;
};

}  // namespace lockstep::kernels
