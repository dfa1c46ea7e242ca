//===- TensorCoreAttentionKernel.cpp - sparse MLA attention on wgmma -------===//
//
// One CTA computes 64 heads of one query over a range of its selected rows,
// 64 rows (a tile) at a time, with three warpgroups:
//  - the producer gathers each tile's rows from their HBM slots or the host
//    store (16-byte loads, two rows per thread), dequantizes FP8 to bf16 and
//    stores them into one of two tile buffers in wgmma's 128-byte swizzled
//    layout, then signals the tile full (mbarrier);
//  - the softmax warpgroup computes S = Q K^T (36 wgmma m64n64k16), the
//    online softmax in base 2, writes P (bf16) and each row's rescale factor
//    to shared memory, and accumulates O[:, 0:256] += P V (4 m64n256k16);
//  - the second warpgroup accumulates O[:, 256:512] += P V from the same P.
// Both consumers release the tile (mbarrier) once their P V completed; two
// named barriers hand P from the softmax warpgroup to the second one and
// back. The dequantized tile serves both products: K-major for Q K^T,
// N-major (transposed) for P V.
//
// With 128 heads (or any even number of 64-head blocks) two CTAs of a
// cluster compute the two head blocks of a query over the same rows: each
// producer gathers and dequantizes half of every tile (32 rows) and stores
// it into both CTAs' tile buffers (st.async into the peer's, completing
// bytes on the peer's "remote" mbarrier), so each CTA dequantizes half the
// rows FlashMLA's 64-head kernel does; a tile buffer is free again once the
// consumers of both CTAs released it.
//
//===----------------------------------------------------------------------===//

#include "codegen/HopperBuilder.h"
#include "codegen/KernelBuilder.h"
#include "codegen/Kernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;

namespace {

/// Threads of a warpgroup, and of a CTA: three warpgroups.
constexpr int64_t kGroupThreads = 128;
constexpr int64_t kTensorCoreThreads = 3 * kGroupThreads;
/// Bytes of one swizzled block: 64 rows of 128 bytes (64 bf16 dims).
constexpr int64_t kBlockBytes = 8192;
/// Key dims (576) in 64-dim blocks, value dims of one consumer (256) in blocks.
constexpr int64_t kKeyBlocks = 9;
constexpr int64_t kHalfValueBlocks = 4;
constexpr int64_t kKeyDims = 576;
constexpr int64_t kValueDims = 512;

// Shared memory, from a 1024-byte aligned base: Q [64 heads x 576] and two
// tiles [64 rows x 576] as 9 swizzled blocks each, P [64 x 64] bf16, the
// rows' rescale factors f32 [64], the tiles' row biases f32 [2][64] (0, or
// -inf for rows without data), mbarriers full[2] and empty[2], and in a
// cluster remote[2] (the peer's half of a tile arrived).
constexpr int64_t kQOffset = 0;
constexpr int64_t kTileOffset = kKeyBlocks * kBlockBytes;
constexpr int64_t kTileBytes = kKeyBlocks * kBlockBytes;
constexpr int64_t kPOffset = kTileOffset + 2 * kTileBytes;
constexpr int64_t kScaleOffset = kPOffset + kBlockBytes;
constexpr int64_t kBiasOffset = kScaleOffset + 4 * kTensorCoreHeads;
constexpr int64_t kBarrierOffset = kBiasOffset + 2 * 4 * kTensorCoreTileRows;
constexpr int64_t kSharedBytes = kBarrierOffset + 4 * 8;
constexpr int64_t kClusterSharedBytes = kBarrierOffset + 6 * 8;
/// Bytes a peer stores into a CTA's tile buffer per tile: its 32 rows of
/// 576 bf16 and their row biases.
constexpr int64_t kPeerTileBytes = kTensorCoreTileRows / 2 * (kKeyDims * 2 + 4);
constexpr int64_t kSharedAlignment = 1024;

// Named barriers (0 is the CTA barrier) between the two consumer warpgroups.
constexpr int64_t kBarrierPReady = 1;
constexpr int64_t kBarrierPFree = 2;
// Ends the two consumers' code with different instructions: LLVM would
// otherwise merge the identical tails of their output stores into one
// block, moving both accumulators through the same registers, and ptxas
// then serializes every wgmma of the kernel (C7511).
constexpr int64_t kBarrierStored = 3;

// Registers per thread of each warpgroup after setmaxnreg (the kernel starts
// with 168: 65536 / 384, rounded down to a multiple of 8). The producer's 144
// hold a tile of rows in flight besides the one it stores (ptxas: no spills
// but 8 bytes in the bf16 cluster kernel; 208 / 160 / 136 spilled with the
// three-tile pipeline).
constexpr uint32_t kSoftmaxRegisters = 200;
constexpr uint32_t kSecondHalfRegisters = 160;
constexpr uint32_t kProducerRegisters = 144;

/// Emits the body of one tensor-core attention kernel.
class TensorCoreAttentionEmitter {
public:
  TensorCoreAttentionEmitter(ImplicitLocOpBuilder &b, const SparseAttentionKernelConfig &config,
                             const KernelArguments &args)
      : b(b), kb{b}, hb{b}, config(config), args(args) {}

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

