#include "lockstep/parallel/pipeline/schedule.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <tuple>

#include "lockstep/util/error.h"

namespace lockstep::parallel {

namespace {

void checkStage(const PipelineShape& shape, int64_t stage) {
  LOCKSTEP_ENFORCE(stage >= 0 && stage < shape.stages, ValueError, "pipeline stage ", stage,
                   " is outside 0..", shape.stages - 1);
}

// A micro-batch's forward or backward on `stage` with the transfers around it.
void appendForward(std::vector<PipelineAction>& out, const PipelineShape& shape, int64_t stage, int64_t m) {
  if (stage > 0) out.push_back({PipelineOp::recv_activation, m});
  out.push_back({PipelineOp::forward, m});
  if (stage + 1 < shape.stages) out.push_back({PipelineOp::send_activation, m});
}

void appendBackward(std::vector<PipelineAction>& out, const PipelineShape& shape, int64_t stage, int64_t m) {
  if (stage + 1 < shape.stages) out.push_back({PipelineOp::recv_grad, m});
  out.push_back({PipelineOp::backward, m});
  if (stage > 0) out.push_back({PipelineOp::send_grad, m});
}

std::vector<PipelineAction> gpipe(const PipelineShape& shape, int64_t stage) {
  std::vector<PipelineAction> out;
  for (int64_t m = 0; m < shape.micro_batches; ++m) appendForward(out, shape, stage, m);
  for (int64_t m = 0; m < shape.micro_batches; ++m) appendBackward(out, shape, stage, m);
  return out;
}

bool isEven(int64_t v) { return v % 2 == 0; }

// DeepSpeed's TrainSchedule._step_to_micro_batch: which micro-batch `stage` runs at clock step
// `step`, and whether forward; the id may be outside 0..M-1 (the stage idles).
std::pair<int64_t, bool> stepToMicroBatch(const PipelineShape& shape, int64_t stage, int64_t step) {
  const int64_t s = shape.stages;
  if (isEven(step) && isEven(stage)) return {step / 2 - stage / 2, true};
  if (!isEven(step) && !isEven(stage)) return {(step - 1) / 2 - stage / 2, true};
  if (isEven(step)) return {step / 2 - s + (stage + 1) / 2, false};  // odd stage
  return {(step - 1) / 2 - s + 1 + stage / 2, false};                // even stage, odd step
}

std::vector<PipelineAction> oneForwardOneBackward(const PipelineShape& shape, int64_t stage) {
  std::vector<PipelineAction> out;
  auto valid = [&](int64_t m) { return m >= 0 && m < shape.micro_batches; };
  const bool has_prev = stage > 0, has_next = stage + 1 < shape.stages;
  int64_t prev = -1;
  const int64_t steps = 2 * (shape.micro_batches + shape.stages - 1);
  for (int64_t step = 0; step < steps; ++step) {
    const auto [m, is_forward] = stepToMicroBatch(shape, stage, step);
    // The transfers of the previous step's result and this step's input, in DeepSpeed's order:
    // on a link, one side's forward step meets the other side's backward step.
    if (is_forward) {
      if (valid(prev) && has_prev) out.push_back({PipelineOp::send_grad, prev});
      if (valid(m) && has_prev) out.push_back({PipelineOp::recv_activation, m});
    } else {
      if (valid(m) && has_next) out.push_back({PipelineOp::recv_grad, m});
      if (valid(prev) && has_next) out.push_back({PipelineOp::send_activation, prev});
    }
    if (valid(m)) out.push_back({is_forward ? PipelineOp::forward : PipelineOp::backward, m});
    prev = m;
  }
  return out;
}

struct Compute {
  bool forward;
  int64_t chunk, micro_batch;
};

// Megatron-LM's interleaved order of rank `stage`'s computes (forward_backward_pipelining_with_
// interleaving): the k-th forward runs chunk (k / S) % V of micro-batch (k / (S V)) S + k % S, the
// k-th backward the same micro-batch's chunk V - 1 - (k / S) % V.
std::vector<Compute> interleavedComputes(const PipelineShape& shape, int64_t stage) {
  const int64_t s = shape.stages, v = shape.chunks, total = shape.micro_batches * v;
  auto at = [&](int64_t k, bool forward) {
    const int64_t chunk = (k / s) % v;
    return Compute{forward, forward ? chunk : v - 1 - chunk, (k / (s * v)) * s + k % s};
  };
  const int64_t warmup = std::min(total, 2 * (s - stage - 1) + (v - 1) * s);
  std::vector<Compute> out;
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back(at(f, true));
  for (; f < total; ++f, ++b) {
    out.push_back(at(f, true));
    out.push_back(at(b, false));
  }
  for (; b < total; ++b) out.push_back(at(b, false));
  return out;
}

// Every rank's actions for interleaved 1F1B: the computes in Megatron's order, timed as early as
// their inputs allow (forward 1, backward 2, transfers free); each transfer is issued by both of
// its ranks at the time T its data is ready, so that all ranks issue their transfers in one global
// order (T, then transfer): the sender right after the compute that produced the data, the
// receiver before the compute it is busy with at T (its buffer posted early, so the transfer runs
// while it computes), at the latest before the compute that uses the data.
std::vector<std::vector<PipelineAction>> interleavedAll(const PipelineShape& shape) {
  const int64_t s = shape.stages, parts = shape.parts(), m_count = shape.micro_batches;
  std::vector<std::vector<Compute>> order;
  for (int64_t r = 0; r < s; ++r) order.push_back(interleavedComputes(shape, r));
  // end[forward?0:1][part * M + m]: when the compute ended, -1 before it ran.
  std::vector<std::vector<int64_t>> end(2, std::vector<int64_t>(static_cast<size_t>(parts * m_count), -1));
  auto endOf = [&](bool forward, int64_t part, int64_t m) -> int64_t& {
    return end[forward ? 0 : 1][static_cast<size_t>(part * m_count + m)];
  };
  // Sort keys: (when it is issued, 0 for a transfer and 1 for a compute, the transfer's T, a
  // tie-breaker) and the action.
  using Event = std::tuple<int64_t, int, int64_t, int64_t, PipelineAction>;
  std::vector<std::vector<Event>> events(static_cast<size_t>(s));
  std::vector<size_t> pos(static_cast<size_t>(s), 0);
  std::vector<int64_t> free_at(static_cast<size_t>(s), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < s; ++r) {
      const auto ri = static_cast<size_t>(r);
      while (pos[ri] < order[ri].size()) {
        const Compute& c = order[ri][pos[ri]];
        const int64_t part = c.chunk * s + r;
        int64_t ready = 0;
        if (c.forward && part > 0) ready = endOf(true, part - 1, c.micro_batch);
        if (!c.forward) ready = part + 1 < parts ? endOf(false, part + 1, c.micro_batch) : 0;
        if (ready < 0) break;  // its input is not computed yet
        const int64_t start = std::max(free_at[ri], ready);
        const int64_t finish = start + (c.forward ? 1 : 2);
        endOf(c.forward, part, c.micro_batch) = finish;
        free_at[ri] = finish;
        events[ri].emplace_back(
            start, 1, start, 0,
            PipelineAction{c.forward ? PipelineOp::forward : PipelineOp::backward, c.micro_batch, c.chunk});
        // The result's transfer: an activation to the next part, a gradient to the previous one.
        const int64_t to = c.forward ? part + 1 : part - 1;
        if (to >= 0 && to < parts) {
          const int64_t id = (c.forward ? 0 : 1) + 2 * (part * m_count + c.micro_batch);
          events[ri].emplace_back(
              finish, 0, finish, id,
              PipelineAction{c.forward ? PipelineOp::send_activation : PipelineOp::send_grad, c.micro_batch,
                             c.chunk});
          events[static_cast<size_t>(to % s)].emplace_back(
              finish, 0, finish, id,
              PipelineAction{c.forward ? PipelineOp::recv_activation : PipelineOp::recv_grad, c.micro_batch,
                             to / s});
        }
        ++pos[ri];
        progress = true;
      }
    }
  }
  for (int64_t r = 0; r < s; ++r)
    LOCKSTEP_CHECK(pos[static_cast<size_t>(r)] == order[static_cast<size_t>(r)].size(),
                   "interleaved 1F1B's compute order waits on itself", r);
  std::vector<std::vector<PipelineAction>> out(static_cast<size_t>(s));
  for (size_t r = 0; r < events.size(); ++r) {
    // A receive at T is issued before the compute running at T. Issue times stay in T's order (a
    // compute spanning T' < T spans T too or starts at T'), so the transfers keep the global order.
    for (Event& e : events[r]) {
      const PipelineOp op = std::get<4>(e).op;
      if (op != PipelineOp::recv_activation && op != PipelineOp::recv_grad) continue;
      for (const Event& c : events[r]) {
        const PipelineAction& a = std::get<4>(c);
        if (std::get<1>(c) != 1) continue;
        const int64_t start = std::get<0>(c), finish = start + (a.op == PipelineOp::forward ? 1 : 2);
        if (start < std::get<2>(e) && std::get<2>(e) < finish) std::get<0>(e) = start;
      }
    }
    std::sort(events[r].begin(), events[r].end(), [](const Event& a, const Event& b) {
      return std::tie(std::get<0>(a), std::get<1>(a), std::get<2>(a), std::get<3>(a)) <
             std::tie(std::get<0>(b), std::get<1>(b), std::get<2>(b), std::get<3>(b));
    });
    for (const Event& e : events[r]) out[r].push_back(std::get<4>(e));
  }
  return out;
}

}  // namespace

