#include "lockstep/kernels/cuda/blas.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/kernels/cuda/cublaslt.h"
#include "lockstep/kernels/cuda/handles.h"
#include "lockstep/kernels/gpu_math_options.h"
#include "lockstep/tensor/cuda/runtime.h"
#include "lockstep/tensor/shape.h"

namespace lockstep::kernels::cuda {

namespace {

namespace rt = ::lockstep::cuda;

// A matrix operand: rows x cols elements from ptr, element (i, j) at i * rs + j * cs, batch b at
// b * batch_stride. After normalise() one of rs, cs is 1 (row- or column-major, with a leading
// dimension cuBLASLt accepts).
struct Mat {
  const void* ptr = nullptr;
  int64_t rows = 0, cols = 0, rs = 0, cs = 0, batch_stride = 0;
  bool rowMajor() const { return cs == 1; }
};

// The strides of size-1 axes are free; false when no axis has unit stride or the other stride is too
// small to be a leading dimension (a broadcast axis, an overlapping view).
bool normalise(Mat& m) {
  if (m.cols <= 1) m.cs = 1;
  if (m.rows <= 1) m.rs = m.cs == 1 ? std::max<int64_t>(m.cols, 1) : 1;
  if (m.cs == 1 && m.rs >= std::max<int64_t>(m.cols, 1)) return true;
  return m.rs == 1 && m.cs >= std::max<int64_t>(m.rows, 1);
}

Mat rawMat(const Tensor& t) {
  const int64_t d = t.dim();
  return {t.devicePtr(), t.size(d - 2), t.size(d - 1), t.stride(d - 2), t.stride(d - 1), 0};
}

// The batch axes (all but the last two) of t collapsed into one stride; -1 when they do not collapse.
int64_t batchStride(const Tensor& t) {
  int64_t stride = -1, expected = 0;
  for (int64_t i = t.dim() - 3; i >= 0; --i) {
    if (t.size(i) == 1) continue;
    if (stride < 0) {
      stride = t.stride(i);
    } else if (t.stride(i) != expected) {
      return -1;
    }
    expected = t.stride(i) * t.size(i);
  }
  return stride < 0 ? 0 : stride;
}

// t as a matrix operand (with its batch stride); t becomes a contiguous copy where cuBLASLt cannot
// read it as it is.
Mat matOf(Tensor& t) {
  Mat m = rawMat(t);
  int64_t bs = batchStride(t);
  if (!normalise(m) || bs < 0) {
    t = t.contiguous();
    m = rawMat(t);
    normalise(m);
    bs = batchStride(t);
  }
  m.batch_stride = bs;
  return m;
}

cudaDataType_t blasType(DType t, const char* op) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f64:
      return CUDA_R_64F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      throw NotSupportedError(
          detail::concat(op, " on a GPU takes f32, f64, bf16 or f16 tensors, got ", dtypeName(t)));
  }
}

// The alignment every matrix of a batch keeps: of its pointer, leading dimension and batch stride.
uint32_t alignmentOf(const void* p, int64_t ld, int64_t batch_stride, size_t elem) {
  uintptr_t bits = reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(ld * elem) |
                   static_cast<uintptr_t>(batch_stride * elem) | uintptr_t{256};
  return static_cast<uint32_t>(bits & (~bits + 1));  // lowest set bit, at most 256
}

// One GEMM (batched): D[b] = X[b] @ Y[b] (+ bias) (+ beta * C[b]), D row-major [M, N] contiguous.
struct Gemm {
  const char* op = "matmul";
  DType dtype = DType::f32;  // X's and Y's, and D's unless `out` says otherwise
  int64_t batch = 1;
  Mat x, y;
  void* d = nullptr;
  int64_t ldd = 0;             // D's row pitch in elements (0: N, contiguous)
  const void* bias = nullptr;  // [N], through the bias epilogue, in D's dtype
  double beta = 0;
  // C, read when beta is nonzero: D itself unless set (then in D's layout and dtype).
  const void* c = nullptr;
  // D's (and C's) dtype when it differs from X's and Y's: f32 for bf16/f16 products (cuBLASLt's
  // CUBLAS_COMPUTE_32F with A/B in 16 bits and C/D in f32).
  std::optional<DType> out;
  // What the epilogue fuses into the GEMM ("the GELU", "the residual add"), for a GEMM the caller can
  // do without: runAlignedGemm returns false rather than throw when cuBLASLt has no algorithm for it.
  const char* fused = nullptr;
  // An activation in the epilogue (bf16, f16, f32; beta 0): gelu_aux writes gelu_tanh(X Y + bias)
  // to D and X Y + bias to aux; dgelu writes (X Y) * gelu_tanh'(aux) to D and, with bgrad, that
  // result's column sums to bgrad [N]. aux is [M, N] with D's row pitch.
  enum class Act { none, gelu_aux, dgelu } act = Act::none;
  void* aux = nullptr;
  void* bgrad = nullptr;
};

