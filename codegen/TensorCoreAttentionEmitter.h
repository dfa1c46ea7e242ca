//===- TensorCoreAttentionEmitter.h - wgmma attention's emitter -*- C++ -*-===//
//
// The emitter of the tensor-core attention kernel, private to codegen/: its
// shared-memory layout, warpgroup roles and register budgets, and the
// helpers its parts share. TensorCoreAttentionKernel.cpp emits the kernel
// (queries, the two consumer warpgroups, cluster setup) and
// TensorCoreAttentionProducer.cpp the producer warpgroup (gather,
// dequantize, swizzled stores).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_CODEGEN_TENSORCOREATTENTIONEMITTER_H
#define DHS_CODEGEN_TENSORCOREATTENTIONEMITTER_H

#include "codegen/HopperBuilder.h"
#include "codegen/KernelBuilder.h"
#include "codegen/Kernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::dhs::tensor_core {

/// Threads of a warpgroup, and of a CTA: three warpgroups.
constexpr int64_t kGroupThreads = 128;
constexpr int64_t kTensorCoreThreads = 3 * kGroupThreads;
/// The two consumer warpgroups' threads (the producer's are the last 128).
constexpr int64_t kConsumerThreads = 2 * kGroupThreads;
/// Overlapped staging: polls of a tile's ready flag, this many nanoseconds
/// apart (about a second), before the producer reports it unset.
constexpr int64_t kReadyPolls = 1 << 21;
constexpr int64_t kReadySleepNs = 512;
/// Bytes of one swizzled block: 64 rows of 128 bytes (64 bf16 dims).
constexpr int64_t kBlockBytes = 8192;
/// Key dims (576) in 64-dim blocks, value dims of one consumer (256) in blocks.
constexpr int64_t kKeyBlocks = 9;
constexpr int64_t kHalfValueBlocks = 4;
constexpr int64_t kKeyDims = 576;
constexpr int64_t kValueDims = 512;

/// Shared memory, from a 1024-byte aligned base: Q [64 heads x 576] and two
/// tiles [64 rows x 576] as 9 swizzled blocks each, P [64 x 64] bf16, the
/// rows' rescale factors f32 [64], the tiles' row biases f32 [2][64] (0, or
/// -inf for rows without data), mbarriers full[2] and empty[2], and in a
/// position cluster remote[2] (the other CTAs' halves of a tile arrived).
constexpr int64_t kQOffset = 0;
constexpr int64_t kTileOffset = kKeyBlocks * kBlockBytes;
constexpr int64_t kTileBytes = kKeyBlocks * kBlockBytes;
constexpr int64_t kPOffset = kTileOffset + 2 * kTileBytes;
constexpr int64_t kScaleOffset = kPOffset + kBlockBytes;
constexpr int64_t kBiasOffset = kScaleOffset + 4 * kTensorCoreHeads;
constexpr int64_t kBarrierOffset = kBiasOffset + 2 * 4 * kTensorCoreTileRows;
constexpr int64_t kSharedBytes = kBarrierOffset + 4 * 8;
/// With a shared prefix (the positions of a request in a cluster), after
/// remote[2], each tile buffer's row ids as this CTA's selections give them
/// (expected[2][64]) and as the CTA that gathered the rows stored them
/// (received[2][64]).
constexpr int64_t kExpectedIdsOffset = kBarrierOffset + 6 * 8;
constexpr int64_t kReceivedIdsOffset = kExpectedIdsOffset + 2 * 4 * kTensorCoreTileRows;
constexpr int64_t kSharingSharedBytes = kReceivedIdsOffset + 2 * 4 * kTensorCoreTileRows;
/// With a host-row ring (never sharing), after empty[2], the ring's
/// mbarriers staged[ring tiles]: the second consumer warpgroup copied a
/// tile's host rows into the ring.
constexpr int64_t kRingBarrierOffset = kBarrierOffset + 4 * 8;
/// Bytes a CTA of a position cluster stores into each other CTA's tile
/// buffer per half tile of the shared prefix it gathers: 32 rows of 576
/// bf16, their row biases and row ids.
constexpr int64_t kShareHalfBytes = kTensorCoreTileRows / 2 * (kKeyDims * 2 + 4 + 4);
constexpr int64_t kSharedAlignment = 1024;
/// After the last tile Q is dead: each consumer warpgroup stages its half of
/// the output there (64 rows of 256 bf16, rows 528 bytes apart so that a
/// warp's stores of 8 rows hit 32 different banks) and writes it out 16
/// bytes a thread, whole rows a warp.
constexpr int64_t kOutputStagingOffset = kQOffset;
constexpr int64_t kOutputStagingPitch = 256 * 2 + 16;
constexpr int64_t kOutputStagingBytes = kTensorCoreHeads * kOutputStagingPitch;
static_assert(2 * kOutputStagingBytes <= kKeyBlocks * kBlockBytes, "the output fits in Q");
/// A split query's fp32 partials go the same way in two passes of 128
/// columns, rows 544 bytes apart (a half warp's 8-byte stores of 4 rows hit
/// 32 banks).
constexpr int64_t kPartialsStagingPitch = 128 * 4 + 32;
constexpr int64_t kPartialsStagingBytes = kTensorCoreHeads * kPartialsStagingPitch;
static_assert(2 * kPartialsStagingBytes <= kKeyBlocks * kBlockBytes,
              "a pass of partials fits in Q");

