#include "lockstep/parallel/pipeline/pipeline_stage.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "lockstep/autograd/autocast.h"
#include "lockstep/kernels/accumulate.h"
#include "lockstep/kernels/binary.h"
#include "lockstep/kernels/norm.h"
#include "lockstep/nn/models/language_model.h"
#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/tensor/generator.h"
#include "lockstep/util/error.h"

namespace lockstep::parallel {

namespace {

// Tags keep the kinds of transfer between two stages apart, and the links between parts: a
// transfer between part p and part p + 1 has tag kind + kTagsPerLink * p.
constexpr int kShapeTag = 1, kActivationTag = 2, kGradTag = 3, kTiedTag = 4, kEvalShapeTag = 5, kEvalTag = 6;
constexpr int kTagsPerLink = 8;
int linkTag(int kind, int64_t link) { return kind + kTagsPerLink * static_cast<int>(link); }
// A shape header: rank, dtype, then up to kMaxDims sizes.
constexpr size_t kMaxDims = 8;
using ShapeHeader = std::array<int64_t, kMaxDims + 2>;

// What a stage sends before a tensor of a new shape: its rank, dtype and sizes. ValueError naming
// the stage when it has more dimensions than a header holds.
ShapeHeader headerOf(const Tensor& t, int64_t stage) {
  LOCKSTEP_ENFORCE(static_cast<size_t>(t.dim()) <= kMaxDims, ValueError, "pipeline stage ", stage,
                   "'s output has ", t.dim(), " dimensions; at most ", kMaxDims,
                   " can be sent between stages");
  ShapeHeader h{};
  h[0] = t.dim();
  h[1] = static_cast<int64_t>(t.dtype());
  for (int64_t d = 0; d < t.dim(); ++d) h[static_cast<size_t>(d) + 2] = t.size(d);
  return h;
}

std::pair<Shape, DType> shapeOf(const ShapeHeader& h) {
  return {Shape(h.begin() + 2, h.begin() + 2 + h[0]), static_cast<DType>(h[1])};
}

int64_t stageOfLayer(const std::vector<int64_t>& bounds, int64_t layer) {
  return static_cast<int64_t>(std::upper_bound(bounds.begin(), bounds.end(), layer) - bounds.begin()) - 1;
}

}  // namespace

PipelineStage::PipelineStage(nn::Module& model, std::shared_ptr<comm::ProcessGroup> group,
                             const PipelineStageOptions& options)
    : group_(std::move(group)), options_(options), sequence_(nn::layerSequence(model)) {
  LOCKSTEP_CHECK(group_ != nullptr, "a pipeline needs a process group");
  LOCKSTEP_ENFORCE(options.partition.stages == group_->size(), ValueError, "pipeline.stages is ",
                   options.partition.stages, " but the pipeline's process group has ", group_->size(),
                   " ranks; each rank runs one stage");
  stages_ = options.partition.stages;
  stage_ = group_->rank();
  const PipelineShape shape{stages_, options.micro_batches, options.virtual_stages};
  actions_ = pipelineActions(options.schedule, shape, stage_);  // checks the shape
  std::vector<PipelineLayerInfo> infos;
  for (const auto& layer : sequence_.layers) infos.push_back({layer->typeName(), layer->numParameters()});
  PartitionOptions parts = options.partition;
  parts.stages = shape.parts();
  if (options.virtual_stages > 1 && !parts.boundaries.empty())
    LOCKSTEP_ENFORCE(static_cast<int64_t>(parts.boundaries.size()) == parts.stages + 1, ValueError,
                     "pipeline.boundaries has ", parts.boundaries.size(), " values but ", stages_,
                     " stages x ", options.virtual_stages, " virtual_stages need ", parts.stages + 1,
                     " ([0, b1, ..., layers], one part per chunk)");
  const auto layer_count = static_cast<int64_t>(infos.size());
  LOCKSTEP_ENFORCE(options.virtual_stages == 1 || parts.stages <= layer_count, ValueError, "pipeline.stages ",
                   stages_, " x pipeline.virtual_stages ", options.virtual_stages, " = ", parts.stages,
                   " parts, but the model has only ", layer_count,
                   " layers to split; every part needs at least one layer: use fewer virtual_stages");
  bounds_ = partitionLayers(infos, parts);
  activation_slots_ = static_cast<size_t>(std::max<int64_t>(1, peakActivationsInFlight(actions_)));

  LOCKSTEP_ENFORCE(options.activation_checkpoint_interval >= 0, ValueError,
                   "pipeline.activation_checkpoint_interval must be >= 0 (0: off), got ",
                   options.activation_checkpoint_interval);
  std::set<const autograd::VariableImpl*> seen;
  for (int64_t c = 0; c < options.virtual_stages; ++c) {
    Chunk chunk;
    chunk.part = c * stages_ + stage_;
    chunk.slots.resize(static_cast<size_t>(std::max<int64_t>(1, peakInputsHeld(actions_, c))));
    for (int64_t l = bounds_[static_cast<size_t>(chunk.part)];
         l < bounds_[static_cast<size_t>(chunk.part) + 1]; ++l) {
      nn::Module* layer = sequence_.layers[static_cast<size_t>(l)].get();
      chunk.layers.push_back(layer);
      layers_.push_back(layer);
      for (const auto& p : layer->parameters())
        if (seen.insert(p.impl().get()).second) parameters_.push_back(p);
    }
    chunks_.push_back(std::move(chunk));
  }
  std::map<std::string, autograd::Variable> named;
  for (const auto& [name, p] : model.namedParameters()) named.emplace(name, p);
  for (const auto& tie : sequence_.tied) {
    std::set<int> holders;
    for (size_t l : tie.layers)
      holders.insert(static_cast<int>(stageOfLayer(bounds_, static_cast<int64_t>(l)) % stages_));
    if (holders.size() > 1 && holders.count(static_cast<int>(stage_)))
      tied_.emplace_back(named.at(tie.name), std::vector<int>(holders.begin(), holders.end()));
  }
}

Device PipelineStage::device() const {
  if (options_.device) return *options_.device;
  for (const auto& p : parameters_)
    if (p.tensor().defined()) return p.tensor().device();
  return Device::cpu();
}

std::vector<std::pair<int64_t, int64_t>> PipelineStage::layerRanges() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const Chunk& c : chunks_)
    out.emplace_back(bounds_[static_cast<size_t>(c.part)], bounds_[static_cast<size_t>(c.part) + 1]);
  return out;
}

