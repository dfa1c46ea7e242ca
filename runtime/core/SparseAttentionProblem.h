//===- SparseAttentionProblem.h - Host data of one step ---------*- C++ -*-===//
//
// The host-side inputs of one sparse_attention step over a KV pool (any row
// format of runtime/RowFormat.h, one or more layers per token):
// shapes, queries, per-query selections (row ids into the request's history)
// with their HBM slots, request history bounds, and the two KV tiers (HBM
// slots and the pinned host store) as host vectors. Also a seeded generator
// of such problems with a chosen residency, and the host-side validation that
// runs before any backend.
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
#include "runtime/core/RowFormat.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dhs::runtime {

struct Manifest;
struct SparseAttentionProblem;

/// Shapes and attributes of a sparse_attention step.
struct ProblemShape {
  std::int64_t batch = 0;                ///< B: requests
  std::int64_t queries = 0;              ///< Q: query positions per request
  std::int64_t heads = 0;                ///< H: query heads
  std::int64_t topk = 0;                 ///< K: selected rows per query
  RowFormat format = RowFormat::MlaBf16; ///< layout of one layer's row
  GqaLayout gqa;                         ///< the row layout when format is Gqa
  std::int64_t rowBytes = 1152;          ///< bytes of one layer's row
  std::int64_t layers = 1;               ///< layers per token in the pool's group
  std::int64_t layer = 0;                ///< the layer attention reads
  /// Storage of one token in bf16-sized units: layers * row_bytes / 2 (for
  /// mla_bf16 with one layer, its 576 elements).
  std::int64_t rowElems = 576;
  std::int64_t qkDim = 576;   ///< dims used for scores
  std::int64_t vDim = 512;    ///< leading dims used as values
  std::int64_t hbmSlots = -1; ///< HBM slots (-1: chosen by the generator)
  std::int64_t hostRows = -1; ///< host-store rows (-1: chosen by the generator)
  float softmaxScale = 0.0f;  ///< multiplies q.k before the softmax
  /// W: tokens of the sliding window each query also attends to (0: none).
  std::int64_t windowSize = 0;
  /// R: tokens of each request's window ring (>= W + Q - 1 with a window).
  std::int64_t windowRing = 0;

  /// B * Q * K: selection entries.
  std::int64_t selectionCount() const { return batch * queries * topk; }
  /// B * Q * H * v_dim: output elements.
  std::int64_t outputCount() const { return batch * queries * heads * vDim; }
  /// B * Q * H * qk_dim: query elements.
  std::int64_t queryCount() const { return batch * queries * heads * qkDim; }
};

/// Reads the problem shape of a validated manifest (hbm_slots / host_rows
/// stay -1 where the manifest leaves them to run time). Throws Error if the
/// launches disagree on softmax_scale.
ProblemShape problemShapeFromManifest(const Manifest &manifest);

/// Checks a shape on its own: no empty dimension, GQA query heads divisible
/// by the KV heads, a row layout that is its format's, a finite scale, a
/// window ring that holds the window for every query position. Pool sizes
/// may be -1 (chosen at run time). Throws InputError naming what is wrong.
void checkProblemShape(const ProblemShape &shape);

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

/// How to generate a problem.
struct GeneratorOptions {
  std::uint64_t seed = 1;             ///< seeds std::mt19937_64
  std::int64_t historyRows = 0;       ///< rows per request; 0: random in [min, max]
  std::int64_t minHistoryRows = 2048; ///< lower bound for random histories
  std::int64_t maxHistoryRows = 6144; ///< upper bound for random histories
  double unusedFraction = 0.0;        ///< fraction of each query's K entries set to -1
  /// Fraction of a query position's rows that the next position of the same
  /// request selects again (verify positions overlap: 0.85 is typical).
  double positionOverlap = 0.0;
  double residency = 0.0;     ///< fraction of selected rows made resident
  std::int64_t hbmSlots = -1; ///< if the shape leaves it open; -1: enough for residency 1
  std::int64_t hostRows = -1; ///< if the shape leaves it open; -1: sum of histories
};

/// Generates a problem: histories of the requests laid out contiguously in the
/// host store, with a sliding window when the shape has one (request 0 has
/// fewer raw tokens than the window, the others more than the ring), K distinct random rows per
/// query from its request's history (then round(unusedFraction * K) of them, at random positions,
/// replaced by -1), queries and KV rows drawn from N(0,1) in bf16 (never zero), and the given
/// residency (see applyResidency). Deterministic for a seed on every platform. Throws Error for
/// impossible options (history shorter than K, host store or HBM pool too small).
SparseAttentionProblem generateProblem(const ProblemShape &shape, const GeneratorOptions &options);

/// Redoes the residency of a problem, leaving every other input unchanged:
/// for each request, round(fraction * D) of its D distinct selected rows
/// (chosen at random) are copied byte-exact into distinct random HBM slots and
/// every selection of those rows points there; all other selections read the
/// host store (slot -1). HBM slots not used are filled with noise, so that a
/// backend reading a wrong slot gives a wrong answer. Throws Error if
/// fraction is outside [0, 1] or the pool has too few slots.
void applyResidency(SparseAttentionProblem &problem, double fraction, std::uint64_t seed);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_SPARSEATTENTIONPROBLEM_H