/// Named barriers (0 is the CTA barrier) between the two consumer warpgroups.
constexpr int64_t kBarrierPReady = 1;
constexpr int64_t kBarrierPFree = 2;
/// Ends the two consumers' code with different instructions: LLVM would
/// otherwise merge the identical tails of their output stores into one
/// block, moving both accumulators through the same registers, and ptxas
/// then serializes every wgmma of the kernel (C7511).
constexpr int64_t kBarrierStored = 3;
/// The producer warpgroup's threads stored a tile (sharing: before the bulk
/// copies of its shared halves).
constexpr int64_t kBarrierProduced = 4;
/// Both consumer warpgroups' copies of Q are complete.
constexpr int64_t kBarrierQueries = 5;
/// A consumer warpgroup's output rows are staged (6 + half; 128 threads).
constexpr int64_t kBarrierOutputStaged = 6;

/// In a cluster of n CTAs a tile buffer's empty barrier completes on one
/// arrival of each consumer warpgroup of every CTA; in the copy of the kernel
/// that compute-sanitizer racecheck checks (tools/racecheck-ptx.sh) every
/// consumer thread of every CTA arrives on it as well.
constexpr int64_t clusterEmptyArrivals(int64_t n) { return 2 * n; }
constexpr int64_t racecheckEmptyArrivals(int64_t n) {
  return clusterEmptyArrivals(n) + n * 2 * kGroupThreads;
}

/// Registers per thread of each warpgroup after setmaxnreg (the kernel starts
/// with 168: 65536 / 384, rounded down to a multiple of 8). The producer's 144
/// hold a tile of rows in flight besides the one it stores (ptxas, whole
/// program: no spills for bf16 rows, at most 12 bytes for FP8 shapes; 208 /
/// 160 / 136 spilled more with the three-tile pipeline).
constexpr uint32_t kStartRegisters = 168;
constexpr uint32_t kSoftmaxRegisters = 200;
constexpr uint32_t kSecondHalfRegisters = 160;
constexpr uint32_t kProducerRegisters = 144;
/// setmaxnreg moves registers within the CTA's allocation (3 x 168 a thread
/// position): a warpgroup's increase waits until the others' decreases have
/// freed enough, so budgets summing to more hang the kernel at its start
/// (a 192 / 192 / 128 variant did, forty-second session).
static_assert(kSoftmaxRegisters + kSecondHalfRegisters + kProducerRegisters <=
                  3 * kStartRegisters,
              "setmaxnreg budgets exceed the CTA's registers");

/// Emits the body of one tensor-core attention kernel.
class TensorCoreAttentionEmitter {
public:
  TensorCoreAttentionEmitter(ImplicitLocOpBuilder &b, const SparseAttentionKernelConfig &config,
                             const KernelArguments &args)
      : b(b), kb{b}, hb{b}, config(config), args(args) {}

