//===- ShareRowsKernel.cpp - a shared prefix of tiles first ---------------===//
//
// The kernel of dhs.share_rows (the op's description gives the order). One
// CTA per request, its Q x K selections (Q <= 8, Q x K <= 16384) looked up
// in a hash table in dynamic shared memory: S = 4K (2K where that does not
// fit) rounded up to a power of two slots, each a row id (-1: empty) and Q
// first occurrences (i32 where they fit, else i16; K: none). Each thread
// owns J0 = ceil(K / threads) consecutive entries of position 0 and J1 =
// ceil((Q - 1) K / threads) selections of the others (K + j x threads +
// tid: a warp's side by side), unrolled at generation time:
//
//   A. the threads load their rows, empty the table and clear the taken
//      bytes (16 bytes a store); a barrier;
//   B. position 0's rows >= 0 claim their slots (linear probing from a
//      Fibonacci hash, a compare-and-swap on the row id) and keep the first
//      occurrence (an atomic min); a barrier. Only position 0's rows can be
//      common: the table holds at most K rows, a quarter full or less
//      (half);
//   C. (Q > 1) the other positions' rows >= 0 look their rows up (probing to
//      the row or an empty slot), a thread's J1 lookups side by side in one
//      loop, and, when there, keep their first occurrence; a barrier;
//   D. an entry k of position 0 is common when its row is >= 0, k is the
//      row's first occurrence and every position has one; a block-wide
//      exclusive scan of the threads' counts (warp shuffles, then the
//      warps' sums: two barriers) ranks the common rows in position 0's
//      order and counts them: T = count / tile (thread 0 writes tiles[b]
//      here when min_missing is 0);
//   E. a common row of rank r < T x tile is written at r in every position
//      q with the slot of its first occurrence k_q there, which it marks
//      taken; the prefix rows with a negative slot in position 0 are
//      counted (an atomic add in shared memory); a barrier; with
//      min_missing > 0 thread 0 writes tiles[b] = T when that count reaches
//      it, else 0;
//   F. the selections not taken, ranked in flat order (round j: selection
//      j x threads + tid; a ballot per round, warp 0 scans the warps'
//      counts round by round: two barriers), go to rank + (q + 1) x T x
//      tile: every position has exactly T x tile taken entries, so the
//      flat rank less q (K - T x tile) is the rank within position q.
//
// Exact and deterministic: the atomics decide only which thread claims an
// empty slot (the same row either way) and a minimum. 8 barriers (7 when
// Q = 1). At Q = 5, K = 2048 the table takes 192 KB (first occurrences of
// 32 bits); at Q = 1, K = 16384 (half full, 16 bits) 192 KB, the taken
// bytes 16 KB.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"
#include "codegen/Kernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;