PipelineScheduleKind parsePipelineSchedule(const std::string& name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "gpipe") return PipelineScheduleKind::gpipe;
  if (lower == "1f1b") return PipelineScheduleKind::one_f_one_b;
  if (lower == "interleaved_1f1b" || lower == "interleaved1f1b")
    return PipelineScheduleKind::interleaved_1f1b;
  throw ValueError("pipeline.schedule '" + name +
                   "' is unknown; use 1f1b (one forward, one backward: at most `stages` micro-batches of "
                   "activations held), gpipe (all forwards, then all backwards) or interleaved_1f1b "
                   "(1F1B over pipeline.virtual_stages chunks per rank: a smaller bubble)");
}

const char* pipelineScheduleName(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::gpipe:
      return "gpipe";
    case PipelineScheduleKind::one_f_one_b:
      return "1f1b";
    case PipelineScheduleKind::interleaved_1f1b:
      return "interleaved_1f1b";
  }
  return "?";
}

void checkPipelineShape(PipelineScheduleKind kind, const PipelineShape& shape) {
  LOCKSTEP_ENFORCE(shape.stages >= 1, ValueError, "pipeline.stages must be at least 1, got ", shape.stages);
  LOCKSTEP_ENFORCE(shape.micro_batches >= 1, ValueError,
                   "a pipeline needs at least one micro-batch (gradient_accumulation_steps), got ",
                   shape.micro_batches);
  if (kind != PipelineScheduleKind::interleaved_1f1b) {
    LOCKSTEP_ENFORCE(shape.chunks == 1, ValueError, "pipeline.virtual_stages is ", shape.chunks,
                     " but schedule ", pipelineScheduleName(kind),
                     " runs one chunk per rank; use schedule interleaved_1f1b for several");
    return;
  }
  LOCKSTEP_ENFORCE(shape.chunks >= 2, ValueError,
                   "pipeline.schedule interleaved_1f1b needs pipeline.virtual_stages "
                   ">= 2 (chunks of layers per rank), got ",
                   shape.chunks);
  LOCKSTEP_ENFORCE(shape.stages >= 2, ValueError,
                   "pipeline.schedule interleaved_1f1b needs pipeline.stages >= 2, got ", shape.stages);
  LOCKSTEP_ENFORCE(shape.micro_batches % shape.stages == 0, ValueError,
                   "pipeline.schedule interleaved_1f1b runs micro-batches in rounds of pipeline.stages (",
                   shape.stages, "): gradient_accumulation_steps ", shape.micro_batches,
                   " must be a multiple of it (as torch's ScheduleInterleaved1F1B and Megatron-LM require)");
}

