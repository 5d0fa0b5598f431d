// A language model's output layer and its cross entropy as one op (kernels/loss.h): the linear and
// loss kernels composed chunk by chunk over the rows, so that only one chunk's logits exist at a time.
#include <algorithm>
#include <cmath>

#include "lockstep/kernels/binary.h"
#include "lockstep/kernels/dispatch.h"
#include "lockstep/kernels/fusions.h"
#include "lockstep/kernels/linear.h"
#include "lockstep/kernels/loss.h"
#include "lockstep/kernels/reduce.h"
#include "lockstep/kernels/scale.h"

namespace lockstep::kernels {

namespace {

// The vocabulary the GEMMs see: on a GPU, rows of logits on 16-byte boundaries (cuBLASLt's fast
// kernels), when -inf logits in the added columns leave the loss as it is: not with label
// smoothing, whose term sums every logit of a row.
int64_t paddedVocab(int64_t vocab, const Tensor& x, const CrossEntropyParams& p) {
  if (!x.isCuda() || x.dtype() == DType::f64 || p.label_smoothing != 0.0) return vocab;
  const int64_t run = 16 / static_cast<int64_t>(dtypeSize(x.dtype()));
  return (vocab + run - 1) / run * run;
}

// Rows per chunk: about 128 MiB of logits on a GPU (each chunk's GEMM reads the whole weight, 77 MB
// at GPT-2's head in bf16: at 1,280 rows a chunk it does about 5x the FLOPs per weight byte that an
// H100 needs not to wait for memory, where 256 rows would be about at that limit; and the loss
// kernels get a block per row; not yet measured on a GPU), 64 MiB on a CPU (oneDNN reorders the
// weight for each GEMM: at GPT-2's head, 2,048 rows, 16 MiB chunks made forward + backward 7% slower
// than the composed ops in f32, 64 MiB as fast); whole GEMM tiles (128 rows) on a GPU.
int64_t chunkRows(int64_t n, int64_t vocab, const Tensor& x) {
  const int64_t row_bytes = vocab * static_cast<int64_t>(dtypeSize(x.dtype()));
  const int64_t budget = x.isCuda() ? int64_t{128} << 20 : int64_t{64} << 20;
  const int64_t align = x.isCuda() ? 128 : 16;
  return std::max<int64_t>(1, std::min(n, std::max(align, budget / row_bytes / align * align)));
}

DType computeDType(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// t (a fresh, dense result of this op's own) times the loss's gradient g (0-d), in place: what
// the forward took for dL/dloss = 1, scaled. bf16/f16 multiply in f32 and round once; on a GPU one
// pass reading g on the device (before, two casts and a broadcast multiply: 0.8 ms of GPT-2's step
// on an H200). A host g of exactly 1 costs nothing.
Tensor scaled(Tensor t, const Tensor& g) {
  if (!g.isCuda() && g.itemDouble() == 1.0) return t;
  scaleInPlace(t, g.device() == t.device() ? g : g.to(t.device()));
  return t;
}

}  // namespace

LinearCrossEntropy linearCrossEntropyForward(const Tensor& x, const Tensor& weight, const Tensor& target,
                                             const CrossEntropyParams& p, bool with_grad) {
  LOCKSTEP_ENFORCE(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1) &&
                       isFloating(x.dtype()) && x.dtype() == weight.dtype(),
                   ValueError, "linear_cross_entropy: x [N, C] and weight [V, C] of one floating dtype, got ",
                   x.describe(), " and ", weight.describe());
  LOCKSTEP_ENFORCE(target.dim() == 1 && target.size(0) == x.size(0) && target.dtype() == DType::i64,
                   ValueError, "linear_cross_entropy: target must be [N] i64 for x ", x.describe(), ", got ",
                   target.describe());
  LOCKSTEP_ENFORCE(x.device() == weight.device() && x.device() == target.device(), ValueError,
                   "linear_cross_entropy: x, weight and target must be on one device, got ",
                   deviceName(x.device()), ", ", deviceName(weight.device()), " and ",
                   deviceName(target.device()));
  LOCKSTEP_ENFORCE(p.reduction != LossReduction::none, ValueError,
                   "linear_cross_entropy: reduction none is not supported (each chunk's rows are summed as "
                   "they are computed); take cross entropy of the linear layer's logits for per-row losses");
  const int64_t n = x.size(0), c = x.size(1), vocab = weight.size(0);
  const int64_t vp = paddedVocab(vocab, x, p);
  const DType compute = computeDType(x.dtype());
  const DType loss_dtype = p.f32_loss && isLowPrecision(x.dtype()) ? DType::f32 : x.dtype();