cublasLtEpilogue_t epilogueOf(const Gemm& g) {
  switch (g.act) {
    case Gemm::Act::gelu_aux:
      return g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case Gemm::Act::dgelu:
      return g.bgrad ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    case Gemm::Act::none:
      break;
  }
  return g.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

struct LtObjects {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtObjects() = default;
  LtObjects(const LtObjects&) = delete;
  LtObjects& operator=(const LtObjects&) = delete;
  ~LtObjects() {
    if (pref) cublasLt().cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLt().cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLt().cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLt().cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLt().cublasLtMatmulDescDestroy(desc);
  }
};

template <typename T>
void setDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value,
             const std::string& what) {
  LOCKSTEP_CUBLAS_CHECK(cublasLt().cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)), what);
}

void makeLayout(cublasLtMatrixLayout_t* l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                int64_t batch, int64_t batch_stride, const std::string& what) {
  LOCKSTEP_CUBLAS_CHECK(cublasLt().cublasLtMatrixLayoutCreate(l, type, rows, cols, ld), what);
  if (batch == 1) return;
  const int32_t count = static_cast<int32_t>(batch);
  LOCKSTEP_CUBLAS_CHECK(cublasLt().cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                                    &count, sizeof(count)),
                        what);
  LOCKSTEP_CUBLAS_CHECK(
      cublasLt().cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                  &batch_stride, sizeof(batch_stride)),
      what);
}

// cuBLASLt's fast GEMM kernels want every row on a 16-byte boundary and the dims it calls m (D's
// rows in its column-major view: our N) and k (our K) multiples of 16 bytes of elements. GPT-2's
// vocabulary (50,257 logits a row) breaks both; the heuristic then says "The number of rows in
// matrix D (50257) is not 8 aligned ... consider padding it" and picks a generic CUTLASS kernel
// (algo 24), which ran the LM head's forward and data-gradient GEMMs at ~115 TFLOP/s on an H200, a
// third of the step. A large GEMM therefore runs on zero-padded copies: N and K rounded up to 16
// bytes (zero rows and columns add nothing to the sums; D's extra columns are dropped) and every
// operand row on a 16-byte boundary. The copies (cudaMemcpy2DAsync, the pads cudaMemset2DAsync,
// all on the stream, so CUDA graphs capture them) cost far less than the slow kernel.
constexpr int64_t kStageBytes = int64_t{8} << 20;  // below this the slow kernel costs less

int64_t paddedPitch(int64_t width, size_t elem) {
  return (width * static_cast<int64_t>(elem) + 15) / 16 * 16;
}

cudaStream_t streamOn(const Device& device) { return rt::currentStream(device.index).handle(); }

void copyRows(void* dst, int64_t dpitch, const void* src, int64_t spitch, int64_t width, int64_t height,
              const Device& device) {
  LOCKSTEP_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dpitch), src, static_cast<size_t>(spitch),
                                        static_cast<size_t>(width), static_cast<size_t>(height),
                                        cudaMemcpyDeviceToDevice, streamOn(device)));
}

bool rowsAligned(const Mat& m, size_t elem) {
  return alignmentOf(m.ptr, m.rowMajor() ? m.rs : m.cs, 0, elem) >= 16;
}