  /// Emits the kernel's body: its setup, then the producer and the two
  /// consumer warpgroups.
  void emit();

private:
  // Constants and i32/i64 arithmetic.
  Value c32(int64_t v) { return kb.i32(v); }
  Value c64(int64_t v) { return kb.i64(v); }
  Value add(Value l, Value r) { return arith::AddIOp::create(b, l, r); }
  Value mul(Value l, Value r) { return arith::MulIOp::create(b, l, r); }
  Value andi(Value l, Value r) { return arith::AndIOp::create(b, l, r); }
  Value ori(Value l, Value r) { return arith::OrIOp::create(b, l, r); }
  Value xori(Value l, Value r) { return arith::XOrIOp::create(b, l, r); }
  Value shr(Value l, int64_t r) {
    return arith::ShRUIOp::create(b, l, l.getType().isInteger(64) ? c64(r) : c32(r));
  }
  Value divu(Value l, int64_t r) { return arith::DivUIOp::create(b, l, c32(r)); }
  Value remu(Value l, int64_t r) { return arith::RemUIOp::create(b, l, c32(r)); }
  Value ext64(Value v) { return arith::ExtUIOp::create(b, b.getI64Type(), v); }
  Value sext64(Value v) { return arith::ExtSIOp::create(b, b.getI64Type(), v); }
  Value toIndex(Value v) { return arith::IndexCastOp::create(b, b.getIndexType(), v); }
  Value toI32(Value v) { return arith::IndexCastOp::create(b, b.getI32Type(), v); }
  Value eq(Value l, Value r) { return kb.cmpi(arith::CmpIPredicate::eq, l, r); }

  /// A shared-memory pointer `offset` (i32) bytes past the aligned base.
  Value sharedPointer(Value offset);
  Value sharedPointer(int64_t offset) { return sharedPointer(c32(offset)); }
  /// Stores `value` at shared `offset` (i32) with `alignment`.
  void storeShared(Value value, Value offset, unsigned alignment) {
    LLVM::StoreOp::create(b, value, sharedPointer(offset), alignment);
  }
  Value loadShared(Type type, Value offset, unsigned alignment) {
    return LLVM::LoadOp::create(b, type, sharedPointer(offset), alignment);
  }
  /// The byte offset of 16-byte chunk `chunk` (i32) of row `row` (i32) in a
  /// swizzled block at `block` (i32): the chunk index is XORed with row % 8.
  Value swizzled(Value block, Value row, Value chunk) {
    return add(add(block, mul(row, c32(128))), mul(xori(chunk, andi(row, c32(7))), c32(16)));
  }
  /// The wgmma shared-memory descriptor of a 128-byte swizzled operand at
  /// shared `offset` bytes past the base, with leading and stride byte offsets.
  Value descriptor(int64_t offset, int64_t leadingBytes, int64_t strideBytes) {
    return hb.descriptor(add(sharedStart, c64(offset)), leadingBytes, strideBytes);
  }

