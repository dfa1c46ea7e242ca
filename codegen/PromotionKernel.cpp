//===- PromotionKernel.cpp - a step's promotion decisions on the device ---===//
//
// The kernel of dhs.plan_promotions (the op's description gives the rule).
// Correct first, one CTA of 1024 threads per launch (one pool group):
//
//   0. thread 0 reads the step's status word: a failed step (non-zero)
//      plans nothing (every count 0, the list all -1, the state untouched);
//   A. a lane's count is the index of its first -1 (any negative id;
//      `listed` when there is none): the counts start at `listed`, every
//      thread walks the fetched rows (lane, j) 1024 apart and, at a -1 that
//      opens a run of them (j = 0 or a row id before it), takes the shared
//      atomic min of j into its lane's count (the least such j is the first
//      -1, whatever follows it); after a barrier thread 0 turns the counts
//      (at most `promotions` each) into each lane's first rank, reads the
//      control words and fixes F (promotions from the free stack) and V
//      (victims wanted; none when the noVictimStep memo holds the step);
//   B. a thread per fetched row writes its host row at its rank; ranks below
//      F take their free-stack slot;
//   C. if V > 0: two laps over the slot table in hand order, 1024 slots at a
//      time: a slot is flagged when it is a candidate (hot, not used this
//      step) and unreferenced (lap 0) or referenced (lap 1); a block-wide
//      exclusive scan (warp shuffles, then the warps' sums) ranks the flagged
//      slots, and a slot of rank r < V is victim r: promotion F + r takes it
//      and release entry r gives up its host row. The hand's end is the
//      largest (lap, offset) of a victim (a shared atomic max);
//   D. the entries past the last decision become (-1, -1); the referenced
//      candidates the hand passed (those before the last victim's (lap,
//      offset): all of them once it is in the second lap) lose their
//      reference;
//   E. a thread per promotion records its slot's new host row and reference;
//      thread 0 writes the new hand, the free count left, the excess (+ F),
//      the memo (the step when fewer than V victims were found) and the
//      counts (promoted, released, listed before the cap).
//
// A's walk, B's loops and D's walk over the passed slots take 4 items a
// thread, 1024 apart, per trip and load all of theirs before using any: 4
// loads in flight per thread instead of 1 (A was a thread per lane reading
// its row ids one after another: 2048 loads in turn for 2048 listed).
// A lap stops at the chunk that ranks the last victim wanted (it scanned
// the whole table, both laps, whenever any victim was wanted: 128 scans of
// three barriers at 65536 slots); the rule is ParallelPromotionTest's,
// checked against the controller by PromotionKernelTest.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"
#include "codegen/Kernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <limits>
#include <tuple>

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;
using Control = abi::PromotionPlanLayout;

static constexpr int64_t kThreads = 1024;
static constexpr int64_t kWarps = kThreads / kWarpSize;
/// Items a thread loads before it uses any, in the strided loops over the
/// fetched rows, the free stack and the slots the hand passed.
static constexpr int64_t kUnroll = 4;