// m [rows, cols] copied into `keep` as [rows_p, cols_p] (rows_p >= rows, cols_p >= cols) in the same
// major order, each contiguous run on a 16-byte boundary, the added rows and columns zero.
Mat padded(const Mat& m, int64_t rows_p, int64_t cols_p, size_t elem, const Device& device, Tensor& keep) {
  const int64_t e = static_cast<int64_t>(elem);
  const bool row_major = m.rowMajor();
  // In storage order: `height` runs of `width` contiguous elements, ld apart.
  const int64_t width = row_major ? m.cols : m.rows, height = row_major ? m.rows : m.cols;
  const int64_t width_p = row_major ? cols_p : rows_p, height_p = row_major ? rows_p : cols_p;
  const int64_t ld = row_major ? m.rs : m.cs, pitch = paddedPitch(width_p, elem);
  keep = Tensor::empty({height_p * pitch}, DType::u8, MemoryFormat::contiguous, device);
  auto* base = static_cast<uint8_t*>(keep.devicePtr());
  copyRows(base, pitch, m.ptr, ld * e, width * e, height, device);
  if (width_p > width) {
    LOCKSTEP_CUDA_CHECK(cudaMemset2DAsync(base + width * e, static_cast<size_t>(pitch), 0,
                                          static_cast<size_t>((width_p - width) * e),
                                          static_cast<size_t>(height), streamOn(device)));
  }
  if (height_p > height) {
    LOCKSTEP_CUDA_CHECK(cudaMemsetAsync(base + height * pitch, 0,
                                        static_cast<size_t>((height_p - height) * pitch), streamOn(device)));
  }
  Mat out;
  out.ptr = base;
  out.rows = rows_p;
  out.cols = cols_p;
  out.rs = row_major ? pitch / e : 1;
  out.cs = row_major ? 1 : pitch / e;
  return out;
}

bool runAlignedGemm(const Gemm& g, const Device& device);

// Which operands runGemm stages in padded copies (none: cuBLASLt's fast kernels take it as it is).
struct Staging {
  int64_t Kp = 0, Np = 0;
  bool x = false, y = false, d = false;
  bool any() const { return x || y || d; }
};

Staging stagingOf(const Gemm& g) {
  const int64_t M = g.x.rows, K = g.x.cols, N = g.y.cols;
  const size_t elem = dtypeSize(g.dtype);
  const int64_t e = static_cast<int64_t>(elem), run = 16 / e;
  Staging st;
  st.Kp = (K + run - 1) / run * run;
  st.Np = (N + run - 1) / run * run;
  const bool large = g.batch == 1 && g.ldd == 0 && (M * K + K * N + M * N) * e >= kStageBytes;
  st.x = large && (st.Kp != K || !rowsAligned(g.x, elem));
  st.y = large && (st.Kp != K || st.Np != N || !rowsAligned(g.y, elem));
  st.d = large && st.Np != N;
  return st;
}

void runGemm(const Gemm& g, const Device& device) {
  const int64_t M = g.x.rows, N = g.y.cols;
  const size_t elem = dtypeSize(g.dtype);
  const int64_t e = static_cast<int64_t>(elem);
  const Staging st = stagingOf(g);
  const int64_t Kp = st.Kp, Np = st.Np;
  const bool stage_x = st.x, stage_y = st.y, stage_d = st.d;
  if (!st.any()) {
    runAlignedGemm(g, device);
    return;
  }
  Gemm p = g;
  Tensor keep_x, keep_y, keep_d, keep_bias;
  if (stage_x) p.x = padded(g.x, M, Kp, elem, device, keep_x);
  if (stage_y) p.y = padded(g.y, Kp, Np, elem, device, keep_y);
  const int64_t pitch = paddedPitch(Np, elem);
  if (stage_d) {
    keep_d = Tensor::empty({M * pitch}, DType::u8, MemoryFormat::contiguous, device);
    if (g.beta != 0) copyRows(keep_d.devicePtr(), pitch, g.d, N * e, N * e, M, device);
    p.d = keep_d.devicePtr();
    p.ldd = pitch / e;
    if (g.bias) {  // the epilogue reads Np entries
      keep_bias = Tensor::zeros({Np * e}, DType::u8, device);
      LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(keep_bias.devicePtr(), g.bias, static_cast<size_t>(N * e),
                                          cudaMemcpyDeviceToDevice, streamOn(device)));
      p.bias = keep_bias.devicePtr();
    }
  }
  runAlignedGemm(p, device);
  if (stage_d) copyRows(g.d, N * e, keep_d.devicePtr(), pitch, N * e, M, device);
}