bool PipelineStage::ownsParameter(const autograd::Variable& p) const {
  for (const auto& [param, holders] : tied_)
    if (param.impl() == p.impl()) return holders.front() == stage_;
  return true;
}

void PipelineStage::train(bool on) {
  for (nn::Module* layer : layers_) layer->train(on);
}

double PipelineStage::trainStep(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
                                const Loss& loss, optim::Optimizer* optimizer, double loss_scale) {
  const auto m_count = static_cast<size_t>(options_.micro_batches);
  LOCKSTEP_ENFORCE(stage_ != 0 || inputs.size() == m_count, ValueError, "pipeline stage 0 needs ", m_count,
                   " micro-batches of inputs, got ", inputs.size());
  LOCKSTEP_ENFORCE(stage_ + 1 != stages() || targets.size() == m_count, ValueError,
                   "the last pipeline stage needs ", m_count, " micro-batches of targets, got ",
                   targets.size());
  // Refused here, before any transfer, rather than by the next stage's receive.
  for (size_t m = 1; m < inputs.size(); ++m) {
    LOCKSTEP_ENFORCE(inputs[m].shape() == inputs[0].shape() && inputs[m].dtype() == inputs[0].dtype(),
                     ValueError, "pipeline micro-batch ", m, "'s input is ", dtypeName(inputs[m].dtype()),
                     " ", shapeToString(inputs[m].shape()), " but micro-batch 0's is ",
                     dtypeName(inputs[0].dtype()), " ", shapeToString(inputs[0].shape()),
                     "; every micro-batch must have one shape (drop the last "
                     "partial batch)");
  }
  for (nn::Module* layer : layers_) layer->zeroGrad(true);
  if (!replica_reducers_made_ && options_.data_group && options_.data_group->size() > 1)
    makeReplicaReducers();
  loss_sum_ = Tensor();
  loss_scale_ = loss_scale;
  if (!draws_) countDraws(stage_ == 0 ? inputs.front() : Tensor());
  Generator& rng = defaultGenerator();
  // Replicas draw their samples' part of one process's dropout masks, for this step. Set only where
  // the model draws at all (thread ranks share the generator).
  std::optional<BatchShareScope> share;
  if (sharesBatchDraws() && *draws_ > 0)
    share.emplace(rng, Generator::BatchShare{options_.data_group->size(), options_.data_group->rank()});
  const uint64_t rng_seed = rng.seed(), rng_base = rng.offset();
  auto chunk = [&](const PipelineAction& a) -> Chunk& { return chunks_[static_cast<size_t>(a.chunk)]; };
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::duration compute{}, gradient_phase{};
  std::vector<Clock::duration> forward_took(chunks_.size()), backward_took(chunks_.size());
  for (const PipelineAction& a : actions_) {
    // A compute first waits for its received tensor (idle time, not compute).
    if (a.op == PipelineOp::forward || a.op == PipelineOp::backward) awaitReceive(chunk(a), a);
    const Clock::time_point action_start = Clock::now();
    switch (a.op) {
      case PipelineOp::recv_activation:
        recvActivation(chunk(a), a.micro_batch);
        break;
      case PipelineOp::forward:
        // Micro-batch m draws where one process's m-th forward would, this chunk's layers after the
        // earlier parts': dropout masks are one process's whatever the stage count and schedule.
        if (*draws_ > 0)
          rng.setState(rng_seed,
                       rng_base + static_cast<uint64_t>(a.micro_batch) * *draws_ + chunk(a).draws_before);
        forward(chunk(a), a.micro_batch, inputs, targets, loss);
        break;
      case PipelineOp::send_activation:
        sendActivation(chunk(a), a.micro_batch);
        break;
      case PipelineOp::recv_grad:
        recvGrad(chunk(a), a.micro_batch);
        break;
      case PipelineOp::backward:
        backward(chunk(a), a.micro_batch);
        break;
      case PipelineOp::send_grad:
        sendGrad(chunk(a), a.micro_batch);
        break;
      case PipelineOp::reduce_grads:
        for (auto& p : pending_) p.work->wait();
        pending_.clear();
        // Replicas first (their buckets were launched during the last backwards), then the tied
        // sums over the stages of the averaged gradients: the same sum, and every copy the same bits.
        finishReplicaGrads();
        reduceTiedGrads();
        break;
      case PipelineOp::optimizer_step:
        if (optimizer) optimizer->step();
        break;
    }
    if (a.op == PipelineOp::forward || a.op == PipelineOp::backward) {
      const Clock::duration took = Clock::now() - action_start;
      compute += took;
      (a.op == PipelineOp::forward ? forward_took : backward_took)[static_cast<size_t>(a.chunk)] += took;
    }
    if (a.op == PipelineOp::reduce_grads || a.op == PipelineOp::optimizer_step)
      gradient_phase += Clock::now() - action_start;
  }
  if (*draws_ > 0) rng.setState(rng_seed, rng_base + m_count * *draws_);  // as after one process's step
  times_.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  times_.compute_s = std::chrono::duration<double>(compute).count();
  times_.gradient_phase_s = std::chrono::duration<double>(gradient_phase).count();
  times_.forward_s.clear();
  times_.backward_s.clear();
  for (size_t c = 0; c < chunks_.size(); ++c) {
    times_.forward_s.push_back(std::chrono::duration<double>(forward_took[c]).count());
    times_.backward_s.push_back(std::chrono::duration<double>(backward_took[c]).count());
  }
  // On a GPU the step's one read of its losses (not a wait per micro-batch).
  return stage_ + 1 == stages() && loss_sum_.defined() ? loss_sum_.itemDouble() / static_cast<double>(m_count)
                                                       : std::numeric_limits<double>::quiet_NaN();
}