const char* pipelineOpName(PipelineOp op) {
  switch (op) {
    case PipelineOp::recv_activation:
      return "recv_activation";
    case PipelineOp::forward:
      return "forward";
    case PipelineOp::send_activation:
      return "send_activation";
    case PipelineOp::recv_grad:
      return "recv_grad";
    case PipelineOp::backward:
      return "backward";
    case PipelineOp::send_grad:
      return "send_grad";
    case PipelineOp::reduce_grads:
      return "reduce_grads";
    case PipelineOp::optimizer_step:
      return "optimizer_step";
  }
  return "?";
}

std::string toString(const PipelineAction& action) {
  std::string s = pipelineOpName(action.op);
  if (action.micro_batch >= 0) s += " " + std::to_string(action.micro_batch);
  if (action.chunk != 0) s += " chunk " + std::to_string(action.chunk);
  return s;
}

std::vector<PipelineAction> pipelineActions(PipelineScheduleKind kind, const PipelineShape& shape,
                                            int64_t stage) {
  checkPipelineShape(kind, shape);
  checkStage(shape, stage);
  std::vector<PipelineAction> out;
  if (kind == PipelineScheduleKind::gpipe)
    out = gpipe(shape, stage);
  else if (kind == PipelineScheduleKind::one_f_one_b)
    out = oneForwardOneBackward(shape, stage);
  else
    out = interleavedAll(shape)[static_cast<size_t>(stage)];
  out.push_back({PipelineOp::reduce_grads});
  out.push_back({PipelineOp::optimizer_step});
  return out;
}

