#include "lockstep/parallel/zero/nvme_offload.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <unordered_map>

#include "lockstep/tensor/allocator.h"
#include "lockstep/util/error.h"

namespace lockstep::parallel {

using autograd::Variable;
using file::SwapFile;

namespace {
const std::string kKey = "zero_optimization.offload_optimizer";

size_t alignUp(size_t n) {
  return (n + SwapFile::kAlignment - 1) / SwapFile::kAlignment * SwapFile::kAlignment;
}
}  // namespace

void validateNvmeOffloadOptions(const NvmeOffloadOptions& o) {
  if (o.nvme_path.empty()) return;
  LOCKSTEP_ENFORCE(o.sub_group_size >= 1, ValueError, "zero_optimization.sub_group_size=", o.sub_group_size,
                   " must be a positive number of elements");
  LOCKSTEP_ENFORCE(o.buffer_count >= 1, ValueError, kKey, ".buffer_count=", o.buffer_count,
                   " must be at least 1 (one swap buffer per state tensor of a sub-group)");
}

ZeroNvmeOffload::ZeroNvmeOffload(std::shared_ptr<optim::Optimizer> optimizer, std::vector<Shard> shards,
                                 DType dtype, int rank, const NvmeOffloadOptions& options)
    : optimizer_(std::move(optimizer)), shards_(std::move(shards)), dtype_(dtype), options_(options) {
  validateNvmeOffloadOptions(options_);
  LOCKSTEP_ENFORCE(!options_.nvme_path.empty(), ValueError, kKey, ".nvme_path is needed with device nvme");
  for (const optim::ParamGroup& g : optimizer_->paramGroups())
    states_ = std::max(states_, optimizer_->stateElementsPerParameterElement(g));
  LOCKSTEP_ENFORCE(states_ == 0 || options_.buffer_count >= states_, ValueError, kKey,
                   ".buffer_count=", options_.buffer_count, " is fewer than the ", states_, " state tensors ",
                   optimizer_->name(),
                   " keeps per parameter: each state tensor of a sub-group needs a swap buffer; "
                   "set buffer_count to at least ",
                   states_, " (", 3 * states_, " lets reading, stepping and writing overlap fully)");
  // Cut the partition (the shards, in order) into sub-groups of sub_group_size elements.
  const int64_t cap = options_.sub_group_size;
  int64_t largest = 0;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const Tensor& t = shards_[i].var.tensor();
    for (int64_t off = 0; off < t.numel();) {
      if (groups_.empty() || groups_.back().numel == cap) groups_.emplace_back();
      SubGroup& g = groups_.back();
      const int64_t take = std::min(t.numel() - off, cap - g.numel);
      g.pieces.push_back(pieces_.size());
      pieces_.push_back({i, off, take, g.numel, Variable(t.narrow(0, off, take), true), {}});
      g.numel += take;
      largest = std::max(largest, g.numel);
      off += take;
    }
  }
  if (states_ == 0 || groups_.empty()) return;  // nothing to swap
  region_bytes_ = alignUp(static_cast<size_t>(largest) * dtypeSize(dtype_));
  const int64_t resident =
      std::min<int64_t>(options_.buffer_count / states_, static_cast<int64_t>(groups_.size()));
  const size_t slot_bytes = static_cast<size_t>(states_) * region_bytes_;
  buffers_ = {static_cast<char*>(std::aligned_alloc(SwapFile::kAlignment, resident * slot_bytes)), std::free};
  LOCKSTEP_ENFORCE(buffers_ != nullptr, Error, "ZeRO NVMe offload: cannot allocate ", resident * slot_bytes,
                   " bytes of swap buffers (", kKey, ".buffer_count x sub_group_size); lower them");
  slots_.resize(static_cast<size_t>(resident));
  for (int64_t s = 0; s < resident; ++s) slots_[s].data = buffers_.get() + s * slot_bytes;
  file::SwapFileOptions fo;
  fo.dir = options_.nvme_path;
  fo.prefix = "lockstep-zero-optimizer-rank" + std::to_string(rank);
  fo.bytes = static_cast<int64_t>(groups_.size()) * static_cast<int64_t>(slot_bytes);
  try {
    file_ = std::make_unique<SwapFile>(fo);
  } catch (const IoError& e) {
    throw IoError(kKey + ".nvme_path: " + e.what());
  }
}