void PipelineStage::forward(Chunk& chunk, int64_t m, const std::vector<Tensor>& inputs,
                            const std::vector<Tensor>& targets, const Loss& loss) {
  InFlight& slot = chunk.slots[static_cast<size_t>(m) % chunk.slots.size()];
  if (isFirstPart(chunk))
    slot.input = autograd::Variable(inputs[static_cast<size_t>(m)]);
  else
    slot.input = autograd::Variable(slot.input_buffer, true);  // received: awaitReceive
  const bool training = chunk.layers.front()->isTraining();
  {
    std::optional<autograd::AutocastGuard> autocast;
    if (options_.autocast) autocast.emplace(*options_.autocast);
    slot.output =
        nn::runBlocks(chunk.layers, slot.input, training ? options_.activation_checkpoint_interval : 0);
  }
  if (isLastPart(chunk)) {
    if (options_.autocast) slot.output = autograd::toDType(slot.output, DType::f32);
    slot.output = loss(slot.output, targets[static_cast<size_t>(m)]);
    const Tensor l = slot.output.tensor().to(DType::f64);
    if (loss_sum_.defined())
      kernels::addInto(loss_sum_, l);
    else
      loss_sum_ = l.dtype() == slot.output.tensor().dtype() ? l.clone() : l;
  }
}

