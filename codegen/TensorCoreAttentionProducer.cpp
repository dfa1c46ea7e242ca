//===- TensorCoreAttentionProducer.cpp - wgmma attention's producer -------===//
//
// The producer warpgroup of the tensor-core attention kernel
// (TensorCoreAttentionKernel.cpp): per tile of 64 selected rows it loads the
// selections, classifies each row (HBM slot, host store or staging, bad
// ids reported through the step status), gathers the rows with 16-byte
// loads, dequantizes FP8 to bf16 and stores them into a tile buffer in
// wgmma's 128-byte swizzled layout (in a position cluster, the halves of
// the shared tiles it gathers into every CTA's buffer too), then signals the
// tile full.
//
//===----------------------------------------------------------------------===//

#include "codegen/TensorCoreAttentionEmitter.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::dhs;
using namespace mlir::dhs::tensor_core;

SmallVector<Value> TensorCoreAttentionEmitter::emitLoadSelection(Value k) {
  SmallVector<Value> selection{memref::LoadOp::create(b, rowIds, ValueRange{request, position, k}),
                               memref::LoadOp::create(b, slots, ValueRange{request, position, k})};
  if (config.staged && config.indexed)
    selection.push_back(memref::LoadOp::create(b, stagingIndex, ValueRange{request, position, k}));
  return selection;
}

TensorCoreAttentionEmitter::ClassifiedRow
TensorCoreAttentionEmitter::emitClassify(Value k, ArrayRef<Value> selection, Value report) {
  int64_t layers = config.pool.getLayers();
  int64_t rowBytes = config.pool.getFormat().getRowBytes();
  Value id = selection[0];
  Value slot = selection[1];
  Value none = eq(id, c32(-1));
  Value badRow = kb.cmpi(arith::CmpIPredicate::slt, id, c32(-1));
  if (!config.staged || config.overlapped)
    badRow = ori(badRow, kb.cmpi(arith::CmpIPredicate::sge, id,
                                 requestHistoryLen
                                     ? requestHistoryLen
                                     : memref::LoadOp::create(b, historyLen, ValueRange{request})));
  Value hbmRows =
      arith::IndexCastOp::create(b, b.getI64Type(), memref::DimOp::create(b, hbm, kb.index(0)));
  Value badSlot = ori(kb.cmpi(arith::CmpIPredicate::slt, slot, c32(-1)),
                      kb.cmpi(arith::CmpIPredicate::sge, sext64(slot), hbmRows));
  Value onHost = eq(slot, c32(-1));
  // A missing row's place: the host store at history_start + id (fused), or
  // its staging row b * N + position (staged).
  Value hostRow, hostOutside, readyFlag, hostAddress;
  // Overlapped staging: a missing row of a tile the attention takes is read
  // from the host store (checked as the fused kernel checks it).
  Value storeOutside;
  Value requestRow = arith::IndexCastOp::create(b, b.getI64Type(), request);
  auto historyStartOfRequest = [&]() -> Value {
    return requestHistoryStart ? requestHistoryStart
                               : memref::LoadOp::create(b, historyStart, ValueRange{request});
  };
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
    // Overlapped: a missing row goes by the flag of its tile of 64.
    if (config.overlapped) {
      int64_t tilesPerRequest = config.stagingRows / kTensorCoreTileRows;
      Value flag =
          add(readyFlags, mul(add(mul(requestRow, c64(tilesPerRequest)),
                                  arith::DivUIOp::create(b, staged, c64(kTensorCoreTileRows))),
                              c64(4)));
      readyFlag = kb.select(onHost, flag, c64(0));
      Value storeRow = add(historyStartOfRequest(), sext64(id));
      Value storeRows = arith::IndexCastOp::create(
          b, b.getI64Type(), memref::DimOp::create(b, hostStore, kb.index(0)));
      storeOutside = ori(kb.cmpi(arith::CmpIPredicate::slt, storeRow, c64(0)),
                         kb.cmpi(arith::CmpIPredicate::sge, storeRow, storeRows));
      hostAddress = add(hb.getAddress(hostStore),
                        mul(add(mul(storeRow, c64(layers)), c64(config.layer)), c64(rowBytes)));
    }
  } else {
    hostRow = add(historyStartOfRequest(), sext64(id));
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
  if (storeOutside) {
    Value badStore = andi(andi(onHost, storeOutside), idUsable);
    bits = ori(bits, kb.select(badStore, c32(abi::kStatusBadHostRow), c32(0)));
    hostOutside = ori(hostOutside, storeOutside);
  }
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
  ClassifiedRow row{valid, address, readyFlag, hostAddress, andi(valid, xori(onHost, trueValue))};
  if (writeBackEntries) {
    // A host row's ring entry, looked up by the CTAs of the query's first
    // head block (the others read the same rows). One outside the ring is
    // reported (a bad slot) and not written. It is used a tile later, when
    // the row's chunks are stored.
    // (One value at a time: the IR's order must not depend on the host
    // compiler's order of evaluating arguments.)
    Value firstHeads = eq(headBase, c32(0));
    Value validHostRow = andi(valid, onHost);
    Value entry = kb.loadI32Or(andi(validHostRow, firstHeads), writeBackEntries,
                               ValueRange{request, position, k}, /*fallback=*/-1);
    Value outside = kb.outsideRing(entry, kb.ringRows(writeBackRing));
    kb.ifThen(andi(report, outside), [&] {
      memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori, c32(abi::kStatusBadSlot), status,
                                  ValueRange{kb.index(0)});
    });
    row.ringEntry = kb.select(outside, c32(-1), entry);
  }
  return row;
}