  LinearCrossEntropy out;
  Tensor w = weight, bias;
  if (vp != vocab) {
    w = Tensor::empty({vp, c}, x.dtype(), MemoryFormat::contiguous, x.device());
    w.slice(0, vocab).copyFrom(weight);
    w.slice(vocab, vp).zero();
    bias = Tensor::zeros({vp}, x.dtype(), x.device());
    bias.slice(vocab, vp).fill(-INFINITY);
  }
  // Each row's share of the reduced loss: the per-row gradients come out already divided by the
  // rows kept (the mean's), as the composed cross entropy's backward divides them.
  const Tensor share = crossEntropyRowWeights(target, p.ignore_index, p.reduction, compute);
  CrossEntropyParams rows_p = p;
  rows_p.reduction = LossReduction::none;
  rows_p.classes = vocab;  // a target in the padding is out of range, as without it
  // On a GPU the rows' losses stay f32 until summed (its kernels compute them in f32 anyway), as the
  // composed cross entropy sums before it rounds; the host's loops would cast each chunk for it.
  if (x.isCuda() && isLowPrecision(x.dtype())) rows_p.f32_loss = true;
  const DType per_dtype = rows_p.f32_loss && isLowPrecision(x.dtype()) ? DType::f32 : x.dtype();
  Tensor per = Tensor::empty({n}, per_dtype, MemoryFormat::contiguous, x.device());
  if (with_grad) {
    out.grad_logits = Tensor::empty({n, vp}, x.dtype(), MemoryFormat::contiguous, x.device());
    out.weight = w;
  }
  const Tensor xs = x.contiguous();
  const int64_t rows = chunkRows(n, vp, x);
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t r1 = std::min(n, r0 + rows);
    const Tensor logits = linearForward(xs.slice(r0, r1), w, bias);
    const Tensor t = target.slice(r0, r1);
    Tensor rows_grad = with_grad ? out.grad_logits.slice(r0, r1) : Tensor();
    // A GPU's loss and gradient in one pass over the chunk's logits, the gradient straight into the
    // kept one; elsewhere (or with the fusion off) the forward, then the backward.
    if (with_grad && fusionEnabled(Fusion::loss_with_grad)) {
      if (auto both = crossEntropyWithGradInto(rows_grad, share.slice(r0, r1), logits, t, rows_p)) {
        per.slice(r0, r1).copyFrom(both->first);
        continue;
      }
    }
    auto [loss, lse] = crossEntropyForward(logits, t, rows_p);
    per.slice(r0, r1).copyFrom(loss);
    if (with_grad) {
      if (!crossEntropyBackwardInto(rows_grad, share.slice(r0, r1), logits, lse, t, rows_p))
        rows_grad.copyFrom(crossEntropyBackward(share.slice(r0, r1), logits, lse, t, rows_p));
    }
  }
  out.loss = reduce(ReduceOp::sum, binary(BinaryOp::mul, per.to(compute), share), {0});
  // The mean over no rows at all is 0 / 0, as PyTorch's (the sum of no shares above is 0).
  if (n == 0 && p.reduction == LossReduction::mean) out.loss.fill(NAN);
  if (out.loss.dtype() != loss_dtype) out.loss = out.loss.to(loss_dtype);
  return out;
}

std::pair<Tensor, Tensor> linearCrossEntropyBackward(const Tensor& gloss, const LinearCrossEntropy& forward,
                                                     const Tensor& x, int64_t vocab, bool need_x,
                                                     bool need_weight) {
  LOCKSTEP_ENFORCE(forward.grad_logits.defined(), ValueError,
                   "linear_cross_entropy backward: the forward ran without with_grad");
  LOCKSTEP_ENFORCE(gloss.numel() == 1, ValueError, "linear_cross_entropy backward: gradient ",
                   gloss.describe(), " does not fit the 0-d loss");
  Tensor dx, dw;
  if (need_x) dx = scaled(linearBackwardData(forward.grad_logits, forward.weight), gloss);
  if (need_weight) {
    const Tensor padded = linearBackwardWeights(forward.grad_logits, x.contiguous(), false).first;
    dw = scaled(padded.slice(0, vocab), gloss);
  }
  return {dx, dw};
}

}  // namespace lockstep::kernels
