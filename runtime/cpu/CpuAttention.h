//===- CpuAttention.h - The CPU reference of sparse_attention ---*- C++ -*-===//
//
// Computes sparse_attention exactly as specified, on the host: for each
// request b, query q, head h, scores over the valid selections k
//   s_k = softmax_scale * sum_{d < qk_dim} q[b,q,h,d] * row_k[d],
// p = softmax(s) (max subtracted), out[v] = sum_k p_k row_k[v] for v < v_dim,
// rounded to bf16 (nearest even); 0 when no selection is valid. bf16 inputs
// convert exactly. Two accumulation modes: float (what a GPU kernel would do)
// and fp64 (the reference; its output is also available unrounded).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CPU_CPUATTENTION_H
#define DHS_RUNTIME_CPU_CPUATTENTION_H

#include "runtime/core/Bf16.h"
#include "runtime/core/SparseAttentionProblem.h"

#include <cstddef>
#include <vector>

namespace dhs::runtime {

/// Accumulator type of the CPU backend.
enum class CpuPrecision {
  Float, ///< f32 accumulation and softmax
  Double ///< f64 accumulation and softmax (the reference)
};

/// The CPU backend.
class CpuAttention {
public:
  /// A backend with the given precision, running on `threads` threads
  /// (0: one per hardware thread).
  explicit CpuAttention(CpuPrecision precision = CpuPrecision::Float, unsigned threads = 0);

  /// Validates the problem (throws InputError) and returns the bf16 output
  /// [B,Q,H,v_dim].
  std::vector<bf16_t> run(const SparseAttentionProblem &problem) const;

  /// Validates the problem and returns the output before rounding to bf16,
  /// as doubles (in Float precision, the float results widened).
  std::vector<double> runUnrounded(const SparseAttentionProblem &problem) const;

  /// The precision this backend accumulates in.
  CpuPrecision precision() const { return precision_; }

private:
  CpuPrecision precision_;
  unsigned threads_;
};

/// Result of comparing an output with a reference.
struct Comparison {
  std::size_t elements = 0;   ///< elements compared
  std::size_t nonFinite = 0;  ///< elements where either side is NaN or infinite
  double relativeError = 0.0; ///< ||actual - reference||_2 / ||reference||_2
                              ///< (infinite if anything is non-finite, or the
                              ///< reference is zero and actual is not)
  double maxAbsError = 0.0;   ///< max |actual - reference| over finite elements
  double referenceNorm = 0.0; ///< ||reference||_2
};

/// Compares a bf16 output with a double reference (sizes must match; throws
/// Error otherwise). Sums are in double.
Comparison compareOutputs(const std::vector<bf16_t> &actual, const std::vector<double> &reference);

/// Compares two bf16 outputs.
Comparison compareOutputs(const std::vector<bf16_t> &actual, const std::vector<bf16_t> &reference);

/// Compares two double outputs.
Comparison compareOutputs(const std::vector<double> &actual, const std::vector<double> &reference);

/// Number of elements whose bit patterns differ (sizes must match; throws
/// Error otherwise).
std::size_t countBitDifferences(const std::vector<bf16_t> &a, const std::vector<bf16_t> &b);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CPU_CPUATTENTION_H