void PipelineStage::backward(Chunk& chunk, int64_t m) {
  InFlight& slot = chunk.slots[static_cast<size_t>(m) % chunk.slots.size()];
  if (!slot.output.requiresGrad()) {
    // The first part with no parameters (an mlp's Flatten): nothing before it takes a gradient.
    slot.output = autograd::Variable();
    return;
  }
  // The chunk's last backward runs with its replicas' reducer armed: a bucket is launched as soon
  // as its gradients are final (DDP's overlap), and awaited after the schedule.
  const bool last = chunk.reducer && m == chunk.last_backward;
  if (last) {
    chunk.reducer->setSyncEnabled(true);
    chunk.reducer->prepareForBackward(slot.output);
  }
  const Tensor& out = slot.output.tensor();
  if (isLastPart(chunk)) {
    // Each micro-batch's mean loss weighs 1 / M: the gradients are those of the whole batch's mean.
    // One multiplication by loss_scale / M (exact for a power-of-two scale), as Engine::backward.
    slot.output.backward(Tensor::full(out.shape(), loss_scale_ / static_cast<double>(options_.micro_batches),
                                      out.dtype(), out.device()));
  } else {
    slot.output.backward(out.isChannelsLast() ? slot.grad_buffer.toFormat(MemoryFormat::channels_last)
                                              : slot.grad_buffer);
  }
  if (last) chunk.reducer->setSyncEnabled(false);  // until the next step's last backward
  slot.output = autograd::Variable();
}

void PipelineStage::awaitReceive(Chunk& chunk, const PipelineAction& a) {
  InFlight& slot = chunk.slots[static_cast<size_t>(a.micro_batch) % chunk.slots.size()];
  const bool forward = a.op == PipelineOp::forward;
  if (forward ? isFirstPart(chunk) : isLastPart(chunk)) return;  // the data, the loss
  std::shared_ptr<comm::Work>& work = forward ? slot.input_recv : slot.grad_recv;
  LOCKSTEP_CHECK(work != nullptr, "a compute before the receive of its input", toString(a), chunk.part);
  work->wait();
  work.reset();
}

void PipelineStage::send(const Tensor& t, int peer, int tag) {
  comm::SendRecvOptions o;
  o.tag = tag;
  Tensor data = t.contiguous();
  o.place = placeOf(data);
  pending_.push_back(
      {group_->send(data.devicePtr(), static_cast<size_t>(data.numel()), data.dtype(), peer, o), data});
}

