//===- ShareRowsKernel.cpp - a shared prefix of tiles first ---------------===//
//
// The kernel of dhs.share_rows (the op's description gives the order). One
// CTA per request, its Q x K selections (Q <= 8, Q x K <= 16384) in dynamic
// shared memory:
//
//   A. the threads load the request's selections as 64-bit keys
//      (q << 46 | row as unsigned << 14 | k), padded with all-ones words to
//      P = the next power of two, and clear the taken bytes and the counter;
//   B. a bitonic network sorts the keys as unsigned words (passes unrolled
//      at generation time, as in SortRowsKernel.cpp): position q's
//      selections are then keys [q K, (q + 1) K), by row (-1 last), repeats
//      by k;
//   C. a thread per entry k of position 0 flags it common when its row is
//      >= 0, k is the row's first occurrence (a lower bound of (0, row, 0)
//      in position 0's keys finds k) and every other position's keys hold
//      the row (lower bounds); flags are bytes, a shared atomic counts them;
//   D. T = count / tile (thread 0 writes tiles[b]); position 0's entries, a
//      block at a time, ranked by a block-wide exclusive scan of the flags
//      (warp shuffles, then the warps' sums): a common row of rank r < T x
//      tile is prefix row r: for every position q, a lower bound gives its
//      first occurrence k_q, which writes shared_rows/slots[b, q, r] and is
//      marked taken;
//   E. per position, the entries not taken, a block at a time, ranked by
//      scans in their original order, go to T x tile + their rank.
//
// Exact and deterministic (no races decide anything). At Q x K = 16384 the
// keys take 128 KB, the taken and flag bytes 16 KB each.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"
#include "codegen/Kernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;

