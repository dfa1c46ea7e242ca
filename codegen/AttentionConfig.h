//===- AttentionConfig.h - how an attention op maps to a kernel -*- C++ -*-===//
//
// The static shape and tiling of the kernel of a dhs.sparse_attention or
// dhs.attention, derived once from the op, and the parameters every
// attention kernel of it takes.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_CODEGEN_ATTENTIONCONFIG_H
#define DHS_CODEGEN_ATTENTIONCONFIG_H

#include "codegen/KernelSpec.h"
#include "dialects/DhsOps.h"

#include <array>
#include <string>

namespace mlir::dhs {

/// Static shape and tiling of one sparse attention kernel.
struct SparseAttentionKernelConfig {
  int64_t requests = 0;      // B
  int64_t positions = 0;     // Q, query positions per request
  int64_t heads = 0;         // H
  int64_t selected = 0;      // K, selected rows per query
  int64_t headsPerBlock = 0; // warps per CTA, one head each
  int64_t tileRows = 0;      // rows staged in shared memory at a time
  int64_t layer = 0;         // layer of the pool's group to read
  /// Missing rows come from a staging buffer [B, stagingRows, layers, row
  /// bytes] (dhs.attention) instead of the host store (dhs.sparse_attention).
  bool staged = false;
  /// Staged rows are found through a per-selection index (a shared fetch).
  bool indexed = false;
  /// The staging is filled by a fetch running beside the kernel: a staged
  /// row is read once its tile's ready flag is set (tensor cores only; the
  /// CUDA-core kernel runs after the fetch, as without flags).
  bool overlapped = false;
  int64_t stagingRows = 0;
  /// Host rows read are also written into the pool's write-back ring at
  /// each selection's entry (dhs.sparse_attention's write_back; the
  /// CUDA-core kernel over MLA rows).
  bool writeBack = false;
  /// Shared-memory columns of a staged row: the keys (qk_dim), then for
  /// formats whose values are not a prefix of the keys (GQA), the values.
  int64_t tileColumns = 0;
  /// Column where a staged row's values start (0: the keys' leading dims).
  int64_t valueColumn = 0;
  /// Query heads per KV head (GQA; 1 KV head for MLA).
  int64_t groupHeads = 0;
  /// Sliding window: tokens each query sees (0: no window) and
  /// tokens its per-request ring holds.
  int64_t windowSize = 0;
  int64_t windowRing = 0;
  float softmaxScale = 0.0f;
  KVPoolType pool;
  /// A query's K + W entries are split over `splits` CTAs of `splitRows`
  /// entries each (a multiple of tileRows); with splits > 1 every CTA
  /// writes its unnormalized softmax state into partials [B, Q, H, splits,
  /// 2 + v_dim] (max, sum, output) and a combine kernel merges them.
  int64_t splits = 1;
  int64_t splitRows = 0;
  /// The tensor-core kernel computes it (TensorCoreAttentionKernel.cpp):
  /// headsPerBlock and tileRows are then 64, and a CTA has 384 threads.
  bool tensorCores = false;
  /// Tensor-core CTAs of one request's query positions that form a cluster
  /// and gather each tile of the selections' shared prefix (the op's
  /// `shared` operand) once for all of them: Q, else 1.
  int64_t sharedPositions = 1;
  /// The other kernel of a shared-prefix op (sharedPositions > 1): the
  /// tensor-core kernel of each query position alone, no cluster, which
  /// computes the step where fewer than half of its requests have tiles to
  /// share (the clustered kernel computes the others). The same tiles, in
  /// the same order, with the same arithmetic as the clustered kernel:
  /// either computes a request to the same bits.
  bool unsharedRequests = false;
  /// The resident form of a fused FP8 tensor-core kernel (the launch's
  /// second kernel, KernelSpec::emitResidentBody): its producer loads the
  /// selections a tile and a half ahead, and at the top of each iteration
  /// classifies the next tile's rows and prefetches those in HBM into L2.
  /// Faster when every row is in HBM, slower when rows come from the host
  /// (bench/NOTES.md, 2026-12-04, twenty-fourth and twenty-fifth sessions).
  bool residentForm = false;
  /// Tiles of a CTA's host-row ring (0: none): in a fused FP8 kernel of
  /// one CTA a query (64 heads, unsplit), the second consumer warpgroup copies each
  /// tile's rows from the host store into the ring kHostRowRingAhead tiles
  /// before the producer reads them there (its own loads of host rows
  /// otherwise wait out the link's latency a tile at a time). The resident
  /// form takes the same parameter and leaves it alone.
  int64_t hostRowRingTiles = 0;