int64_t peakActivationsInFlight(const std::vector<PipelineAction>& actions, int64_t chunk) {
  int64_t live = 0, peak = 0;
  for (const auto& a : actions) {
    if (chunk >= 0 && a.chunk != chunk) continue;
    if (a.op == PipelineOp::forward) peak = std::max(peak, ++live);
    if (a.op == PipelineOp::backward) --live;
  }
  return peak;
}

int64_t peakInputsHeld(const std::vector<PipelineAction>& actions, int64_t chunk) {
  std::set<int64_t> live, sends_grad;
  for (const auto& a : actions)
    if (a.chunk == chunk && a.op == PipelineOp::send_grad) sends_grad.insert(a.micro_batch);
  size_t peak = 0;
  for (const auto& a : actions) {
    if (a.chunk != chunk) continue;
    if (a.op == PipelineOp::recv_activation || a.op == PipelineOp::forward) {
      live.insert(a.micro_batch);
      peak = std::max(peak, live.size());
    }
    if (a.op == (sends_grad.count(a.micro_batch) ? PipelineOp::send_grad : PipelineOp::backward))
      live.erase(a.micro_batch);
  }
  return static_cast<int64_t>(peak);
}

double theoreticalBubble(const PipelineShape& shape) {
  LOCKSTEP_ENFORCE(shape.stages >= 1 && shape.micro_batches >= 1 && shape.chunks >= 1, ValueError,
                   "a pipeline needs at least one stage, micro-batch and chunk");
  return static_cast<double>(shape.stages - 1) /
         static_cast<double>(shape.chunks * shape.micro_batches + shape.stages - 1);
}

}  // namespace lockstep::parallel