// Runs g; false (nothing run) only for a GEMM with an activation in its epilogue that cuBLASLt has
// no algorithm for. A plain GEMM without one is a NotSupportedError.
bool runAlignedGemm(const Gemm& g, const Device& device) {
  const int64_t M = g.x.rows, K = g.x.cols, N = g.y.cols;
  const std::string what =
      detail::concat(g.op, " ([", M, ", ", K, "] @ [", K, ", ", N, "]",
                     g.batch > 1 ? detail::concat(" x ", g.batch, " batches") : "", ", ", dtypeName(g.dtype),
                     g.out && *g.out != g.dtype ? detail::concat(" into ", dtypeName(*g.out)) : "", ", ",
                     deviceName(device), ")");
  LOCKSTEP_ENFORCE(g.batch <= INT32_MAX, NotSupportedError,
                   "cuBLASLt takes at most 2^31 - 1 batches: ", what);
  const cudaDataType_t type = blasType(g.dtype, g.op);
  const DType out = g.out.value_or(g.dtype);
  const cudaDataType_t out_type = blasType(out, g.op);
  const bool f64 = g.dtype == DType::f64;
  const size_t elem = dtypeSize(g.dtype), out_elem = dtypeSize(out);
  const void* c = g.c ? g.c : g.d;
  // Row-major D = X Y is column-major D^T = Y^T X^T: cuBLASLt's A is Y, its B is X, m = N, n = M.
  const cublasOperation_t ta = g.y.rowMajor() ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t tb = g.x.rowMajor() ? CUBLAS_OP_N : CUBLAS_OP_T;
  const int64_t lda = g.y.rowMajor() ? g.y.rs : g.y.cs, ldb = g.x.rowMajor() ? g.x.rs : g.x.cs;
  const cublasLtEpilogue_t epilogue = epilogueOf(g);

  // f32 in TF32 only when asked (PyTorch's torch.backends.cuda.matmul.allow_tf32, default off);
  // bf16/f16 accumulate in f32 either way.
  const bool tf32 = g.dtype == DType::f32 && gpuMathOptions().matmul_allow_tf32;
  const cublasComputeType_t compute = f64    ? CUBLAS_COMPUTE_64F
                                      : tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                             : CUBLAS_COMPUTE_32F;
  LtObjects lt;
  LOCKSTEP_CUBLAS_CHECK(cublasLt().cublasLtMatmulDescCreate(&lt.desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F),
                        what);
  setDesc(lt.desc, CUBLASLT_MATMUL_DESC_TRANSA, ta, what);
  setDesc(lt.desc, CUBLASLT_MATMUL_DESC_TRANSB, tb, what);
  setDesc(lt.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, what);
  if (g.bias) setDesc(lt.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias, what);
  if (g.bgrad) setDesc(lt.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(g.bgrad), what);
  if (g.aux) {
    // In cuBLASLt's column-major view the aux matrix is D's shape, [N, M], with D's leading dimension.
    setDesc(lt.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(g.aux), what);
    setDesc(lt.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(g.ldd > 0 ? g.ldd : N), what);
  }
  if (ta == CUBLAS_OP_N) {
    makeLayout(&lt.a, type, N, K, lda, g.batch, g.y.batch_stride, what);
  } else {
    makeLayout(&lt.a, type, K, N, lda, g.batch, g.y.batch_stride, what);
  }
  if (tb == CUBLAS_OP_N) {
    makeLayout(&lt.b, type, K, M, ldb, g.batch, g.x.batch_stride, what);
  } else {
    makeLayout(&lt.b, type, M, K, ldb, g.batch, g.x.batch_stride, what);
  }
  const int64_t ldd = g.ldd > 0 ? g.ldd : N;
  makeLayout(&lt.d, out_type, N, M, ldd, g.batch, M * ldd, what);

  const rt::Stream stream = rt::currentStream(device.index);
  const Workspace ws = blasWorkspace(stream);
  const cublasLtHandle_t handle = blasLtHandle(device.index);
  const uint32_t align_a = alignmentOf(g.y.ptr, lda, g.y.batch_stride, elem),
                 align_b = alignmentOf(g.x.ptr, ldb, g.x.batch_stride, elem),
                 align_d = alignmentOf(g.d, ldd, g.batch > 1 ? M * ldd : 0, out_elem),
                 align_c = alignmentOf(c, ldd, g.batch > 1 ? M * ldd : 0, out_elem);
  // The epilogue's vectors and aux matrix: cuBLASLt picks its algorithm for their pointers'
  // alignment too (cublasLt.h on BIAS_POINTER and EPILOGUE_AUX_POINTER), so they are part of the key:
  // a bias view of a packed buffer (ZeRO-3's flat parameters) may be less aligned than the last one.
  const int64_t align_epilogue = (g.bias ? alignmentOf(g.bias, 0, 0, out_elem) : 0) |
                                 (g.bgrad ? int64_t{alignmentOf(g.bgrad, 0, 0, elem)} << 12 : 0) |
                                 (g.aux ? int64_t{alignmentOf(g.aux, ldd, 0, elem)} << 24 : 0);

  // The heuristic's choice, once per problem and compute type (it depends on nothing else). Every
  // algorithm cuBLASLt offers is deterministic: a split-K reduction (CUBLASLT_REDUCTION_SCHEME_*)
  // either sums in a separate pass or in place in a fixed order kept by counters (cublasLt.h), and
  // each stream has a workspace of its own, which NVIDIA's reproducibility rule for cuBLAS asks for.
  // So the same problem gives the same bits on the same GPU model and library version.
  static std::mutex mutex;
  // nullopt: no algorithm (kept, so an epilogue cuBLASLt lacks is asked about once).
  static auto* chosen = new std::map<std::vector<int64_t>, std::optional<cublasLtMatmulAlgo_t>>();
  const std::vector<int64_t> key{device.index,
                                 static_cast<int64_t>(g.dtype),
                                 static_cast<int64_t>(out),
                                 g.batch,
                                 ta,
                                 tb,
                                 M,
                                 N,
                                 K,
                                 lda,
                                 ldb,
                                 ldd,
                                 g.y.batch_stride,
                                 g.x.batch_stride,
                                 epilogue,
                                 align_a,
                                 align_b,
                                 align_d,
                                 align_c,
                                 align_epilogue,
                                 g.beta != 0,
                                 compute};
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = chosen->find(key);
    if (it == chosen->end()) {
      LOCKSTEP_CUBLAS_CHECK(cublasLt().cublasLtMatmulPreferenceCreate(&lt.pref), what);
      const uint64_t max_ws = ws.bytes;
      LOCKSTEP_CUBLAS_CHECK(cublasLt().cublasLtMatmulPreferenceSetAttribute(
                                lt.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)),
                            what);
      const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}};
      for (const auto& [attr, value] : aligns) {
        LOCKSTEP_CUBLAS_CHECK(
            cublasLt().cublasLtMatmulPreferenceSetAttribute(lt.pref, attr, &value, sizeof(value)), what);
      }
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const cublasStatus_t status = cublasLt().cublasLtMatmulAlgoGetHeuristic(
          handle, lt.desc, lt.a, lt.b, lt.d, lt.d, lt.pref, 1, &result, &found);
      // An epilogue (or a type mix) this cuBLASLt does not know for the problem may be refused
      // outright: no algorithm.
      if (status != CUBLAS_STATUS_SUCCESS && g.fused) {
        found = 0;
      } else if (status != CUBLAS_STATUS_SUCCESS) {
        throwBlasError(status, "cublasLtMatmulAlgoGetHeuristic in " + what);
      }
      std::optional<cublasLtMatmulAlgo_t> choice;
      if (found > 0) choice = result.algo;
      if (found == 0 && g.fused) {
        std::fprintf(stderr,
                     "lockstep: cuBLASLt has no algorithm for %s with %s in its epilogue; "
                     "it runs as a kernel of its own\n",
                     what.c_str(), g.fused);
      }
      it = chosen->emplace(key, choice).first;
    }
    if (!it->second) {
      LOCKSTEP_ENFORCE(g.fused, NotSupportedError, "cuBLASLt has no algorithm for ", what);
      return false;
    }
    algo = *it->second;
  }
  const float alpha32 = 1.0f, beta32 = static_cast<float>(g.beta);
  const double alpha64 = 1.0, beta64 = g.beta;
  const void* alpha = f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = f64 ? static_cast<const void*>(&beta64) : &beta32;
  const cublasStatus_t status =
      cublasLt().cublasLtMatmul(handle, lt.desc, alpha, g.y.ptr, lt.a, g.x.ptr, lt.b, beta, c, lt.d, g.d,
                                lt.d, &algo, ws.ptr, ws.bytes, stream.handle());
  // A fused epilogue the heuristic offered but the launch refuses (NOT_SUPPORTED): it runs as a
  // kernel of its own, from now on for this problem, as when no algorithm is offered.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED && g.fused) {
    std::lock_guard<std::mutex> lock(mutex);
    (*chosen)[key] = std::nullopt;
    std::fprintf(stderr,
                 "lockstep: cuBLASLt refused %s with %s in its epilogue at launch; it runs as a kernel of "
                 "its own\n",
                 what.c_str(), g.fused);
    return false;
  }
  if (status != CUBLAS_STATUS_SUCCESS) throwBlasError(status, "cublasLtMatmul in " + what);
  return true;
}

