//===- TopK.h - The top-k kernel's selection on the host --------*- C++ -*-===//
//
// What a compiled top-k step (dhs.topk, codegen/TopKKernel.cpp) computes,
// on the host with the kernel's exact semantics: for each lane b of a batch
// and each position q of Q, the ids of the K highest of scores[b, q, 0..N)
// among the rows the position sees, [0, history_len[b] - (Q - 1 - q))
// clamped to [0, N), in descending order of the kernel's key, -1 past the
// visible rows. The key of row i is the score's bits with the sign folded
// (an order-preserving map of all 2^32 patterns: -0 below +0, NaNs above
// +inf or below -inf by their sign bit) in the high half and the
// complement of i in the low half: equal scores go to the lower row id.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_TOPK_H
#define DHS_RUNTIME_CORE_TOPK_H

#include <cstdint>
#include <string>

namespace dhs::runtime {

struct Manifest;

/// The shapes of a compiled top-k step.
struct TopKShape {
  std::int64_t batch = 0;     ///< B: lanes
  std::int64_t positions = 0; ///< Q: query positions per lane
  std::int64_t scored = 0;    ///< N: scored rows per position
  std::int64_t k = 0;         ///< K: selections per position
};

/// The shapes of a top-k step's manifest: one dhs.topk launch over scores
/// f32 [B, Q, N], history_len i32 [B] and rows i32 [B, Q, K]. Throws Error
/// naming the step otherwise.
TopKShape topKShapeOf(const Manifest &manifest);

/// The kernel's key of row `id` with score `score` (larger ranks higher).
std::uint64_t topKKey(float score, std::int32_t id);

/// Selects as the kernel does for `batch` lanes (<= shape.batch): scores
/// [batch][Q][N], historyLen [batch], rows [batch][Q][K]. Returns the
/// kernel's status word: abi::kStatusHistoryBeyondScores when a history is
/// negative or longer than N (selection stays within the scored rows), else
/// 0.
std::uint32_t selectTopK(const TopKShape &shape, std::int64_t batch, const float *scores,
                         const std::int32_t *historyLen, std::int32_t *rows);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_TOPK_H
