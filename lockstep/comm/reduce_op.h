#pragma once
// Reduction operators and the element-wise kernels every backend uses to apply them.
#include <cstddef>
#include <cstdint>

#include "lockstep/util/dtype.h"

namespace lockstep::comm {

/// avg is sum followed by division by the group size (integer division for integer dtypes).
enum class ReduceOp : uint8_t { sum, avg, min, max, product };

/// "sum", "avg", ... for messages.
const char* reduceOpName(ReduceOp op);

/// dst[i] = op(a[i], b[i]) for i < n; dst may alias a or b. avg combines like sum. When copy is
/// set, copy[i] receives the same value in the same pass (saves re-reading dst). A divisor other
/// than 1 (sum and avg only) divides each combined value in the same pass, with the same result
/// as divideBy afterwards: the last combining step of an avg finishes it without another pass.
/// Thread-safe (pure). Half and BFloat16 are combined in float and rounded once per call.
void reduceInto(void* dst, const void* a, const void* b, size_t n, DType dtype, ReduceOp op,
                void* copy = nullptr, int64_t divisor = 1);
/// dst[i] /= divisor (finishes an avg). Thread-safe (pure).
void divideBy(void* dst, size_t n, DType dtype, int64_t divisor);

}  // namespace lockstep::comm
