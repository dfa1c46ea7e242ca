//===- SparseAttentionProblem.h - Host data of one step ---------*- C++ -*-===//
//
// The host-side inputs of one sparse_attention step over a KV pool (any row
// format of runtime/RowFormat.h, one or more layers per token):
// shapes, queries, per-query selections (row ids into the request's history)
// with their HBM slots, request history bounds, and the two KV tiers (HBM
// slots and the pinned host store) as host vectors, and the host-side
// validation that runs before any backend. (testing/ProblemGenerator.h
// generates such problems.)
//
// Semantics: for each request b, query q, head h, the valid selections are
// the k with row_ids[b,q,k] != -1. A valid selection's row r must lie in
// [0, history_len[b]); slot s = slots[b,q,k] >= 0 reads HBM slot s (which must
// be < hbm_slots), s == -1 reads host row history_start[b] + r (which must be
// < host_rows). The slot of an unused selection (row id -1) is ignored.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_SPARSEATTENTIONPROBLEM_H
#define DHS_RUNTIME_CORE_SPARSEATTENTIONPROBLEM_H

#include "runtime/core/Bf16.h"
#include "runtime/core/ProblemShape.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dhs::runtime {

struct Manifest;
struct SparseAttentionProblem;

/// Checks that a problem fits a manifest: B, Q, H, K, the row layout and any
/// pool size the manifest fixes. Throws InputError naming the first mismatch.
void checkProblemMatchesManifest(const SparseAttentionProblem &problem, const Manifest &manifest);

/// Selection statistics of a problem.
struct ProblemStats {
  std::int64_t selections = 0;           ///< valid (b,q,k) entries
  std::int64_t unusedSelections = 0;     ///< entries with row id -1
  std::int64_t residentReads = 0;        ///< valid entries read from HBM
  std::int64_t hostReads = 0;            ///< valid entries read from the host store
  std::int64_t distinctRows = 0;         ///< distinct (request, row) selected
  std::int64_t distinctResidentRows = 0; ///< of those, read from HBM somewhere
  std::int64_t distinctHostRows = 0;     ///< of those, read from host somewhere
};

/// The host-side data of one step. All arrays are row-major.
struct SparseAttentionProblem {
  ProblemShape shape;                     ///< concrete shape (hbmSlots, hostRows >= 0)
  std::vector<bf16_t> queries;            ///< [B,Q,H,qk_dim]
  std::vector<std::int32_t> rowIds;       ///< [B,Q,K]
  std::vector<std::int32_t> slots;        ///< [B,Q,K]
  std::vector<std::int64_t> historyStart; ///< [B]
  std::vector<std::int32_t> historyLen;   ///< [B]
  std::vector<bf16_t> hostStore;          ///< [host_rows, row_elems]
  std::vector<bf16_t> hbmPool;            ///< [hbm_slots, row_elems]
  /// Optional non-owning tiers (the runtime's persistent stores): when set,
  /// they are read instead of hostStore / hbmPool, which must then be empty.
  /// They must hold host_rows and hbm_slots rows.
  const bf16_t *hostStoreView = nullptr;
  const bf16_t *hbmPoolView = nullptr; ///< see hostStoreView
  /// Staged attention (dhs.attention after a fetch): when set, a selection
  /// read from the host (slot -1) reads row b * stagingRows + j of this
  /// staging buffer [B, stagingRows, row_elems] instead, j = q * K + k, or
  /// remapView[b, q, k] ([B, Q, K]) when that is set (a shared retrieval's
  /// staging position); the history bounds are then not needed for it.
  const bf16_t *stagingView = nullptr;
  std::int64_t stagingRows = 0;
  const std::int32_t *remapView = nullptr;
  /// Sliding window (shape.windowSize > 0, else empty): ring [B, R,
  /// row_elems] holding raw token p of request b in row p mod R, and each
  /// request's raw token count [B]. Query q of Q sees tokens [max(0, e - W),
  /// e) with e = windowTokens[b] - (Q - 1 - q).
  std::vector<bf16_t> windowRing;
  std::vector<std::int32_t> windowTokens;

  /// The host store's rows: hostStoreView if set, else hostStore.
  const bf16_t *hostStoreData() const { return hostStoreView ? hostStoreView : hostStore.data(); }
  /// The HBM pool's rows: hbmPoolView if set, else hbmPool.
  const bf16_t *hbmPoolData() const { return hbmPoolView ? hbmPoolView : hbmPool.data(); }

  /// Flat index of selection (b, q, k).
  std::size_t selectionIndex(std::int64_t b, std::int64_t q, std::int64_t k) const {
    return static_cast<std::size_t>((b * shape.queries + q) * shape.topk + k);
  }

  /// Checks array sizes against the shape and every selection against the
  /// rules above. Throws InputError naming the request, query, k and the
  /// offending value, e.g. "row id 5000 at [request 1, query 0, k 17] is
  /// outside the request's history (length 4096)".
  void validate() const;

  /// Checks array sizes and every valid selection's row id and host row
  /// (whatever its slot): what copying the selected rows into HBM needs.
  /// Throws InputError as validate does.
  void validateRows() const;

  /// The staging row (of request b's) that selection (b, q, k) reads in a
  /// staged problem when its row is not resident.
  std::int64_t stagingIndex(std::int64_t b, std::int64_t q, std::int64_t k) const;

  /// The row read by selection (b, q, k), or nullptr for an unused selection.
  /// Requires a validated problem.
  const bf16_t *row(std::int64_t b, std::int64_t q, std::int64_t k) const;

  /// The j-th token (0 <= j < W) of the sliding window of query (b, q), or
  /// nullptr when the window does not reach that far back (before token 0).
  /// Requires a validated problem with a window.
  const bf16_t *windowRow(std::int64_t b, std::int64_t q, std::int64_t j) const;

  /// Selection statistics. Requires a validated problem.
  ProblemStats stats() const;
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_SPARSEATTENTIONPROBLEM_H