void TensorCoreAttentionEmitter::emitProducer() {
  NVVM::SetMaxRegisterOp::create(b, kProducerRegisters, NVVM::SetMaxRegisterAction::decrease);
  bool fp8 = isa<MlaFp8Attr>(config.pool.getFormat());
  int64_t rowBytes = config.pool.getFormat().getRowBytes();
  // Where tile t + 1's rows are classified and tile t + 2's selections
  // loaded (measured on the H200, bench/NOTES.md, 2026-12-02 eleventh
  // session, against the form kept for bf16: rows classified as their loads
  // issue, the selections loaded after the stores, the request's history
  // bounds loaded in the loop). An FP8 producer that reads host rows itself
  // (fused or overlapped staging) loads the history bounds
  // once and classifies the next tile's rows at the top of each iteration:
  // a host row's loads then issue without waiting for the tile's other
  // loads (mixed steps 9-14% faster, the resident step 6%). Other FP8
  // producers load the selections at the top of the iteration before, a
  // tile and a half ahead (the staged 128-head step 4% faster; in the fused
  // 64-head kernel this form made the resident step 16% faster but mixed
  // steps 3-14% slower, hence only in its resident form, which the runtime
  // launches for steps with (almost) every row in HBM; that form loads the
  // history bounds once too).
  bool classifyAhead = (!config.staged || config.overlapped) && fp8 && !config.residentForm;
  bool selectionsAhead = fp8 && !classifyAhead;
  // A staged FP8 query of two CTAs (128 heads) prefetches its
  // rows two tiles ahead (below), from the selections loaded ahead.
  bool stagedPrefetch = selectionsAhead && config.staged && !config.overlapped && !config.indexed &&
                        !sharing && config.groupHeads > config.headsPerBlock;
  if (classifyAhead || config.residentForm) {
    requestHistoryStart = memref::LoadOp::create(b, historyStart, ValueRange{request});
    requestHistoryLen = memref::LoadOp::create(b, historyLen, ValueRange{request});
  }
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
  // The thread's rows of a tile, as offsets from firstRow: both halves.
  SmallVector<Value> rowOffsets{c32(0), c32(32)};
  int64_t rounds = rowOffsets.size();
  // bf16 rows in HBM go to the tile buffer by cp.async (16 bytes a copy,
  // completing on the tile's full barrier), so the producer never waits for
  // them and both tile buffers can be in flight; rows from the host store
  // (which cp.async reads at a third of the rate of plain loads: bench/NOTES.md,
  // twelfth session) and rows without data go through registers. Not when
  // sharing (its producers copy each stored half to other CTAs) or
  // overlapped (its producer waits on the fetch's ready flags).
  bool asyncRows = !fp8 && !sharing && !config.overlapped;
  // Rows whose loads are issued a tile ahead, while the tile before waits
  // for its buffer: both for FP8 (88 registers), the first for bf16 (72),
  // none where rows are copied asynchronously.
  int64_t aheadRows = asyncRows ? 0 : fp8 ? 2 : 1;
  // Sharing: whether tile `tileIndex` (index) is in the shared prefix, and
  // whether this CTA gathers its row `round`: half h of shared tile t is
  // gathered by rank (2t + h) mod Q, every row of other tiles by its own CTA.
  Value trueValue = arith::ConstantIntOp::create(b, 1, 1);
  auto isShared = [&](Value tileIndex) {
    return kb.cmpi(arith::CmpIPredicate::ult, tileIndex, sharedTiles);
  };
  auto gathers = [&](Value tileIndex, int64_t round) -> Value {
    Value owner = remu(add(mul(toI32(tileIndex), c32(2)), c32(round)), config.sharedPositions);
    // (One op per statement: the lit test reads their order.)
    Value mine = eq(owner, rank);
    Value privateTile = xori(isShared(tileIndex), trueValue);
    return ori(privateTile, mine);
  };
  // Whether the row's bytes are loaded: it has data and, sharing, this CTA
  // gathers it.
  auto loads = [&](Value tileIndex, int64_t round, Value valid) {
    return sharing ? andi(valid, gathers(tileIndex, round)) : valid;
  };
  // Values carried per row loaded ahead: whether it has data, sharing its
  // id, then its chunks.
  bool writesBack = static_cast<bool>(writeBackEntries);
  int64_t aheadHead = 1 + (sharing ? 1 : 0) + (writesBack ? 1 : 0);
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
  auto classify = [&](Value tileIndex, int64_t round, ArrayRef<Value> selection) -> ClassifiedRow {
    auto [k, inRange] = selectionOf(tileIndex, round);
    ClassifiedRow row = emitClassify(k, selection, andi(reporter, inRange));
    row.valid = andi(row.valid, inRange);
    // With a host-row ring, a host row of a tile from kHostRowRingAhead on
    // is read where the second consumer warpgroup copied it (ring sequence
    // number: the tile - kHostRowRingAhead).
    if (hostRowRing) {
      Value fromHost = andi(row.valid, xori(row.inHbm, trueValue));
      Value staged = kb.cmpi(arith::CmpIPredicate::uge, tileIndex, kb.index(kHostRowRingAhead));
      Value sequence = arith::SubIOp::create(
          b, arith::MaxUIOp::create(b, tileIndex, kb.index(kHostRowRingAhead)).getResult(),
          kb.index(kHostRowRingAhead));
      Value ringAddress = ringRowAddress(sequence, add(firstRow, rowOffsets[round]));
      row.address = kb.select(andi(fromHost, staged), ringAddress, row.address);
    }
    // (A row past the last tile has no data: nothing to write back.)
    if (row.ringEntry)
      row.ringEntry = kb.select(inRange, row.ringEntry, c32(-1));
    return row;
  };
  int64_t selectionWidth = config.staged && config.indexed ? 3 : 2;
  // The row's 16-byte loads (zeros for a row without data); a staged row of
  // overlapped staging first waits for its tile's ready flag (a flag that
  // stays unset is reported, and the step fails). A layer group's attention
  // never takes a tile: the other layers would then read the host rows too.
  bool waitForFetch = config.overlapped && config.pool.getLayers() > 1;
  auto load = [&](Value valid, const ClassifiedRow &row) -> SmallVector<Value> {
    Value address = row.address;
    auto loads =
        scf::IfOp::create(b, SmallVector<Type>(loadsPerRow, chunkType), valid, /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loads.elseBlock());
    scf::YieldOp::create(b, SmallVector<Value>(loadsPerRow, zero));
    b.setInsertionPointToStart(loads.thenBlock());
    if (row.readyFlag && waitForFetch) {
      // A missing row of a layer group (a flag address; 0 for a row in
      // HBM): wait until the fetch has staged its tile (every layer reads
      // the token the fetch copied once).
      kb.ifThen(kb.cmpi(arith::CmpIPredicate::ne, row.readyFlag, c64(0)), [&] {
        Value ready = hb.waitFlagFor(row.readyFlag, kReadyPolls, kReadySleepNs, kTileStaged);
        kb.ifThen(xori(ready, arith::ConstantIntOp::create(b, 1, 1)), [&] {
          memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori,
                                      c32(abi::kStatusStagingNotReady), status,
                                      ValueRange{kb.index(0)});
        });
      });
    } else if (row.readyFlag) {
      // A missing row: take its tile unless the fetch has (then read the
      // host store), or wait until the fetch has staged it.
      auto source = scf::IfOp::create(b, b.getI64Type(),
                                      kb.cmpi(arith::CmpIPredicate::ne, row.readyFlag, c64(0)),
                                      /*withElse=*/true);
      b.setInsertionPointToStart(source.elseBlock());
      scf::YieldOp::create(b, address);
      b.setInsertionPointToStart(source.thenBlock());
      Value taken = hb.compareAndSwap(row.readyFlag, c32(kTileUnclaimed), c32(kTileFromHost));
      kb.ifThen(eq(taken, c32(kTileStaging)), [&] {
        Value ready = hb.waitFlag(row.readyFlag, kReadyPolls, kReadySleepNs, kTileStaging);
        kb.ifThen(xori(ready, arith::ConstantIntOp::create(b, 1, 1)), [&] {
          memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori,
                                      c32(abi::kStatusStagingNotReady), status,
                                      ValueRange{kb.index(0)});
        });
      });
      Value fromHost = ori(eq(taken, c32(kTileUnclaimed)), eq(taken, c32(kTileFromHost)));
      scf::YieldOp::create(b, kb.select(fromHost, row.hostAddress, address));
      b.setInsertionPointAfter(source);
      address = source.getResult(0);
    }
    SmallVector<Value> chunks;
    Value segmentBytes = ext64(mul(segment, c32(fp8 ? 16 : 32)));
    // (Rows of the host-row ring are written by the kernel: coherent loads.)
    bool invariant = !hostRowRing;
    if (fp8) {
      for (int64_t g = 0; g < 8; ++g)
        chunks.push_back(hb.loadGlobal16(add(address, add(segmentBytes, c64(g * 64))), invariant));
      chunks.push_back(hb.loadGlobal16(add(address, c64(512)), invariant));
      Value rope = add(address, add(ext64(mul(segment, c32(32))), c64(528)));
      for (int64_t c = 0; c < 2; ++c)
        chunks.push_back(hb.loadGlobal16(add(rope, c64(16 * c)), invariant));
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
  // Stores row `round` of tile buffer `buffer`: its bias, sharing its id,
  // and its chunks (FP8 dequantized). (The other CTAs of a cluster get them
  // by bulk copies: shareHalves.)
  // Writing back: the row's chunks, as loaded, into its ring entry (at the
  // offsets they were loaded from; the scales' chunk, which every segment
  // loads, by segment 0).
  auto writeBack = [&](Value entry, ArrayRef<Value> chunks) {
    if (!writesBack)
      return;
    kb.ifThen(kb.cmpi(arith::CmpIPredicate::sge, entry, c32(0)), [&] {
      // (One value at a time: see emitClassify.)
      Value ring = hb.getAddress(writeBackRing);
      Value token = sext64(entry);
      Value rowIndex = add(mul(token, c64(config.pool.getLayers())), c64(config.layer));
      Value base = add(ring, mul(rowIndex, c64(rowBytes)));
      Value segmentBytes = ext64(mul(segment, c32(fp8 ? 16 : 32)));
      if (fp8) {
        for (int64_t g = 0; g < 8; ++g)
          hb.storeGlobal16(add(base, add(segmentBytes, c64(g * 64))), chunks[g]);
        kb.ifThen(reporter, [&] { hb.storeGlobal16(add(base, c64(512)), chunks[8]); });
        Value ropeOffset = ext64(mul(segment, c32(32)));
        Value rope = add(base, add(ropeOffset, c64(528)));
        for (int64_t c = 0; c < 2; ++c)
          hb.storeGlobal16(add(rope, c64(16 * c)), chunks[9 + c]);
        return;
      }
      for (int64_t g = 0; g < kKeyBlocks; ++g)
        for (int64_t c = 0; c < 2; ++c)
          hb.storeGlobal16(add(base, add(segmentBytes, c64(g * 128 + 16 * c))), chunks[2 * g + c]);
    });
  };
  // The shared offset (i32) of the thread's chunk c of 128-byte block
  // `block` of row `row` of the tile buffer at `tileBase`.
  auto chunkOffset = [&](Value tileBase, Value row, int64_t block, int64_t c) {
    return swizzled(add(tileBase, c32(block * kBlockBytes)), row,
                    add(mul(segment, c32(2)), c32(c)));
  };
  auto storeRow = [&](Value buffer, int64_t round, Value valid, Value id, ArrayRef<Value> chunks) {
    Value row = add(firstRow, rowOffsets[round]);
    Value rowOffset = mul(add(mul(buffer, c32(kTensorCoreTileRows)), row), c32(4));
    Value biasOffset = add(c32(kBiasOffset), rowOffset);
    Value bias = kb.select(valid, kb.f32(0.0), negInf);
    storeShared(bias, biasOffset, 4);
    if (sharing)
      storeShared(id, add(c32(kReceivedIdsOffset), rowOffset), 4);
    if (chunks.empty())
      return;
    Value tileBase = add(c32(kTileOffset), mul(buffer, c32(kTileBytes)));
    auto storeChunk = [&](int64_t block, int64_t c, Value chunk) {
      storeShared(chunk, chunkOffset(tileBase, row, block, c), 16);
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
  // Stores row `round` of tile `tileIndex` into tile buffer `buffer`.
  // Sharing, the row's id is this CTA's expected one, and the CTA that
  // gathers the row stores it (shareHalves copies it to the others).
  auto store = [&](Value tileIndex, Value buffer, int64_t round, Value valid, Value id, Value entry,
                   ArrayRef<Value> chunks) {
    writeBack(entry, chunks);
    if (!sharing) {
      storeRow(buffer, round, valid, id, chunks);
      return;
    }
    Value row = add(firstRow, rowOffsets[round]);
    Value rowOffset = mul(add(mul(buffer, c32(kTensorCoreTileRows)), row), c32(4));
    kb.ifThen(reporter, [&] { storeShared(id, add(c32(kExpectedIdsOffset), rowOffset), 4); });
    kb.ifThen(gathers(tileIndex, round), [&] { storeRow(buffer, round, valid, id, chunks); });
  };
  // asyncRows: row `round` of tile `tileIndex` into tile buffer `buffer`,
  // by cp.async from its HBM slot, else through registers.
  auto copyOrStore = [&](Value tileIndex, Value buffer, int64_t round, const ClassifiedRow &row,
                         Value id) {
    kb.ifThenElse(
        row.inHbm,
        [&] {
          storeRow(buffer, round, row.valid, id, {});
          Value rowInTile = add(firstRow, rowOffsets[round]);
          Value tileBase = add(c32(kTileOffset), mul(buffer, c32(kTileBytes)));
          Value segmentBytes = ext64(mul(segment, c32(32)));
          for (int64_t g = 0; g < kKeyBlocks; ++g)
            for (int64_t c = 0; c < 2; ++c) {
              Value destination = sharedPointer(chunkOffset(tileBase, rowInTile, g, c));
              Value source =
                  hb.globalPointer(add(row.address, add(segmentBytes, c64(g * 128 + 16 * c))));
              NVVM::CpAsyncOp::create(b, destination, source, b.getI32IntegerAttr(16),
                                      NVVM::LoadCacheModifierKindAttr::get(
                                          b.getContext(), NVVM::LoadCacheModifierKind::CG),
                                      Value());
            }
        },
        [&] {
          store(tileIndex, buffer, round, row.valid, id, row.ringEntry, load(row.valid, row));
        });
  };
  // Bulk copies of a stored tile's rows to the other CTAs of the cluster
  // (sharing). Piece
  // p of half h (rows 32 h to 32 h + 31) of tile buffer `buffer` is block
  // p's 32 rows (4 KB, contiguous) for p < 9, then the half's 32 row biases
  // and its 32 received ids (128 B each); it lands at the same
  // offset in the receiving CTA and completes on its full barrier of the
  // buffer. The receiving CTA's shared addresses are taken once, before the
  // loop (a thread's receiver does not change).
  constexpr int64_t kPieces = kKeyBlocks + 2;
  Value localBase, receiverBase, receiverBarriers;
  if (sharing) {
    // Thread i of the first 11 (Q - 1) sends to the (i / 11 + 1)-th next
    // rank.
    Value receiver = remu(add(rank, add(divu(thread, kPieces), c32(1))), clusterSize);
    receiverBase = hb.clusterAddress(sharedBase, receiver);
    Value barriers = sharedPointer(kBarrierOffset + 32);
    receiverBarriers = hb.clusterAddress(barriers, receiver);
    localBase = LLVM::PtrToIntOp::create(b, b.getI32Type(), sharedBase);
  }
  auto copyPiece = [&](Value buffer, Value piece, Value half) {
    // (One value at a time: the IR's order must not depend on the host
    // compiler's order of evaluating arguments.)
    Value isBlock = kb.cmpi(arith::CmpIPredicate::ult, piece, c32(kKeyBlocks));
    Value isBias = eq(piece, c32(kKeyBlocks));
    Value size = kb.select(isBlock, c32(kBlockBytes / 2), c32(4 * kTensorCoreTileRows / 2));
    Value barrier = add(receiverBarriers, mul(buffer, c32(8)));
    Value tileBase = add(c32(kTileOffset), mul(buffer, c32(kTileBytes)));
    Value blockBase = add(tileBase, mul(piece, c32(kBlockBytes)));
    Value blockOffset = add(blockBase, mul(half, c32(kBlockBytes / 2)));
    Value bufferRow = mul(buffer, c32(kTensorCoreTileRows));
    Value halfRow = add(bufferRow, mul(half, c32(32)));
    Value rowsOffset = mul(halfRow, c32(4));
    Value rowsBase = kb.select(isBias, c32(kBiasOffset), c32(kReceivedIdsOffset));
    Value offset = kb.select(isBlock, blockOffset, add(rowsBase, rowsOffset));
    Value destination = add(receiverBase, offset);
    Value source = add(localBase, offset);
    hb.copyToCluster(destination, source, size, barrier);
  };
  // Sharing: once the producer stored tile `tileIndex` (and fenced it to
  // the async proxy), the halves of a shared tile this CTA gathered go to
  // every other CTA: thread i of the first 11 (Q - 1) issues piece i % 11.
  auto shareHalves = [&](Value tileIndex, Value buffer) {
    NVVM::BarrierOp::create(b, Type(), c32(kBarrierProduced), c32(kGroupThreads), {}, Value());
    Value copier = kb.cmpi(arith::CmpIPredicate::ult, thread, c32(kPieces * (clusterSize - 1)));
    kb.ifThen(andi(isShared(tileIndex), copier), [&] {
      Value piece = remu(thread, kPieces);
      for (int64_t round = 0; round < rounds; ++round)
        kb.ifThen(gathers(tileIndex, round), [&] { copyPiece(buffer, piece, c32(round)); });
    });
  };
  // Software pipeline, three tiles deep: while tile t is dequantized and
  // stored, the rows of tile t + 1 are in flight and the selections of tile
  // t + 2 are being loaded, so a row's loads never wait for its selection,
  // and a tile's stores wait for loads issued a tile earlier. The loop
  // carries, per round (row of the thread), tile t's row: for rows loaded
  // ahead whether it has data and its chunks, for the others its selection;
  // then the selections of tile t + 1.
  //
  // When tile t + 1's loads issue: each ahead row's right after the same
  // row of tile t is stored (FP8: both rows ahead, at most 88 registers of
  // chunks live), or after the last store where a later row is loaded at
  // its own store (bf16 through registers: one row ahead).
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
        ClassifiedRow row = classify(kb.index(0), round, first[round]);
        initial.push_back(row.valid);
        if (sharing)
          initial.push_back(first[round][0]);
        if (writesBack)
          initial.push_back(row.ringEntry);
        llvm::append_range(initial, load(loads(kb.index(0), round, row.valid), row));
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
      int64_t width = round < aheadRows ? aheadHead + loadsPerRow : selectionWidth;
      current.push_back(state.take_front(width));
      state = state.drop_front(width);
    }
    for (int64_t round = 0; round < rounds; ++round) {
      upcoming.push_back(state.take_front(selectionWidth));
      state = state.drop_front(selectionWidth);
    }
    // Tile t + 1's rows loaded ahead: classified first where
    // classifyAhead and in the resident form, else as their loads issue;
    // tile t + 2's selections: loaded here where selectionsAhead, else after
    // the stores.
    // With a host-row ring, tile t + 1's host rows are in the ring before
    // it is classified (from kHostRowRingAhead on).
    if (hostRowRing) {
      Value staged = kb.cmpi(arith::CmpIPredicate::uge, nextTile, kb.index(kHostRowRingAhead));
      Value exists = kb.cmpi(arith::CmpIPredicate::ult, nextTile, tiles);
      kb.ifThen(andi(staged, exists), [&] {
        // (One value at a time: the IR's order must not depend on the host
        // compiler's order of evaluating arguments.)
        Value sequence = arith::SubIOp::create(b, nextTile, kb.index(kHostRowRingAhead));
        Value entry = ringBarrier(sequence);
        Value parity = ringParity(sequence);
        NVVM::MBarrierTryWaitParityOp::create(b, entry, parity, c32(10000000));
      });
    }
    SmallVector<ClassifiedRow> nextRows;
    if (classifyAhead || config.residentForm)
      for (int64_t round = 0; round < aheadRows; ++round)
        nextRows.push_back(classify(nextTile, round, llvm::to_vector(upcoming[round])));
    // Prefetches into L2 the lines of `row` where `predicate` holds: lane
    // segment s the lines at bytes s x 128 and min(512 + s x 128, 655) of the
    // row (all of the up to 7 lines a 656-byte row spans).
    auto prefetchRow = [&](const ClassifiedRow &row, Value predicate) {
      for (int64_t offset = 0; offset < rowBytes; offset += 512)
        kb.ifThen(predicate, [&] {
          Value byte = add(mul(segment, c32(128)), c32(offset));
          if (offset + 512 > rowBytes)
            byte = arith::MinUIOp::create(b, byte, c32(rowBytes - 1));
          hb.prefetchL2(add(row.address, ext64(byte)));
        });
    };
    // The resident form's rows of tile t + 1 that are in HBM go to L2 now,
    // half a tile to a tile before their loads issue. Measured on the H200
    // (bench/NOTES.md, 2026-12-04 twenty-fifth session): the resident step
    // 7-8% faster (its producer waited for HBM, long scoreboard stalls);
    // the same in the other form slowed mixed steps 13-20% (the prefetches
    // compete with its host reads), so not there. Where a query's heads
    // span two CTAs, head block 0 alone prefetches (the other reads the
    // same rows at about the same time), as the staged kernel does below.
    if (config.residentForm)
      for (const ClassifiedRow &row : nextRows)
        prefetchRow(row, config.groupHeads > config.headsPerBlock
                             ? andi(row.inHbm, eq(headBase, c32(0)))
                             : row.inHbm);
    Value tileAfterNext = arith::AddIOp::create(b, tileIndex, kb.index(2));
    SmallVector<SmallVector<Value>> afterNext;
    if (selectionsAhead)
      for (int64_t round = 0; round < rounds; ++round)
        afterNext.push_back(select(tileAfterNext, round));
    waitBarrier(buffer, /*full=*/false, xori(andi(shr(tile, 1), c32(1)), c32(1)));
    // Sharing: the halves of a shared tile that other CTAs gather arrive
    // here (none for the other tiles: the phase completes on the arrival).
    if (sharing)
      kb.ifThen(eq(thread, c32(0)), [&] {
        Value othersHalves = c32(0);
        for (int64_t round = 0; round < rounds; ++round)
          othersHalves =
              add(othersHalves, arith::ExtUIOp::create(b, b.getI32Type(),
                                                       xori(gathers(tileIndex, round), trueValue)));
        NVVM::MBarrierArriveExpectTxOp::create(b, Type(), barrier(buffer, Barrier::Remote),
                                               mul(othersHalves, c32(kShareHalfBytes)),
                                               NVVM::MemScopeKind::CTA,
                                               /*relaxed=*/false, Value());
      });
    SmallVector<SmallVector<Value>> next(rounds);
    auto issueNext = [&](int64_t round) {
      ClassifiedRow row = !nextRows.empty()
                              ? nextRows[round]
                              : classify(nextTile, round, llvm::to_vector(upcoming[round]));
      next[round].push_back(row.valid);
      if (sharing)
        next[round].push_back(upcoming[round][0]);
      if (writesBack)
        next[round].push_back(row.ringEntry);
      llvm::append_range(next[round], load(loads(nextTile, round, row.valid), row));
    };
    for (int64_t round = 0; round < rounds; ++round) {
      if (round < aheadRows) {
        store(tileIndex, buffer, round, current[round][0], sharing ? current[round][1] : Value(),
              writesBack ? current[round][aheadHead - 1] : Value(),
              llvm::to_vector(current[round].drop_front(aheadHead)));
      } else {
        ClassifiedRow row = classify(tileIndex, round, llvm::to_vector(current[round]));
        if (asyncRows)
          copyOrStore(tileIndex, buffer, round, row, current[round][0]);
        else
          store(tileIndex, buffer, round, row.valid, current[round][0], row.ringEntry,
                load(loads(tileIndex, round, row.valid), row));
      }
      for (int64_t ahead = 0; ahead < aheadRows; ++ahead)
        if (issueAfter(ahead) == round)
          issueNext(ahead);
    }
    // The thread's copies complete on the full barrier too (one more
    // arrival, counted as it is issued; the thread's own follows).
    if (asyncRows)
      NVVM::CpAsyncMBarrierArriveOp::create(b, barrier(buffer, /*full=*/true));
    // The tile's bytes are read by wgmma and, sharing, bulk copies (the
    // async proxy).
    hb.fenceAsyncShared();
    if (sharing)
      shareHalves(tileIndex, buffer);
    arriveBarrier(buffer, /*full=*/true);
    // A staged FP8 kernel (its rows all in device memory: HBM or staging)
    // whose query spans two CTAs prefetches tile t + 2's rows
    // after publishing tile t, in head block 0 only: the other CTA of the
    // query reads the same rows at about the same time. Measured on the
    // H200 (bench/NOTES.md, 2026-12-04 twenty-sixth session): 64 x 128
    // heads 0-2% faster, 32 x 128 4%; at the top of the loop (tile t + 1)
    // the producer spilled and was 6-13% slower, in both CTAs slower still.
    if (stagedPrefetch)
      for (int64_t round = 0; round < rounds; ++round) {
        ClassifiedRow row = classify(tileAfterNext, round, afterNext[round]);
        prefetchRow(row, andi(row.valid, eq(headBase, c32(0))));
      }
    SmallVector<Value> yielded;
    for (int64_t round = 0; round < rounds; ++round) {
      if (round < aheadRows)
        llvm::append_range(yielded, next[round]);
      else
        llvm::append_range(yielded, upcoming[round]);
    }
    for (int64_t round = 0; round < rounds; ++round)
      llvm::append_range(yielded,
                         selectionsAhead ? afterNext[round] : select(tileAfterNext, round));
    scf::YieldOp::create(b, yielded);
  }
  // Overlapped staging: the grid ends after its prerequisite (the fetch, or
  // the layer group's attention before it), so that the work after the
  // attentions, which may reuse what the fetch writes, comes after all of
  // them. The first CTA's producer waits for it as it ends, which is enough:
  // a grid completes when its last CTA does. The other CTAs leave their SMs
  // to the next layer's attention at once; with every CTA waiting, each held
  // its SM until the layer before had ended (the overlapped group 4-18%
  // slower: bench/NOTES.md, twenty-sixth session).
  if (config.overlapped) {
    // (One value at a time: the IR's order must not depend on the host
    // compiler's order of evaluating arguments.)
    Value firstRequest = eq(toI32(kb.blockId()), c32(0));
    Value firstHeads = eq(headBase, c32(0));
    Value firstSplit = eq(toI32(split), c32(0));
    Value firstBlock = andi(andi(firstRequest, firstHeads), firstSplit);
    kb.ifThen(firstBlock,
              [&] { NVVM::GriddepcontrolOp::create(b, NVVM::GridDepActionKind::wait); });
  }
}
