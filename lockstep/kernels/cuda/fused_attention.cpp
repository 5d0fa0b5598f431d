#include "lockstep/kernels/cuda/fused_attention.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "lockstep/kernels/cuda/elementwise.h"
#include "lockstep/kernels/cuda/handles.h"
#include "lockstep/kernels/gpu_math_options.h"
#include "lockstep/tensor/cuda/runtime.h"
#include "lockstep/util/env.h"
#include "lockstep/util/error.h"

#if LOCKSTEP_CUDNN_FRONTEND
// The frontend's dynamic-loading mode: it reaches cuDNN through cudnn_dlhandle (set below to the
// libcudnn this process links) and opens NVRTC and the driver only if an engine needs them, so
// lockstep links neither (a machine without a GPU driver still starts every program).
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING 1
#include <cudnn_frontend.h>
#include <dlfcn.h>

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}
#endif

namespace lockstep::kernels::cuda {

namespace {

namespace rt = ::lockstep::cuda;

enum class Mode { automatic, cudnn, lockstep };

std::atomic<int64_t> g_runs{0}, g_in_place_runs{0}, g_chunked_runs{0};
std::atomic<int64_t> g_key_chunk{0};  // setFusedAttentionKeyChunk's; 0: chosen by size

Mode mode() {
  static const Mode m = [] {
    const std::string v = env::get("LOCKSTEP_GPU_ATTENTION").value_or("auto");
    if (v == "auto" || v.empty()) return Mode::automatic;
    if (v == "cudnn") return Mode::cudnn;
    if (v == "lockstep") return Mode::lockstep;
    throw ValueError("LOCKSTEP_GPU_ATTENTION='" + v +
                     "': use auto (cuDNN's fused attention where it applies), cudnn or lockstep");
  }();
  return m;
}

// Prints "lockstep: scaled_dot_product_attention on cuda:N (<dtype>, head dim D[, causal]): <choice>"
// the first time each (device, dtype, head dim, mask, choice) comes up. The line is formatted only
// then: a call that runs lockstep's kernel (every one, with dropout) costs one set lookup.
void announce(const Tensor& q, bool causal, const std::string& choice) {
  static std::mutex mu;
  static std::set<std::tuple<int, int, int64_t, bool, std::string>> said;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!said.emplace(q.device().index, static_cast<int>(q.dtype()), q.size(3), causal, choice).second)
      return;
  }
  std::fprintf(stderr, "lockstep: scaled_dot_product_attention on %s (%s, head dim %lld%s): %s\n",
               deviceName(q.device()).c_str(), dtypeName(q.dtype()), static_cast<long long>(q.size(3)),
               causal ? ", causal" : "", choice.c_str());
}

// Why cuDNN's fused attention cannot take these inputs, or nullptr when it may.
const char* unsuitable(const Tensor& q, const AttentionParams& p) {
  if (q.dtype() != DType::bf16 && q.dtype() != DType::f16)
    return "cuDNN's fused attention takes bf16 and f16 only";
  if (p.dropout_p > 0.0)
    return "dropout (lockstep's kernel draws the CPU's Philox mask; cuDNN draws its own)";
  if (q.size(3) % 8 != 0 || q.size(3) > 256) return "cuDNN's fused attention takes head dims 8, 16, ..., 256";
#if !LOCKSTEP_CUDNN_FRONTEND
  return "this build has no cuDNN frontend headers (cmake/LockstepCudnnFrontend.cmake)";
#else
  return nullptr;
#endif
}

