//===- TensorCoreAttentionKernel.cpp - sparse MLA attention on wgmma -------===//
//
// One CTA computes 64 heads of one query over a range of its selected rows,
// 64 rows (a tile) at a time, with three warpgroups:
//  - the producer gathers each tile's rows from their HBM slots or the host
//    store (16-byte loads, two rows per thread), dequantizes FP8 to bf16 and
//    stores them into one of two tile buffers in wgmma's 128-byte swizzled
//    layout, then signals the tile full (mbarrier); a bf16 row in HBM goes
//    to its place by cp.async instead, tracked by the same barrier;
//  - the softmax warpgroup computes S = Q K^T (36 wgmma m64n64k16), the
//    online softmax in base 2, writes P (bf16) and each row's rescale factor
//    to shared memory, and accumulates O[:, 0:256] += P V (4 m64n256k16);
//  - the second warpgroup accumulates O[:, 256:512] += P V from the same P.
// Both consumers release the tile (mbarrier) once their P V completed; two
// named barriers hand P from the softmax warpgroup to the second one and
// back. The dequantized tile serves both products: K-major for Q K^T,
// N-major (transposed) for P V.
//
// With 128 heads (or any multiple of 64) each 64-head block of a query is
// a CTA of its own that gathers every row of the query's tiles; the CTAs of
// a query read the same rows at about the same time (mostly from L2), and a
// one-layer step fetches its missing rows into HBM first (dhs.fetch), so
// that no host row crosses PCIe twice. (Pairs of head-block CTAs that split
// each tile's gather in a cluster were measured slower: bench/NOTES.md,
// forty-first session.)
//
// With a shared prefix (dhs.share_rows: the first tiles[b] tiles of every
// position of request b hold the same rows) the position CTAs of a request
// form a cluster: half h of shared tile t is gathered and dequantized by the
// CTA of rank (2t + h) mod Q alone, which copies it into every CTA's tile
// buffer (bulk copies), so each CTA gathers 2/Q of the shared tiles and all of
// its own others. Each row's id travels with it; a CTA's consumers compare
// it with their own selection and report a prefix that differs.
//
// The layout and the emitter's helpers are in TensorCoreAttentionEmitter.h,
// the producer in TensorCoreAttentionProducer.cpp.
//
//===----------------------------------------------------------------------===//