  // mbarriers full[2] (the producer filled a tile), empty[2] (the
  // consumers are done with it) and, in a cluster, remote[2] (the peer's
  // half of the tile arrived).
  enum class Barrier { Full = 0, Empty = 1, Remote = 2 };
  Value barrier(Value buffer, Barrier kind) {
    return sharedPointer(
        add(c32(kBarrierOffset + 16 * static_cast<int64_t>(kind)), mul(buffer, c32(8))));
  }
  Value barrier(Value buffer, bool full) {
    return barrier(buffer, full ? Barrier::Full : Barrier::Empty);
  }
  void waitBarrier(Value buffer, Barrier kind, Value parity) {
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
  /// and, in a cluster, the peer's.
  void waitTileFull(Value buffer, Value parity) {
    waitBarrier(buffer, Barrier::Full, parity);
    if (clustered)
      waitBarrier(buffer, Barrier::Remote, parity);
  }
  /// A consumer warpgroup is done with tile buffer `buffer`: every thread
  /// arrives on this CTA's empty barrier, or in a cluster one thread on
  /// each CTA's (the producers of both write into it).
  void releaseTile(Value buffer) {
    if (!clustered) {
      arriveBarrier(buffer, /*full=*/false);
      return;
    }
    for (int64_t rank = 0; rank < 2; ++rank)
      kb.ifThen(eq(thread, c32(32 * (rank + 1))),
                [&] { hb.arriveRemote(barrier(buffer, Barrier::Empty), c32(rank)); });
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

  void emitLoadQueries();
  void emitProducer();
  void emitSoftmaxGroup();
  void emitSecondHalfGroup();

  /// Loads what selection `k` (index) of this query says: its row id, its
  /// slot and, for indexed staging, its staging row (i32 each).
  SmallVector<Value> emitLoadSelection(Value k);
  /// Classifies selection `k` from its loaded `selection`: whether its row
  /// has data, and the address of its row of this layer (i64). Reports bad
  /// ids through the step status when `report`.
  std::pair<Value, Value> emitClassify(Value k, ArrayRef<Value> selection, Value report);

  ImplicitLocOpBuilder &b;
  KernelBuilder kb;
  HopperBuilder hb;
  const SparseAttentionKernelConfig &config;
  const KernelArguments &args;
  /// Two CTAs of a cluster share each tile (config.clusterHeadBlocks == 2).
  bool clustered = config.clusterHeadBlocks == 2;

  // Arguments (see getAttentionSignature).
  Value queries, rowIds, slots, historyStart, historyLen, hbm, host, stagingIndex, output, partials,
      status;
  // Per-thread values (i32 unless noted; request, position, split: index).
  Value tid, group, thread, warp, lane, request, position, split, headBase;
  Value rank;        // the CTA's rank in its cluster (i32; clustered only)
  Value sharedBase;  // the aligned shared base as !llvm.ptr<3>
  Value sharedStart; // its shared address (i64) for descriptors
  Value tiles;       // tiles this CTA walks (index)
};

} // namespace

Value TensorCoreAttentionEmitter::sharedPointer(Value offset) {
  return LLVM::GEPOp::create(b, LLVM::LLVMPointerType::get(b.getContext(), 3), b.getI8Type(),
                             sharedBase, ValueRange{offset});
}

Value TensorCoreAttentionEmitter::emitScores(Value buffer) {
  // Q and the tile are K-major: each k16 step moves 32 bytes within a
  // 128-byte row, each 64-dim block 8 KB.
  Value queryDesc = descriptor(kQOffset, 16, 1024);
  Value tileDesc = add(descriptor(kTileOffset, 16, 1024), mul(ext64(buffer), c64(kTileBytes >> 4)));
  Value scores = LLVM::UndefOp::create(b, hb.accumulatorType(64));
  NVVM::WgmmaFenceAlignedOp::create(b);
  for (int64_t step = 0; step < kKeyDims / 16; ++step) {
    int64_t offset = (step / 4) * kBlockBytes + (step % 4) * 32;
    scores = hb.wgmma(scores, add(queryDesc, c64(offset >> 4)), add(tileDesc, c64(offset >> 4)), 64,
                      /*accumulate=*/step > 0, /*transposeB=*/false);
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b);
  NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
  return scores;
}

Value TensorCoreAttentionEmitter::emitValues(Value output, Value buffer, int64_t half) {
  // P is K-major (32 bytes per k16 step); the tile seen as V [rows x dims]
  // is N-major: 64-dim blocks 8 KB apart (leading), 8-row groups 1 KB apart
  // (stride), 16 rows (2 KB) per k16 step.
  Value probDesc = descriptor(kPOffset, 16, 1024);
  Value valueDesc =
      add(descriptor(kTileOffset + half * kHalfValueBlocks * kBlockBytes, kBlockBytes, 1024),
          mul(ext64(buffer), c64(kTileBytes >> 4)));
  NVVM::WgmmaFenceAlignedOp::create(b);
  for (int64_t step = 0; step < kTensorCoreTileRows / 16; ++step)
    output = hb.wgmma(output, add(probDesc, c64((step * 32) >> 4)),
                      add(valueDesc, c64((step * 2048) >> 4)), 256, /*accumulate=*/true,
                      /*transposeB=*/true);
  NVVM::WgmmaGroupSyncAlignedOp::create(b);
  NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
  return output;
}

Value TensorCoreAttentionEmitter::scaleRows(Value output, ArrayRef<Value> scales) {
  // Register i of an m64nN accumulator holds row 16 * warp + lane / 4 + 8 *
  // ((i >> 1) & 1) and column 8 * (i >> 2) + 2 * (lane % 4) + (i & 1).
  auto type = cast<LLVM::LLVMStructType>(output.getType());
  for (int64_t i = 0, e = type.getBody().size(); i < e; ++i) {
    Value element = LLVM::ExtractValueOp::create(b, output, i);
    element = arith::MulFOp::create(b, element, scales[(i >> 1) & 1]);
    output = LLVM::InsertValueOp::create(b, output, element, i);
  }
  return output;
}

void TensorCoreAttentionEmitter::emitStoreOutput(Value output, ArrayRef<Value> scales,
                                                 int64_t half) {
  Value quad = remu(lane, 4);
  Value firstRow = add(mul(warp, c32(16)), divu(lane, 4));
  Value query = ext64(add(mul(toI32(request), c32(config.positions)), toI32(position)));
  Type pair = VectorType::get({2}, b.getF32Type());
  Value outputBase = config.splits > 1 ? hb.getAddress(partials) : hb.getAddress(this->output);
  for (int64_t i = 0; i < 128; i += 2) {
    Value row = add(firstRow, c32(8 * ((i >> 1) & 1)));
    Value column = add(c32(half * 256 + 8 * (i >> 2)), mul(quad, c32(2)));
    Value head = ext64(add(headBase, row));
    Value values =
        vector::FromElementsOp::create(b, pair,
                                       ValueRange{LLVM::ExtractValueOp::create(b, output, i),
                                                  LLVM::ExtractValueOp::create(b, output, i + 1)});
    if (config.splits > 1) {
      // partials[b, q, h, split, 2 + column]
      Value element = add(mul(add(mul(add(mul(query, c64(config.heads)), head), c64(config.splits)),
                                  arith::IndexCastOp::create(b, b.getI64Type(), split)),
                              c64(2 + kValueDims)),
                          add(ext64(column), c64(2)));
      LLVM::StoreOp::create(b, values, hb.globalPointer(add(outputBase, mul(element, c64(4)))), 8);
      continue;
    }
    values = arith::MulFOp::create(
        b, values, vector::BroadcastOp::create(b, pair, scales[(i >> 1) & 1]).getResult());
    Value narrow =
        arith::TruncFOp::create(b, VectorType::get({2}, b.getBF16Type()), values).getResult();
    Value element =
        add(mul(add(mul(query, c64(config.heads)), head), c64(kValueDims)), ext64(column));
    LLVM::StoreOp::create(b, narrow, hb.globalPointer(add(outputBase, mul(element, c64(2)))), 4);
  }
}

void TensorCoreAttentionEmitter::emitLoadQueries() {
  // 64 rows x 72 chunks of 16 bytes, 12 per thread.
  Value base = hb.getAddress(queries);
  Value query = add(mul(toI32(request), c32(config.positions)), toI32(position));
  constexpr int64_t chunksPerRow = kKeyDims * 2 / 16;
  for (int64_t j = 0; j < kTensorCoreHeads * chunksPerRow / kTensorCoreThreads; ++j) {
    Value chunkIndex = add(tid, c32(j * kTensorCoreThreads));
    Value row = divu(chunkIndex, chunksPerRow);
    Value chunk = remu(chunkIndex, chunksPerRow);
    Value element =
        add(mul(ext64(add(mul(query, c32(config.heads)), add(headBase, row))), c64(kKeyDims)),
            mul(ext64(chunk), c64(8)));
    Value data = hb.loadGlobal16(add(base, mul(element, c64(2))));
    Value offset =
        swizzled(add(c32(kQOffset), mul(divu(chunk, 8), c32(kBlockBytes))), row, remu(chunk, 8));
    storeShared(data, offset, 16);
  }
}

SmallVector<Value> TensorCoreAttentionEmitter::emitLoadSelection(Value k) {
  SmallVector<Value> selection{memref::LoadOp::create(b, rowIds, ValueRange{request, position, k}),
                               memref::LoadOp::create(b, slots, ValueRange{request, position, k})};
  if (config.staged && config.indexed)
    selection.push_back(memref::LoadOp::create(b, stagingIndex, ValueRange{request, position, k}));
  return selection;
}

std::pair<Value, Value> TensorCoreAttentionEmitter::emitClassify(Value k, ArrayRef<Value> selection,
                                                                 Value report) {
  int64_t layers = config.pool.getLayers();
  int64_t rowBytes = config.pool.getFormat().getRowBytes();
  Value id = selection[0];
  Value slot = selection[1];
  Value none = eq(id, c32(-1));
  Value badRow = kb.cmpi(arith::CmpIPredicate::slt, id, c32(-1));
  if (!config.staged)
    badRow = ori(badRow, kb.cmpi(arith::CmpIPredicate::sge, id,
                                 memref::LoadOp::create(b, historyLen, ValueRange{request})));
  Value hbmRows =
      arith::IndexCastOp::create(b, b.getI64Type(), memref::DimOp::create(b, hbm, kb.index(0)));
  Value badSlot = ori(kb.cmpi(arith::CmpIPredicate::slt, slot, c32(-1)),
                      kb.cmpi(arith::CmpIPredicate::sge, sext64(slot), hbmRows));
  Value onHost = eq(slot, c32(-1));
  // A missing row's place: the host store at history_start + id (fused), or
  // its staging row b * N + position (staged).
  Value hostRow, hostOutside;
  Value requestRow = arith::IndexCastOp::create(b, b.getI64Type(), request);
  if (config.staged) {
    Value staged =
        config.indexed
            ? sext64(selection[2])
            : arith::IndexCastOp::create(
                  b, b.getI64Type(),
                  arith::AddIOp::create(
                      b, arith::MulIOp::create(b, position, kb.index(config.selected)), k))
                  .getResult();
    hostOutside = ori(kb.cmpi(arith::CmpIPredicate::slt, staged, c64(0)),
                      kb.cmpi(arith::CmpIPredicate::sge, staged, c64(config.stagingRows)));
    hostRow = add(mul(requestRow, c64(config.stagingRows)), staged);
  } else {
    hostRow = add(memref::LoadOp::create(b, historyStart, ValueRange{request}), sext64(id));
    Value hostRows =
        arith::IndexCastOp::create(b, b.getI64Type(), memref::DimOp::create(b, host, kb.index(0)));
    hostOutside = ori(kb.cmpi(arith::CmpIPredicate::slt, hostRow, c64(0)),
                      kb.cmpi(arith::CmpIPredicate::sge, hostRow, hostRows));
  }
  Value trueValue = arith::ConstantIntOp::create(b, 1, 1);
  Value idUsable = xori(ori(none, badRow), trueValue);
  Value badHost = andi(andi(onHost, hostOutside), idUsable);
  Value bits = ori(
      ori(kb.select(badRow, c32(abi::kStatusBadRowId), c32(0)),
          kb.select(badSlot, c32(abi::kStatusBadSlot), c32(0))),
      kb.select(badHost, c32(config.staged ? abi::kStatusBadStagingIndex : abi::kStatusBadHostRow),
                c32(0)));
  kb.ifThen(andi(report, kb.cmpi(arith::CmpIPredicate::ne, bits, c32(0))), [&] {
    memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori, bits, status,
                                ValueRange{kb.index(0)});
  });
  Value valid = andi(idUsable, xori(kb.select(onHost, hostOutside, badSlot), trueValue));
  // Invalid rows point at nothing: their loads are skipped.
  Value token = kb.select(onHost, hostRow, sext64(slot));
  Value tierBase = kb.select(onHost, hb.getAddress(host), hb.getAddress(hbm));
  Value address =
      add(tierBase, mul(add(mul(token, c64(layers)), c64(config.layer)), c64(rowBytes)));
  return {valid, address};
}

void TensorCoreAttentionEmitter::emitProducer() {
  NVVM::SetMaxRegisterOp::create(b, kProducerRegisters, NVVM::SetMaxRegisterAction::decrease);
  bool fp8 = isa<MlaFp8Attr>(config.pool.getFormat());
  Type chunkType = VectorType::get({4}, b.getI32Type());
  // Thread (warp w, lane l) handles rows 8w + l % 8 and 32 + 8w + l % 8 of
  // each tile, and the 16-byte chunks 2 (l / 8) and 2 (l / 8) + 1 of each
  // 128-byte block of their bf16 rows.
  Value segment = divu(lane, 8);
  Value firstRow = add(mul(warp, c32(8)), remu(lane, 8));
  Value reporter = eq(segment, c32(0));
  // Loads per row: FP8: 8 x 16 e4m3 values, the 4 scales, 2 x 8 RoPE dims;
  // bf16: 9 blocks x 2 chunks.
  int64_t loadsPerRow = fp8 ? 11 : 18;
  // The thread's rows of a tile, as offsets from firstRow: both halves, or
  // in a cluster the half of this CTA's rank.
  SmallVector<Value> rowOffsets{c32(0), c32(32)};
  if (clustered)
    rowOffsets = {mul(rank, c32(32))};
  int64_t rounds = rowOffsets.size();
  // Rows whose loads are issued a tile ahead, while the tile before waits
  // for its buffer: both for FP8 (88 registers), the first for bf16 (72).
  int64_t aheadRows = std::min<int64_t>(fp8 ? 2 : 1, rounds);
  Value zero = arith::ConstantOp::create(
      b, chunkType, DenseElementsAttr::get(cast<ShapedType>(chunkType), b.getI32IntegerAttr(0)));
  Value negInf = kb.f32(-std::numeric_limits<double>::infinity());

  // The selection of row `round` of tile `tileIndex` (index; past the last
  // tile it is the last tile's, and has no data), and whether the tile exists.
  auto selectionOf = [&](Value tileIndex, int64_t round) -> std::pair<Value, Value> {
    Value inRange = kb.cmpi(arith::CmpIPredicate::ult, tileIndex, tiles);
    Value clamped = arith::MinUIOp::create(
        b, tileIndex, arith::SubIOp::create(b, tiles, kb.index(1)).getResult());
    Value k = arith::AddIOp::create(
        b,
        arith::AddIOp::create(b, arith::MulIOp::create(b, split, kb.index(config.splitRows)),
                              arith::MulIOp::create(b, clamped, kb.index(kTensorCoreTileRows))),
        toIndex(add(firstRow, rowOffsets[round])));
    return {k, inRange};
  };
  // Loads the selection of that row (no use of the values yet).
  auto select = [&](Value tileIndex, int64_t round) {
    return emitLoadSelection(selectionOf(tileIndex, round).first);
  };
  // From its loaded selection: whether the row has data, and its address.
  auto classify = [&](Value tileIndex, int64_t round,
                      ArrayRef<Value> selection) -> std::pair<Value, Value> {
    auto [k, inRange] = selectionOf(tileIndex, round);
    auto [valid, address] = emitClassify(k, selection, andi(reporter, inRange));
    return {andi(valid, inRange), address};
  };
  int64_t selectionWidth = config.staged && config.indexed ? 3 : 2;
  // The row's 16-byte loads (zeros for a row without data).
  auto load = [&](Value valid, Value address) -> SmallVector<Value> {
    auto loads =
        scf::IfOp::create(b, SmallVector<Type>(loadsPerRow, chunkType), valid, /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loads.elseBlock());
    scf::YieldOp::create(b, SmallVector<Value>(loadsPerRow, zero));
    b.setInsertionPointToStart(loads.thenBlock());
    SmallVector<Value> chunks;
    Value segmentBytes = ext64(mul(segment, c32(fp8 ? 16 : 32)));
    if (fp8) {
      for (int64_t g = 0; g < 8; ++g)
        chunks.push_back(hb.loadGlobal16(add(address, add(segmentBytes, c64(g * 64)))));
      chunks.push_back(hb.loadGlobal16(add(address, c64(512))));
      Value rope = add(address, add(ext64(mul(segment, c32(32))), c64(528)));
      for (int64_t c = 0; c < 2; ++c)
        chunks.push_back(hb.loadGlobal16(add(rope, c64(16 * c))));
    } else {
      for (int64_t g = 0; g < kKeyBlocks; ++g)
        for (int64_t c = 0; c < 2; ++c)
          chunks.push_back(hb.loadGlobal16(add(address, add(segmentBytes, c64(g * 128 + 16 * c)))));
    }
    scf::YieldOp::create(b, chunks);
    return SmallVector<Value>(loads.getResults());
  };
  // Decodes row `round`'s chunks into tile buffer `buffer`.
  Type pairF32 = VectorType::get({2}, b.getF32Type());
  // In a cluster every store goes to the peer's tile buffer too.
  Value peerBase, peerBarrier;
  if (clustered) {
    Value peer = xori(rank, c32(1));
    peerBase = hb.clusterAddress(sharedBase, peer);
    peerBarrier = hb.clusterAddress(sharedPointer(kBarrierOffset + 32), peer);
  }
  auto storeTile = [&](Value value, Value offset, Value buffer, unsigned alignment) {
    storeShared(value, offset, alignment);
    if (clustered)
      hb.storeRemote(add(peerBase, offset), value, add(peerBarrier, mul(buffer, c32(8))));
  };
  auto store = [&](Value buffer, int64_t round, Value valid, ArrayRef<Value> chunks) {
    Value row = add(firstRow, rowOffsets[round]);
    Value biasOffset =
        add(c32(kBiasOffset), mul(add(mul(buffer, c32(kTensorCoreTileRows)), row), c32(4)));
    Value bias = kb.select(valid, kb.f32(0.0), negInf);
    storeShared(bias, biasOffset, 4);
    // The peer gets each row's bias once (kPeerTileBytes counts it so).
    if (clustered)
      kb.ifThen(reporter, [&] {
        hb.storeRemote(add(peerBase, biasOffset), arith::BitcastOp::create(b, b.getI32Type(), bias),
                       add(peerBarrier, mul(buffer, c32(8))));
      });
    Value tileBase = add(c32(kTileOffset), mul(buffer, c32(kTileBytes)));
    auto storeChunk = [&](int64_t block, int64_t c, Value chunk) {
      storeTile(
          chunk,
          swizzled(add(tileBase, c32(block * kBlockBytes)), row, add(mul(segment, c32(2)), c32(c))),
          buffer, 16);
    };
    if (!fp8) {
      for (int64_t g = 0; g < kKeyBlocks; ++g)
        for (int64_t c = 0; c < 2; ++c)
          storeChunk(g, c, chunks[2 * g + c]);
      return;
    }
    // e4m3 pairs -> f16x2 (exact) -> f32 x scale -> bf16x2 (rounded once).
    Value scales = vector::BitCastOp::create(b, VectorType::get({4}, b.getF32Type()), chunks[8]);
    for (int64_t g = 0; g < 8; ++g) {
      Value scale = vector::BroadcastOp::create(
          b, pairF32, vector::ExtractOp::create(b, scales, ArrayRef<int64_t>{g / 2}));
      Value bytes = vector::BitCastOp::create(b, VectorType::get({16}, b.getI8Type()), chunks[g]);
      SmallVector<Value> words;
      for (int64_t p = 0; p < 8; ++p) {
        Value pairBytes =
            vector::ShuffleOp::create(b, bytes, bytes, ArrayRef<int64_t>{2 * p, 2 * p + 1});
        Value halves =
            NVVM::ConvertF8x2ToF16x2Op::create(b, VectorType::get({2}, b.getF16Type()), pairBytes,
                                               false, Float8E4M3FNType::get(b.getContext()));
        Value values =
            arith::MulFOp::create(b, arith::ExtFOp::create(b, pairF32, halves).getResult(), scale);
        Value narrow = arith::TruncFOp::create(b, VectorType::get({2}, b.getBF16Type()), values);
        words.push_back(vector::ExtractOp::create(
            b, vector::BitCastOp::create(b, VectorType::get({1}, b.getI32Type()), narrow),
            ArrayRef<int64_t>{0}));
      }
      for (int64_t c = 0; c < 2; ++c)
        storeChunk(g, c,
                   vector::FromElementsOp::create(b, cast<VectorType>(chunkType),
                                                  ArrayRef<Value>(words).slice(4 * c, 4)));
    }
    for (int64_t c = 0; c < 2; ++c)
      storeChunk(8, c, chunks[9 + c]);
  };

  // Software pipeline, three tiles deep: while tile t is dequantized and
  // stored, the rows of tile t + 1 are in flight and the selections of tile
  // t + 2 are being loaded, so a row's loads never wait for its selection,
  // and a tile's stores wait for loads issued a tile earlier. The loop
  // carries, per round (row of the thread), tile t's row: for rows loaded
  // ahead whether it has data and its chunks, for the others its selection;
  // then the selections of tile t + 1.
  //
  // When tile t + 1's loads issue: before tile t's stores where the
  // registers allow both tiles' chunks (FP8 in a cluster: one row each, 88
  // registers), else each ahead row's right after the same row of tile t
  // is stored (FP8: both rows ahead, at most 88 registers of chunks live),
  // and after the last store where a later row is loaded at its store
  // (bf16 outside a cluster: the second row, 72 registers).
  bool issueEarly = clustered && fp8;
  auto issueAfter = [&](int64_t round) {
    for (int64_t later = round + 1; later < rounds; ++later)
      if (later >= aheadRows)
        return rounds - 1;
    return round;
  };
  SmallVector<Value> initial;
  {
    SmallVector<SmallVector<Value>> first, second;
    for (int64_t round = 0; round < rounds; ++round)
      first.push_back(select(kb.index(0), round));
    for (int64_t round = 0; round < rounds; ++round)
      second.push_back(select(kb.index(1), round));
    for (int64_t round = 0; round < rounds; ++round) {
      if (round < aheadRows) {
        auto [valid, address] = classify(kb.index(0), round, first[round]);
        initial.push_back(valid);
        llvm::append_range(initial, load(valid, address));
      } else {
        llvm::append_range(initial, first[round]);
      }
    }
    for (int64_t round = 0; round < rounds; ++round)
      llvm::append_range(initial, second[round]);
  }
  auto loop = scf::ForOp::create(b, kb.index(0), tiles, kb.index(1), initial);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value tileIndex = loop.getInductionVar();
    Value nextTile = arith::AddIOp::create(b, tileIndex, kb.index(1));
    Value tile = toI32(tileIndex);
    Value buffer = andi(tile, c32(1));
    ValueRange state = loop.getRegionIterArgs();
    SmallVector<ValueRange> current, upcoming;
    for (int64_t round = 0; round < rounds; ++round) {
      int64_t width = round < aheadRows ? 1 + loadsPerRow : selectionWidth;
      current.push_back(state.take_front(width));
      state = state.drop_front(width);
    }
    for (int64_t round = 0; round < rounds; ++round) {
      upcoming.push_back(state.take_front(selectionWidth));
      state = state.drop_front(selectionWidth);
    }
    waitBarrier(buffer, /*full=*/false, xori(andi(shr(tile, 1), c32(1)), c32(1)));
    // The peer's half of this tile may now be stored here: expect its bytes.
    if (clustered)
      kb.ifThen(eq(thread, c32(0)), [&] {
        NVVM::MBarrierArriveExpectTxOp::create(b, Type(), barrier(buffer, Barrier::Remote),
                                               c32(kPeerTileBytes), NVVM::MemScopeKind::CTA,
                                               /*relaxed=*/false, Value());
      });
    SmallVector<SmallVector<Value>> next(rounds);
    auto issueNext = [&](int64_t round) {
      auto [valid, address] = classify(nextTile, round, llvm::to_vector(upcoming[round]));
      next[round].push_back(valid);
      llvm::append_range(next[round], load(valid, address));
    };
    if (issueEarly)
      for (int64_t round = 0; round < aheadRows; ++round)
        issueNext(round);
    for (int64_t round = 0; round < rounds; ++round) {
      if (round < aheadRows) {
        store(buffer, round, current[round][0], llvm::to_vector(current[round].drop_front()));
      } else {
        auto [valid, address] = classify(tileIndex, round, llvm::to_vector(current[round]));
        store(buffer, round, valid, load(valid, address));
      }
      if (!issueEarly)
        for (int64_t ahead = 0; ahead < aheadRows; ++ahead)
          if (issueAfter(ahead) == round)
            issueNext(ahead);
    }
    // The tile's bytes are read by wgmma (the async proxy).
    hb.fenceAsyncShared();
    arriveBarrier(buffer, /*full=*/true);
    Value tileAfterNext = arith::AddIOp::create(b, tileIndex, kb.index(2));
    SmallVector<Value> yielded;
    for (int64_t round = 0; round < rounds; ++round) {
      if (round < aheadRows)
        llvm::append_range(yielded, next[round]);
      else
        llvm::append_range(yielded, upcoming[round]);
    }
    for (int64_t round = 0; round < rounds; ++round)
      llvm::append_range(yielded, select(tileAfterNext, round));
    scf::YieldOp::create(b, yielded);
  }
}