// Decides between the kernels: true for cuDNN; false (after announcing why) for lockstep's; a
// NotSupportedError under LOCKSTEP_GPU_ATTENTION=cudnn.
bool wantFused(const Tensor& q, const AttentionParams& p) {
  if (mode() == Mode::lockstep) {
    announce(q, p.causal, "lockstep's kernel (LOCKSTEP_GPU_ATTENTION=lockstep)");
    return false;
  }
  if (!gpuMathOptions().cudnn_sdp) {
    announce(q, p.causal, "lockstep's kernel (GpuMathOptions::cudnn_sdp off)");
    return false;
  }
  const char* why = unsuitable(q, p);
  if (why == nullptr) return true;
  LOCKSTEP_ENFORCE(mode() != Mode::cudnn, NotSupportedError, "LOCKSTEP_GPU_ATTENTION=cudnn, but ", why,
                   " (got ", q.describe(), p.dropout_p > 0.0 ? detail::concat(", dropout ", p.dropout_p) : "",
                   "); unset it to let lockstep's kernel take such inputs");
  announce(q, p.causal, std::string("lockstep's kernel: ") + why);
  return false;
}

#if LOCKSTEP_CUDNN_FRONTEND

#define LOCKSTEP_STR2(x) #x
#define LOCKSTEP_STR(x) LOCKSTEP_STR2(x)

namespace fe = cudnn_frontend;
using Graph = fe::graph::Graph;
using TensorAttr = fe::graph::Tensor_attributes;

// The tensors' uids in both graphs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// Whether cuDNN can read or write t in place: contiguous last dim, strides positive multiples of 8
// elements (a broadcast, stride-0 axis is no layout to write into), 16-byte aligned.
bool inPlace(const Tensor& t) {
  bool ok = t.stride(3) == 1 && reinterpret_cast<uintptr_t>(t.devicePtr()) % 16 == 0;
  for (int d = 0; d < 3 && ok; ++d) ok = (t.stride(d) > 0 && t.stride(d) % 8 == 0) || t.size(d) == 1;
  return ok;
}

// t itself when cuDNN can read it in place, else a contiguous copy.
Tensor readable(const Tensor& t) { return inPlace(t) ? t : t.contiguous(); }

// q, k and v as cuDNN reads them (in place where their strides allow) and their sizes.
struct Problem {
  Tensor q, k, v;
  int64_t b, h, t, d, s;
  Problem(const Tensor& q0, const Tensor& k0, const Tensor& v0)
      : q(readable(q0)),
        k(readable(k0)),
        v(readable(v0)),
        b(q.size(0)),
        h(q.size(1)),
        t(q.size(2)),
        d(q.size(3)),
        s(k.size(2)) {}
  /// No rows, keys or head dims: lockstep's kernel keeps its edge rules for these.
  bool empty() const { return b * h * t == 0 || s == 0 || d == 0; }
};