Shape withLast(const Tensor& t, int64_t last) {
  Shape s(t.shape().begin(), t.shape().end() - 1);
  s.push_back(last);
  return s;
}

int64_t leadingRows(const Tensor& t) { return shapeNumel(Shape(t.shape().begin(), t.shape().end() - 1)); }

// out [M, N] (contiguous) = x2 [M, K] @ y [K, N] (+ bias [N]), or out += x2 @ y when accumulate (no
// bias then); K may be 0.
void product(const char* op, Tensor out, Tensor x2, Tensor y, Tensor bias, bool accumulate = false) {
  const int64_t M = x2.size(0), K = x2.size(1), N = y.size(1);
  if (M == 0 || N == 0) return;
  if (bias.defined()) bias = bias.contiguous();
  if (accumulate) {
    LOCKSTEP_CHECK(!bias.defined(), op, ": an accumulating product takes no bias");
    if (K == 0) return;
  }
  if (K == 0) {
    if (bias.defined()) {
      out.copyFrom(bias.unsqueeze(0).expand({M, N}));
    } else {
      out.zero();
    }
    return;
  }
  Gemm g;
  g.op = op;
  g.dtype = out.dtype();
  g.d = out.devicePtr();
  if (bias.defined() && out.dtype() == DType::f64) {
    // cuBLASLt has no f64 epilogues: D = ones [M, 1] @ bias [1, N] first, then D += X Y.
    Tensor ones = Tensor::ones({M, 1}, DType::f64, out.device());
    Tensor row = bias.view({1, N});
    Gemm b = g;
    b.x = matOf(ones);
    b.y = matOf(row);
    runGemm(b, out.device());
    g.beta = 1;
  } else if (bias.defined()) {
    g.bias = bias.devicePtr();
  }
  if (accumulate) g.beta = 1;
  g.x = matOf(x2);
  g.y = matOf(y);
  runGemm(g, out.device());
}

}  // namespace