#include "codegen/TensorCoreAttentionEmitter.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::dhs;
using namespace mlir::dhs::tensor_core;
using Role = abi::ParamRole;

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
  Value staging = c32(kOutputStagingOffset +
                      half * (config.splits > 1 ? kPartialsStagingBytes : kOutputStagingBytes));
  auto registerPair = [&](int64_t i) -> Value {
    return vector::FromElementsOp::create(
        b, pair,
        ValueRange{LLVM::ExtractValueOp::create(b, output, i),
                   LLVM::ExtractValueOp::create(b, output, i + 1)});
  };
  auto stagedSync = [&] {
    NVVM::BarrierOp::create(b, Type(), c32(kBarrierOutputStaged + half), c32(kGroupThreads), {},
                            Value());
  };
  if (config.splits > 1) {
    // Unscaled fp32 partials[b, q, h, split, 2 + column], whose rows (2056
    // bytes apart) allow 8-byte stores only: two passes of 128 columns
    // through the staging rows (kPartialsStagingPitch apart, so that a half
    // warp's 8-byte stores of 4 rows hit 32 banks), then each warp writes
    // 256 contiguous bytes of a row a store instead of 32 bytes of 8 rows.
    Value partialsBase = hb.getAddress(partials);
    Value splitIndex = arith::IndexCastOp::create(b, b.getI64Type(), split);
    for (int64_t pass = 0; pass < 2; ++pass) {
      if (pass > 0)
        stagedSync();
      for (int64_t i = pass * 64; i < pass * 64 + 64; i += 2) {
        Value row = add(firstRow, c32(8 * ((i >> 1) & 1)));
        Value column = add(c32(8 * (i >> 2) - 128 * pass), mul(quad, c32(2)));
        storeShared(registerPair(i),
                    add(add(staging, mul(row, c32(kPartialsStagingPitch))), mul(column, c32(4))),
                    8);
      }
      stagedSync();
      // A thread's 8-byte chunk of a row is the same in every store; its
      // row advances by kGroupThreads / chunksPerRow a store.
      constexpr int64_t chunksPerRow = 128 * 4 / 8;
      constexpr int64_t rowsPerStore = kGroupThreads / chunksPerRow;
      Value firstStagedRow = divu(thread, chunksPerRow);
      Value chunk = remu(thread, chunksPerRow);
      Value stagedBase =
          add(add(staging, mul(firstStagedRow, c32(kPartialsStagingPitch))), mul(chunk, c32(8)));
      Value element =
          add(mul(add(mul(add(mul(query, c64(config.heads)), ext64(add(headBase, firstStagedRow))),
                          c64(config.splits)),
                      splitIndex),
                  c64(2 + kValueDims)),
              ext64(add(c32(2 + half * 256 + pass * 128), mul(chunk, c32(2)))));
      Value globalBase = add(partialsBase, mul(element, c64(4)));
      for (int64_t k = 0; k < kTensorCoreHeads / rowsPerStore; ++k) {
        Value data =
            loadShared(pair, add(stagedBase, c32(k * rowsPerStore * kPartialsStagingPitch)), 8);
        int64_t rowBytes = rowsPerStore * config.splits * (2 + kValueDims) * 4;
        LLVM::StoreOp::create(b, data, hb.globalPointer(add(globalBase, c64(k * rowBytes))), 8);
      }
    }
    return;
  }
  Value outputBase = hb.getAddress(this->output);
  for (int64_t i = 0; i < 128; i += 2) {
    Value row = add(firstRow, c32(8 * ((i >> 1) & 1)));
    Value values = arith::MulFOp::create(
        b, registerPair(i), vector::BroadcastOp::create(b, pair, scales[(i >> 1) & 1]).getResult());
    Value narrow =
        arith::TruncFOp::create(b, VectorType::get({2}, b.getBF16Type()), values).getResult();
    // Into the warpgroup's staging rows (the column within its half).
    Value staged = add(add(staging, mul(row, c32(kOutputStagingPitch))),
                       mul(add(c32(8 * (i >> 2)), mul(quad, c32(2))), c32(2)));
    storeShared(narrow, staged, 4);
  }
  // The warpgroup's 64 rows x 512 bytes, 16 bytes a thread at a time: each
  // warp writes whole rows, 4 full 128-byte lines a store.
  stagedSync();
  constexpr int64_t chunksPerRow = kValueDims / 2 * 2 / 16;
  Type chunkType = VectorType::get({4}, b.getI32Type());
  for (int64_t k = 0; k < kTensorCoreHeads * chunksPerRow / kGroupThreads; ++k) {
    Value chunkIndex = add(thread, c32(k * kGroupThreads));
    Value row = divu(chunkIndex, chunksPerRow);
    Value chunk = remu(chunkIndex, chunksPerRow);
    Value data = loadShared(
        chunkType, add(add(staging, mul(row, c32(kOutputStagingPitch))), mul(chunk, c32(16))), 16);
    Value element =
        add(mul(add(mul(query, c64(config.heads)), ext64(add(headBase, row))), c64(kValueDims)),
            ext64(add(c32(half * 256), mul(chunk, c32(8)))));
    LLVM::StoreOp::create(b, data, hb.globalPointer(add(outputBase, mul(element, c64(2)))), 16);
  }
}

void TensorCoreAttentionEmitter::emitLoadQueries() {
  // 64 rows x 72 chunks of 16 bytes, 18 per consumer thread, by cp.async:
  // the producer starts on its first tile at once, and the consumers wait
  // for Q only before their first wgmma (waitQueries).
  kb.ifThen(kb.cmpi(arith::CmpIPredicate::ult, tid, c32(kConsumerThreads)), [&] {
    Value base = hb.getAddress(queries);
    Value query = add(mul(toI32(request), c32(config.positions)), toI32(position));
    constexpr int64_t chunksPerRow = kKeyDims * 2 / 16;
    for (int64_t j = 0; j < kTensorCoreHeads * chunksPerRow / kConsumerThreads; ++j) {
      Value chunkIndex = add(tid, c32(j * kConsumerThreads));
      Value row = divu(chunkIndex, chunksPerRow);
      Value chunk = remu(chunkIndex, chunksPerRow);
      Value element =
          add(mul(ext64(add(mul(query, c32(config.heads)), add(headBase, row))), c64(kKeyDims)),
              mul(ext64(chunk), c64(8)));
      Value offset =
          swizzled(add(c32(kQOffset), mul(divu(chunk, 8), c32(kBlockBytes))), row, remu(chunk, 8));
      NVVM::CpAsyncOp::create(
          b, sharedPointer(offset), hb.globalPointer(add(base, mul(element, c64(2)))),
          b.getI32IntegerAttr(16),
          NVVM::LoadCacheModifierKindAttr::get(b.getContext(), NVVM::LoadCacheModifierKind::CG),
          Value());
    }
    NVVM::CpAsyncCommitGroupOp::create(b);
  });
}

