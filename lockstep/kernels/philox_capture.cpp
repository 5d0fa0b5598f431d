#include "lockstep/kernels/philox_capture.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/kernels/cuda/words.h"
#endif

namespace lockstep::kernels {

namespace {
thread_local PhiloxCapture* active_capture = nullptr;
}  // namespace

PhiloxState philoxState(Generator& gen, const Device& device) {
  PhiloxCapture* c = PhiloxCapture::active();
  if (c && c->device() == device) return c->stateOf(gen);
  return {gen.seed(), gen.offset(), nullptr};
}

PhiloxCapture::PhiloxCapture(const Device& device, int64_t max_generators)
    : device_(device), capacity_(max_generators) {
  LOCKSTEP_ENFORCE(device.isCuda(), ValueError, "PhiloxCapture: needs a GPU, got ", deviceName(device));
  LOCKSTEP_ENFORCE(max_generators > 0, ValueError, "PhiloxCapture: max_generators must be positive, got ",
                   max_generators);
  slots_ = Tensor::empty({max_generators, 2}, DType::i64, MemoryFormat::contiguous, device);
}

PhiloxCapture::~PhiloxCapture() {
  if (active_capture == this) active_capture = nullptr;
}

PhiloxCapture* PhiloxCapture::active() { return active_capture; }

void PhiloxCapture::begin() {
  LOCKSTEP_ENFORCE(!recording_ && entries_.empty(), ValueError,
                   "PhiloxCapture: this capture was already begun");
  LOCKSTEP_ENFORCE(active_capture == nullptr, ValueError,
                   "PhiloxCapture: another capture is active on this thread (one at a time)");
  active_capture = this;
  recording_ = true;
}

void PhiloxCapture::end() {
  LOCKSTEP_ENFORCE(recording_, ValueError, "PhiloxCapture::end: the capture was not begun");
  active_capture = nullptr;
  recording_ = false;
  std::vector<uint64_t> words;
  for (Entry& e : entries_) {
    e.drawn = e.gen->offset() - e.start;
    words.push_back(e.seed);
    words.push_back(e.start);
  }
  writeSlots(words);
}

void PhiloxCapture::rollBack() {
  if (active_capture == this) active_capture = nullptr;
  recording_ = false;
  for (const Entry& e : entries_) e.gen->setState(e.seed, e.start);
  entries_.clear();
  index_.clear();
}

void PhiloxCapture::prepareReplay() {
  LOCKSTEP_ENFORCE(!recording_, ValueError, "PhiloxCapture::prepareReplay: the capture has not ended");
  std::vector<uint64_t> words;
  for (Entry& e : entries_) {
    const uint64_t seed = e.gen->seed(), offset = e.gen->offset();
    words.push_back(seed);
    words.push_back(offset);
    e.gen->setState(seed, offset + e.drawn);
  }
  writeSlots(words);
}

PhiloxState PhiloxCapture::stateOf(Generator& gen) {
  auto [it, added] = index_.try_emplace(&gen, entries_.size());
  if (added) {
    LOCKSTEP_ENFORCE(static_cast<int64_t>(entries_.size()) < capacity_, NotSupportedError,
                     "a step captured in a CUDA graph draws from more than ", capacity_,
                     " random generators; run it eagerly (cuda_graph: false)");
    entries_.push_back({&gen, gen.seed(), gen.offset(), 0});
  }
  const Entry& e = entries_[it->second];
  // A generator reseeded, or set back before where the capture found it, inside the step would
  // need draws the slot cannot express.
  LOCKSTEP_ENFORCE(gen.seed() == e.seed && gen.offset() >= e.start, NotSupportedError,
                   "a random generator was reseeded or rewound inside a step captured in a CUDA graph "
                   "(seed ",
                   e.seed, " -> ", gen.seed(), ", offset ", e.start, " -> ", gen.offset(),
                   "); run the step eagerly (cuda_graph: false)");
  const auto* slot = static_cast<const uint64_t*>(slots_.devicePtr()) + 2 * it->second;
  return {0, gen.offset() - e.start, slot};
}

void PhiloxCapture::writeSlots(const std::vector<uint64_t>& words) {
  if (words.empty()) return;
#if LOCKSTEP_WITH_CUDA
  cuda::writeWords(static_cast<uint64_t*>(slots_.devicePtr()), words, device_);
#else
  throw NotSupportedError("PhiloxCapture: this lockstep was built without CUDA");
#endif
}

}  // namespace lockstep::kernels