void PipelineStage::recvActivation(Chunk& chunk, int64_t m) {
  comm::SendRecvOptions o;
  if (!chunk.in_shape) {
    ShapeHeader h{};
    o.tag = linkTag(kShapeTag, chunk.part - 1);
    group_->recv(h.data(), h.size(), DType::i64, prevRank(), o)->wait();
    chunk.in_shape.emplace(shapeOf(h));
  }
  InFlight& slot = chunk.slots[static_cast<size_t>(m) % chunk.slots.size()];
  LOCKSTEP_CHECK(slot.input_recv == nullptr && !slot.input.defined(), "an input slot still in use",
                 chunk.part, m);
  if (!slot.input_buffer.defined())
    slot.input_buffer =
        Tensor::empty(chunk.in_shape->first, chunk.in_shape->second, MemoryFormat::contiguous, device());
  o.tag = linkTag(kActivationTag, chunk.part - 1);
  o.place = placeOf(slot.input_buffer);
  // Posted now, waited for by the forward: the transfer runs while the stage computes.
  slot.input_recv =
      group_->recv(slot.input_buffer.devicePtr(), static_cast<size_t>(slot.input_buffer.numel()),
                   slot.input_buffer.dtype(), prevRank(), o);
}

void PipelineStage::sendActivation(Chunk& chunk, int64_t m) {
  const Tensor& out = chunk.slots[static_cast<size_t>(m) % chunk.slots.size()].output.tensor();
  if (!chunk.out_shape) {
    const ShapeHeader h = headerOf(out, stage_);
    chunk.out_shape.emplace(out.shape(), out.dtype());
    Tensor header =
        Tensor::fromVector<int64_t>(std::vector<int64_t>(h.begin(), h.end()), {int64_t(h.size())});
    send(header, nextRank(), linkTag(kShapeTag, chunk.part));
  }
  LOCKSTEP_ENFORCE(out.shape() == chunk.out_shape->first && out.dtype() == chunk.out_shape->second,
                   ValueError, "pipeline stage ", stage_, "'s output of micro-batch ", m, " is ",
                   dtypeName(out.dtype()), " ", shapeToString(out.shape()), " but the first step agreed on ",
                   dtypeName(chunk.out_shape->second), " ", shapeToString(chunk.out_shape->first),
                   "; every micro-batch must keep one shape");
  send(out, nextRank(), linkTag(kActivationTag, chunk.part));
}

void PipelineStage::recvGrad(Chunk& chunk, int64_t m) {
  LOCKSTEP_CHECK(chunk.out_shape.has_value(), "a gradient arrives before the stage sent its activation",
                 chunk.part);
  InFlight& slot = chunk.slots[static_cast<size_t>(m) % chunk.slots.size()];
  if (!slot.grad_buffer.defined())
    slot.grad_buffer =
        Tensor::empty(chunk.out_shape->first, chunk.out_shape->second, MemoryFormat::contiguous, device());
  comm::SendRecvOptions o;
  o.tag = linkTag(kGradTag, chunk.part);
  o.place = placeOf(slot.grad_buffer);
  slot.grad_recv = group_->recv(slot.grad_buffer.devicePtr(), static_cast<size_t>(slot.grad_buffer.numel()),
                                slot.grad_buffer.dtype(), nextRank(), o);
}

void PipelineStage::sendGrad(Chunk& chunk, int64_t m) {
  InFlight& slot = chunk.slots[static_cast<size_t>(m) % chunk.slots.size()];
  LOCKSTEP_CHECK(slot.input.hasGrad(), "stage's input got no gradient", stage_, m);
  send(slot.input.grad(), prevRank(), linkTag(kGradTag, chunk.part - 1));
  slot.input = autograd::Variable();
}

void PipelineStage::reduceTiedGrads() {
  // The first holder sums the holders' gradients in stage order and sends the sum back: every
  // copy gets the same bits.
  comm::SendRecvOptions o;
  o.tag = kTiedTag;
  for (auto& [param, holders] : tied_) {
    const Device where = param.tensor().device();
    Tensor grad = param.hasGrad() ? param.grad() : Tensor::zeros(param.shape(), param.dtype(), where);
    o.place = placeOf(grad);
    if (stage_ == holders.front()) {
      Tensor total = grad;
      for (size_t i = 1; i < holders.size(); ++i) {
        Tensor other = Tensor::empty(param.shape(), param.dtype(), MemoryFormat::contiguous, where);
        group_->recv(other.devicePtr(), static_cast<size_t>(other.numel()), other.dtype(), holders[i], o)
            ->wait();
        total = kernels::binary(kernels::BinaryOp::add, total, other);
      }
      total = total.contiguous();
      for (size_t i = 1; i < holders.size(); ++i)
        group_->send(total.devicePtr(), static_cast<size_t>(total.numel()), total.dtype(), holders[i], o)
            ->wait();
      param.setGrad(total);
    } else {
      Tensor mine = grad.contiguous();
      group_->send(mine.devicePtr(), static_cast<size_t>(mine.numel()), mine.dtype(), holders.front(), o)
          ->wait();
      Tensor total = Tensor::empty(param.shape(), param.dtype(), MemoryFormat::contiguous, where);
      group_->recv(total.devicePtr(), static_cast<size_t>(total.numel()), total.dtype(), holders.front(), o)
          ->wait();
      param.setGrad(total);
    }
  }
}