// t's strides for cuDNN, a size-1 axis's given the value it would have in a dense layout (it never
// moves an index, but cuDNN may check every stride's alignment).
std::vector<int64_t> stridesOf(const Tensor& t) {
  std::vector<int64_t> s{t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
  int64_t inner = 1;
  for (int d = 3; d >= 0; --d) {
    if (t.size(d) == 1) s[static_cast<size_t>(d)] = inner;
    inner *= t.size(d);
  }
  return s;
}

std::shared_ptr<TensorAttr> input(Graph& g, const char* name, Uid uid, const Tensor& t) {
  return g.tensor(TensorAttr().set_name(name).set_uid(uid).set_dim(t.shape()).set_stride(stridesOf(t)));
}

// Outputs (O, dQ, dK, dV) are token-major: memory [B, T, H, D] seen as [B, H, T, D], as the CPU
// kernel's (kernels::AttentionOutput), so merging the heads (transpose(1, 2) then reshape to
// [B, T, H * D]) is a view, not a copy: the copies a transformer layer made of O in the forward and
// of dQ, dK and dV in the backward are gone.
void output(const std::shared_ptr<TensorAttr>& a, Uid uid, const Shape& shape) {
  a->set_output(true).set_uid(uid).set_dim(shape).set_stride(
      {shape[1] * shape[2] * shape[3], shape[3], shape[1] * shape[3], 1});
}

// An output written into the caller's tensor t (its shape and strides).
void outputInto(const std::shared_ptr<TensorAttr>& a, Uid uid, const Tensor& t) {
  a->set_output(true).set_uid(uid).set_dim(t.shape()).set_stride(stridesOf(t));
}

Tensor tokenMajor(const Shape& shape, DType dtype, const Device& device) {
  return Tensor::empty({shape[0], shape[2], shape[1], shape[3]}, dtype, MemoryFormat::contiguous, device)
      .transpose(1, 2);
}

// The softmax stats [B, H, t, 1] f32, packed (cuDNN before 9.26 misreads any other layout, and the
// frontend refuses one).
void statsLayout(const std::shared_ptr<TensorAttr>& a, int64_t b, int64_t h, int64_t t) {
  a->set_dim({b, h, t, 1}).set_stride({h * t, t, 1, 1}).set_data_type(fe::DataType_t::FLOAT);
}

// One built graph (or why cuDNN declined the problem).
struct Plan {
  std::shared_ptr<Graph> graph;
  int64_t workspace = 0;
  std::string declined;
};

// Points the frontend at the libcudnn this process links, once: "" or why it could not.
const std::string& frontendReady() {
  static const std::string why = []() -> std::string {
    void* h = dlopen("libcudnn.so." LOCKSTEP_STR(CUDNN_MAJOR), RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) h = dlopen("libcudnn.so." LOCKSTEP_STR(CUDNN_MAJOR), RTLD_NOW);
    if (h == nullptr) return detail::concat("cannot open libcudnn for the cuDNN frontend: ", dlerror());
    cudnn_frontend::cudnn_dlhandle = h;
    return "";
  }();
  return why;
}

// Builds g for the problem: "" on success, else cuDNN's reason.
std::string build(Graph& g, cudnnHandle_t h, int64_t& workspace) {
  auto step = [](fe::error_t e, const char* what) {
    return e.is_good() ? std::string() : detail::concat(what, ": ", e.get_message());
  };
  std::string why = frontendReady();
  if (why.empty()) why = step(g.validate(), "validate");
  if (why.empty()) why = step(g.build_operation_graph(h), "build_operation_graph");
  if (why.empty()) why = step(g.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  if (why.empty()) why = step(g.check_support(h), "check_support");
  if (why.empty()) why = step(g.build_plans(h), "build_plans");
  if (why.empty()) why = step(g.get_workspace_size(workspace), "get_workspace_size");
  return why;
}

std::shared_ptr<Graph> newGraph(DType t) {
  auto g = std::make_shared<Graph>();
  g->set_io_data_type(t == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// The plans built so far, by problem (shapes, strides, dtype, device, options); kept for the
// process's life, as cuDNN's convolution choices are (kernels/cuda/conv.cpp).
std::mutex g_plans_mu;
std::map<std::vector<int64_t>, std::shared_ptr<const Plan>> g_plans;

// The plan for key, made by make() the first time (fresh is then true).
template <typename Make>
std::shared_ptr<const Plan> planFor(const std::vector<int64_t>& key, bool& fresh, Make&& make) {
  fresh = false;
  {
    std::lock_guard<std::mutex> lock(g_plans_mu);
    if (auto it = g_plans.find(key); it != g_plans.end()) return it->second;
  }
  std::shared_ptr<const Plan> plan = make();
  std::lock_guard<std::mutex> lock(g_plans_mu);
  auto [it, inserted] = g_plans.emplace(key, std::move(plan));
  fresh = inserted;
  return it->second;
}

std::vector<int64_t> keyOf(int pass, const Tensor& q, const AttentionParams& p,
                           std::initializer_list<const Tensor*> ts) {
  uint32_t scale_bits = 0;
  const float scale = static_cast<float>(p.scale);
  std::memcpy(&scale_bits, &scale, sizeof scale);
  std::vector<int64_t> key{pass,     q.device().index, static_cast<int64_t>(q.dtype()),
                           p.causal, scale_bits,       gpuMathOptions().cudnn_deterministic};
  for (const Tensor* t : ts) {
    key.insert(key.end(), t->shape().begin(), t->shape().end());
    key.insert(key.end(), t->strides().begin(), t->strides().end());
  }
  return key;
}

// Runs plan's graph on the current stream of q's device.
void execute(const Plan& plan, const Tensor& q, std::unordered_map<int64_t, void*>& pack, const char* op) {
  const rt::Stream stream = rt::currentStream(q.device().index);
  cudnnHandle_t h = dnnHandle(stream);
  Tensor ws = plan.workspace > 0 ? scratch(static_cast<size_t>(plan.workspace), q.device()) : Tensor();
  fe::error_t e = plan.graph->execute(h, pack, ws.defined() ? ws.devicePtr() : nullptr);
  LOCKSTEP_ENFORCE(e.is_good(), Error, op, " (cuDNN fused attention, ", q.describe(),
                   ") failed: ", e.get_message());
}

// Says whether to use plan, announcing the outcome when the plan is fresh.
bool usable(const Plan& plan, bool fresh, const Tensor& q, const AttentionParams& p, const char* pass) {
  if (plan.declined.empty()) {
    if (fresh) announce(q, p.causal, "cuDNN's fused SDPA (cuDNN " + std::to_string(cudnnGetVersion()) + ")");
    return true;
  }
  LOCKSTEP_ENFORCE(mode() != Mode::cudnn, NotSupportedError,
                   "LOCKSTEP_GPU_ATTENTION=cudnn, but cuDNN declined the attention ", pass, " of ",
                   q.describe(), ": ", plan.declined, "; unset it to let lockstep's kernel take it");
  if (fresh)
    announce(q, p.causal,
             detail::concat("lockstep's kernel: cuDNN declined the ", pass, " (", plan.declined, ")"));
  return false;
}

// The backward's graph for one call: q, k, v, out and gout as they are laid out, the stats packed,
// dQ, dK and dV written with g's tensors' strides (the caller's, or token-major).
std::shared_ptr<const Plan> backwardPlan(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                         const Tensor& gout, const AttentionParams& p,
                                         const AttentionGrads& g, bool& fresh) {
  return planFor(keyOf(1, q, p, {&q, &k, &v, &out, &gout, &g.gq, &g.gk, &g.gv}), fresh, [&] {
    auto made = std::make_shared<Plan>();
    made->graph = newGraph(q.dtype());
    Graph& gr = *made->graph;
    auto Q = input(gr, "Q", kQ, q), K = input(gr, "K", kK, k), V = input(gr, "V", kV, v);
    auto O = input(gr, "O", kO, out), dO = input(gr, "dO", kDO, gout);
    auto stats = gr.tensor(TensorAttr().set_name("Stats").set_uid(kStats));
    statsLayout(stats, q.size(0), q.size(1), q.size(2));
    auto attrs = fe::graph::SDPA_backward_attributes()
                     .set_name("lockstep_sdpa_backward")
                     .set_causal_mask(p.causal)
                     .set_attn_scale(static_cast<float>(p.scale))
                     .set_deterministic_algorithm(gpuMathOptions().cudnn_deterministic);
    auto [dQ, dK, dV] = gr.sdpa_backward(Q, K, V, O, dO, stats, attrs);
    outputInto(dQ, kDQ, g.gq);
    outputInto(dK, kDK, g.gk);
    outputInto(dV, kDV, g.gv);
    made->declined = build(gr, dnnHandle(rt::currentStream(q.device().index)), made->workspace);
    return std::shared_ptr<const Plan>(std::move(made));
  });
}

void runBackward(const Plan& plan, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& gout, const Tensor& lse, const AttentionGrads& g) {
  std::unordered_map<int64_t, void*> pack{
      {kQ, q.devicePtr()},     {kK, k.devicePtr()},     {kV, v.devicePtr()},
      {kO, out.devicePtr()},   {kDO, gout.devicePtr()}, {kStats, lse.devicePtr()},
      {kDQ, g.gq.devicePtr()}, {kDK, g.gk.devicePtr()}, {kDV, g.gv.devicePtr()}};
  execute(plan, q, pack, "scaled_dot_product_attention backward");
}

int64_t roundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Keys per call of the backward, or 0 for one call. cuDNN's deterministic backward (its
// dP-workspace algorithm) keeps B x H x T x S x 2 bytes of scratch (T and S rounded up to 64): 3.2
// GB at B 2, 12 heads, T = S = 8,192, against 100 MB for q, k, v and out. Past max(256 MiB, 4 x
// those inputs' bytes) the keys go in chunks (multiples of 128) whose scratch stays under that
// bound, so the backward's memory grows linearly with the sequence, as the dQ-atomics algorithm's
// and FlashAttention's do. GPT-2's T = 1,024 with heads of 64 is one call (its scratch is exactly
// 4 x the inputs). The nondeterministic backward's scratch is linear already: one call.
int64_t keyChunk(const Problem& pr, const Tensor& out) {
  if (const int64_t forced = g_key_chunk.load(std::memory_order_relaxed); forced > 0) return forced;
  if (!gpuMathOptions().cudnn_deterministic) return 0;
  const int64_t per_key = pr.b * pr.h * roundUp(pr.t, 64) * 2;
  const int64_t inputs = (pr.q.numel() + pr.k.numel() + pr.v.numel() + out.numel()) *
                         static_cast<int64_t>(dtypeSize(pr.q.dtype()));
  const int64_t bound = std::max<int64_t>(int64_t{256} << 20, 4 * inputs);
  if (per_key * roundUp(pr.s, 64) <= bound) return 0;
  return std::max<int64_t>(128, bound / per_key / 128 * 128);
}

// The backward a chunk of keys [a, e) per cuDNN call (keyChunk): each call takes the query rows
// that may attend those keys ([a, T) under the causal mask, whose top-left diagonal then starts at
// the chunk's first key and first row; every row without it) with their O, dO and logsumexp rows, so
// each dP row is the whole row's (softmax statistics and rowsum(dO * O) are per row), and writes
// the chunk's dK and dV whole (every row that attends them took part) and its rows' share of dQ in
// q's dtype, which are summed in f32 in key order (deterministic) and rounded again: each share is
// rounded once more than one call's dQ. Keys no row attends (causal with S > T) get zero gradients.
// The stats rows are copied packed for each call (cuDNN before 9.26 reads no other layout). nullopt,
// with nothing run, when cuDNN declines a chunk.
std::optional<AttentionGrads> chunkedBackward(const Problem& pr, const Tensor& out, const Tensor& gout,
                                              const Tensor& lse, const AttentionParams& p, AttentionGrads g,
                                              int64_t chunk) {
  const Tensor &q = pr.q, &k = pr.k, &v = pr.v;
  const int64_t t = pr.t, s = pr.s;
  Tensor part = tokenMajor(q.shape(), q.dtype(), q.device());  // each call's dQ rows
  struct Call {
    int64_t a, e, qa;
    std::shared_ptr<const Plan> plan;  // null: no row attends these keys
    AttentionGrads g;
  };
  std::vector<Call> calls;
  bool fresh_plans = false;
  for (int64_t a = 0; a < s;) {
    // A tail under 64 keys joins the chunk before it (cuDNN refuses one key by one row).
    const int64_t e = s - (a + chunk) < 64 ? s : a + chunk, qa = p.causal ? a : 0;
    Call c{a, e, qa, nullptr, {Tensor(), g.gk.narrow(2, a, e - a), g.gv.narrow(2, a, e - a)}};
    if (qa < t) {
      const int64_t rows = t - qa;
      c.g.gq = part.narrow(2, qa, rows);
      bool fresh = false;
      c.plan = backwardPlan(q.narrow(2, qa, rows), k.narrow(2, a, e - a), v.narrow(2, a, e - a),
                            out.narrow(2, qa, rows), gout.narrow(2, qa, rows), p, c.g, fresh);
      fresh_plans = fresh_plans || fresh;
      if (!c.plan->declined.empty()) {
        if (fresh)
          announce(q, p.causal,
                   "backward in one call: cuDNN declined a chunk of " + std::to_string(chunk) + " keys (" +
                       c.plan->declined + ")");
        return std::nullopt;
      }
    }
    calls.push_back(std::move(c));
    a = e;
  }
  if (fresh_plans)
    announce(
        q, p.causal,
        "cuDNN's fused SDPA backward in chunks of " + std::to_string(chunk) + " keys (scratch linear in T)");
  Tensor acc = tokenMajor(q.shape(), DType::f32, q.device());
  for (size_t i = 0; i < calls.size(); ++i) {
    Call& c = calls[i];
    if (!c.plan) {
      c.g.gk.zero();
      c.g.gv.zero();
      continue;
    }
    const int64_t rows = t - c.qa;
    runBackward(*c.plan, q.narrow(2, c.qa, rows), k.narrow(2, c.a, c.e - c.a), v.narrow(2, c.a, c.e - c.a),
                out.narrow(2, c.qa, rows), gout.narrow(2, c.qa, rows), lse.narrow(2, c.qa, rows).contiguous(),
                c.g);
    if (i == 0) {
      acc.copyFrom(part);  // the first chunk's keys start at 0: every row attends them
    } else {
      Tensor acc_rows = acc.narrow(2, c.qa, rows);
      addInto(acc_rows, c.g.gq, 1.0);
    }
  }
  g.gq.copyFrom(acc);
  g_chunked_runs.fetch_add(1, std::memory_order_relaxed);
  return g;
}

#endif  // LOCKSTEP_CUDNN_FRONTEND

}  // namespace

int64_t fusedAttentionRuns() { return g_runs.load(std::memory_order_relaxed); }

std::optional<AttentionOutput> fusedAttentionForward(const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                                     const AttentionParams& p) {
  if (!wantFused(q0, p)) return std::nullopt;
#if !LOCKSTEP_CUDNN_FRONTEND
  return std::nullopt;
#else
  const Problem pr(q0, k0, v0);
  if (pr.empty()) return std::nullopt;
  const Tensor &q = pr.q, &k = pr.k, &v = pr.v;
  const int64_t b = pr.b, h = pr.h, t = pr.t;
  const rt::DeviceGuard guard(q.device().index);
  bool fresh = false;
  const auto plan = planFor(keyOf(0, q, p, {&q, &k, &v}), fresh, [&] {
    auto made = std::make_shared<Plan>();
    made->graph = newGraph(q.dtype());
    Graph& g = *made->graph;
    auto Q = input(g, "Q", kQ, q), K = input(g, "K", kK, k), V = input(g, "V", kV, v);
    auto attrs = fe::graph::SDPA_attributes()
                     .set_name("lockstep_sdpa")
                     .set_generate_stats(true)
                     .set_causal_mask(p.causal)
                     .set_attn_scale(static_cast<float>(p.scale));
    auto [O, stats] = g.sdpa(Q, K, V, attrs);
    output(O, kO, q.shape());
    stats->set_output(true).set_uid(kStats);
    statsLayout(stats, b, h, t);
    made->declined = build(g, dnnHandle(rt::currentStream(q.device().index)), made->workspace);
    return std::shared_ptr<const Plan>(std::move(made));
  });
  if (!usable(*plan, fresh, q, p, "forward")) return std::nullopt;
  AttentionOutput r{tokenMajor(q.shape(), q.dtype(), q.device()),
                    Tensor::empty({b, h, t}, DType::f32, MemoryFormat::contiguous, q.device())};
  std::unordered_map<int64_t, void*> pack{{kQ, q.devicePtr()},
                                          {kK, k.devicePtr()},
                                          {kV, v.devicePtr()},
                                          {kO, r.out.devicePtr()},
                                          {kStats, r.lse.devicePtr()}};
  execute(*plan, q, pack, "scaled_dot_product_attention");
  g_runs.fetch_add(1, std::memory_order_relaxed);
  return r;
#endif
}

std::optional<AttentionGrads> fusedAttentionBackward(const Tensor& gout0, const Tensor& q0, const Tensor& k0,
                                                     const Tensor& v0, const Tensor& out0, const Tensor& lse0,
                                                     const AttentionParams& p, const AttentionGrads* into) {
  if (!wantFused(q0, p)) return std::nullopt;
#if !LOCKSTEP_CUDNN_FRONTEND
  return std::nullopt;
#else
  const Problem pr(q0, k0, v0);
  if (pr.empty()) return std::nullopt;
  const Tensor &q = pr.q, &k = pr.k, &v = pr.v;
  if (into) {
    const bool fits = into->gq.shape() == q.shape() && into->gk.shape() == k.shape() &&
                      into->gv.shape() == v.shape() && into->gq.dtype() == q.dtype() &&
                      into->gk.dtype() == q.dtype() && into->gv.dtype() == q.dtype();
    if (!fits || !inPlace(into->gq) || !inPlace(into->gk) || !inPlace(into->gv)) return std::nullopt;
  }
  const Tensor out = readable(out0.to(q.dtype()));
  Tensor gout = readable(gout0.to(q.dtype()));
  if (cudnnGetVersion() < 90501 && gout.strides() != out.strides()) {
    // cuDNN before 9.5.1 reads dO as if it had O's strides (PyTorch re-lays it out for them too).
    Tensor same = Tensor::emptyStrided(out.shape(), out.strides(), q.dtype(), q.device());
    same.copyFrom(gout);
    gout = same;
  }
  const Tensor lse = lse0.to(DType::f32).contiguous();
  const rt::DeviceGuard guard(q.device().index);
  auto empty = [&](const Shape& shape) { return tokenMajor(shape, q.dtype(), q.device()); };
  const AttentionGrads g =
      into ? *into : AttentionGrads{empty(q.shape()), empty(k.shape()), empty(v.shape())};
  if (const int64_t chunk = keyChunk(pr, out); chunk > 0 && pr.s - chunk >= 64) {  // two chunks or more
    if (auto r = chunkedBackward(pr, out, gout, lse, p, g, chunk)) {
      g_runs.fetch_add(1, std::memory_order_relaxed);
      if (into) g_in_place_runs.fetch_add(1, std::memory_order_relaxed);
      return r;
    }
  }
  bool fresh = false;
  const auto plan = backwardPlan(q, k, v, out, gout, p, g, fresh);
  // Gradients into the caller's layout that cuDNN declines: the caller takes cuDNN's own layout
  // and copies (said once, no error under LOCKSTEP_GPU_ATTENTION=cudnn).
  if (into && !plan->declined.empty()) {
    if (fresh)
      announce(q, p.causal,
               "gradients copied: cuDNN declined writing them in place (" + plan->declined + ")");
    return std::nullopt;
  }
  if (!usable(*plan, fresh, q, p, "backward")) return std::nullopt;
  runBackward(*plan, q, k, v, out, gout, lse, g);
  g_runs.fetch_add(1, std::memory_order_relaxed);
  if (into) g_in_place_runs.fetch_add(1, std::memory_order_relaxed);
  return g;
#endif
}

bool attentionBackwardInto(const Tensor& gout, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& out, const Tensor& lse, const AttentionParams& p,
                           const AttentionGrads& into) {
  for (const Tensor* t : {&k, &v, &gout, &out, &lse, &into.gq, &into.gk, &into.gv})
    checkSameDevice("scaled_dot_product_attention backward", q, *t);
  return fusedAttentionBackward(gout, q, k, v, out, lse, p, &into).has_value();
}

int64_t fusedAttentionInPlaceRuns() { return g_in_place_runs.load(std::memory_order_relaxed); }

int64_t fusedAttentionChunkedRuns() { return g_chunked_runs.load(std::memory_order_relaxed); }

int64_t setFusedAttentionKeyChunk(int64_t keys) {
  LOCKSTEP_ENFORCE(keys >= 0 && keys % 64 == 0, ValueError,
                   "fused attention key chunk: a multiple of 64 keys (0: chosen by size), got ", keys);
  return g_key_chunk.exchange(keys, std::memory_order_relaxed);
}

}  // namespace lockstep::kernels::cuda