  /// mbarriers full[2] (the producer filled a tile), empty[2] (the
  /// consumers are done with it) and, sharing, remote[2] (the other CTAs'
  /// halves of the tile arrived).
  enum class Barrier { Full = 0, Empty = 1, Remote = 2 };
  /// The address of the `kind` mbarrier of tile buffer `buffer` (i32: 0 or 1).
  Value barrier(Value buffer, Barrier kind) {
    return sharedPointer(
        add(c32(kBarrierOffset + 16 * static_cast<int64_t>(kind)), mul(buffer, c32(8))));
  }
  Value barrier(Value buffer, bool full) {
    return barrier(buffer, full ? Barrier::Full : Barrier::Empty);
  }
  /// Waits for the phase of parity `parity` of barrier `kind` of `buffer`.
  /// Sharing, empty[b] completes on arrivals of every CTA's consumers, so
  /// its wait acquires at cluster scope (the producer then copies into the
  /// other CTAs' buffers what their consumers have just read).
  void waitBarrier(Value buffer, Barrier kind, Value parity) {
    if (sharing && kind == Barrier::Empty)
      hb.waitParityCluster(barrier(buffer, kind), parity, 10000000);
    else
      NVVM::MBarrierTryWaitParityOp::create(b, barrier(buffer, kind), parity, c32(10000000));
  }
  void waitBarrier(Value buffer, bool full, Value parity) {
    waitBarrier(buffer, full ? Barrier::Full : Barrier::Empty, parity);
  }
  void arriveBarrier(Value buffer, bool full) {
    NVVM::MBarrierArriveOp::create(b, b.getI64Type(), barrier(buffer, full), Value(),
                                   NVVM::MemScopeKind::CTA, false);
  }
  /// Waits until tile buffer `buffer` holds its tile: the producer's rows
  /// and, sharing, the other CTAs' halves.
  void waitTileFull(Value buffer, Value parity) {
    waitBarrier(buffer, Barrier::Full, parity);
    if (sharing)
      waitBarrier(buffer, Barrier::Remote, parity);
  }
  /// A consumer warpgroup is done with tile `tile` (index) in buffer
  /// `buffer`: every thread arrives on this CTA's empty barrier, or sharing,
  /// a tile of the shared prefix, one thread on each CTA's (the producers of
  /// all of them write into it). A tile past the shared prefix is released
  /// here only (one arrival counting for all CTAs): no other CTA writes into
  /// this CTA's buffers after the prefix, so private tiles do not wait for
  /// the others' consumers.
  void releaseTile(Value buffer, Value tile) {
    if (!sharing) {
      arriveBarrier(buffer, /*full=*/false);
      return;
    }
    // racecheck does not credit the ordering that reaches thread 32 / 64's
    // arrival through a named barrier from the other threads' accesses; its
    // copy of the kernel (tools/racecheck-ptx.sh) has every thread arrive on
    // every CTA's barriers too (racecheckEmptyArrivals). The marker takes
    // empty[b] as full[b]'s address, which waitTileFull computed, plus 16:
    // an address computed here for it would stand in for the one computed
    // below under `thread == releaser(rank)` and change the kernel.
    hb.racecheckArriveCluster(
        barrier(buffer, Barrier::Full),
        16 * (static_cast<int64_t>(Barrier::Empty) - static_cast<int64_t>(Barrier::Full)),
        clusterSize);
    // Rank r's arrival comes from thread 32 * ((r + 1) % 4) + (r + 1) / 4:
    // a warp each for up to three ranks (32, 64, 96), then spread further.
    auto releaseEverywhere = [&] {
      for (int64_t rank = 0; rank < clusterSize; ++rank)
        kb.ifThen(eq(thread, c32(32 * ((rank + 1) % 4) + (rank + 1) / 4)),
                  [&] { hb.arriveRemote(barrier(buffer, Barrier::Empty), c32(rank)); });
    };
    kb.ifThenElse(kb.cmpi(arith::CmpIPredicate::ult, tile, sharedTiles), releaseEverywhere, [&] {
      kb.ifThen(eq(thread, c32(32)), [&] {
        NVVM::MBarrierArriveOp::create(b, b.getI64Type(), barrier(buffer, Barrier::Empty),
                                       c32(clusterSize), NVVM::MemScopeKind::CTA, false);
      });
    });
  }
  void namedSync(int64_t id) {
    NVVM::BarrierOp::create(b, Type(), c32(id), c32(2 * kGroupThreads), {}, Value());
  }
  void namedArrive(int64_t id) {
    NVVM::BarrierArriveOp::create(b, c32(id), c32(2 * kGroupThreads));
  }

  /// S = Q K^T over tile buffer `buffer`: [64 heads x 64 rows].
  Value emitScores(Value buffer);
  /// O += P V over the value dims of `half` of tile buffer `buffer`.
  Value emitValues(Value output, Value buffer, int64_t half);
  /// O with each row r (of the thread's two) scaled by scales[r].
  Value scaleRows(Value output, ArrayRef<Value> scales);
  /// Writes the thread's part of O (value dims of `half`) times its rows'
  /// scales into the output, or unscaled into the partials.
  void emitStoreOutput(Value output, ArrayRef<Value> scales, int64_t half);