Tensor linearForward(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  checkSameDevice("linear", x, weight, bias);
  const int64_t N = weight.size(0), K = weight.size(1), M = leadingRows(x);
  Tensor y = Tensor::empty(withLast(x, N), x.dtype(), MemoryFormat::contiguous, x.device());
  product("linear", y.view({M, N}), x.reshape({M, K}), weight.transpose(0, 1), bias);
  return y;
}

Tensor linearBackwardData(const Tensor& gy, const Tensor& weight) {
  checkSameDevice("linear backward", gy, weight);
  const int64_t N = weight.size(0), K = weight.size(1), M = leadingRows(gy);
  Tensor gx = Tensor::empty(withLast(gy, K), gy.dtype(), MemoryFormat::contiguous, gy.device());
  product("linear backward (data)", gx.view({M, K}), gy.reshape({M, N}), weight, Tensor());
  return gx;
}

bool linearBackwardDataInto(Tensor& gx, const Tensor& gy, const Tensor& weight) {
  checkSameDevice("linear backward", gy, weight);
  checkSameDevice("linear backward", gx, weight);
  if (!gx.isContiguous()) return false;
  const int64_t N = weight.size(0), K = weight.size(1), M = leadingRows(gy);
  product("linear backward (data)", gx.view({M, K}), gy.reshape({M, N}), weight, Tensor(), true);
  return true;
}