/// Threads of a CTA at most.
static constexpr int64_t kMaxShareThreads = 1024;
/// Dynamic shared memory of a CTA at most (sm_90).
static constexpr int64_t kMaxShareSharedBytes = 227 * 1024;
/// Fibonacci hashing: a row's hash is the top bits of row x 2^32 / phi.
static constexpr int64_t kGoldenRatio32 = -1640531535; // 0x9E3779B1

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(ShareRowsOp op) {
  MemRefType rows = op.getRows().getType();
  for (Value v : op->getOperands())
    if (!cast<MemRefType>(v.getType()).hasStaticShape())
      return op.emitOpError() << "needs static shapes to generate a kernel" << kStaticShapesHint;
  const int64_t requests = rows.getDimSize(0), positions = rows.getDimSize(1),
                selected = rows.getDimSize(2);
  const int64_t entries = positions * selected;
  if (entries == 0 || requests == 0)
    return op.emitOpError() << "has no selections to share";
  // (The verifier bounds Q and Q x K: first occurrences fit i16.)
  // (Above K no prefix reaches min_missing: clamped, it fits i32.)
  const int64_t minMissing = std::min<int64_t>(op.getMinMissing(), selected + 1);
  const int64_t threads =
      std::clamp<int64_t>(llvm::PowerOf2Ceil(entries) / 4, kWarpSize, kMaxShareThreads);
  const int64_t warps = threads / kWarpSize;
  // Entries per thread: of position 0, of all positions, of positions >= 1.
  const int64_t perThread0 = llvm::divideCeil(selected, threads);
  const int64_t perThread = llvm::divideCeil(entries, threads);
  const int64_t perThreadRest = llvm::divideCeil(entries - selected, threads);
  // T = count / tile is 0 for any tile above the count: clamped, it fits i32.
  const int64_t tile = std::min<int64_t>(op.getTile(), entries + 1);
  // Shared memory: the table's rows, its first occurrences, taken, the
  // warps' sums (of the rest's scan: a sum per warp and round of
  // selections) and, with min_missing, one more word: the prefix rows
  // missing from HBM.
  const int64_t takenBytes = llvm::alignTo(entries, 16);
  const int64_t sumWords = warps * perThread;
  struct Layout {
    int64_t table, firstBytes, firstOffset, takenOffset, sumsOffset, missingOffset, bytes;
  };
  auto layoutOf = [&](int64_t table, int64_t firstBytes) {
    Layout l{table, firstBytes, table * 4, 0, 0, 0, 0};
    l.takenOffset = llvm::alignTo(l.firstOffset + positions * table * firstBytes, 16);
    l.sumsOffset = l.takenOffset + takenBytes;
    l.missingOffset = l.sumsOffset + sumWords * 4;
    l.bytes = llvm::alignTo(l.missingOffset + (minMissing > 0 ? 4 : 0), 16);
    return l;
  };
  // A table a quarter full at most where it fits, else half (a warp probes
  // until its lane with the longest run is done: about 11 probes a warp at
  // half full, Q = 5, K = 2048, bench/NOTES.md); first occurrences of 32
  // bits (a native atomic minimum) where they fit, else 16 (a
  // compare-and-swap loop).
  const int64_t quarter = llvm::PowerOf2Ceil(4 * selected);
  Layout layout = layoutOf(quarter / 2, 2);
  for (auto [table, firstBytes] :
       {std::pair{quarter, int64_t{4}}, {quarter, int64_t{2}}, {quarter / 2, int64_t{4}}}) {
    Layout candidate = layoutOf(table, firstBytes);
    if (candidate.bytes <= kMaxShareSharedBytes) {
      layout = candidate;
      break;
    }
  }
  const int64_t table = layout.table, firstBytes = layout.firstBytes,
                firstOffset = layout.firstOffset, takenOffset = layout.takenOffset,
                sumsOffset = layout.sumsOffset, missingOffset = layout.missingOffset,
                sharedBytes = layout.bytes;
  const int64_t tableBits = llvm::Log2_64(table);
  if (sharedBytes > kMaxShareSharedBytes)
    return op.emitOpError() << "needs " << sharedBytes << " bytes of shared memory, more than "
                            << kMaxShareSharedBytes;

  KernelSpec spec{abi::LaunchKind::ShareRows, kernelKey(rows, op.getTile(), minMissing)};
  spec.signature.add(Role::RowIds, rows);
  spec.signature.add(Role::Slots, op.getSlots().getType());
  spec.signature.add(Role::SharedRows, op.getSharedRows().getType());
  spec.signature.add(Role::SharedSlots, op.getSharedSlots().getType());
  spec.signature.add(Role::SharedTiles, op.getTiles().getType());
  spec.geometry.grid = {requests, 1, 1};
  spec.geometry.block = {threads, 1, 1};
  spec.geometry.dynamicSharedBytes = sharedBytes;

  spec.emitBody = [=](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    KernelBuilder kb{b};
    using P = arith::CmpIPredicate;
    Type i8 = b.getI8Type(), i32 = b.getI32Type();
    Type indexType = b.getIndexType();
    Location loc = b.getLoc();
    auto flatten = [&](Value list) -> Value {
      return memref::CollapseShapeOp::create(b, list, ArrayRef<ReassociationIndices>{{0}, {1, 2}});
    };
    Value inRows = flatten(args[Role::RowIds]), inSlots = flatten(args[Role::Slots]);
    Value outRows = flatten(args[Role::SharedRows]), outSlots = flatten(args[Role::SharedSlots]);
    Value outTiles = args[Role::SharedTiles];

    auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
    Value shared = gpu::DynamicSharedMemoryOp::create(
        b, MemRefType::get({ShapedType::kDynamic}, i8, MemRefLayoutAttrInterface{}, workgroup));
    auto view = [&](int64_t offset, int64_t elements, Type type) -> Value {
      return memref::ViewOp::create(
          b, MemRefType::get({elements}, type, MemRefLayoutAttrInterface{}, workgroup), shared,
          kb.index(offset), ValueRange{});
    };
    Value keys = view(0, table, i32);
    Type firstType = b.getIntegerType(firstBytes * 8);
    Value firsts = view(firstOffset, positions * table, firstType);
    Value firstWords = view(firstOffset, positions * table * firstBytes / 4, i32);
    Value taken = view(takenOffset, takenBytes, i8);
    Value takenWords = view(takenOffset, takenBytes / 4, i32);
    Value sums = view(sumsOffset, sumWords, i32);
    Value missingWord = view(missingOffset, 1, i32);

    auto load = [&](Value memref, ValueRange indices) -> Value {
      return memref::LoadOp::create(b, memref, indices);
    };
    auto store = [&](Value value, Value memref, ValueRange indices) {
      memref::StoreOp::create(b, value, memref, indices);
    };
    auto add = [&](Value x, Value y) -> Value { return arith::AddIOp::create(b, x, y); };
    auto sub = [&](Value x, Value y) -> Value { return arith::SubIOp::create(b, x, y); };
    auto mul = [&](Value x, Value y) -> Value { return arith::MulIOp::create(b, x, y); };
    auto andI = [&](Value x, Value y) -> Value { return arith::AndIOp::create(b, x, y); };
    auto minU = [&](Value x, int64_t y) -> Value {
      return arith::MinUIOp::create(b, x, kb.index(y));
    };
    auto i32Of = [&](Value index) -> Value { return arith::IndexCastUIOp::create(b, i32, index); };
    auto indexOf = [&](Value v) -> Value { return arith::IndexCastUIOp::create(b, indexType, v); };
    /// An scf.if yielding `then()` or `otherwise()` (one value).
    auto ifValue = [&](Value condition, Type type, function_ref<Value()> then,
                       function_ref<Value()> otherwise) -> Value {
      auto op = scf::IfOp::create(b, TypeRange{type}, condition, /*withElseRegion=*/true);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(op.thenBlock());
      scf::YieldOp::create(b, ValueRange{then()});
      b.setInsertionPointToStart(op.elseBlock());
      scf::YieldOp::create(b, ValueRange{otherwise()});
      return op.getResult(0);
    };

    Value tid = kb.threadId();
    Value request = kb.blockId();
    Value step = kb.index(threads);
    Value lane = kb.laneOf(tid), warp = kb.warpOf(tid);
    Value lane32 = i32Of(lane);
    Value zero = kb.index(0);
    Value none = kb.i32(selected);
    Value tableMask = kb.index(table - 1);

    /// The slot a row's probes start at.
    auto hashOf = [&](Value row) -> Value {
      Value product = mul(row, kb.i32(kGoldenRatio32));
      return indexOf(arith::ShRUIOp::create(b, product, kb.i32(32 - tableBits)));
    };
    /// Linear probing from the row's hash: `visit(slot)` gives whether the
    /// probe stops there and a value forwarded with the slot. Returns the
    /// slot it stopped at and that value.
    auto probe =
        [&](Value row,
            function_ref<std::pair<Value, Value>(Value)> visit) -> std::pair<Value, Value> {
      auto loop = scf::WhileOp::create(b, TypeRange{indexType, i32}, ValueRange{hashOf(row)});
      OpBuilder::InsertionGuard guard(b);
      Block *before = b.createBlock(&loop.getBefore(), {}, {indexType}, {loc});
      Value slot = before->getArgument(0);
      auto [stop, seen] = visit(slot);
      Value next = andI(add(slot, kb.index(1)), tableMask);
      scf::ConditionOp::create(
          b, arith::XOrIOp::create(b, stop, arith::ConstantIntOp::create(b, 1, 1)),
          ValueRange{kb.select(stop, slot, next), seen});
      Block *after = b.createBlock(&loop.getAfter(), {}, {indexType, i32}, {loc, loc});
      scf::YieldOp::create(b, ValueRange{after->getArgument(0)});
      return {loop.getResult(0), loop.getResult(1)};
    };
    /// first[q][slot] as an i32.
    auto firstAt = [&](Value position, Value slot) -> Value {
      Value value = load(firsts, {add(mul(position, kb.index(table)), slot)});
      return firstBytes == 4 ? value : arith::ExtUIOp::create(b, i32, value);
    };
    /// first[q][slot] = min(first[q][slot], k) (an index k <= K: K leaves
    /// it as it is).
    auto keepFirst = [&](Value position, Value slot, Value k) {
      Value at = add(mul(position, kb.index(table)), slot);
      Value value = arith::IndexCastUIOp::create(b, firstType, k);
      auto keep = [&] {
        memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::minu, value, firsts, ValueRange{at});
      };
      // (16 bits: a compare-and-swap loop, skipped where a plain read shows
      // an earlier occurrence.)
      if (firstBytes == 2)
        kb.ifThen(kb.cmpi(P::ugt, load(firsts, {at}), value), keep);
      else
        keep();
    };
    Value lanesBefore = sub(arith::ShLIOp::create(b, kb.i32(1), lane32), kb.i32(1)); // lane < 32
    /// Inclusive scan over the warp of the i32 `x`.
    auto warpScan = [&](Value x) {
      for (int64_t d = 1; d < kWarpSize; d *= 2) {
        auto up = gpu::ShuffleOp::create(b, x, d, kWarpSize, gpu::ShuffleMode::UP);
        x = kb.select(kb.cmpi(P::sge, lane32, kb.i32(d)), add(x, up.getShuffleResult()), x);
      }
      return x;
    };
    /// Warp 0 turns sums[0 .. n) into their exclusive prefix sums in place:
    /// lane l the run [l C, (l + 1) C), C = ceil(n / 32); a barrier first
    /// and after.
    auto scanSums = [&](int64_t n) {
      const int64_t run = llvm::divideCeil(n, kWarpSize);
      gpu::BarrierOp::create(b);
      kb.ifThen(kb.cmpi(P::eq, warp, zero), [&] {
        Value begin = mul(lane, kb.index(run));
        SmallVector<Value> values;
        Value total = kb.i32(0);
        for (int64_t c = 0; c < run; ++c) {
          Value at = add(begin, kb.index(c));
          Value mine = kb.cmpi(P::ult, at, kb.index(n));
          values.push_back(
              ifValue(mine, i32, [&] { return load(sums, {at}); }, [&] { return kb.i32(0); }));
          total = add(total, values.back());
        }
        Value before = sub(warpScan(total), total);
        for (int64_t c = 0; c < run; ++c) {
          Value at = add(begin, kb.index(c));
          kb.ifThen(kb.cmpi(P::ult, at, kb.index(n)), [&] { store(before, sums, {at}); });
          before = add(before, values[c]);
        }
      });
      gpu::BarrierOp::create(b);
    };
    /// A block-wide exclusive scan of the threads' i32 `count`s (warp
    /// shuffles, then warp 0 over the warps' sums; two barriers): the
    /// thread's exclusive sum and the block's total.
    auto blockScan = [&](Value count) -> std::pair<Value, Value> {
      Value inclusive = warpScan(count);
      kb.ifThen(kb.cmpi(P::eq, lane, kb.index(kWarpSize - 1)),
                [&] { store(inclusive, sums, {warp}); });
      gpu::BarrierOp::create(b);
      // Warp 0 scans the warps' sums in place: lane w reads and writes only
      // sums[w]; with fewer than 32 warps the other lanes read nothing.
      kb.ifThen(kb.cmpi(P::eq, warp, zero), [&] {
        if (warps == kWarpSize) {
          store(warpScan(load(sums, {lane})), sums, {lane});
          return;
        }
        Value mine = kb.cmpi(P::ult, lane, kb.index(warps));
        Value sum =
            ifValue(mine, i32, [&] { return load(sums, {lane}); }, [&] { return kb.i32(0); });
        Value scanned = warpScan(sum);
        kb.ifThen(mine, [&] { store(scanned, sums, {lane}); });
      });
      gpu::BarrierOp::create(b);
      Value first = kb.cmpi(P::eq, warp, zero);
      Value warpBefore =
          kb.select(first, kb.i32(0), load(sums, {kb.select(first, zero, sub(warp, kb.index(1)))}));
      Value total = load(sums, {kb.index(warps - 1)});
      return {sub(add(warpBefore, inclusive), count), total};
    };

    // A. The rows this thread looks at, loaded first (clamped in bounds):
    // position 0's entries tid J0 + j, the other positions' K + j x threads
    // + tid (a warp's 32 side by side).
    SmallVector<Value> ks0, valid0, rows0, flats1, valid1, rows1;
    for (int64_t j = 0; j < perThread0; ++j) {
      Value k = add(mul(tid, kb.index(perThread0)), kb.index(j));
      ks0.push_back(k);
      valid0.push_back(kb.cmpi(P::ult, k, kb.index(selected)));
      rows0.push_back(load(inRows, {request, minU(k, selected - 1)}));
    }
    if (positions > 1)
      for (int64_t j = 0; j < perThreadRest; ++j) {
        Value i = add(tid, kb.index(selected + j * threads));
        flats1.push_back(i);
        valid1.push_back(kb.cmpi(P::ult, i, kb.index(entries)));
        rows1.push_back(load(inRows, {request, minU(i, entries - 1)}));
      }
    // An empty table (rows -1, first occurrences K), nothing taken: 16
    // bytes a store (each part's words a multiple of 4 from a 16-byte
    // boundary).
    auto fill = [&](Value words, int64_t count, int64_t word) {
      VectorType quad = VectorType::get({4}, i32);
      Value value = kb.splatI32(quad, word);
      kb.forLoop(tid, kb.index(count / 4), step, [&](Value i) {
        vector::StoreOp::create(b, value, words, ValueRange{mul(i, kb.index(4))},
                                /*nontemporal=*/false, llvm::MaybeAlign(16));
      });
    };
    fill(keys, table, -1);
    fill(firstWords, positions * table * firstBytes / 4,
         firstBytes == 4 ? selected : selected * 0x10001);
    fill(takenWords, takenBytes / 4, 0);
    if (minMissing > 0)
      kb.ifThen(kb.cmpi(P::eq, tid, zero), [&] { store(kb.i32(0), missingWord, {zero}); });
    gpu::BarrierOp::create(b);

    // B. Position 0's rows claim their slots; the slot of each entry (0 for
    // those that claim none).
    Value minusOne = kb.i32(-1);
    SmallVector<Value> slots0;
    for (int64_t j = 0; j < perThread0; ++j) {
      Value row = rows0[j];
      slots0.push_back(ifValue(
          andI(valid0[j], kb.cmpi(P::sge, row, kb.i32(0))), indexType,
          [&] {
            Value slot =
                probe(row, [&](Value at) -> std::pair<Value, Value> {
                  Value there = load(keys, {at});
                  Value seen = ifValue(
                      kb.cmpi(P::eq, there, minusOne), i32,
                      [&] {
                        auto cas = memref::GenericAtomicRMWOp::create(b, keys, ValueRange{at});
                        {
                          OpBuilder::InsertionGuard guard(b);
                          b.setInsertionPointToStart(cas.getBody());
                          Value current = cas.getCurrentValue();
                          memref::AtomicYieldOp::create(
                              b, kb.select(kb.cmpi(P::eq, current, minusOne), row, current));
                        }
                        Value previous = cas.getResult();
                        return kb.select(kb.cmpi(P::eq, previous, minusOne), row, previous);
                      },
                      [&] { return there; });
                  return {kb.cmpi(P::eq, seen, row), seen};
                }).first;
            keepFirst(zero, slot, ks0[j]);
            return slot;
          },
          [&] { return zero; }));
    }
    gpu::BarrierOp::create(b);

    // C. The other positions' rows keep their first occurrence where
    // position 0 has the row. The thread's lookups probe side by side, one
    // slot each a trip: a cursor c in [0, S) probes slot c; c + S: found at
    // c; c + 2 S: not there (an empty slot c, or no row to look up: slot
    // tid mod S), so that the warp waits for its longest run once, not
    // once a lookup. Then every lookup keeps its first occurrence, the
    // ones not found K, which changes nothing.
    if (positions > 1) {
      // (One op per statement: the IR's order must not depend on the host
      // compiler's order of evaluating arguments; the lit test reads it.)
      Value tableSize = kb.i32(table), tableMask32 = kb.i32(table - 1);
      Value tid32 = i32Of(tid);
      Value tidSlot = andI(tid32, tableMask32);
      Value noRow = add(tidSlot, kb.i32(2 * table));
      SmallVector<Value> cursors;
      for (int64_t j = 0; j < perThreadRest; ++j) {
        Value hash = i32Of(hashOf(rows1[j]));
        Value isRow = kb.cmpi(P::sge, rows1[j], kb.i32(0));
        Value looked = andI(valid1[j], isRow);
        cursors.push_back(kb.select(looked, hash, noRow));
      }
      SmallVector<Type> cursorTypes(cursors.size(), i32);
      SmallVector<Location> cursorLocs(cursors.size(), loc);
      auto loop = scf::WhileOp::create(b, cursorTypes, cursors);
      {
        OpBuilder::InsertionGuard guard(b);
        Block *before = b.createBlock(&loop.getBefore(), {}, cursorTypes, cursorLocs);
        SmallVector<Value> next;
        Value probing = arith::ConstantIntOp::create(b, 0, 1);
        for (int64_t j = 0; j < perThreadRest; ++j) {
          Value cursor = before->getArgument(j);
          Value active = kb.cmpi(P::ult, cursor, tableSize);
          Value there = load(keys, {indexOf(kb.select(active, cursor, kb.i32(0)))});
          Value following = add(cursor, kb.i32(1));
          Value nextSlot = andI(following, tableMask32);
          Value notThere = add(cursor, kb.i32(2 * table));
          Value isEmpty = kb.cmpi(P::eq, there, minusOne);
          Value missed = kb.select(isEmpty, notThere, nextSlot);
          Value foundAt = add(cursor, tableSize);
          Value isRow = kb.cmpi(P::eq, there, rows1[j]);
          Value moved = kb.select(isRow, foundAt, missed);
          Value cursorNext = kb.select(active, moved, cursor);
          next.push_back(cursorNext);
          probing = arith::OrIOp::create(b, probing, kb.cmpi(P::ult, cursorNext, tableSize));
        }
        scf::ConditionOp::create(b, probing, next);
        Block *after = b.createBlock(&loop.getAfter(), {}, cursorTypes, cursorLocs);
        scf::YieldOp::create(b, after->getArguments());
      }
      for (int64_t j = 0; j < perThreadRest; ++j) {
        Value cursor = loop.getResult(j);
        Value found = kb.cmpi(P::ult, cursor, kb.i32(2 * table));
        Value i = minU(flats1[j], entries - 1);
        Value k = arith::RemUIOp::create(b, i, kb.index(selected));
        Value kept = kb.select(found, k, kb.index(selected));
        Value slot = indexOf(andI(cursor, tableMask32));
        Value position = arith::DivUIOp::create(b, i, kb.index(selected));
        keepFirst(position, slot, kept);
      }
      gpu::BarrierOp::create(b);
    }

    // D. Position 0's common rows, counted and ranked in its order.
    SmallVector<Value> common0;
    Value count0 = kb.i32(0);
    for (int64_t j = 0; j < perThread0; ++j) {
      Value slot = slots0[j];
      Value isRow = kb.cmpi(P::sge, rows0[j], kb.i32(0));
      Value looked = andI(valid0[j], isRow);
      Value first = firstAt(zero, slot);
      Value k = i32Of(minU(ks0[j], selected - 1));
      Value common = andI(looked, kb.cmpi(P::eq, first, k));
      for (int64_t q = 1; q < positions; ++q)
        common = andI(common, kb.cmpi(P::ult, firstAt(kb.index(q), slot), none));
      common0.push_back(common);
      count0 = add(count0, arith::ExtUIOp::create(b, i32, common));
    }
    auto [rank0, commonCount] = blockScan(count0);
    Value tiles = arith::DivUIOp::create(b, commonCount, kb.i32(tile));
    Value prefix = mul(tiles, kb.i32(tile));
    if (minMissing == 0)
      kb.ifThen(kb.cmpi(P::eq, tid, zero), [&] { store(tiles, outTiles, {request}); });

    // E. The prefix: common rows of rank < T x tile, at their first
    // occurrence in every position; those position 0 reads from the host
    // counted.
    // Every load first (the first occurrences, the slots there; clamped
    // in bounds outside the prefix), then the stores: the loads wait side
    // by side.
    SmallVector<Value> inPrefix, outRank;
    SmallVector<SmallVector<Value>> firstsAt, slotsAt;
    Value rank = rank0;
    for (int64_t j = 0; j < perThread0; ++j) {
      inPrefix.push_back(andI(common0[j], kb.cmpi(P::slt, rank, prefix)));
      outRank.push_back(indexOf(rank));
      SmallVector<Value> jFirsts, jSlots;
      for (int64_t q = 0; q < positions; ++q) {
        Value first = q == 0 ? minU(ks0[j], selected - 1)
                             : minU(indexOf(firstAt(kb.index(q), slots0[j])), selected - 1);
        jFirsts.push_back(first);
        jSlots.push_back(load(inSlots, {request, add(kb.index(q * selected), first)}));
      }
      firstsAt.push_back(jFirsts);
      slotsAt.push_back(jSlots);
      rank = add(rank, arith::ExtUIOp::create(b, i32, common0[j]));
    }
    Value missing = kb.i32(0);
    for (int64_t j = 0; j < perThread0; ++j) {
      kb.ifThen(inPrefix[j], [&] {
        for (int64_t q = 0; q < positions; ++q) {
          Value base = kb.index(q * selected);
          store(rows0[j], outRows, {request, add(base, outRank[j])});
          store(slotsAt[j][q], outSlots, {request, add(base, outRank[j])});
          store(arith::ConstantIntOp::create(b, 1, 8), taken, {add(base, firstsAt[j][q])});
        }
      });
      if (minMissing > 0)
        missing =
            add(missing, arith::ExtUIOp::create(
                             b, i32, andI(inPrefix[j], kb.cmpi(P::slt, slotsAt[j][0], kb.i32(0)))));
    }
    if (minMissing > 0)
      kb.ifThen(kb.cmpi(P::ne, missing, kb.i32(0)), [&] {
        memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addi, missing, missingWord,
                                    ValueRange{zero});
      });
    gpu::BarrierOp::create(b);
    // With too few of them the positions gather the prefix alone (the
    // lists stay as they are).
    if (minMissing > 0)
      kb.ifThen(kb.cmpi(P::eq, tid, zero), [&] {
        Value share = kb.cmpi(P::sge, load(missingWord, {zero}), kb.i32(minMissing));
        store(kb.select(share, tiles, kb.i32(0)), outTiles, {request});
      });

    // F. Every selection not taken, in order, after the prefix: flat rank
    // r of position q goes to q K + T x tile + (r - q (K - T x tile)).
    // Round j of the threads takes the selections j x threads + tid (a
    // warp's 32 side by side, loads and stores whole lines); a selection's
    // rank is the count before its warp's in round order (sums[j x warps +
    // w], scanned) plus its lanes before it (a ballot).
    SmallVector<Value> flats, rows, slots, masks;
    for (int64_t j = 0; j < perThread; ++j) {
      Value i = add(tid, kb.index(j * threads));
      Value clamped = minU(i, entries - 1);
      flats.push_back(i);
      rows.push_back(load(inRows, {request, clamped}));
      slots.push_back(load(inSlots, {request, clamped}));
      Value inList = kb.cmpi(P::ult, i, kb.index(entries));
      Value notTaken =
          kb.cmpi(P::eq, load(taken, {clamped}), arith::ConstantIntOp::create(b, 0, 8));
      masks.push_back(kb.ballot(andI(inList, notTaken)));
      kb.ifThen(kb.cmpi(P::eq, lane, zero), [&] {
        Value count = LLVM::CtPopOp::create(b, i32, masks.back());
        store(count, sums, {add(kb.index(j * warps), warp)});
      });
    }
    scanSums(sumWords);
    Value laneBit = arith::ShLIOp::create(b, kb.i32(1), lane32);
    for (int64_t j = 0; j < perThread; ++j) {
      Value free = kb.cmpi(P::ne, andI(masks[j], laneBit), kb.i32(0));
      kb.ifThen(free, [&] {
        Value before = LLVM::CtPopOp::create(b, i32, andI(masks[j], lanesBefore));
        Value rankRest = add(load(sums, {add(kb.index(j * warps), warp)}), before);
        Value position = i32Of(arith::DivUIOp::create(b, flats[j], kb.index(selected)));
        Value out = indexOf(add(rankRest, mul(add(position, kb.i32(1)), prefix)));
        store(rows[j], outRows, {request, out});
        store(slots[j], outSlots, {request, out});
      });
    }
    gpu::ReturnOp::create(b);
  };
  return spec;
}
