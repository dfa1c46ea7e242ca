//===- Kernels.h - the kernel of each dhs op --------------------*- C++ -*-===//
//
// Every kernel builder: given an op (or an attention's configuration), it
// declares the kernel as a KernelSpec (parameters by role, geometry, body),
// or emits an error on the op for shapes it cannot handle. The getKernelSpec
// overloads are what dhs-lower-to-gpu's patterns call.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_CODEGEN_KERNELS_H
#define DHS_CODEGEN_KERNELS_H

#include "codegen/AttentionConfig.h"
#include "codegen/KernelSpec.h"
#include "dialects/DhsOps.h"

namespace mlir::dhs {

//===----------------------------------------------------------------------===//
// Retrieval and residency (RetrievalKernels.cpp)
//===----------------------------------------------------------------------===//

/// The kernel of a `dhs.fetch`: copies each listed missing token (all
/// layers of its group) from the device-mapped host store into staging, 16
/// bytes per thread and load. Emits an error on `op` for shapes it cannot
/// handle.
FailureOr<KernelSpec> getKernelSpec(FetchOp op);

/// The kernel of a `dhs.union_missing`: one CTA per request inserts its
/// missing rows into an open-addressing table in shared memory, so each
/// distinct row gets one owner (the selection that claimed it first);
/// `missing` lists each row at its owner's position, and `remap` points
/// every missing selection there.
FailureOr<KernelSpec> getKernelSpec(UnionMissingOp op);

/// The kernel of a `dhs.share_rows`: one CTA per request sorts its
/// selections as (position, row, k) keys in shared memory, flags the rows
/// every position selected at their first occurrence in position 0, ranks
/// them with block-wide scans and writes the first whole tiles of them
/// first in every position, then each position's other entries in order
/// (ShareRowsKernel.cpp describes the phases).
FailureOr<KernelSpec> getKernelSpec(ShareRowsOp op);

/// The kernel of a `dhs.resolve`: a thread per selection looks its host row
/// up in the residency map; row ids outside the history (or host rows
/// outside the map) are reported (BadRowId) and resolve to -1. With a
/// non-empty step log, hits stamp the replacement state (an atomic exchange
/// each) and each block appends its first hits and misses to the log at
/// bases one thread reserves (shared-memory counters, one global atomic per
/// list and block).
FailureOr<KernelSpec> getKernelSpec(ResolveOp op);

/// The kernel of a `dhs.place_rows`: a warp per list entry copies the placed
/// row 16 bytes a lane from the mapped host store (or the write-back ring)
/// into its slot, and its lane 0 records the slot (or -1) in the residency
/// map and stamps a filled slot's replacement state with the log's step.
FailureOr<KernelSpec> getKernelSpec(PlaceRowsOp op);

/// The kernel of a `dhs.plan_promotions` (CLOCK): one CTA ranks the fetched
/// rows, hands out the free stack's slots and finds the victims in hand
/// order with block-wide prefix scans over the slot table, two laps
/// (PromotionKernel.cpp describes the phases). Grouped (dhs.group_bindings):
/// one launch plans several groups, a CTA each.
FailureOr<KernelSpec> getKernelSpec(PlanPromotionsOp op);

/// The kernel of a `dhs.age_rows`: one warp whose first thread replays the
/// recorded appends in call order over the device residency state
/// (AgeRowsKernel.cpp describes the steps). Grouped (dhs.group_bindings):
/// one launch replays several groups' appends, a CTA each.
FailureOr<KernelSpec> getKernelSpec(AgeRowsOp op);

/// The kernel of a `dhs.sort_rows`: one CTA per request loads its list
/// into shared memory (padded with -1 to a power of two), sorts it as
/// unsigned keys (so -1 goes last) with a bitonic network whose stages
/// are unrolled at generation time, and writes it back.
/// (SortRowsKernel.cpp)
FailureOr<KernelSpec> getKernelSpec(SortRowsOp op);

//===----------------------------------------------------------------------===//
// Draft rings (RingKernels.cpp)
//===----------------------------------------------------------------------===//

/// The kernel of a `dhs.ring_index`: one CTA per request writes
/// (positions[b] + offset + i) mod window.
FailureOr<KernelSpec> getKernelSpec(RingIndexOp op);

/// The kernel of a `dhs.copy_rows`: rows of [layers, row bytes] moved 16
/// bytes per thread and load, scattered through the destination index or
/// gathered through the source index. An index outside its buffer is
/// reported (BadStagingIndex) and its row skipped.
FailureOr<KernelSpec> getKernelSpec(CopyRowsOp op);

//===----------------------------------------------------------------------===//
// Selection and acceptance (TopKKernel.cpp, AcceptKernel.cpp)
//===----------------------------------------------------------------------===//

/// The kernel of a `dhs.topk`: one CTA per (request, query position). Each visible row gets a
/// 64-bit key (its score's bits made order-preserving, then the complement of its id, so equal
/// scores rank the lower id first); radix passes over 8-bit digits with a shared-memory histogram
/// find the k-th largest key (at most eight; the search ends at the first pass whose chosen bin
/// holds exactly the keys still wanted, so distinct scores rarely need the id bits), the rows at or
/// above it are gathered, sorted (bitonic, descending) and written; slots past the visible rows
/// hold -1. A history longer than the scores sets HistoryBeyondScores.
FailureOr<KernelSpec> getKernelSpec(TopKOp op);

/// The kernel of a `dhs.accept`. Greedy: one CTA per request finds the
/// target's argmax at each of the gamma + 1 positions (ties to the lower
/// token id), accepts drafts while they match, and writes the count and the
/// target's token at the first mismatch (or the bonus token). With
/// rejection sampling (which also takes the drafter's distributions)
/// thread 0 accepts draft i when u q(x) < p(x), u a
/// uniform from a counter-based generator keyed by (seed, step, i), and the
/// block samples the next token from norm(max(0, p - q)) at the first
/// rejection, or from p after gamma acceptances (u from counter gamma + n).
FailureOr<KernelSpec> getKernelSpec(AcceptOp op);

//===----------------------------------------------------------------------===//
// Attention (SparseAttentionKernel.cpp, AttentionCombineKernel.cpp)
//===----------------------------------------------------------------------===//

/// The CUDA-core kernel of an attention of `config` (its parameters are
/// getAttentionSignature's): one CTA per (request, query position, block of
/// heads), one warp per head, rows staged a tile at a time in shared memory
/// and folded into an online softmax. docs/compiler.md describes it.
KernelSpec getSparseAttentionKernel(const SparseAttentionKernelConfig &config);

/// The tensor-core kernel of an attention of `config` (config.tensorCores;
/// its parameters are getAttentionSignature's) on Hopper (wgmma, sm_90a):
/// one CTA of three warpgroups per 64 heads of a query: a producer gathers
/// each tile of 64 rows and dequantizes it to bf16 in 128-byte swizzled
/// shared memory, a softmax warpgroup computes Q K^T, the online softmax and
/// half of P V, a third warpgroup the other half. docs/compiler.md
/// describes it. (TensorCoreAttentionKernel.cpp)
KernelSpec getTensorCoreAttentionKernel(const SparseAttentionKernelConfig &config);

/// The kernel that merges the partials of a split attention of `config`
/// into its output (parameters: partials, output): a warp per head rescales
/// every split's state to the common max, sums and normalizes; a query
/// without any valid row yields zeros. `dependent`: a programmatic dependent
/// launch that waits for the split attention's grid (after a tensor-core
/// split, sm_90a; KernelSpec::dependentLaunch).
KernelSpec getAttentionCombineKernel(const SparseAttentionKernelConfig &config, bool dependent);

} // namespace mlir::dhs

#endif // DHS_CODEGEN_KERNELS_H