void TensorCoreAttentionEmitter::waitQueries(bool softmaxGroup) {
  // Each consumer thread's copies are complete and, fenced, visible to
  // wgmma (the async proxy); then both consumer warpgroups' copies are (the
  // second-half warpgroup, which never reads Q, only arrives).
  NVVM::CpAsyncWaitGroupOp::create(b, 0);
  hb.fenceAsyncShared();
  if (softmaxGroup)
    namedSync(kBarrierQueries);
  else
    namedArrive(kBarrierQueries);
}

void TensorCoreAttentionEmitter::emitSoftmaxGroup() {
  NVVM::SetMaxRegisterOp::create(b, kSoftmaxRegisters, NVVM::SetMaxRegisterAction::increase);
  waitQueries(/*softmaxGroup=*/true);
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
    releaseTile(buffer, tileIndex);
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

void TensorCoreAttentionEmitter::emitCheckSharedIds(Value buffer) {
  // Thread i < 64 checks row i: the id this CTA selected against the id of
  // the row the tile holds.
  kb.ifThen(kb.cmpi(arith::CmpIPredicate::ult, thread, c32(kTensorCoreTileRows)), [&] {
    Value offset = mul(add(mul(buffer, c32(kTensorCoreTileRows)), thread), c32(4));
    Value expected = loadShared(b.getI32Type(), add(c32(kExpectedIdsOffset), offset), 4);
    Value received = loadShared(b.getI32Type(), add(c32(kReceivedIdsOffset), offset), 4);
    kb.ifThen(kb.cmpi(arith::CmpIPredicate::ne, expected, received), [&] {
      memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori, c32(abi::kStatusBadSharedRows),
                                  status, ValueRange{kb.index(0)});
    });
  });
}

void TensorCoreAttentionEmitter::emitSecondHalfGroup() {
  NVVM::SetMaxRegisterOp::create(b, kSecondHalfRegisters, NVVM::SetMaxRegisterAction::decrease);
  waitQueries(/*softmaxGroup=*/false);
  Value firstRow = add(mul(warp, c32(16)), divu(lane, 4));
  auto readScales = [&]() {
    SmallVector<Value> scales;
    for (int64_t r = 0; r < 2; ++r)
      scales.push_back(loadShared(
          b.getF32Type(), add(c32(kScaleOffset), mul(add(firstRow, c32(8 * r)), c32(4))), 4));
    return scales;
  };
  if (hostRowRing) {
    requestHistoryStart = memref::LoadOp::create(b, historyStart, ValueRange{request});
    requestHistoryLen = memref::LoadOp::create(b, historyLen, ValueRange{request});
  }
  auto loop = scf::ForOp::create(b, kb.index(0), tiles, kb.index(1),
                                 ValueRange{LLVM::ZeroOp::create(b, hb.accumulatorType(256))});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    // The host rows of tile t + ahead go into ring entry t (the sequence
    // number) while this warpgroup would wait for tile t's P anyway.
    if (hostRowRing) {
      Value staged = arith::AddIOp::create(b, loop.getInductionVar(), kb.index(kHostRowRingAhead));
      kb.ifThen(kb.cmpi(arith::CmpIPredicate::ult, staged, tiles),
                [&] { emitStageHostRows(staged, loop.getInductionVar()); });
    }
    Value tile = toI32(loop.getInductionVar());
    Value buffer = andi(tile, c32(1));
    waitTileFull(buffer, andi(shr(tile, 1), c32(1)));
    if (sharing)
      emitCheckSharedIds(buffer);
    namedSync(kBarrierPReady);
    Value output = emitValues(scaleRows(loop.getRegionIterArg(0), readScales()), buffer, 1);
    namedArrive(kBarrierPFree);
    releaseTile(buffer, loop.getInductionVar());
    scf::YieldOp::create(b, output);
  }
  namedSync(kBarrierPReady);
  emitStoreOutput(loop.getResult(0), readScales(), 1);
  namedSync(kBarrierStored);
}