void PipelineStage::makeReplicaReducers() {
  replica_reducers_made_ = true;
  // Each chunk's last backward in the schedule; a parameter of several chunks (a tie within the
  // stage) has its gradient final only after the last of them, so that chunk reduces it.
  std::vector<size_t> last_at(chunks_.size(), 0);
  for (size_t i = 0; i < actions_.size(); ++i) {
    const PipelineAction& a = actions_[i];
    if (a.op != PipelineOp::backward) continue;
    chunks_[static_cast<size_t>(a.chunk)].last_backward = a.micro_batch;
    last_at[static_cast<size_t>(a.chunk)] = i;
  }
  std::map<const autograd::VariableImpl*, size_t> owner;
  for (size_t c = 0; c < chunks_.size(); ++c)
    for (nn::Module* layer : chunks_[c].layers)
      for (const auto& p : layer->parameters()) {
        auto [it, fresh] = owner.emplace(p.impl().get(), c);
        if (!fresh && last_at[c] > last_at[it->second]) it->second = c;
      }
  ReducerOptions ro;
  ro.buckets = options_.buckets;
  ro.finalize_in_backward = false;  // the input's gradient goes to the previous stage first
  for (size_t c = 0; c < chunks_.size(); ++c) {
    Chunk& chunk = chunks_[c];
    std::vector<autograd::Variable> params;
    std::vector<std::string> names;
    std::set<const autograd::VariableImpl*> taken;
    int64_t layer_index = bounds_[static_cast<size_t>(chunk.part)];
    for (nn::Module* layer : chunk.layers) {
      for (const auto& [name, p] : layer->namedParameters()) {
        if (owner.at(p.impl().get()) != c || !p.requiresGrad() || !isFloating(p.dtype()) ||
            !taken.insert(p.impl().get()).second)
          continue;
        params.push_back(p);
        names.push_back(
            ::lockstep::detail::concat("layer ", layer_index, " (", layer->typeName(), ") ", name));
      }
      ++layer_index;
    }
    if (!params.empty())
      chunk.reducer = std::make_unique<Reducer>(std::move(params), std::move(names), options_.data_group, ro);
  }
}

void PipelineStage::finishReplicaGrads() {
  int64_t in_backward = 0, buckets = 0;
  for (Chunk& chunk : chunks_) {
    if (!chunk.reducer) continue;
    in_backward += static_cast<int64_t>(chunk.reducer->lastLaunchOrder().size());
    buckets += static_cast<int64_t>(chunk.reducer->bucketAssignment().size());
    chunk.reducer->finishIteration();
  }
  times_.replica_buckets_launched_in_backward = in_backward;
  times_.replica_buckets = buckets;
}

}  // namespace lockstep::parallel