ZeroNvmeOffload::~ZeroNvmeOffload() {
  file_.reset();  // waits for the writes in flight before the buffers they read from go
}

int64_t ZeroNvmeOffload::fileOffset(int64_t group, size_t j) const {
  return (group * states_ + static_cast<int64_t>(j)) * static_cast<int64_t>(region_bytes_);
}

size_t ZeroNvmeOffload::regionIoBytes(int64_t group) const {
  return alignUp(static_cast<size_t>(groups_[group].numel) * dtypeSize(dtype_));
}

void ZeroNvmeOffload::waitReads(Slot& slot) {
  for (SwapFile::Ticket t : slot.reads) file_->wait(t);
  slot.reads.clear();
}

void ZeroNvmeOffload::waitWrites(Slot& slot) {
  for (SwapFile::Ticket t : slot.writes) file_->wait(t);
  slot.writes.clear();
}

void ZeroNvmeOffload::load(int64_t k, Slot& slot) {
  if (slot.group == k) return;  // still holds what was last written for k
  waitReads(slot);
  waitWrites(slot);  // the buffer is about to be overwritten
  slot.group = k;
  for (size_t j = 0; j < groups_[k].regions; ++j)
    slot.reads.push_back(file_->read(fileOffset(k, j), region(slot, j), regionIoBytes(k)));
}

void ZeroNvmeOffload::setShardHooks(std::function<void(size_t)> before, std::function<void(size_t)> after) {
  before_ = std::move(before);
  after_ = std::move(after);
}

void ZeroNvmeOffload::step() {
  if (!file_) {  // no states to keep (SGD without momentum) or no elements here
    if (before_) {
      for (size_t i = 0; i < shards_.size(); ++i) before_(i);
    }
    optimizer_->step();
    if (after_) {
      for (size_t i = 0; i < shards_.size(); ++i) after_(i);
    }
    return;
  }
  const int64_t n = subGroups();
  const size_t resident = slots_.size();
  auto states = [&](int64_t k) {
    size_t count = 0;
    for (size_t pi : groups_[k].pieces) count += pieces_[pi].names.size();
    return count;
  };
  for (int64_t k = 0; k < n; ++k) {
    Slot& slot = slots_[k % resident];
    load(k, slot);
    if (options_.pipeline_read && resident > 1 && k + 1 < n) load(k + 1, slots_[(k + 1) % resident]);
    waitReads(slot);
    waitWrites(slot);  // k's own last write (it stayed in memory): the step must not race it
    const size_t before = states(k);
    if (before_) {
      for (size_t pi : groups_[k].pieces) {
        if (pieces_[pi].shard_offset == 0) before_(pieces_[pi].shard);
      }
    }
    stepGroup(k, slot);
    if (after_) {
      for (size_t pi : groups_[k].pieces) {
        const Piece& p = pieces_[pi];
        if (p.shard_offset + p.numel == shards_[p.shard].var.numel()) after_(p.shard);
      }
    }
    if (states(k) != before) {
      // The step created k's states (the first step does): the optimizer's tensors, copied into
      // the swap buffer and freed, would stay in the caching allocator in as many size classes
      // as the pieces have sizes, never asked for again: give them back at once, or the first
      // step would hold the whole partition's states after all.
      CachingAllocator::instance().emptyCache();
    }
    for (size_t j = 0; j < groups_[k].regions; ++j)
      slot.writes.push_back(file_->write(fileOffset(k, j), region(slot, j), regionIoBytes(k)));
    if (!options_.pipeline_write) waitWrites(slot);
  }
}