std::pair<Tensor, Tensor> linearBackwardWeights(const Tensor& gy, const Tensor& x, bool with_bias) {
  checkSameDevice("linear backward", gy, x);
  const int64_t N = gy.size(gy.dim() - 1), K = x.size(x.dim() - 1), M = leadingRows(x);
  const Tensor gy2 = gy.reshape({M, N});
  Tensor gw = Tensor::empty({N, K}, x.dtype(), MemoryFormat::contiguous, x.device());
  product("linear backward (weight)", gw, gy2.transpose(0, 1), x.reshape({M, K}), Tensor());
  Tensor gb;
  if (with_bias) {
    gb = Tensor::empty({N}, gy.dtype(), MemoryFormat::contiguous, gy.device());
    // db = gy^T @ ones: the column sums as one GEMM, in the GEMM's f32 (f64) accumulation.
    product("linear backward (bias)", gb.view({N, 1}), gy2.transpose(0, 1),
            Tensor::ones({M, 1}, gy.dtype(), gy.device()), Tensor());
  }
  return {gw, gb};
}

namespace {
// A GEMM with work in its epilogue (an activation and its aux matrix, or a C matrix to add), when
// cuBLASLt's epilogues take it as it is: rows of whole 16-byte runs for D, C and aux (D and C in
// g.out's dtype when set), the aux matrix's leading dimension a multiple of 8 elements (cublasLt.h's
// rule for CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD with GELU), and no padded staging (runGemm's copies
// would need those matrices padded as well). False: nothing ran, the caller composes.
bool runEpilogueGemm(const Gemm& g, const Device& device) {
  if (g.dtype == DType::f64 || stagingOf(g).any()) return false;
  const size_t elem = dtypeSize(g.out.value_or(g.dtype));
  const int64_t N = g.y.cols;
  if (alignmentOf(g.d, N, 0, elem) < 16) return false;  // also the rows' N * elem bytes
  if (g.c != nullptr && alignmentOf(g.c, N, 0, elem) < 16) return false;
  if (g.aux != nullptr && (N % 8 != 0 || alignmentOf(g.aux, N, 0, dtypeSize(g.dtype)) < 16)) return false;
  return runAlignedGemm(g, device);
}

// d = x @ y with act in the epilogue and aux its [M, N] matrix (x and y may become copies).
Gemm epilogueGemm(const char* op, Gemm::Act act, Tensor& x, Tensor& y, const Tensor& d, const Tensor& aux) {
  Gemm g;
  g.op = op;
  g.dtype = d.dtype();
  g.x = matOf(x);
  g.y = matOf(y);
  g.d = d.devicePtr();
  g.act = act;
  g.aux = aux.devicePtr();
  g.fused = act == Gemm::Act::gelu_aux ? "the GELU" : "the GELU's derivative";
  return g;
}
}  // namespace

std::pair<Tensor, Tensor> linearGeluTanhForward(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  checkSameDevice("linear+gelu", x, weight, bias);
  const int64_t N = weight.size(0), K = weight.size(1), M = leadingRows(x);
  if (M == 0 || N == 0 || K == 0) return {};
  Tensor y = Tensor::empty(withLast(x, N), x.dtype(), MemoryFormat::contiguous, x.device());
  Tensor z = Tensor::empty(withLast(x, N), x.dtype(), MemoryFormat::contiguous, x.device());
  Tensor x2 = x.reshape({M, K}), wt = weight.transpose(0, 1), b = bias.defined() ? bias.contiguous() : bias;
  Gemm g = epilogueGemm("linear+gelu", Gemm::Act::gelu_aux, x2, wt, y, z);
  g.bias = b.defined() ? b.devicePtr() : nullptr;
  if (!runEpilogueGemm(g, x.device())) return {};
  return {y, z};
}