namespace lockstep::parallel {

double PipelineStage::clipGradNorm(double max_norm) {
  std::vector<Tensor> mine, all;
  for (const auto& p : parameters_) {
    if (!p.hasGrad()) continue;
    all.push_back(p.grad());
    if (ownsParameter(p)) mine.push_back(p.grad());
  }
  double squares = 0;
  if (!mine.empty()) {
    const double n = kernels::totalNorm(mine, 2.0).item<double>();
    squares = n * n;
  }
  group_->allreduce(&squares, 1, DType::f64)->wait();
  const double norm = std::sqrt(squares);
  if (!all.empty()) kernels::scaleByClipCoefficient(all, Tensor::scalar(norm, DType::f64), max_norm);
  return norm;
}

bool PipelineStage::sharesBatchDraws() const {
  return options_.one_process_dropout && options_.data_group && options_.data_group->size() > 1;
}

void PipelineStage::countDraws(const Tensor& first_input) {
  // One forward of micro-batch 0 through the stages in training mode, without gradients, each chunk
  // counting the default generator's counters its layers draw; the generator and the layers'
  // buffers (batch norm's running statistics) are put back as they were.
  Generator& rng = defaultGenerator();
  const uint64_t seed = rng.seed(), offset = rng.offset();
  std::vector<std::pair<Tensor, Tensor>> buffers;  // {the buffer, its copy}
  for (nn::Module* layer : layers_)
    for (auto& [name, b] : layer->namedBuffers()) buffers.emplace_back(b, b.clone());
  std::vector<int64_t> mine;
  forwardThroughChunks(first_input, &mine);
  // Drawn as a replica's share of the one-process batch, each draw covers the replicas' samples.
  if (sharesBatchDraws())
    for (int64_t& d : mine) d *= static_cast<int64_t>(options_.data_group->size());
  rng.setState(seed, offset);
  for (auto& [b, copy] : buffers) b.copyFrom(copy);
  std::vector<int64_t> all(static_cast<size_t>(stages_ * chunks()));
  group_->allgather(mine.data(), all.data(), mine.size(), DType::i64)->wait();
  // all[r * V + c] is rank r's chunk c, part c * S + r; before[p]: the draws of the parts before p.
  std::vector<uint64_t> before(all.size() + 1, 0);
  for (int64_t p = 0; p < stages_ * chunks(); ++p)
    before[static_cast<size_t>(p) + 1] =
        before[static_cast<size_t>(p)] +
        static_cast<uint64_t>(all[static_cast<size_t>((p % stages_) * chunks() + p / stages_)]);
  for (Chunk& chunk : chunks_) chunk.draws_before = before[static_cast<size_t>(chunk.part)];
  draws_ = before.back();
}

autograd::Variable PipelineStage::forwardOnly(const Tensor& input) {
  return forwardThroughChunks(input, nullptr);
}

autograd::Variable PipelineStage::forwardThroughChunks(const Tensor& input, std::vector<int64_t>* draws) {
  autograd::NoGradGuard no_grad;
  comm::SendRecvOptions o;
  Generator& rng = defaultGenerator();
  for (Chunk& chunk : chunks_) {
    Tensor x = input;
    if (!isFirstPart(chunk)) {
      ShapeHeader h{};
      o.tag = linkTag(kEvalShapeTag, chunk.part - 1);
      o.place = {};
      group_->recv(h.data(), h.size(), DType::i64, prevRank(), o)->wait();
      const auto [shape, dtype] = shapeOf(h);
      x = Tensor::empty(shape, dtype, MemoryFormat::contiguous, device());
      o.tag = linkTag(kEvalTag, chunk.part - 1);
      o.place = placeOf(x);
      group_->recv(x.devicePtr(), static_cast<size_t>(x.numel()), x.dtype(), prevRank(), o)->wait();
    }
    const uint64_t before = rng.offset();
    autograd::Variable out = autograd::Variable(x);
    for (nn::Module* layer : chunk.layers) out = (*layer)(out);
    if (draws) draws->push_back(static_cast<int64_t>(rng.offset() - before));
    if (isLastPart(chunk)) return out;
    const Tensor y = out.tensor().contiguous();
    const ShapeHeader h = headerOf(y, stage_);
    o.tag = linkTag(kEvalShapeTag, chunk.part);
    o.place = {};
    group_->send(h.data(), h.size(), DType::i64, nextRank(), o)->wait();
    o.tag = linkTag(kEvalTag, chunk.part);
    o.place = placeOf(y);
    group_->send(y.devicePtr(), static_cast<size_t>(y.numel()), y.dtype(), nextRank(), o)->wait();
  }
  return {};
}

}  // namespace lockstep::parallel