void ZeroNvmeOffload::stepGroup(int64_t k, Slot& slot) {
  SubGroup& g = groups_[k];
  const size_t elem = dtypeSize(dtype_);
  auto& groups = optimizer_->paramGroups();
  std::vector<std::vector<Variable>> saved(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) saved[i] = std::move(groups[i].params);
  for (size_t pi : g.pieces) {
    Piece& p = pieces_[pi];
    const Shard& s = shards_[p.shard];
    p.var.tensor() = s.var.tensor().narrow(0, p.shard_offset, p.numel);  // the shard's storage may move
    p.var.setGrad(s.var.hasGrad() ? s.var.grad().narrow(0, p.shard_offset, p.numel) : Tensor());
    auto& buffers = optimizer_->state(p.var).buffers;
    for (size_t j = 0; j < p.names.size(); ++j)
      buffers[p.names[j]] = Tensor::fromBlob(region(slot, j) + p.group_offset * elem, {p.numel}, dtype_);
    groups[s.group].params.push_back(p.var);
  }
  auto restore = [&] {
    for (size_t i = 0; i < groups.size(); ++i) groups[i].params = std::move(saved[i]);
  };
  try {
    optimizer_->step();
  } catch (...) {
    restore();
    throw;
  }
  restore();
  // Take the states out, copying those the step created into the buffer.
  for (size_t pi : g.pieces) {
    Piece& p = pieces_[pi];
    p.var.setGrad(Tensor());
    auto& buffers = optimizer_->state(p.var).buffers;
    for (auto& [name, t] : buffers) {
      auto it = std::find(p.names.begin(), p.names.end(), name);
      if (it == p.names.end()) {
        LOCKSTEP_ENFORCE(static_cast<int64_t>(p.names.size()) < states_, NotSupportedError,
                         "ZeRO NVMe offload: ", optimizer_->name(),
                         " keeps more state tensors per parameter than the ", states_, " it declares (", name,
                         ")");
        it = p.names.insert(p.names.end(), name);
      }
      char* dst = region(slot, static_cast<size_t>(it - p.names.begin())) + p.group_offset * elem;
      LOCKSTEP_CHECK(t.dtype() == dtype_ && t.numel() == p.numel && t.isContiguous(), "state '", name,
                     "' is ", t.describe());
      if (t.dataPtr() != dst) std::memcpy(dst, t.dataPtr(), p.numel * elem);
    }
    buffers.clear();
    g.regions = std::max(g.regions, p.names.size());
  }
}

optim::OptimizerStateDict ZeroNvmeOffload::stateDict() {
  optim::OptimizerStateDict out;
  const auto& groups = optimizer_->paramGroups();
  for (const optim::ParamGroup& g : groups) out.param_groups.push_back({g.options, {}});
  std::vector<int64_t> steps(shards_.size(), 0);
  for (const Piece& p : pieces_) steps[p.shard] = std::max(steps[p.shard], optimizer_->state(p.var).step);
  for (size_t i = 0; i < shards_.size(); ++i) {
    out.param_groups[shards_[i].group].params.push_back(shards_[i].opt_index);
    if (steps[i] > 0)
      out.state.insert(std::to_string(shards_[i].opt_index) + ".step",
                       Tensor::scalar(static_cast<double>(steps[i]), DType::i64));
  }
  if (!file_) return out;
  const size_t elem = dtypeSize(dtype_);
  std::vector<std::unordered_map<std::string, Tensor>> full(shards_.size());
  for (int64_t k = 0; k < subGroups(); ++k) {
    if (groups_[k].regions == 0) continue;
    Slot& slot = slots_[k % slots_.size()];
    load(k, slot);
    waitReads(slot);
    for (size_t pi : groups_[k].pieces) {
      const Piece& p = pieces_[pi];
      for (size_t j = 0; j < p.names.size(); ++j) {
        Tensor& t = full[p.shard][p.names[j]];
        if (!t.defined()) t = Tensor::zeros({shards_[p.shard].var.numel()}, dtype_);
        std::memcpy(static_cast<char*>(t.dataPtr()) + p.shard_offset * elem,
                    region(slot, j) + p.group_offset * elem, p.numel * elem);
      }
    }
  }
  for (size_t i = 0; i < shards_.size(); ++i) {
    for (auto& [name, t] : full[i]) out.state.insert(std::to_string(shards_[i].opt_index) + "." + name, t);
  }
  return out;
}