  /// Entries a query walks: its selected rows, then its window.
  int64_t entries() const { return selected + windowSize; }
  /// Grid: (B * Q, H / headsPerBlock, splits).
  std::array<int64_t, 3> grid() const {
    return {requests * positions, heads / headsPerBlock, splits};
  }
  /// Grid of the combine kernel: (B * Q, H / headsPerBlock, 1).
  std::array<int64_t, 3> combineGrid() const {
    return {requests * positions, heads / headsPerBlock, 1};
  }
  /// The partial results of a split kernel.
  MemRefType partialsType(MLIRContext *context) const;
  /// The host-row ring: [CTAs, ring tiles, 64 rows, row bytes] bytes.
  MemRefType hostRowRingType(MLIRContext *context) const;
  /// Block: one warp per head, or the tensor-core kernel's three warpgroups.
  std::array<int64_t, 3> block() const { return {tensorCores ? 384 : 32 * headsPerBlock, 1, 1}; }

  /// Everything the generated code depends on, as a string: equal keys
  /// mean one kernel serves both ops.
  std::string key() const;
  /// The query, key and value types of its ops.
  MemRefType queriesType() const;
  MemRefType outputType() const;
};

/// Derives the kernel configuration of `op`, or emits an error on `op` when
/// the op cannot be compiled as is (dynamic shapes, unsupported sizes).
/// `minBlocks` > 0 splits each query's entries over CTAs until the grid has
/// about that many (each split keeping at least two tiles). With
/// `tensorCores`, shapes the tensor-core kernel computes
/// (supportsTensorCoreAttention) get it, and an op with a shared prefix
/// gets a cluster of its query positions (sharedPositions).
FailureOr<SparseAttentionKernelConfig>
getSparseAttentionKernelConfig(Operation *op, int64_t maxHeadsPerBlock, int64_t tileRows,
                               int64_t minBlocks = 0, bool tensorCores = false);

/// Query heads of one tensor-core CTA (the wgmma M dimension).
inline constexpr int64_t kTensorCoreHeads = 64;
/// Selected rows one tensor-core CTA gathers and multiplies at a time.
inline constexpr int64_t kTensorCoreTileRows = 64;
/// Tiles ahead of its consumers that a host-row ring is filled: far enough
/// that a tile's host rows have crossed the link before the producer, which
/// runs up to three tiles ahead of the consumers, classifies it.
inline constexpr int64_t kHostRowRingAhead = 4;

/// True if the tensor-core kernel computes an attention of `config`'s shape:
/// MLA rows (576 key dims, 512 value dims), query heads in multiples of 64
/// per KV head, selections in multiples of 64, no sliding window.
bool supportsTensorCoreAttention(const SparseAttentionKernelConfig &config);

/// The parameters of an attention kernel of `config`, in order:
/// - fused (dhs.sparse_attention): queries, row_ids, slots, history_start,
///   history_len, the HBM tier, the host tier, [window_ring,
///   window_tokens], output, [partials], status;
/// - staged (dhs.attention): queries, row_ids, slots, staging, [remap (the
///   staging index)], the HBM tier, [window_ring, window_tokens], output,
///   [partials], status;
/// shared_tiles (after the HBM tier's or host tier's parameters) when the
/// positions share tiles, partials with splits > 1, host_row_ring (before
/// status) with a host-row ring.
KernelSignature getAttentionSignature(const SparseAttentionKernelConfig &config);

} // namespace mlir::dhs

#endif // DHS_CODEGEN_ATTENTIONCONFIG_H