/// Threads of a CTA at most.
static constexpr int64_t kMaxShareThreads = 1024;
/// Bits of a key below the row: the entry's k (K <= 16384).
static constexpr int64_t kIndexBits = 14;
/// Bits of a key below the position: the row and k.
static constexpr int64_t kPositionShift = 32 + kIndexBits;

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(ShareRowsOp op) {
  MemRefType rows = op.getRows().getType();
  for (Value v : op->getOperands())
    if (!cast<MemRefType>(v.getType()).hasStaticShape())
      return op.emitOpError() << "needs static shapes to generate a kernel";
  const int64_t requests = rows.getDimSize(0), positions = rows.getDimSize(1),
                selected = rows.getDimSize(2);
  const int64_t entries = positions * selected;
  if (entries == 0 || requests == 0)
    return op.emitOpError() << "has no selections to share";
  // (The verifier bounds Q and Q x K: the keys' fields fit.)
  const int64_t padded = std::max<int64_t>(2, llvm::PowerOf2Ceil(entries));
  const int64_t levels = llvm::Log2_64(padded);
  const int64_t threads = std::clamp<int64_t>(padded / 2, kWarpSize, kMaxShareThreads);
  const int64_t warps = threads / kWarpSize;
  // T = count / tile is 0 for any tile above the count: clamped, it fits i32.
  const int64_t tile = std::min<int64_t>(op.getTile(), entries + 1);
  // Lower-bound iterations over a segment of K keys.
  const int64_t searchSteps = llvm::Log2_64(selected) + 1;
  // Shared memory: keys, the warps' sums and the counter, taken, flags.
  const int64_t sumsOffset = padded * 8;
  const int64_t counterWord = warps;
  const int64_t takenOffset = llvm::alignTo(sumsOffset + (warps + 1) * 4, 16);
  const int64_t flagsOffset = llvm::alignTo(takenOffset + entries, 16);
  const int64_t sharedBytes = llvm::alignTo(flagsOffset + selected, 16);

  KernelSpec spec{abi::LaunchKind::ShareRows, kernelKey(rows, op.getTile())};
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
    Type i8 = b.getI8Type(), i32 = b.getI32Type(), i64 = b.getI64Type();
    Value inRows = args[Role::RowIds], inSlots = args[Role::Slots];
    Value outRows = args[Role::SharedRows], outSlots = args[Role::SharedSlots];
    Value outTiles = args[Role::SharedTiles];

    auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
    Value shared = gpu::DynamicSharedMemoryOp::create(
        b, MemRefType::get({ShapedType::kDynamic}, i8, MemRefLayoutAttrInterface{}, workgroup));
    auto view = [&](int64_t offset, int64_t elements, Type type) -> Value {
      return memref::ViewOp::create(
          b, MemRefType::get({elements}, type, MemRefLayoutAttrInterface{}, workgroup), shared,
          kb.index(offset), ValueRange{});
    };
    Value keys = view(0, padded, i64);
    Value sums = view(sumsOffset, warps + 1, i32);
    Value taken = view(takenOffset, entries, i8);
    Value flags = view(flagsOffset, selected, i8);

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
    auto i64Of = [&](Value index) -> Value { return arith::IndexCastUIOp::create(b, i64, index); };
    auto i32Of = [&](Value index) -> Value { return arith::IndexCastUIOp::create(b, i32, index); };

    Value tid = kb.threadId();
    Value request = kb.blockId();
    Value step = kb.index(threads);
    Value lane = kb.laneOf(tid), warp = kb.warpOf(tid);
    Value lane32 = i32Of(lane);
    Value zero = kb.index(0);

    /// The key of (position, row, k): k a constant 0 for searches.
    auto keyOf = [&](Value position, Value row, Value k) -> Value {
      Value high = arith::ShLIOp::create(b, i64Of(position), kb.i64(kPositionShift));
      Value middle =
          arith::ShLIOp::create(b, arith::ExtUIOp::create(b, i64, row), kb.i64(kIndexBits));
      return arith::OrIOp::create(b, arith::OrIOp::create(b, high, middle), i64Of(k));
    };
    /// The first key >= `target` in position `position`'s segment: its
    /// index in `keys` (the segment's end when there is none).
    auto lowerBound = [&](Value position, Value target) -> Value {
      Value base = mul(position, kb.index(selected));
      auto search = scf::ForOp::create(b, zero, kb.index(searchSteps), kb.index(1),
                                       ValueRange{base, kb.index(selected)});
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(search.getBody());
        Value low = search.getRegionIterArgs()[0], count = search.getRegionIterArgs()[1];
        Value half = arith::ShRUIOp::create(b, count, kb.index(1));
        Value middle = add(low, half);
        Value clamped = arith::MinUIOp::create(b, middle, kb.index(padded - 1));
        Value below =
            andI(kb.cmpi(P::ugt, count, zero), kb.cmpi(P::ult, load(keys, {clamped}), target));
        scf::YieldOp::create(
            b, ValueRange{kb.select(below, add(middle, kb.index(1)), low),
                          kb.select(below, sub(sub(count, half), kb.index(1)), half)});
      }
      return search.getResult(0);
    };
    /// Whether keys[at] (at <= the segment's end) is `target`'s row in
    /// position `position`.
    auto holds = [&](Value position, Value at, Value target) -> Value {
      Value end = mul(add(position, kb.index(1)), kb.index(selected));
      Value clamped = arith::MinUIOp::create(b, at, kb.index(padded - 1));
      Value same =
          kb.cmpi(P::eq, arith::ShRUIOp::create(b, load(keys, {clamped}), kb.i64(kIndexBits)),
                  arith::ShRUIOp::create(b, target, kb.i64(kIndexBits)));
      return andI(kb.cmpi(P::ult, at, end), same);
    };
    /// The k of keys[at].
    auto indexOf = [&](Value at) -> Value {
      Value k = arith::AndIOp::create(b, load(keys, {at}), kb.i64((1 << kIndexBits) - 1));
      return arith::IndexCastUIOp::create(b, b.getIndexType(), k);
    };
    /// Inclusive scan over the warp of the i32 `x`.
    auto warpScan = [&](Value x) {
      for (int64_t d = 1; d < kWarpSize; d *= 2) {
        auto up = gpu::ShuffleOp::create(b, x, d, kWarpSize, gpu::ShuffleMode::UP);
        x = kb.select(kb.cmpi(P::sge, lane32, kb.i32(d)), add(x, up.getShuffleResult()), x);
      }
      return x;
    };
    /// Walks [0, K) a block at a time in order; `flagOf(k, inRange)` is an
    /// i1 per entry, `body(k, rank)` runs for the flagged entries with their
    /// rank among all flagged ones (a block-wide exclusive scan).
    auto rankFlagged = [&](function_ref<Value(Value, Value)> flagOf,
                           function_ref<void(Value, Value)> body) {
      auto blocks = scf::ForOp::create(b, zero, kb.index(selected), step, ValueRange{kb.i32(0)});
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(blocks.getBody());
      Value running = blocks.getRegionIterArgs()[0];
      Value k = add(blocks.getInductionVar(), tid);
      Value inRange = kb.cmpi(P::ult, k, kb.index(selected));
      Value flagged =
          andI(inRange, flagOf(arith::MinUIOp::create(b, k, kb.index(selected - 1)), inRange));
      Value flag = arith::ExtUIOp::create(b, i32, flagged);
      Value inclusive = warpScan(flag);
      kb.ifThen(kb.cmpi(P::eq, lane, kb.index(kWarpSize - 1)),
                [&] { store(inclusive, sums, {warp}); });
      gpu::BarrierOp::create(b);
      // Warp 0 scans the warps' sums in place: lane w reads and writes only
      // sums[w]. With fewer than 32 warps the other lanes read nothing (a
      // clamped read of sums[warps - 1], discarded, raced with its lane's
      // write between the same barriers: a racecheck hazard, never a result).
      kb.ifThen(kb.cmpi(P::eq, warp, zero), [&] {
        if (warps == kWarpSize) {
          store(warpScan(load(sums, {lane})), sums, {lane});
          return;
        }
        Value mine = kb.cmpi(P::ult, lane, kb.index(warps));
        auto sum = scf::IfOp::create(b, TypeRange{i32}, mine, /*withElseRegion=*/true);
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(sum.thenBlock());
          scf::YieldOp::create(b, ValueRange{load(sums, {lane})});
          b.setInsertionPointToStart(sum.elseBlock());
          scf::YieldOp::create(b, ValueRange{kb.i32(0)});
        }
        Value scanned = warpScan(sum.getResult(0));
        kb.ifThen(mine, [&] { store(scanned, sums, {lane}); });
      });
      gpu::BarrierOp::create(b);
      Value warpBefore = kb.select(
          kb.cmpi(P::eq, warp, zero), kb.i32(0),
          load(sums, {kb.select(kb.cmpi(P::eq, warp, zero), zero, sub(warp, kb.index(1)))}));
      Value blockTotal = load(sums, {kb.index(warps - 1)});
      Value rank = add(running, sub(add(warpBefore, inclusive), flag));
      kb.ifThen(flagged, [&] { body(k, rank); });
      gpu::BarrierOp::create(b); // the sums are read before the next block's
      scf::YieldOp::create(b, ValueRange{add(running, blockTotal)});
    };

    // A. The keys, padded with all ones; nothing taken, nothing counted.
    kb.forLoop(tid, kb.index(padded), step, [&](Value i) {
      auto key = scf::IfOp::create(b, TypeRange{i64}, kb.cmpi(P::ult, i, kb.index(entries)),
                                   /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(key.thenBlock());
        Value position = arith::DivUIOp::create(b, i, kb.index(selected));
        Value k = arith::RemUIOp::create(b, i, kb.index(selected));
        scf::YieldOp::create(b,
                             ValueRange{keyOf(position, load(inRows, {request, position, k}), k)});
        b.setInsertionPointToStart(key.elseBlock());
        scf::YieldOp::create(b, ValueRange{kb.i64(-1)});
      }
      store(key.getResult(0), keys, {i});
    });
    kb.forLoop(tid, kb.index(entries), step,
               [&](Value i) { store(arith::ConstantIntOp::create(b, 0, 8), taken, {i}); });
    kb.ifThen(kb.cmpi(P::eq, tid, zero), [&] { store(kb.i32(0), sums, {kb.index(counterWord)}); });
    gpu::BarrierOp::create(b);

    // B. The bitonic network, ascending as unsigned words.
    for (int64_t level = 1; level <= levels; ++level) {
      const int64_t size = int64_t(1) << level;
      for (int64_t stride = size / 2; stride >= 1; stride /= 2) {
        kb.forLoop(tid, kb.index(padded / 2), step, [&](Value pair) {
          Value low =
              add(mul(arith::DivUIOp::create(b, pair, kb.index(stride)), kb.index(2 * stride)),
                  arith::RemUIOp::create(b, pair, kb.index(stride)));
          Value high = add(low, kb.index(stride));
          Value x = load(keys, {low});
          Value y = load(keys, {high});
          Value ascending = kb.cmpi(P::eq, andI(low, kb.index(size)), zero);
          Value outOfOrder = kb.select(ascending, kb.cmpi(P::ugt, x, y), kb.cmpi(P::ult, x, y));
          kb.ifThen(outOfOrder, [&] {
            store(y, keys, {low});
            store(x, keys, {high});
          });
        });
        gpu::BarrierOp::create(b);
      }
    }

    // C. Position 0's common rows, flagged at their first occurrence.
    kb.forLoop(tid, kb.index(selected), step, [&](Value k) {
      Value row = load(inRows, {request, zero, k});
      Value at = lowerBound(zero, keyOf(zero, row, zero));
      Value common = andI(kb.cmpi(P::sge, row, kb.i32(0)), kb.cmpi(P::eq, indexOf(at), k));
      for (int64_t q = 1; q < positions; ++q) {
        Value position = kb.index(q);
        Value target = keyOf(position, row, zero);
        common = andI(common, holds(position, lowerBound(position, target), target));
      }
      store(arith::ExtUIOp::create(b, i8, common), flags, {k});
      kb.ifThen(common, [&] {
        memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addi, kb.i32(1), sums,
                                    ValueRange{kb.index(counterWord)});
      });
    });
    gpu::BarrierOp::create(b);
    Value common = load(sums, {kb.index(counterWord)});
    Value tiles = arith::DivUIOp::create(b, common, kb.i32(tile));
    Value prefix = mul(tiles, kb.i32(tile));
    kb.ifThen(kb.cmpi(P::eq, tid, zero), [&] { store(tiles, outTiles, {request}); });
    gpu::BarrierOp::create(b); // the counter is read before the scans use the sums

    // D. The prefix: common rows of rank < T x tile, at their first
    // occurrence in every position.
    rankFlagged(
        [&](Value k, Value) {
          return kb.cmpi(P::ne, load(flags, {k}), arith::ConstantIntOp::create(b, 0, 8));
        },
        [&](Value k, Value rank) {
          kb.ifThen(kb.cmpi(P::slt, rank, prefix), [&] {
            Value row = load(inRows, {request, zero, k});
            Value out = kb.toIndex(rank);
            for (int64_t q = 0; q < positions; ++q) {
              Value position = kb.index(q);
              Value first = indexOf(lowerBound(position, keyOf(position, row, zero)));
              store(row, outRows, {request, position, out});
              store(load(inSlots, {request, position, first}), outSlots, {request, position, out});
              store(arith::ConstantIntOp::create(b, 1, 8), taken,
                    {add(mul(position, kb.index(selected)), first)});
            }
          });
        });
    gpu::BarrierOp::create(b);

    // E. Per position, every entry not taken, in order, after the prefix.
    kb.forLoop(zero, kb.index(positions), kb.index(1), [&](Value position) {
      Value base = mul(position, kb.index(selected));
      rankFlagged(
          [&](Value k, Value) {
            return kb.cmpi(P::eq, load(taken, {add(base, k)}),
                           arith::ConstantIntOp::create(b, 0, 8));
          },
          [&](Value k, Value rank) {
            Value out = kb.toIndex(add(prefix, rank));
            store(load(inRows, {request, position, k}), outRows, {request, position, out});
            store(load(inSlots, {request, position, k}), outSlots, {request, position, out});
          });
    });
    gpu::ReturnOp::create(b);
  };
  return spec;
}