void ZeroNvmeOffload::loadStateDict(const optim::OptimizerStateDict& sd) {
  auto& groups = optimizer_->paramGroups();
  LOCKSTEP_ENFORCE(sd.param_groups.size() == groups.size(), ValueError, "ZeRO NVMe offload: the state has ",
                   sd.param_groups.size(), " parameter groups, the optimizer ", groups.size());
  std::vector<optim::HyperParams> options(groups.size());
  for (size_t gi = 0; gi < groups.size(); ++gi)
    options[gi] = optimizer_->loadedOptions(gi, sd.param_groups[gi].options);
  std::unordered_map<int64_t, size_t> shard_of;
  for (size_t i = 0; i < shards_.size(); ++i) shard_of.emplace(shards_[i].opt_index, i);
  // Validate everything before changing anything.
  std::vector<int64_t> steps(shards_.size(), 0);
  std::vector<std::map<std::string, Tensor>> tensors(shards_.size());
  for (const auto& [key, t] : sd.state) {
    const size_t dot = key.find('.');
    auto it =
        dot == std::string::npos ? shard_of.end() : shard_of.find(std::atoll(key.substr(0, dot).c_str()));
    LOCKSTEP_ENFORCE(it != shard_of.end(), ValueError, "ZeRO NVMe offload: state key '", key,
                     "' names none of this rank's ", shards_.size(), " shards");
    const std::string name = key.substr(dot + 1);
    if (name == "step") {
      steps[it->second] = optimizer_->loadedStep(key, t);
      continue;
    }
    LOCKSTEP_ENFORCE(t.numel() == shards_[it->second].var.numel(), ValueError, "ZeRO NVMe offload: state '",
                     key, "' has ", t.numel(), " elements, its shard ", shards_[it->second].var.numel());
    tensors[it->second][name] = t.contiguous();
    LOCKSTEP_ENFORCE(static_cast<int64_t>(tensors[it->second].size()) <= states_, ValueError,
                     "ZeRO NVMe offload: shard ", key.substr(0, dot), " has more state tensors than the ",
                     states_, " ", optimizer_->name(), " keeps");
  }
  for (size_t i = 0; i < shards_.size(); ++i) {
    std::vector<std::string> keys;
    if (steps[i] > 0) keys.push_back("step");
    for (const auto& [name, t] : tensors[i]) keys.push_back(name);
    if (keys.empty()) continue;  // never stepped
    optimizer_->checkStateKeys(options.at(shards_[i].group), keys,
                               "the state of shard " + std::to_string(shards_[i].opt_index));
  }
  for (size_t gi = 0; gi < groups.size(); ++gi) groups[gi].options = std::move(options[gi]);
  const size_t elem = dtypeSize(dtype_);
  for (Slot& slot : slots_) {
    waitReads(slot);
    waitWrites(slot);
    slot.group = -1;
  }
  for (int64_t k = 0; k < subGroups(); ++k) {
    SubGroup& g = groups_[k];
    g.regions = 0;
    Slot* slot = file_ ? &slots_[k % slots_.size()] : nullptr;
    for (size_t pi : g.pieces) {
      Piece& p = pieces_[pi];
      auto& st = optimizer_->state(p.var);
      st.step = steps[p.shard];
      st.buffers.clear();
      p.names.clear();
      for (const auto& [name, t] : tensors[p.shard]) {
        LOCKSTEP_ENFORCE(slot != nullptr, ValueError, "ZeRO NVMe offload: state '", name, "' for ",
                         optimizer_->name(), ", which keeps no state here");
        p.names.push_back(name);
        Tensor src = t.narrow(0, p.shard_offset, p.numel);
        Tensor dst =
            Tensor::fromBlob(region(*slot, p.names.size() - 1) + p.group_offset * elem, {p.numel}, dtype_);
        dst.copyFrom(src);  // casts to the parameters' dtype
      }
      g.regions = std::max(g.regions, p.names.size());
    }
    if (g.regions == 0) continue;
    for (size_t j = 0; j < g.regions; ++j)
      slot->writes.push_back(file_->write(fileOffset(k, j), region(*slot, j), regionIoBytes(k)));
    waitWrites(*slot);
    slot->group = k;
  }
}

int64_t ZeroNvmeOffload::memoryBytes() const {
  return static_cast<int64_t>(slots_.size()) * states_ * static_cast<int64_t>(region_bytes_);
}

}  // namespace lockstep::parallel