Value TensorCoreAttentionEmitter::ringBarrier(Value sequence) {
  Value entry = toI32(arith::RemUIOp::create(b, sequence, kb.index(ringTiles)));
  Value offset = mul(entry, c32(8));
  return sharedPointer(add(c32(kRingBarrierOffset), offset));
}

Value TensorCoreAttentionEmitter::ringParity(Value sequence) {
  Value phase = toI32(arith::DivUIOp::create(b, sequence, kb.index(ringTiles)));
  return andi(phase, c32(1));
}

Value TensorCoreAttentionEmitter::ringRowAddress(Value sequence, Value row) {
  // The CTA's part: x + X (y + Y z) over the grid (X, Y, Z). (One value at
  // a time: the IR's order must not depend on the host compiler's order of
  // evaluating arguments.)
  std::array<int64_t, 3> grid = config.grid();
  Value x = ext64(toI32(kb.blockId()));
  Value y = ext64(toI32(kb.blockId(gpu::Dimension::y)));
  Value z = ext64(toI32(split));
  Value plane = add(y, mul(z, c64(grid[1])));
  Value cta = add(x, mul(plane, c64(grid[0])));
  Value entry = arith::IndexCastOp::create(
      b, b.getI64Type(), arith::RemUIOp::create(b, sequence, kb.index(ringTiles)));
  Value ringTile = add(mul(cta, c64(ringTiles)), entry);
  Value ringRow = add(mul(ringTile, c64(kTensorCoreTileRows)), ext64(row));
  return add(hostRowRing, mul(ringRow, c64(config.pool.getFormat().getRowBytes())));
}