  /// Starts copying the CTA's 64 heads of its query into shared memory (Q):
  /// cp.async by the consumer threads, waited for by waitQueries.
  void emitLoadQueries();
  /// Waits for Q (emitLoadQueries' copies) in a consumer warpgroup.
  void waitQueries(bool softmaxGroup);
  /// The producer warpgroup: gathers each tile's rows into a tile buffer,
  /// as swizzled bf16.
  void emitProducer();
  /// The first consumer warpgroup: scores, the online softmax (P and the
  /// rows' scales) and O over the first half of the value dims.
  void emitSoftmaxGroup();
  /// The second consumer warpgroup: O over the second half of the value
  /// dims, from the first's P and scales.
  void emitSecondHalfGroup();
  /// The second consumer warpgroup's copy of the host rows of tile
  /// `tileIndex` (index) into the host-row ring's entry `sequence` (index)
  /// modulo its tiles, then its arrival on that entry's staged barrier.
  void emitStageHostRows(Value tileIndex, Value sequence);
  /// The host-row ring's staged barrier of ring sequence number `sequence`
  /// (index), and the parity of that sequence's phase (i32).
  Value ringBarrier(Value sequence);
  Value ringParity(Value sequence);
  /// The address (i64) of row `row` (i32) of ring sequence number
  /// `sequence` (index) in this CTA's part of the host-row ring.
  Value ringRowAddress(Value sequence, Value row);
  /// Reports (BadSharedRows) rows of tile buffer `buffer` whose id differs
  /// from this CTA's selection (sharing only).
  void emitCheckSharedIds(Value buffer);

  /// Loads what selection `k` (index) of this query says: its row id, its
  /// slot and, for indexed staging, its staging row (i32 each).
  SmallVector<Value> emitLoadSelection(Value k);
  /// What emitClassify finds of a selection.
  struct ClassifiedRow {
    Value valid;   ///< whether its row has data (i1)
    Value address; ///< its row of this layer (i64)
    /// Overlapped staging: the ready flag of its tile when the row is
    /// missing, else 0 (i64), and its row of this layer in the host store
    /// (i64), read when the attention takes the tile; null otherwise.
    Value readyFlag, hostAddress;
    Value inHbm; ///< whether it has data read from HBM (i1)
    /// Writing back: the ring entry its host row is stored into (i32, -1:
    /// none); null otherwise.
    Value ringEntry;
  };
  /// Classifies selection `k` from its loaded `selection`. Reports bad ids
  /// through the step status when `report`.
  ClassifiedRow emitClassify(Value k, ArrayRef<Value> selection, Value report);

  ImplicitLocOpBuilder &b;
  KernelBuilder kb;
  HopperBuilder hb;
  const SparseAttentionKernelConfig &config;
  const KernelArguments &args;
  /// The CTAs of a request's query positions form a cluster and share the
  /// tiles of the selections' shared prefix (config.sharedPositions > 1).
  bool sharing = config.sharedPositions > 1;
  /// CTAs of a cluster (1: no cluster).
  int64_t clusterSize = config.sharedPositions;

  // Arguments (see getAttentionSignature).
  Value queries, rowIds, slots, historyStart, historyLen, hbm, host, stagingIndex, output, partials,
      status, sharedTilesArg;
  // Overlapped staging only: the flags' address (i64) and the host store
  // (the staged kernel's `host` is its staging).
  Value readyFlags, hostStore;
  // Writing back: each selection's ring entry, and the ring.
  Value writeBackEntries, writeBackRing;
  // The host-row ring (address, i64), in the form that fills it (not the
  // resident form); null otherwise. Its tiles a CTA, from the config.
  Value hostRowRing;
  int64_t ringTiles = 0;
  // Per-thread values (i32 unless noted; request, position, split: index).
  Value tid, group, thread, warp, lane, request, position, split, headBase;
  Value rank;        // the CTA's rank in its cluster (i32; sharing only)
  Value sharedBase;  // the aligned shared base as !llvm.ptr<3>
  Value sharedStart; // its shared address (i64) for descriptors
  Value tiles;       // tiles this CTA walks (index)
  // The request's history start (i64) and length (i32) where the producer
  // loads them once (see emitProducer); null: loaded where used.
  Value requestHistoryStart, requestHistoryLen;
  Value sharedTiles; // tiles of the shared prefix (index; sharing only)
};

} // namespace mlir::dhs::tensor_core

#endif // DHS_CODEGEN_TENSORCOREATTENTIONEMITTER_H