void TensorCoreAttentionEmitter::emitSoftmaxGroup() {
  NVVM::SetMaxRegisterOp::create(b, kSoftmaxRegisters, NVVM::SetMaxRegisterAction::increase);
  Type f32Type = b.getF32Type();
  Value quad = remu(lane, 4);
  Value firstRow = add(mul(warp, c32(16)), divu(lane, 4));
  Value negInf = kb.f32(-std::numeric_limits<double>::infinity());
  // Scores in base 2: q.k * scale * log2(e).
  Value scoreScale = kb.f32(static_cast<double>(config.softmaxScale) * M_LOG2E);
  Value zeroOutput = LLVM::ZeroOp::create(b, hb.accumulatorType(256));

  auto quadReduce = [&](Value v, bool max) {
    for (int64_t offset : {1, 2}) {
      Value other =
          gpu::ShuffleOp::create(b, v, offset, 32, gpu::ShuffleMode::XOR).getShuffleResult();
      v = max ? arith::MaximumFOp::create(b, v, other).getResult()
              : arith::AddFOp::create(b, v, other).getResult();
    }
    return v;
  };

  auto loop = scf::ForOp::create(b, kb.index(0), tiles, kb.index(1),
                                 ValueRange{zeroOutput, negInf, negInf, kb.f32(0.0), kb.f32(0.0)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value tileIndex = loop.getInductionVar();
    Value output = loop.getRegionIterArg(0);
    SmallVector<Value> maxes{loop.getRegionIterArg(1), loop.getRegionIterArg(2)};
    SmallVector<Value> sums{loop.getRegionIterArg(3), loop.getRegionIterArg(4)};
    Value tile = toI32(tileIndex);
    Value buffer = andi(tile, c32(1));
    waitTileFull(buffer, andi(shr(tile, 1), c32(1)));
    Value scores = emitScores(buffer);

    // Column biases of the thread's 16 columns (shared by its two rows).
    SmallVector<Value> bias;
    Value biasBase = add(c32(kBiasOffset), mul(buffer, c32(4 * kTensorCoreTileRows)));
    for (int64_t j = 0; j < 8; ++j) {
      Value pair = loadShared(VectorType::get({2}, f32Type),
                              add(biasBase, mul(add(c32(8 * j), mul(quad, c32(2))), c32(4))), 8);
      for (int64_t e = 0; e < 2; ++e)
        bias.push_back(vector::ExtractOp::create(b, pair, ArrayRef<int64_t>{e}));
    }
    SmallVector<Value> values;
    SmallVector<Value> rowMax{negInf, negInf};
    for (int64_t i = 0; i < 32; ++i) {
      Value s = LLVM::ExtractValueOp::create(b, scores, i);
      s = LLVM::FMAOp::create(b, s, scoreScale, bias[2 * (i >> 2) + (i & 1)]);
      values.push_back(s);
      rowMax[(i >> 1) & 1] = arith::MaximumFOp::create(b, rowMax[(i >> 1) & 1], s);
    }
    SmallVector<Value> newMaxes, alphas, usedMaxes;
    for (int64_t r = 0; r < 2; ++r) {
      Value m = arith::MaximumFOp::create(b, maxes[r], quadReduce(rowMax[r], true));
      // Rows without any data yet keep -inf; subtract 0 from them instead.
      Value used =
          kb.select(arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, m, negInf), kb.f32(0.0), m);
      newMaxes.push_back(m);
      usedMaxes.push_back(used);
      alphas.push_back(kb.exp2(arith::SubFOp::create(b, maxes[r], used)));
    }
    SmallVector<Value> newSums{arith::MulFOp::create(b, sums[0], alphas[0]),
                               arith::MulFOp::create(b, sums[1], alphas[1])};
    for (int64_t i = 0; i < 32; ++i) {
      int64_t r = (i >> 1) & 1;
      values[i] = kb.exp2(arith::SubFOp::create(b, values[i], usedMaxes[r]));
      newSums[r] = arith::AddFOp::create(b, newSums[r], values[i]);
    }
    // P may be overwritten once the second warpgroup has read the last one.
    kb.ifThen(kb.cmpi(arith::CmpIPredicate::ugt, tile, c32(0)), [&] { namedSync(kBarrierPFree); });
    Type pairF32 = VectorType::get({2}, f32Type);
    for (int64_t i = 0; i < 32; i += 2) {
      Value row = add(firstRow, c32(8 * ((i >> 1) & 1)));
      Value pair = vector::FromElementsOp::create(b, pairF32, ValueRange{values[i], values[i + 1]});
      Value narrow = arith::TruncFOp::create(b, VectorType::get({2}, b.getBF16Type()), pair);
      Value offset = add(swizzled(c32(kPOffset), row, c32(i >> 2)), mul(quad, c32(4)));
      storeShared(narrow, offset, 4);
    }
    kb.ifThen(eq(quad, c32(0)), [&] {
      for (int64_t r = 0; r < 2; ++r)
        storeShared(alphas[r], add(c32(kScaleOffset), mul(add(firstRow, c32(8 * r)), c32(4))), 4);
    });
    hb.fenceAsyncShared();
    namedArrive(kBarrierPReady);
    output = emitValues(scaleRows(output, alphas), buffer, 0);
    releaseTile(buffer);
    scf::YieldOp::create(b, ValueRange{output, newMaxes[0], newMaxes[1], newSums[0], newSums[1]});
  }

  Value output = loop.getResult(0);
  SmallVector<Value> scales;
  namedSync(kBarrierPFree);
  for (int64_t r = 0; r < 2; ++r) {
    Value max = loop.getResult(1 + r);
    Value sum = quadReduce(loop.getResult(3 + r), false);
    Value row = add(firstRow, c32(8 * r));
    if (config.splits > 1) {
      // The split's softmax state: its max (base 2) and sum.
      kb.ifThen(eq(quad, c32(0)), [&] {
        Value query = ext64(add(mul(toI32(request), c32(config.positions)), toI32(position)));
        Value element = mul(add(mul(add(mul(query, c64(config.heads)), ext64(add(headBase, row))),
                                    c64(config.splits)),
                                arith::IndexCastOp::create(b, b.getI64Type(), split)),
                            c64(2 + kValueDims));
        Value state =
            vector::FromElementsOp::create(b, VectorType::get({2}, f32Type), ValueRange{max, sum});
        LLVM::StoreOp::create(
            b, state, hb.globalPointer(add(hb.getAddress(partials), mul(element, c64(4)))), 8);
      });
      scales.push_back(kb.f32(1.0));
    } else {
      scales.push_back(
          kb.select(arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, sum, kb.f32(0.0)),
                    arith::DivFOp::create(b, kb.f32(1.0), sum), kb.f32(0.0)));
    }
  }
  kb.ifThen(eq(quad, c32(0)), [&] {
    for (int64_t r = 0; r < 2; ++r)
      storeShared(scales[r], add(c32(kScaleOffset), mul(add(firstRow, c32(8 * r)), c32(4))), 4);
  });
  namedArrive(kBarrierPReady);
  emitStoreOutput(output, scales, 0);
  namedArrive(kBarrierStored);
}