void TensorCoreAttentionEmitter::emitStageHostRows(Value tileIndex, Value sequence) {
  int64_t layers = config.pool.getLayers();
  int64_t rowBytes = config.pool.getFormat().getRowBytes();
  int64_t chunks = rowBytes / 16;
  int64_t laneRounds = llvm::divideCeil(chunks, kWarpSize);
  // Warp w looks at rows 16 w to 16 w + 15 of the tile, lanes l and l + 16
  // at row 16 w + l % 16; the rows that come from the host store (as the
  // producer classifies them: valid ids, rows inside the store) are copied
  // two at a time by the whole warp, 16 bytes a lane.
  Value warpRow = mul(warp, c32(16));
  Value tileRow = add(warpRow, remu(lane, 16));
  Value splitBase = arith::MulIOp::create(b, split, kb.index(config.splitRows));
  Value tileBase = arith::MulIOp::create(b, tileIndex, kb.index(kTensorCoreTileRows));
  Value tileStart = arith::AddIOp::create(b, splitBase, tileBase);
  Value k = arith::AddIOp::create(b, tileStart, toIndex(tileRow));
  Value id = memref::LoadOp::create(b, rowIds, ValueRange{request, position, k});
  Value slot = memref::LoadOp::create(b, slots, ValueRange{request, position, k});
  Value hostRow = add(requestHistoryStart, sext64(id));
  Value hostRows =
      arith::IndexCastOp::create(b, b.getI64Type(), memref::DimOp::create(b, host, kb.index(0)));
  Value onHost = eq(slot, c32(-1));
  Value idFrom = kb.cmpi(arith::CmpIPredicate::sge, id, c32(0));
  Value idBelow = kb.cmpi(arith::CmpIPredicate::slt, id, requestHistoryLen);
  Value rowFrom = kb.cmpi(arith::CmpIPredicate::sge, hostRow, c64(0));
  Value rowBelow = kb.cmpi(arith::CmpIPredicate::slt, hostRow, hostRows);
  Value idInside = andi(idFrom, idBelow);
  Value rowInside = andi(rowFrom, rowBelow);
  Value copied = andi(andi(onHost, idInside), rowInside);
  Value firstHalf = kb.cmpi(arith::CmpIPredicate::ult, lane, c32(16));
  Value mask = kb.ballot(andi(copied, firstHalf));
  Value ringBase = ringRowAddress(sequence, warpRow);
  Value hostBase = hb.getAddress(host);
  Value zero = arith::ConstantOp::create(
      b, VectorType::get({4}, b.getI32Type()),
      DenseElementsAttr::get(VectorType::get({4}, b.getI32Type()), b.getI32IntegerAttr(0)));
  Type i32 = b.getI32Type();
  auto loop = scf::WhileOp::create(b, TypeRange{i32}, ValueRange{mask});
  {
    OpBuilder::InsertionGuard guard(b);
    Block *before = b.createBlock(&loop.getBefore(), {}, {i32}, {b.getLoc()});
    Value left = before->getArgument(0);
    scf::ConditionOp::create(b, kb.cmpi(arith::CmpIPredicate::ne, left, c32(0)), ValueRange{left});
    Block *after = b.createBlock(&loop.getAfter(), {}, {i32}, {b.getLoc()});
    Value rows = after->getArgument(0);
    Value first = LLVM::CountTrailingZerosOp::create(b, i32, rows, false);
    Value others = andi(rows, add(rows, c32(-1)));
    Value two = kb.cmpi(arith::CmpIPredicate::ne, others, c32(0));
    Value second = kb.select(two, LLVM::CountTrailingZerosOp::create(b, i32, others, false), first);
    Value rest = andi(others, add(others, c32(-1)));
    // Each row's 16-byte chunks: lane l's are l, l + 32, ... (below chunks).
    SmallVector<std::pair<Value, Value>> copies; // (condition, ring address)
    SmallVector<Value> loaded;
    SmallVector<Value, 2> pair{first, second};
    for (auto [r, row] : llvm::enumerate(pair)) {
      Value rowId = gpu::ShuffleOp::create(b, id, row, c32(kWarpSize), gpu::ShuffleMode::IDX)
                        .getShuffleResult();
      Value token = add(requestHistoryStart, sext64(rowId));
      Value layerRow = add(mul(token, c64(layers)), c64(config.layer));
      Value source = add(hostBase, mul(layerRow, c64(rowBytes)));
      Value destination = add(ringBase, mul(ext64(row), c64(rowBytes)));
      for (int64_t round = 0; round < laneRounds; ++round) {
        Value chunk = add(lane, c32(round * kWarpSize));
        Value inRow = kb.cmpi(arith::CmpIPredicate::ult, chunk, c32(chunks));
        Value wanted = r == 0 ? inRow : andi(inRow, two);
        Value offset = mul(ext64(chunk), c64(16));
        auto load = scf::IfOp::create(b, TypeRange{zero.getType()}, wanted, /*withElse=*/true);
        {
          OpBuilder::InsertionGuard inner(b);
          b.setInsertionPointToStart(load.thenBlock());
          scf::YieldOp::create(b, hb.loadGlobal16(add(source, offset)));
          b.setInsertionPointToStart(load.elseBlock());
          scf::YieldOp::create(b, zero);
        }
        loaded.push_back(load.getResult(0));
        copies.push_back({wanted, add(destination, offset)});
      }
    }
    for (auto [copy, chunk] : llvm::zip(copies, loaded))
      kb.ifThen(copy.first, [&] { hb.storeGlobal16(copy.second, chunk); });
    scf::YieldOp::create(b, ValueRange{rest});
  }
  // Every thread of the warpgroup arrives (release at CTA scope: the
  // producer's loads of the ring come after its wait on the phase).
  NVVM::MBarrierArriveOp::create(b, b.getI64Type(), ringBarrier(sequence), Value(),
                                 NVVM::MemScopeKind::CTA, false);
}