/// Words of the kernel's shared scalars: the hand, the free count, F, the
/// victims searched (V, 0 under the memo), 1 when nothing is planned (bad
/// control words or a failed step), the last victim's (lap, offset), the
/// victims wanted (before the memo), the rows listed before the cap, and 1
/// for a failed step.
enum Scalar : int64_t {
  kHand,
  kTop,
  kFree,
  kWanted,
  kBad,
  kLast,
  kNeeded,
  kListedAll,
  kGated,
  kScalars
};

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(PlanPromotionsOp op) {
  MemRefType fetched = op.getFetched().getType();
  if (!fetched.hasStaticShape() || !op.getRows().getType().hasStaticShape())
    return op.emitOpError() << "needs static shapes to generate a kernel" << kStaticShapesHint;
  if (op.getReplacement() != Replacement::clock)
    return op.emitOpError() << "has a kernel for CLOCK only";
  int64_t lanes = fetched.getDimSize(0), listed = fetched.getDimSize(1);
  if (lanes == 0 || listed == 0)
    return op.emitOpError() << "has no fetched rows to plan";
  if (lanes > kThreads)
    return op.emitOpError() << "plans up to " << kThreads << " lanes in one CTA, got " << lanes;
  int64_t total = lanes * listed;
  if (total > std::numeric_limits<int32_t>::max() / 2)
    return op.emitOpError() << "plans up to 2^30 fetched rows, got " << total;
  int64_t cap = std::min<int64_t>(listed, op.getPromotions().value_or(listed));

  MLIRContext *context = op.getContext();
  Type i32 = IntegerType::get(context, 32);
  bool withSources = static_cast<bool>(op.getSources());
  KernelSpec spec{abi::LaunchKind::PlanPromotions,
                  kernelKey(fetched, op.getHot().getType(), cap) + (withSources ? "_sources" : "")};
  spec.signature.add(Role::FetchedRows, fetched);
  spec.signature.add(Role::HistoryStart, op.getHistoryStart().getType());
  spec.signature.add(Role::HotRows, op.getHot().getType());
  spec.signature.add(Role::ClockCleared, op.getCleared().getType());
  spec.signature.add(Role::FreeStack, op.getFree().getType());
  spec.signature.add(Role::PromotionControl, op.getControl().getType());
  spec.signature.add(Role::PlaceRows, op.getRows().getType());
  spec.signature.add(Role::PlaceSlots, op.getSlots().getType());
  if (withSources) {
    spec.signature.add(Role::FetchedSources, op.getFetchedSources().getType());
    spec.signature.add(Role::PlaceSources, op.getSources().getType());
  }
  spec.signature.add(Role::ReplacementState, getReplacementStateType(context));
  spec.signature.add(Role::StepLog, getStepLogType(context));
  spec.signature.add(Role::Status, getStatusType(context));
  // One CTA a group: the runtime runs the groups' in one launch.
  spec.signature.add(Role::GroupBindings, getGroupBindingsType(context));
  spec.geometry.grid = {1, 1, 1};
  spec.geometry.block = {kThreads, 1, 1};
  // Per lane its count and first rank; the warps' sums; the scalars.
  spec.workgroup = {sharedBuffer(lanes, i32), sharedBuffer(lanes, i32), sharedBuffer(kWarps, i32),
                    sharedBuffer(kScalars, i32)};

  spec.emitBody = [=](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    KernelBuilder kb{b};
    using P = arith::CmpIPredicate;
    Value fetchedArg = args[Role::FetchedRows], start = args[Role::HistoryStart],
          hot = args[Role::HotRows], cleared = args[Role::ClockCleared],
          freeStack = args[Role::FreeStack], control = args[Role::PromotionControl],
          rows = args[Role::PlaceRows], slots = args[Role::PlaceSlots],
          recency = args[Role::ReplacementState], log = args[Role::StepLog],
          status = args[Role::Status];
    // With sources: each fetched row's ring entry, and the list beside the
    // plan's (-1 wherever the plan has no promotion).
    Value fetchedSources = withSources ? args[Role::FetchedSources] : Value();
    Value sources = withSources ? args[Role::PlaceSources] : Value();
    auto storeSource = [&](function_ref<Value()> value, Value index) {
      if (withSources)
        memref::StoreOp::create(b, value(), sources, ValueRange{index});
    };
    Value counts = args.workgroup(0), firsts = args.workgroup(1), warpSums = args.workgroup(2),
          scalars = args.workgroup(3);
    Value tid = kb.threadId();
    Value tid32 = arith::IndexCastOp::create(b, i32, tid);
    Value threads = kb.index(kThreads);
    Value isThread0 = kb.cmpi(P::eq, tid, kb.index(0));
    auto dim32 = [&](Value memref) {
      return arith::IndexCastOp::create(b, i32, memref::DimOp::create(b, memref, kb.index(0)));
    };
    auto load = [&](Value memref, ValueRange indices) -> Value {
      return memref::LoadOp::create(b, memref, indices);
    };
    auto store = [&](Value value, Value memref, ValueRange indices) {
      memref::StoreOp::create(b, value, memref, indices);
    };
    auto scalar = [&](Scalar word) { return load(scalars, {kb.index(word)}); };
    auto andI = [&](Value x, Value y) { return arith::AndIOp::create(b, x, y).getResult(); };
    auto orI = [&](Value x, Value y) { return arith::OrIOp::create(b, x, y).getResult(); };
    auto add = [&](Value x, Value y) { return arith::AddIOp::create(b, x, y).getResult(); };
    auto sub = [&](Value x, Value y) { return arith::SubIOp::create(b, x, y).getResult(); };
    auto minS = [&](Value x, Value y) { return arith::MinSIOp::create(b, x, y).getResult(); };
    /// A fetched item's lane and its index in the lane.
    auto laneAndRow = [&](Value item) -> std::pair<Value, Value> {
      return {arith::DivUIOp::create(b, item, kb.index(listed)),
              arith::RemUIOp::create(b, item, kb.index(listed))};
    };
    /// [start, end) in steps of kThreads, kUnroll items a trip: `fetch`
    /// loads every item's words before `use` uses any, so the loads are in
    /// flight together. An item past `end` (`valid` false) loads as the
    /// trip's first, which is in range.
    auto strided = [&](Value from, Value end, function_ref<SmallVector<Value>(Value)> fetch,
                       function_ref<void(Value, Value, ValueRange)> use) {
      kb.forLoop(from, end, kb.index(kThreads * kUnroll), [&](Value first) {
        SmallVector<Value> items, valids;
        SmallVector<SmallVector<Value>> words;
        for (int64_t k = 0; k < kUnroll; ++k) {
          Value item = first, valid = arith::ConstantIntOp::create(b, 1, 1);
          if (k > 0) {
            Value next = arith::AddIOp::create(b, first, kb.index(k * kThreads));
            valid = kb.cmpi(P::ult, next, end);
            item = kb.select(valid, next, first);
          }
          items.push_back(item);
          valids.push_back(valid);
          words.push_back(fetch(item));
        }
        for (int64_t k = 0; k < kUnroll; ++k)
          use(items[k], valids[k], words[k]);
      });
    };
    Value slotCount = dim32(hot);
    Value logWords = dim32(log);
    // The step (an empty log gives 0: no slot is a candidate).
    auto readStep = scf::IfOp::create(b, TypeRange{i32}, kb.cmpi(P::sgt, logWords, kb.i32(0)),
                                      /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(readStep.thenBlock());
      scf::YieldOp::create(b, load(log, {kb.index(abi::StepLogLayout::kStep)}));
      b.setInsertionPointToStart(readStep.elseBlock());
      scf::YieldOp::create(b, kb.i32(0));
    }
    Value step = readStep.getResult(0);
    Value totalIndex = kb.index(total);
    Value total32 = kb.i32(total);

    // 0. The gate: the status word before this launch sets any of it.
    kb.ifThen(isThread0, [&] {
      store(arith::ExtUIOp::create(b, i32, kb.cmpi(P::ne, load(status, {kb.index(0)}), kb.i32(0))),
            scalars, {kb.index(kGated)});
    });

    // A. Counts (every thread), then first ranks and the control words
    // (thread 0). A lane's count is the index of its first negative id
    // (`listed` when there is none): each negative id whose left neighbour is
    // not negative (or that opens the lane) starts a run of them, and the
    // least such index is the first. The counts start at `listed`.
    kb.ifThen(kb.cmpi(P::ult, tid, kb.index(lanes)), [&] { store(kb.i32(listed), counts, {tid}); });
    gpu::BarrierOp::create(b);
    strided(
        tid, totalIndex,
        [&](Value item) -> SmallVector<Value> {
          auto [laneOfItem, j] = laneAndRow(item);
          // (One op per statement: the IR's order must not depend on the
          // compiler's order of evaluating arguments.)
          Value previous = arith::SubIOp::create(b, j, kb.index(1)).getResult();
          Value opensLane = kb.cmpi(P::eq, j, kb.index(0));
          Value left = kb.select(opensLane, j, previous);
          return {load(fetchedArg, {laneOfItem, j}), load(fetchedArg, {laneOfItem, left})};
        },
        [&](Value item, Value valid, ValueRange loaded) {
          // (std::tie, not a structured binding: the lambda below captures both.)
          Value laneOfItem, j;
          std::tie(laneOfItem, j) = laneAndRow(item);
          Value opens = orI(kb.cmpi(P::eq, j, kb.index(0)), kb.cmpi(P::sge, loaded[1], kb.i32(0)));
          Value boundary = andI(andI(valid, kb.cmpi(P::slt, loaded[0], kb.i32(0))), opens);
          kb.ifThen(boundary, [&] {
            memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::mins,
                                        arith::IndexCastOp::create(b, i32, j), counts,
                                        ValueRange{laneOfItem});
          });
        });
    gpu::BarrierOp::create(b);
    kb.ifThen(isThread0, [&] {
      Value gated = kb.cmpi(P::ne, scalar(kGated), kb.i32(0));
      auto prefix = scf::ForOp::create(b, kb.index(0), kb.index(lanes), kb.index(1),
                                       ValueRange{kb.i32(0), kb.i32(0)});
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(prefix.getBody());
        Value sum = prefix.getRegionIterArgs()[0];
        Value count = load(counts, {prefix.getInductionVar()});
        store(sum, firsts, {prefix.getInductionVar()});
        scf::YieldOp::create(b, ValueRange{add(sum, minS(count, kb.i32(cap))),
                                           add(prefix.getRegionIterArgs()[1], count)});
      }
      Value fetchedTotal = prefix.getResult(0);
      Value hand = load(control, {kb.index(Control::kHand)});
      Value top = load(control, {kb.index(Control::kFreeCount)});
      Value budget = load(control, {kb.index(Control::kFreeBudget)});
      // Control words that would index outside the tables plan nothing.
      Value bad =
          orI(orI(kb.cmpi(P::slt, hand, kb.i32(0)),
                  kb.cmpi(P::sge, hand, arith::MaxSIOp::create(b, slotCount, kb.i32(1)))),
              orI(orI(kb.cmpi(P::slt, top, kb.i32(0)), kb.cmpi(P::sgt, top, dim32(freeStack))),
                  orI(kb.cmpi(P::slt, dim32(cleared), slotCount),
                      kb.cmpi(P::slt, dim32(recency), slotCount))));
      kb.ifThen(
          andI(bad, arith::XOrIOp::create(b, gated, arith::ConstantIntOp::create(b, 1, 1))), [&] {
            memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori, kb.i32(abi::kStatusBadSlot),
                                        status, ValueRange{kb.index(0)});
          });
      Value none = orI(bad, gated);
      Value planned = kb.select(none, kb.i32(0), fetchedTotal);
      Value fromFree = minS(minS(arith::MaxSIOp::create(b, budget, kb.i32(0)), top), planned);
      Value wanted = sub(planned, fromFree);
      // The memo: a non-forced search already failed in this (non-zero) step.
      Value memoWord = load(control, {kb.index(Control::kNoVictimStep)});
      Value memoIsStep = kb.cmpi(P::eq, memoWord, step);
      Value stepSet = kb.cmpi(P::ne, step, kb.i32(0));
      Value memo = andI(stepSet, memoIsStep);
      store(kb.select(none, kb.i32(0), hand), scalars, {kb.index(kHand)});
      store(kb.select(none, kb.i32(0), top), scalars, {kb.index(kTop)});
      store(fromFree, scalars, {kb.index(kFree)});
      store(kb.select(memo, kb.i32(0), wanted), scalars, {kb.index(kWanted)});
      store(wanted, scalars, {kb.index(kNeeded)});
      store(kb.select(gated, kb.i32(0), prefix.getResult(1)), scalars, {kb.index(kListedAll)});
      store(arith::ExtUIOp::create(b, i32, none), scalars, {kb.index(kBad)});
      store(kb.i32(-1), scalars, {kb.index(kLast)});
    });
    gpu::BarrierOp::create(b);
    Value hand = scalar(kHand), top = scalar(kTop), fromFree = scalar(kFree),
          wanted = scalar(kWanted);
    Value good = kb.cmpi(P::eq, scalar(kBad), kb.i32(0));

    // B. Host rows at their ranks; the free stack's slots.
    strided(
        tid, totalIndex,
        [&](Value item) -> SmallVector<Value> {
          auto [laneOfItem, j] = laneAndRow(item);
          SmallVector<Value> words{load(fetchedArg, {laneOfItem, j}), load(start, {laneOfItem}),
                                   load(counts, {laneOfItem}), load(firsts, {laneOfItem})};
          if (withSources)
            words.push_back(load(fetchedSources, {laneOfItem, j}));
          return words;
        },
        [&](Value item, Value valid, ValueRange loaded) {
          Value j32 = arith::IndexCastOp::create(b, i32, laneAndRow(item).second);
          Value listedRow = kb.cmpi(P::slt, j32, minS(loaded[2], kb.i32(cap)));
          kb.ifThen(andI(andI(good, valid), listedRow), [&] {
            Value hostRow =
                add(loaded[1], arith::ExtSIOp::create(b, b.getI64Type(), loaded[0]).getResult());
            Value rank = kb.toIndex(add(loaded[3], j32));
            store(hostRow, rows, {rank});
            storeSource([&] { return loaded[4]; }, rank);
          });
        });
    strided(
        tid, kb.toIndex(fromFree),
        [&](Value i) -> SmallVector<Value> {
          Value i32v = arith::IndexCastOp::create(b, i32, i);
          return {load(freeStack, {kb.toIndex(sub(sub(top, kb.i32(1)), i32v))})};
        },
        [&](Value i, Value valid, ValueRange loaded) {
          kb.ifThen(valid, [&] { store(loaded[0], slots, {i}); });
        });
    gpu::BarrierOp::create(b);

    // C. The victims: two laps in hand order, ranked by block-wide scans.
    Value lane = kb.laneOf(tid), warp = kb.warpOf(tid);
    Value lane32 = arith::IndexCastOp::create(b, i32, lane);
    /// The slot at `offset` from the hand, its host row, last use and
    /// whether it is a candidate and referenced (offset < slots).
    struct SlotView {
      Value slot, hostRow, last, candidate, referenced;
    };
    auto view = [&](Value offset32, Value inRange) {
      Value atHand = add(hand, offset32);
      Value wrapped = kb.select(kb.cmpi(P::sge, atHand, slotCount), sub(atHand, slotCount), atHand);
      Value slot = kb.select(inRange, wrapped, kb.i32(0));
      Value slotIndex = kb.toIndex(slot);
      Value hostRow = load(hot, {slotIndex});
      Value last = load(recency, {slotIndex, kb.index(0)});
      Value candidate =
          andI(andI(inRange, kb.cmpi(P::sge, hostRow, kb.i64(0))), kb.cmpi(P::ult, last, step));
      Value referenced = kb.cmpi(P::ne, last, load(cleared, {slotIndex}));
      return SlotView{slot, hostRow, last, candidate, referenced};
    };
    /// Inclusive scan over the warp of the i32 `x`.
    auto warpScan = [&](Value x) {
      for (int64_t d = 1; d < kWarpSize; d *= 2) {
        auto up = gpu::ShuffleOp::create(b, x, d, kWarpSize, gpu::ShuffleMode::UP);
        x = kb.select(kb.cmpi(P::sge, lane32, kb.i32(d)), add(x, up.getShuffleResult()), x);
      }
      return x;
    };
    // The scan only runs while victims are wanted (a uniform bound).
    Value scanEnd = kb.select(kb.cmpi(P::sgt, wanted, kb.i32(0)), slotCount, kb.i32(0));
    // A lap stops at the chunk that ranks the last victim wanted: the
    // slots past it decide nothing (the hand stops after the last victim,
    // and D reads only the slots before it).
    Value running = kb.i32(0);
    for (int64_t lap = 0; lap < 2; ++lap) {
      auto chunks = scf::WhileOp::create(b, TypeRange{i32, i32}, ValueRange{kb.i32(0), running});
      {
        OpBuilder::InsertionGuard guard(b);
        Location loc = b.getLoc();
        Block *test = b.createBlock(&chunks.getBefore(), {}, {i32, i32}, {loc, loc});
        // (Named in order: a call's arguments are built in any order.)
        Value still = kb.cmpi(P::slt, test->getArgument(1), wanted);
        Value inside = kb.cmpi(P::slt, test->getArgument(0), scanEnd);
        Value goes = andI(inside, still);
        scf::ConditionOp::create(b, goes, test->getArguments());
        Block *body = b.createBlock(&chunks.getAfter(), {}, {i32, i32}, {loc, loc});
        Value chunkStart = body->getArgument(0), ranked = body->getArgument(1);
        Value offset32 = add(chunkStart, arith::IndexCastOp::create(b, i32, tid));
        SlotView s = view(offset32, kb.cmpi(P::slt, offset32, slotCount));
        Value flagged = andI(
            s.candidate,
            lap == 0 ? arith::XOrIOp::create(b, s.referenced, arith::ConstantIntOp::create(b, 1, 1))
                           .getResult()
                     : s.referenced);
        Value flag = arith::ExtUIOp::create(b, i32, flagged);
        Value inclusive = warpScan(flag);
        kb.ifThen(kb.cmpi(P::eq, lane, kb.index(kWarpSize - 1)),
                  [&] { store(inclusive, warpSums, {warp}); });
        gpu::BarrierOp::create(b);
        kb.ifThen(kb.cmpi(P::eq, warp, kb.index(0)),
                  [&] { store(warpScan(load(warpSums, {lane})), warpSums, {lane}); });
        gpu::BarrierOp::create(b);
        Value before =
            kb.select(kb.cmpi(P::eq, warp, kb.index(0)), kb.i32(0),
                      load(warpSums, {kb.select(kb.cmpi(P::eq, warp, kb.index(0)), kb.index(0),
                                                arith::SubIOp::create(b, warp, kb.index(1)))}));
        Value chunkTotal = load(warpSums, {kb.index(kWarps - 1)});
        Value rank = add(ranked, sub(add(before, inclusive), flag));
        kb.ifThen(andI(flagged, kb.cmpi(P::slt, rank, wanted)), [&] {
          store(s.slot, slots, {kb.toIndex(add(fromFree, rank))});
          Value release = kb.toIndex(add(total32, rank));
          store(s.hostRow, rows, {release});
          store(kb.i32(-1), slots, {release});
          Value position =
              add(arith::MulIOp::create(b, kb.i32(lap), slotCount).getResult(), offset32);
          memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::maxs, position, scalars,
                                      ValueRange{kb.index(kLast)});
        });
        gpu::BarrierOp::create(b); // the sums are read before the next chunk's
        scf::YieldOp::create(
            b, ValueRange{add(chunkStart, kb.i32(kThreads)), add(ranked, chunkTotal)});
      }
      running = chunks.getResult(1);
    }
    gpu::BarrierOp::create(b);
    Value victims = minS(running, wanted);
    Value decided = add(fromFree, victims);
    Value last = scalar(kLast);

    // D. Padding, and the references the hand took away.
    kb.forLoop(kb.toIndex(add(decided, tid32)), totalIndex, threads, [&](Value i) {
      store(kb.i64(-1), rows, {i});
      store(kb.i32(-1), slots, {i});
      storeSource([&] { return kb.i32(-1); }, i);
    });
    // (Releases are copied from nowhere.)
    if (withSources)
      kb.forLoop(tid, totalIndex, threads, [&](Value v) {
        storeSource([&] { return kb.i32(-1); }, arith::AddIOp::create(b, v, totalIndex));
      });
    kb.forLoop(kb.toIndex(add(victims, tid32)), totalIndex, threads, [&](Value v) {
      Value release = add(v, totalIndex);
      store(kb.i64(-1), rows, {release});
      store(kb.i32(-1), slots, {release});
    });
    SmallVector<SlotView> views;
    strided(
        tid, kb.toIndex(scanEnd),
        [&](Value offset) -> SmallVector<Value> {
          views.push_back(view(arith::IndexCastOp::create(b, i32, offset),
                               arith::ConstantIntOp::create(b, 1, 1)));
          return {};
        },
        [&](Value offset, Value valid, ValueRange) {
          SlotView s = views[0];
          views.erase(views.begin());
          // (A victim in the second lap is past every slot: all lost theirs.)
          Value passed = kb.cmpi(P::slt, arith::IndexCastOp::create(b, i32, offset), last);
          kb.ifThen(andI(andI(andI(valid, s.candidate), s.referenced), passed),
                    [&] { store(s.last, cleared, {kb.toIndex(s.slot)}); });
        });
    gpu::BarrierOp::create(b);

    // E. The filled slots' new rows and references; the control words.
    kb.forLoop(tid, kb.toIndex(decided), threads, [&](Value i) {
      Value slot = load(slots, {i});
      Value inTable = andI(kb.cmpi(P::sge, slot, kb.i32(0)), kb.cmpi(P::slt, slot, slotCount));
      kb.ifThen(inTable, [&] {
        store(load(rows, {i}), hot, {kb.toIndex(slot)});
        store(kb.i32(-1), cleared, {kb.toIndex(slot)});
      });
      // A free-stack entry outside the slots: reported, nothing placed.
      kb.ifThen(arith::XOrIOp::create(b, inTable, arith::ConstantIntOp::create(b, 1, 1)), [&] {
        memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori, kb.i32(abi::kStatusBadSlot),
                                    status, ValueRange{kb.index(0)});
        store(kb.i64(-1), rows, {i});
        store(kb.i32(-1), slots, {i});
        storeSource([&] { return kb.i32(-1); }, i);
      });
    });
    kb.ifThen(isThread0, [&] {
      Value divisor = arith::MaxSIOp::create(b, slotCount, kb.i32(1));
      Value after = add(arith::RemUIOp::create(b, last, divisor).getResult(), kb.i32(1));
      after = kb.select(kb.cmpi(P::sge, after, slotCount), kb.i32(0), after);
      Value newHand = add(hand, after);
      newHand = kb.select(kb.cmpi(P::sge, newHand, slotCount), sub(newHand, slotCount), newHand);
      newHand = kb.select(kb.cmpi(P::sgt, victims, kb.i32(0)), newHand, hand);
      // (Bad control words and a failed step leave them as they were.)
      kb.ifThen(good, [&] {
        store(newHand, control, {kb.index(Control::kHand)});
        store(sub(top, fromFree), control, {kb.index(Control::kFreeCount)});
        Value excess = load(control, {kb.index(Control::kExcess)});
        store(add(excess, fromFree), control, {kb.index(Control::kExcess)});
        kb.ifThen(kb.cmpi(P::slt, victims, scalar(kNeeded)),
                  [&] { store(step, control, {kb.index(Control::kNoVictimStep)}); });
      });
      store(decided, control, {kb.index(Control::kPromoted)});
      store(victims, control, {kb.index(Control::kReleased)});
      store(scalar(kListedAll), control, {kb.index(Control::kListed)});
    });
    gpu::ReturnOp::create(b);
  };
  return spec;
}
