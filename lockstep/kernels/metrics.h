#pragma once
// Evaluation metrics reduced where the logits are, so that an evaluation pass on a GPU reads back
// its sums once instead of copying every batch's logits to the host.
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

/// correct += the number of rows i of logits [n, c] whose prediction equals target[i]. The
/// prediction is the first column holding the row's largest value compared in f32, NaNs skipped
/// (a NaN in column 0 predicts column 0), as the loop `if (x[j] > x[best]) best = j` from best = 0
/// finds it. logits: floating, any strides; target: i64 [n]; correct: one i64 element; all three on
/// one device. On a GPU nothing is read back and the count is exact (integer sums), so an evaluation
/// pass can accumulate into one counter and read it at its end.
void countCorrectInto(const Tensor& logits, const Tensor& target, Tensor& correct);

}  // namespace lockstep::kernels