std::pair<Tensor, Tensor> linearBackwardDataGeluTanh(const Tensor& gy, const Tensor& weight, const Tensor& z,
                                                     bool with_bias) {
  checkSameDevice("linear+gelu backward", gy, weight);
  checkSameDevice("linear+gelu backward", gy, z);
  const int64_t N = weight.size(0), K = weight.size(1), M = leadingRows(gy);
  if (M == 0 || N == 0 || K == 0) return {};
  Tensor gz = Tensor::empty(withLast(gy, K), gy.dtype(), MemoryFormat::contiguous, gy.device());
  Tensor gb = with_bias ? Tensor::empty({K}, gy.dtype(), MemoryFormat::contiguous, gy.device()) : Tensor();
  Tensor gy2 = gy.reshape({M, N}), w = weight, zc = z.contiguous();
  Gemm g = epilogueGemm("linear+gelu backward (data)", Gemm::Act::dgelu, gy2, w, gz, zc);
  g.bgrad = with_bias ? gb.devicePtr() : nullptr;
  if (!runEpilogueGemm(g, gy.device())) return {};
  return {gz, gb};
}

Tensor linearResidualForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& residual) {
  checkSameDevice("linear+residual", x, weight, bias);
  checkSameDevice("linear+residual", x, residual);
  const DType out = residual.dtype();
  const bool narrow_in = x.dtype() == DType::bf16 || x.dtype() == DType::f16;
  // cuBLASLt's type mixes: D in X's dtype, or f32 for a 16-bit product (autocast's f32 residual
  // stream); f64 has no epilogues.
  if (x.dtype() == DType::f64 || !(out == x.dtype() || (out == DType::f32 && narrow_in))) return {};
  const int64_t N = weight.size(0), K = weight.size(1), M = leadingRows(x);
  if (M == 0 || N == 0 || K == 0 || !residual.isContiguous()) return {};
  Tensor y = Tensor::empty(residual.shape(), out, MemoryFormat::contiguous, x.device());
  Tensor x2 = x.reshape({M, K}), wt = weight.transpose(0, 1);
  // The bias epilogue reads D's dtype.
  const Tensor b = bias.defined() ? bias.to(out).contiguous() : Tensor();
  Gemm g;
  g.op = "linear+residual";
  g.dtype = x.dtype();
  g.out = out;
  g.x = matOf(x2);
  g.y = matOf(wt);
  g.d = y.devicePtr();
  g.c = residual.devicePtr();
  g.beta = 1;
  g.bias = b.defined() ? b.devicePtr() : nullptr;
  g.fused = "the residual add";
  if (!runEpilogueGemm(g, x.device())) return {};
  return y;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  checkSameDevice("matmul", a, b);
  const int64_t M = a.size(a.dim() - 2), K = a.size(a.dim() - 1), N = b.size(b.dim() - 1);
  const Shape batch = broadcastShapes(Shape(a.shape().begin(), a.shape().end() - 2),
                                      Shape(b.shape().begin(), b.shape().end() - 2), "matmul");
  Shape out_shape = batch, a_shape = batch, b_shape = batch;
  out_shape.insert(out_shape.end(), {M, N});
  a_shape.insert(a_shape.end(), {M, K});
  b_shape.insert(b_shape.end(), {K, N});
  Tensor out = Tensor::empty(out_shape, a.dtype(), MemoryFormat::contiguous, a.device());
  const int64_t B = shapeNumel(batch);
  if (B == 0 || M == 0 || N == 0) return out;
  if (K == 0) {
    out.zero();
    return out;
  }
  Tensor ae = a.expand(a_shape), be = b.expand(b_shape);
  Gemm g;
  g.dtype = a.dtype();
  g.batch = B;
  g.x = matOf(ae);
  g.y = matOf(be);
  g.d = out.devicePtr();
  if (B > 1 && g.y.batch_stride == 0 && g.x.rowMajor() && g.x.batch_stride == M * g.x.rs) {
    // Every batch shares b and a's rows follow each other: one GEMM of B*M rows.
    g.x.rows = B * M;
    g.batch = 1;
  }
  runGemm(g, out.device());
  return out;
}

}  // namespace lockstep::kernels::cuda