void TensorCoreAttentionEmitter::emitSecondHalfGroup() {
  NVVM::SetMaxRegisterOp::create(b, kSecondHalfRegisters, NVVM::SetMaxRegisterAction::decrease);
  Value firstRow = add(mul(warp, c32(16)), divu(lane, 4));
  auto readScales = [&]() {
    SmallVector<Value> scales;
    for (int64_t r = 0; r < 2; ++r)
      scales.push_back(loadShared(
          b.getF32Type(), add(c32(kScaleOffset), mul(add(firstRow, c32(8 * r)), c32(4))), 4));
    return scales;
  };
  auto loop = scf::ForOp::create(b, kb.index(0), tiles, kb.index(1),
                                 ValueRange{LLVM::ZeroOp::create(b, hb.accumulatorType(256))});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value tile = toI32(loop.getInductionVar());
    Value buffer = andi(tile, c32(1));
    waitTileFull(buffer, andi(shr(tile, 1), c32(1)));
    namedSync(kBarrierPReady);
    Value output = emitValues(scaleRows(loop.getRegionIterArg(0), readScales()), buffer, 1);
    namedArrive(kBarrierPFree);
    releaseTile(buffer);
    scf::YieldOp::create(b, output);
  }
  namedSync(kBarrierPReady);
  emitStoreOutput(loop.getResult(0), readScales(), 1);
  namedSync(kBarrierStored);
}