void TensorCoreAttentionEmitter::emit() {
  queries = args[Role::Queries];
  rowIds = args[Role::RowIds];
  slots = args[Role::Slots];
  if (config.staged) {
    host = args[Role::Staging]; // [B, N, ...]: row b * N + n
    stagingIndex = args.lookup(Role::Remap);
    if (config.overlapped) {
      readyFlags = hb.getAddress(args[Role::ReadyFlags]);
      historyStart = args[Role::HistoryStart];
      historyLen = args[Role::HistoryLen];
      hostStore = args[Role::HostTier];
    }
  } else {
    historyStart = args[Role::HistoryStart];
    historyLen = args[Role::HistoryLen];
    host = args[Role::HostTier];
  }
  hbm = args[Role::HbmTier];
  output = args[Role::Output];
  partials = args.lookup(Role::Partials);
  status = args[Role::Status];
  sharedTilesArg = args.lookup(Role::SharedTiles);
  writeBackEntries = args.lookup(Role::WriteBack);
  writeBackRing = args.lookup(Role::WriteBackRing);
  if (config.hostRowRingTiles > 0 && !config.residentForm) {
    // (Its barriers lie where a position cluster's remote[2] would.)
    assert(!sharing && "a host-row ring in a position cluster");
    hostRowRing = hb.getAddress(args[Role::HostRowRing]);
    ringTiles = config.hostRowRingTiles;
  }

  // Overlapped staging: the next layer's attention of a layer group (a
  // programmatic dependent launch too) may start once every CTA of this one
  // runs, so that its CTAs take the SMs this one's leave while the fetch
  // still runs; it waits for this one before it ends.
  // A split query's combine kernel may start too (it waits for this grid to
  // end before it reads the partials).
  if (config.overlapped || config.splits > 1)
    NVVM::GriddepcontrolOp::create(b, NVVM::GridDepActionKind::launch_dependents);
  tid = toI32(kb.threadId());
  group = divu(tid, kGroupThreads);
  thread = remu(tid, kGroupThreads);
  warp = divu(thread, 32);
  lane = remu(thread, 32);
  Value pair = kb.blockId();
  request = arith::DivUIOp::create(b, pair, kb.index(config.positions));
  position = arith::RemUIOp::create(b, pair, kb.index(config.positions));
  // (The operands one statement each: C++ leaves the order of a call's
  // arguments open, and the IR's order must not depend on the host compiler.)
  Value headsPerBlock = c32(kTensorCoreHeads);
  Value headBlock = toI32(kb.blockId(gpu::Dimension::y));
  headBase = mul(headBlock, headsPerBlock);
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

  if (sharing)
    rank = hb.clusterRank();
  // A shared-prefix op's step runs in one of two kernels: the clustered one
  // where at least half of its requests have tiles to share (the others
  // gather theirs alone in their clusters), else the unclustered one (no
  // request shares). Every CTA counts the requests with a tile count (not
  // 0) itself, the same way, and runs or skips whole. Either kernel gives
  // each request the same bits (its tiles in the same order, the same
  // arithmetic).
  Value run;
  if (sharing || config.unsharedRequests) {
    // The count by barrier reductions (popc), one request per thread at a
    // time.
    Value counted = c32(0);
    for (int64_t first = 0; first < config.requests; first += kTensorCoreThreads) {
      Value b0 = add(tid, c32(first));
      Value inRange = kb.cmpi(arith::CmpIPredicate::ult, b0, c32(config.requests));
      Value clamped = arith::MinUIOp::create(b, b0, c32(config.requests - 1));
      Value count = memref::LoadOp::create(b, sharedTilesArg, ValueRange{toIndex(clamped)});
      Value hasTiles = andi(inRange, kb.cmpi(arith::CmpIPredicate::ne, count, c32(0)));
      auto sharers = NVVM::BarrierOp::create(
          b, b.getI32Type(), /*barrierId=*/Value(), /*numberOfThreads=*/Value(),
          NVVM::BarrierReductionAttr::get(b.getContext(), NVVM::BarrierReduction::POPC),
          arith::ExtUIOp::create(b, b.getI32Type(), hasTiles));
      counted = add(counted, sharers.getRes());
    }
    Value stepShares =
        kb.cmpi(arith::CmpIPredicate::sge, mul(counted, c32(2)), c32(config.requests));
    run = sharing ? stepShares
                  : arith::XOrIOp::create(b, stepShares, arith::ConstantIntOp::create(b, 1, 1));
  }
  if (sharing) {
    // The shared prefix's tiles, at most all of them; a count outside
    // [0, tiles] is reported (by rank 0 of each cluster) in every step,
    // whichever kernel computes it, as the CPU backend does.
    Value requested = memref::LoadOp::create(b, sharedTilesArg, ValueRange{request});
    Value total = toI32(tiles);
    sharedTiles = toIndex(arith::MinUIOp::create(b, requested, total));
    // (One op per statement: the lit test reads their order, which nested
    // calls would leave to the C++ compiler.)
    Value tooMany = kb.cmpi(arith::CmpIPredicate::ugt, requested, total);
    Value firstThread = eq(tid, c32(0));
    Value firstRank = eq(rank, c32(0));
    kb.ifThen(andi(andi(firstThread, firstRank), tooMany), [&] {
      memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori, c32(abi::kStatusBadSharedRows),
                                  status, ValueRange{kb.index(0)});
    });
  }
  if (run) {
    // (The rest of the kernel goes into the scf.if, the return after it.)
    auto ifRun = scf::IfOp::create(b, run, /*withElseRegion=*/false);
    b.setInsertionPointAfter(ifRun);
    gpu::ReturnOp::create(b);
    b.setInsertionPointToStart(ifRun.thenBlock());
  }
  emitLoadQueries();
  kb.ifThen(eq(tid, c32(0)), [&] {
    // full: the producer's threads; empty: every consumer thread, or in a
    // cluster one thread of each consumer warpgroup of every CTA (and in
    // racecheck's copy every consumer thread of each as well); remote:
    // this CTA's producer arms it with the other CTAs' bytes.
    Value emptyArrivals = sharing ? hb.racecheckConstant(clusterEmptyArrivals(clusterSize),
                                                         racecheckEmptyArrivals(clusterSize))
                                  : c32(2 * kGroupThreads);
    for (int64_t i = 0; i < (sharing ? 6 : 4); ++i)
      NVVM::MBarrierInitOp::create(b, sharedPointer(kBarrierOffset + 8 * i),
                                   i < 2   ? c32(kGroupThreads)
                                   : i < 4 ? emptyArrivals
                                           : c32(1),
                                   Value());
    // staged: the second consumer warpgroup's threads.
    for (int64_t entry = 0; entry < ringTiles; ++entry)
      NVVM::MBarrierInitOp::create(b, sharedPointer(kRingBarrierOffset + 8 * entry),
                                   c32(kGroupThreads), Value());
    if (sharing)
      NVVM::FenceMbarrierInitOp::create(b);
  });
  hb.fenceAsyncShared();
  gpu::BarrierOp::create(b);
  // The other CTAs' barriers are initialized before anything reaches them.
  if (sharing)
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
  // No CTA leaves while another may still store into its shared memory or
  // arrive on its barriers.
  if (sharing)
    hb.clusterSync();
  if (!run)
    gpu::ReturnOp::create(b);
}