void TensorCoreAttentionEmitter::emit() {
  queries = args[Role::Queries];
  rowIds = args[Role::RowIds];
  slots = args[Role::Slots];
  if (config.staged) {
    host = args[Role::Staging]; // [B, N, ...]: row b * N + n
    stagingIndex = args.lookup(Role::Remap);
  } else {
    historyStart = args[Role::HistoryStart];
    historyLen = args[Role::HistoryLen];
    host = args[Role::HostTier];
  }
  hbm = args[Role::HbmTier];
  output = args[Role::Output];
  partials = args.lookup(Role::Partials);
  status = args[Role::Status];

  tid = toI32(kb.threadId());
  group = divu(tid, kGroupThreads);
  thread = remu(tid, kGroupThreads);
  warp = divu(thread, 32);
  lane = remu(thread, 32);
  Value pair = kb.blockId();
  request = arith::DivUIOp::create(b, pair, kb.index(config.positions));
  position = arith::RemUIOp::create(b, pair, kb.index(config.positions));
  headBase = mul(toI32(kb.blockId(gpu::Dimension::y)), c32(kTensorCoreHeads));
  split = kb.blockId(gpu::Dimension::z);
  tiles = kb.index(config.splitRows / kTensorCoreTileRows);

  // The dynamic shared memory, declared once per module, and its base
  // rounded up to 1024 bytes (128-byte swizzle atoms).
  constexpr StringLiteral sharedName = "dhs_tensor_core_shared";
  auto module = b.getInsertionBlock()->getParentOp()->getParentOfType<gpu::GPUModuleOp>();
  if (!module.lookupSymbol(sharedName)) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    LLVM::GlobalOp::create(b, LLVM::LLVMArrayType::get(b.getI8Type(), 0), /*isConstant=*/false,
                           LLVM::Linkage::External, sharedName, Attribute(),
                           /*alignment=*/kSharedAlignment, /*addrSpace=*/3);
  }
  auto sharedPtrType = LLVM::LLVMPointerType::get(b.getContext(), 3);
  Value raw = LLVM::PtrToIntOp::create(b, b.getI64Type(),
                                       LLVM::AddressOfOp::create(b, sharedPtrType, sharedName));
  sharedStart = andi(add(raw, c64(kSharedAlignment - 1)), c64(-kSharedAlignment));
  sharedBase = LLVM::IntToPtrOp::create(b, sharedPtrType, sharedStart);

  if (clustered)
    rank = hb.clusterRank();
  emitLoadQueries();
  kb.ifThen(eq(tid, c32(0)), [&] {
    // full: the producer's threads; empty: every consumer thread, or in a
    // cluster one thread of each consumer warpgroup of both CTAs; remote:
    // this CTA's producer arms it with the peer's bytes.
    int64_t emptyArrivals = clustered ? 4 : 2 * kGroupThreads;
    for (int64_t i = 0; i < (clustered ? 6 : 4); ++i)
      NVVM::MBarrierInitOp::create(b, sharedPointer(kBarrierOffset + 8 * i),
                                   c32(i < 2   ? kGroupThreads
                                       : i < 4 ? emptyArrivals
                                               : 1),
                                   Value());
    if (clustered)
      NVVM::FenceMbarrierInitOp::create(b);
  });
  hb.fenceAsyncShared();
  gpu::BarrierOp::create(b);
  // The peer's barriers are initialized before anything reaches them.
  if (clustered)
    hb.clusterSync();

  auto producer = scf::IfOp::create(b, eq(group, c32(2)), /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(producer.thenBlock());
    emitProducer();
    b.setInsertionPointToStart(producer.elseBlock());
    auto consumer = scf::IfOp::create(b, eq(group, c32(0)), /*withElse=*/true);
    b.setInsertionPointToStart(consumer.thenBlock());
    emitSoftmaxGroup();
    b.setInsertionPointToStart(consumer.elseBlock());
    emitSecondHalfGroup();
  }
  // Neither CTA leaves while the peer may still store into its shared
  // memory or arrive on its barriers.
  if (clustered)
    hb.clusterSync();
  gpu::ReturnOp::create(b);
}

KernelSpec mlir::dhs::getTensorCoreAttentionKernel(const SparseAttentionKernelConfig &config) {
  KernelSpec spec{config.staged ? abi::LaunchKind::Attention : abi::LaunchKind::SparseAttention,
                  config.key()};
  spec.signature = getAttentionSignature(config);
  spec.geometry.grid = config.grid();
  spec.geometry.block = {kTensorCoreThreads, 1, 1};
  spec.geometry.dynamicSharedBytes =
      (config.clusterHeadBlocks == 2 ? kClusterSharedBytes : kSharedBytes) + kSharedAlignment;
  if (config.clusterHeadBlocks == 2)
    spec.cluster = {1, 2, 1};
  // One CTA per SM: a thread starts with 168 registers (65536 / 384), which
  // the warpgroups then redistribute (setmaxnreg).
  spec.minBlocksPerSM = 1;
  spec.emitBody = [config](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    TensorCoreAttentionEmitter(b, config, args).emit();
  };
  return spec;
}