/// Whether the kernel of `config` gets a resident form: fused (missing rows
/// read from the host store), FP8 rows, no cluster.
static bool hasResidentForm(const SparseAttentionKernelConfig &config) {
  return !config.staged && isa<MlaFp8Attr>(config.pool.getFormat()) &&
         config.sharedPositions == 1 && !config.residentForm;
}

KernelSpec mlir::dhs::getTensorCoreAttentionKernel(const SparseAttentionKernelConfig &config) {
  KernelSpec spec{config.staged ? abi::LaunchKind::Attention : abi::LaunchKind::SparseAttention,
                  config.key()};
  spec.signature = getAttentionSignature(config);
  spec.geometry.grid = config.grid();
  spec.geometry.block = {kTensorCoreThreads, 1, 1};
  spec.geometry.dynamicSharedBytes =
      (config.sharedPositions > 1 ? kSharingSharedBytes
                                  : kSharedBytes + 8 * config.hostRowRingTiles) +
      kSharedAlignment;
  // Overlapped staging: the attention starts while its fetch runs (it waits
  // on the fetch's ready flags).
  spec.dependentLaunch = config.overlapped;
  if (config.sharedPositions > 1)
    spec.cluster = {config.sharedPositions, 1, 1};
  // One CTA per SM: a thread starts with 168 registers (65536 / 384), which
  // the warpgroups then redistribute (setmaxnreg).
  spec.minBlocksPerSM = 1;
  spec.emitBody = [config](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    TensorCoreAttentionEmitter(b, config, args).emit();
  };
  // A fused FP8 kernel outside a position cluster has a resident form (its producer
  // loads selections further ahead and prefetches the next tile's HBM rows
  // into L2; the runtime chooses per step).
  if (hasResidentForm(config)) {
    SparseAttentionKernelConfig resident = config;
    resident.residentForm = true;
    spec.emitResidentBody = [resident](ImplicitLocOpBuilder &b, const KernelArguments &args) {
      TensorCoreAttentionEmitter(b, resident, args).emit();
    };
  }
  return spec;
}
