//===- AgeRowsKernel.cpp - the appends between steps on the device --------===//
//
// The kernel of dhs.age_rows (the op's description gives the rule). One CTA
// of 1024 threads per launch (one pool group) replays the appends in call
// order, exactly as the controller's append does them
// (runtime/residency/PromotionPlan's planAgeRows is the host reference):
//
//   1. every entry of the list becomes (-1, -1); the appends are copied into
//      shared memory (the CTA);
//   2. the control words are read and checked (bad words plan nothing);
//   3. per append (the whole CTA steps through the appends; its first
//      thread does the sequential parts and leaves its decisions in shared
//      words that the CTA reads after a barrier, so that the control flow
//      around the parallel parts is uniform):
//      a. the checks, the aged row's slot;
//      b. while the memo holds the step: the owner check, whether any hot
//         row lies in the request's range [begin, end) (none: the aged row
//         is the request's first hot row, which resets the memo; a memo of
//         another step decides nothing and stays). It reads a count per
//         append of the hot rows in its range, built by the CTA at the
//         launch's first owner check and kept current from then on (step
//         f), so a check costs O(1) instead of a scan of the hot rows.
//         The build: the 2N range bounds sorted in shared memory (a rank
//         sort); one pass over the hot rows, each row's class (the number
//         of bounds <= it, a binary search) counted by a shared atomic;
//         prefix sums over the classes; append i's count is the sum over
//         the classes of its range (a row r lies in [b, e) exactly when
//         #bounds <= b <= class(r) <= #bounds < e), exact for any ranges,
//         overlapping, repeated or empty;
//      c. the slot becomes hot; the budget drops;
//      d. over the budget, unless the memo holds the step, findVictim (the
//         CTA): CLOCK from the hand over two laps at most, min(4096, slots)
//         slots a trip (a trip never sees a slot twice); thread t examines
//         positions k + t + 1024 u, u < 4, their loads issued together; per
//         warp and u a ballot of the unreferenced candidates (hot, last use
//         < the step), the trip's victim the lowest position over the warps
//         (a shuffle min over the warps' lowest); the
//         referenced candidates before it (all, if none) get their second
//         chance (cleared = last use); two barriers a trip (the second lap
//         reads what the first cleared); the hand stops right after the
//         victim, or comes back to where it was; no victim sets the memo.
//         A search without any candidate would walk both laps, clear
//         nothing and fail: it is not walked. The candidates are counted
//         by the CTA at the launch's first search (a ballot per warp, 1024
//         slots at a time) and kept current by the first thread (+1 the
//         aged row's slot, -1 the released slot, -1 a hot slot a new row
//         takes, a bad state); at B=128 x 65536 slots the failed two-lap
//         walks (128 trips, 256 barriers, ~2.6 MB read each) were most of
//         the aging step's ~5 ms a group;
//      e. the release of the victim or the aged row; the new row takes the
//         free stack's top (the released slot itself when it was pushed);
//      f. once the counts are built: every append's count whose range holds
//         the aged row (+1) or the released row (-1) changes (the CTA, a
//         thread an append);
//   4. the list: the new rows that are still mapped, and the released rows
//      (the CTA); the control words.
//
// History: one thread scanning (80 ms a step at dhs-decision-bench's large
// step, 32 appends over 16384 slots), then one warp, 32 slots a trip
// (~6.5 ms there; 1.73 s a step at B=128 x 20 groups x 65536 slots, most
// likely the owner scans: after promotions that ran out of victims the memo
// holds the step for every append, and a request's hot rows sit together in
// hand order, so a scan from slot 0 walks half the table). The CTA form
// with O(1) owner checks and 1024-slot CLOCK trips: 1.7-1.8 ms a group at
// B=128 x 65536 slots (ncu at 1.5 GHz), 81% of it in the trips, ~32 of
// them an append (the candidates are few: nearly every hot slot served the
// last step), hence 4096-slot trips.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"
#include "codegen/Kernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;
using Layout = abi::AgeRowsLayout;

/// Threads of the CTA, and its warps.
static constexpr int64_t kThreads = 1024;
static constexpr int64_t kWarps = kThreads / kWarpSize;
static_assert(kWarps == kWarpSize, "a CLOCK trip's lowest position: one warp reads every warp's");
/// Appends a launch replays at most (its shared memory grows with them:
/// ~60 bytes an append; the runtime splits longer lists into launches).
static constexpr int64_t kMaxAppends = 512;
/// Slots a thread loads at once in the owner counts' pass over the hot rows.
static constexpr int64_t kUnroll = 4;
/// Slots a thread examines in a CLOCK trip, and the trip's slots: where
/// few slots are candidates a search walks far (at B=128 x 65536 slots,
/// ~32 trips of 1024 slots an append), and a trip costs its loads' latency
/// and two barriers whatever its width.
static constexpr int64_t kTripRounds = 4;
static constexpr int64_t kTripSlots = kTripRounds * kThreads;

/// Words of the kernel's shared scalars: the control words while they
/// change; whether the control words are bad; and the current append's
/// state, which the first thread decides and the CTA reads after a barrier:
/// whether it goes on, whether its aged row is aged (and its slot), whether
/// the owner check runs, whether a row is released, whether the CLOCK
/// search runs, and its victim (-1: none); whether the owner counts are
/// built; the CLOCK candidates (hot, last use < the step) and whether they
/// are counted.
enum Scalar : int64_t {
  kHand,
  kTop,
  kBudget,
  kMemo,
  kExcess,
  kGoOn,
  kBad,
  kAging,
  kSlot,
  kOwnerCheck,
  kRelease,
  kSearch,
  kVictim,
  kCounted,
  kCandidates,
  kCandidatesCounted,
  kScalars
};

/// The kernel's shared buffers, in the order of KernelSpec::workgroup.
enum Shared : unsigned {
  kScalarWords, ///< [kScalars] i32
  kEntries,     ///< [N, 4] i64: the appends (AgeRowsLayout)
  kBounds,      ///< [2N] i64: the ranges' bounds, ascending
  kClasses,     ///< [2N + 2] i32: hot rows per class, then their prefix sums
  kOwned,       ///< [N] i32: hot rows in append i's range
  kWarpLowest,  ///< [kWarps] i32: a CLOCK trip's lowest victim position per warp
  kGone,        ///< [1] i64: the row the current append released
};

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(AgeRowsOp op) {
  MemRefType appends = op.getAppends().getType();
  if (!appends.hasStaticShape() || !op.getRows().getType().hasStaticShape())
    return op.emitOpError() << "needs static shapes to generate a kernel" << kStaticShapesHint;
  int64_t n = appends.getDimSize(0);
  if (n == 0)
    return op.emitOpError() << "has no appends to replay";
  if (n > kMaxAppends)
    return op.emitOpError() << "replays up to " << kMaxAppends
                            << " appends in one CTA (the runtime splits longer lists), got " << n;

  MLIRContext *context = op.getContext();
  Type i32 = IntegerType::get(context, 32), i64 = IntegerType::get(context, 64);
  KernelSpec spec{abi::LaunchKind::AgeRows, kernelKey(appends, op.getHot().getType())};
  spec.signature.add(Role::AgeList, appends);
  spec.signature.add(Role::HotRows, op.getHot().getType());
  spec.signature.add(Role::ClockCleared, op.getCleared().getType());
  spec.signature.add(Role::FreeStack, op.getFree().getType());
  spec.signature.add(Role::PromotionControl, op.getControl().getType());
  spec.signature.add(Role::PlaceRows, op.getRows().getType());
  spec.signature.add(Role::PlaceSlots, op.getSlots().getType());
  spec.signature.add(Role::ResidencyMap, getResidencyMapType(context));
  spec.signature.add(Role::ReplacementState, getReplacementStateType(context));
  spec.signature.add(Role::StepLog, getStepLogType(context));
  spec.signature.add(Role::Status, getStatusType(context));
  // One CTA a group: the runtime runs the groups' in one launch.
  spec.signature.add(Role::GroupBindings, getGroupBindingsType(context));
  spec.geometry.grid = {1, 1, 1};
  spec.geometry.block = {kThreads, 1, 1};
  spec.workgroup = {sharedBuffer(kScalars, i32),
                    sharedBuffer({n, static_cast<int64_t>(Layout::kEntryWords)}, i64),
                    sharedBuffer(2 * n, i64),
                    sharedBuffer(2 * n + 2, i32),
                    sharedBuffer(n, i32),
                    sharedBuffer(kWarps, i32),
                    sharedBuffer(1, i64)};

  spec.emitBody = [=](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    KernelBuilder kb{b};
    using P = arith::CmpIPredicate;
    Value list = args[Role::AgeList], hot = args[Role::HotRows], cleared = args[Role::ClockCleared],
          freeStack = args[Role::FreeStack], control = args[Role::PromotionControl],
          rows = args[Role::PlaceRows], slots = args[Role::PlaceSlots],
          map = args[Role::ResidencyMap], recency = args[Role::ReplacementState],
          log = args[Role::StepLog], status = args[Role::Status];
    Value scalars = args.workgroup(kScalarWords), entries = args.workgroup(kEntries),
          bounds = args.workgroup(kBounds), classes = args.workgroup(kClasses),
          owned = args.workgroup(kOwned), warpLowest = args.workgroup(kWarpLowest),
          goneRow = args.workgroup(kGone);
    Value tid = kb.threadId();
    Value threads = kb.index(kThreads);
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
    auto setScalar = [&](Value value, Scalar word) { store(value, scalars, {kb.index(word)}); };
    auto andI = [&](Value x, Value y) { return arith::AndIOp::create(b, x, y).getResult(); };
    auto orI = [&](Value x, Value y) { return arith::OrIOp::create(b, x, y).getResult(); };
    auto notI = [&](Value x) {
      return arith::XOrIOp::create(b, x, arith::ConstantIntOp::create(b, 1, 1)).getResult();
    };
    auto add = [&](Value x, Value y) { return arith::AddIOp::create(b, x, y).getResult(); };
    auto sub = [&](Value x, Value y) { return arith::SubIOp::create(b, x, y).getResult(); };
    auto report = [&](uint32_t bit) {
      memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori, kb.i32(bit), status,
                                  ValueRange{kb.index(0)});
    };
    // An scf.if with one result: `then` and `otherwise` build the values.
    auto ifValue = [&](Value condition, Type type, function_ref<Value()> then,
                       function_ref<Value()> otherwise) {
      auto op = scf::IfOp::create(b, TypeRange{type}, condition, /*withElseRegion=*/true);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(op.thenBlock());
      scf::YieldOp::create(b, then());
      b.setInsertionPointToStart(op.elseBlock());
      scf::YieldOp::create(b, otherwise());
      return op.getResult(0);
    };
    Value nIndex = kb.index(n), entriesIndex = kb.index(2 * n);
    Value slotCount = dim32(hot);
    Value hostRows = arith::ExtSIOp::create(b, i64, dim32(map));
    Value step = ifValue(
        kb.cmpi(P::sgt, dim32(log), kb.i32(0)), i32,
        [&] { return load(log, {kb.index(abi::StepLogLayout::kStep)}); },
        [&] { return kb.i32(0); });
    Value thread = arith::IndexCastOp::create(b, i32, tid);
    Value lane = arith::IndexCastOp::create(b, i32, kb.laneOf(tid));
    Value warp = kb.warpOf(tid);
    Value first = kb.cmpi(P::eq, tid, kb.index(0));
    auto flag = [&](Value condition) { return arith::ExtUIOp::create(b, i32, condition); };
    auto isSet = [&](Scalar word) { return kb.cmpi(P::ne, scalar(word), kb.i32(0)); };
    auto memoHoldsStep = [&] {
      Value same = kb.cmpi(P::eq, scalar(kMemo), step);
      Value stepped = kb.cmpi(P::ne, step, kb.i32(0));
      return andI(same, stepped);
    };
    // The least i32 `v` over the warp; every lane gets it.
    auto warpMin = [&](Value v) {
      for (int64_t offset = kWarpSize / 2; offset >= 1; offset /= 2) {
        auto shuffle = gpu::ShuffleOp::create(b, v, offset, kWarpSize, gpu::ShuffleMode::XOR);
        v = arith::MinSIOp::create(b, v, shuffle.getShuffleResult());
      }
      return v;
    };
    // [0, end) over the CTA: thread t takes t, t + 1024, ...
    auto overCTA = [&](Value end, function_ref<void(Value)> body) {
      kb.forLoop(tid, end, threads, body);
    };
    // A CTA-wide scan: `trip(t)` examines positions t + thread (all threads
    // together) and yields the trip's result, the same in every thread; the
    // loop ends at `end` or once `done(result)`. Returns the last trip's
    // result (`none` if no trip ran).
    auto scan = [&](Value end, Value width, Value none, function_ref<Value(Value)> trip,
                    function_ref<Value(Value)> done) {
      Type type = none.getType();
      auto loop = scf::WhileOp::create(b, TypeRange{i32, type}, ValueRange{kb.i32(0), none});
      OpBuilder::InsertionGuard guard(b);
      Location loc = b.getLoc();
      Block *before = b.createBlock(&loop.getBefore(), {}, {i32, type}, {loc, loc});
      Value t = before->getArgument(0);
      Value more = kb.cmpi(P::slt, t, end);
      Value goes = andI(more, notI(done(before->getArgument(1))));
      scf::ConditionOp::create(b, goes, ValueRange{t, before->getArgument(1)});
      Block *after = b.createBlock(&loop.getAfter(), {}, {i32, type}, {loc, loc});
      Value result = trip(after->getArgument(0));
      Value next = add(after->getArgument(0), width);
      scf::YieldOp::create(b, ValueRange{next, result});
      return loop.getResult(1);
    };
    // How many of the sorted bounds are below `x` (`inclusive`: at most
    // `x`): a binary search over the 2N bounds in shared memory, a fixed
    // number of halvings.
    int64_t halvings = static_cast<int64_t>(llvm::Log2_64(static_cast<uint64_t>(2 * n))) + 1;
    auto boundsBelow = [&](Value x, bool inclusive) {
      auto loop = scf::ForOp::create(b, kb.index(0), kb.index(halvings), kb.index(1),
                                     ValueRange{kb.index(0), entriesIndex});
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value lo = loop.getRegionIterArgs()[0], hi = loop.getRegionIterArgs()[1];
      Value open = kb.cmpi(P::ult, lo, hi);
      Value sum = arith::AddIOp::create(b, lo, hi).getResult();
      Value mid = arith::ShRUIOp::create(b, sum, kb.index(1)).getResult();
      Value at = kb.select(open, mid, kb.index(0));
      Value bound = load(bounds, {at});
      Value below = kb.cmpi(inclusive ? P::sle : P::slt, bound, x);
      Value right = andI(open, below), left = andI(open, notI(below));
      Value nextLo = kb.select(right, arith::AddIOp::create(b, mid, kb.index(1)), lo);
      Value nextHi = kb.select(left, mid, hi);
      scf::YieldOp::create(b, ValueRange{nextLo, nextHi});
      return loop.getResult(0);
    };
    // Whether slot `s` (index) is a CLOCK candidate given its row `row`:
    // hot, last use < the step.
    auto candidateAt = [&](Value s, Value row) {
      Value isHot = kb.cmpi(P::sge, row, kb.i64(0));
      Value last = load(recency, {s, kb.index(0)});
      return andI(isHot, kb.cmpi(P::ult, last, step));
    };
    // Once counted, the candidates change by `delta` when `condition` holds
    // (first thread).
    auto countCandidate = [&](function_ref<Value()> condition, int64_t delta) {
      kb.ifThen(isSet(kCandidatesCounted), [&] {
        kb.ifThen(condition(),
                  [&] { setScalar(add(scalar(kCandidates), kb.i32(delta)), kCandidates); });
      });
    };
    // Whether host row `row` lies in the range of append `i` (shared).
    auto inRange = [&](Value row, Value i) {
      Value begin = load(entries, {i, kb.index(Layout::kOwnerBegin)});
      Value end = load(entries, {i, kb.index(Layout::kOwnerEnd)});
      Value above = kb.cmpi(P::sge, row, begin);
      Value below = kb.cmpi(P::slt, row, end);
      return andI(above, below);
    };

    // 1. An empty list; the appends into shared memory.
    overCTA(entriesIndex, [&](Value i) {
      store(kb.i64(-1), rows, {i});
      store(kb.i32(-1), slots, {i});
    });
    overCTA(nIndex, [&](Value i) {
      for (int64_t w = 0; w < static_cast<int64_t>(Layout::kEntryWords); ++w)
        store(load(list, {i, kb.index(w)}), entries, {i, kb.index(w)});
    });

    // 2. The control words; bad ones replay nothing.
    kb.ifThen(first, [&] {
      Value hand = load(control, {kb.index(Layout::kHand)});
      Value top = load(control, {kb.index(Layout::kFreeCount)});
      Value bad =
          orI(orI(kb.cmpi(P::slt, hand, kb.i32(0)),
                  kb.cmpi(P::sge, hand, arith::MaxSIOp::create(b, slotCount, kb.i32(1)))),
              orI(orI(kb.cmpi(P::slt, top, kb.i32(0)), kb.cmpi(P::sgt, top, dim32(freeStack))),
                  orI(kb.cmpi(P::slt, dim32(cleared), slotCount),
                      kb.cmpi(P::slt, dim32(recency), slotCount))));
      kb.ifThen(bad, [&] { report(abi::kStatusBadSlot); });
      setScalar(flag(bad), kBad);
      setScalar(hand, kHand);
      setScalar(top, kTop);
      setScalar(load(control, {kb.index(Layout::kFreeBudget)}), kBudget);
      setScalar(load(control, {kb.index(Layout::kNoVictimStep)}), kMemo);
      setScalar(load(control, {kb.index(Layout::kExcess)}), kExcess);
      setScalar(kb.i32(0), kCounted);
      setScalar(kb.i32(0), kCandidates);
      setScalar(kb.i32(0), kCandidatesCounted);
      store(kb.i64(-1), goneRow, {kb.index(0)});
    });
    gpu::BarrierOp::create(b);
    Value bad = isSet(kBad);

    // The owner counts (the CTA, uniformly): append i's count of the hot
    // rows in its range, from the hot rows as they are now.
    auto countOwners = [&] {
      // The bounds ascending (a rank sort: ties in index order); no row yet.
      overCTA(entriesIndex, [&](Value j) {
        auto boundAt = [&](Value k) {
          Value row = arith::RemUIOp::create(b, k, nIndex).getResult();
          Value isEnd = kb.cmpi(P::uge, k, nIndex);
          Value word = kb.select(isEnd, kb.index(Layout::kOwnerEnd), kb.index(Layout::kOwnerBegin));
          return load(entries, {row, word});
        };
        Value v = boundAt(j);
        auto rank =
            scf::ForOp::create(b, kb.index(0), entriesIndex, kb.index(1), ValueRange{kb.index(0)});
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(rank.getBody());
          Value k = rank.getInductionVar();
          Value other = boundAt(k);
          Value less = kb.cmpi(P::slt, other, v);
          Value tie = andI(kb.cmpi(P::eq, other, v), kb.cmpi(P::ult, k, j));
          Value before = orI(less, tie);
          Value count = rank.getRegionIterArgs()[0];
          Value more = add(count, kb.index(1));
          scf::YieldOp::create(b, ValueRange{kb.select(before, more, count)});
        }
        store(v, bounds, {rank.getResult(0)});
      });
      overCTA(kb.index(2 * n + 2), [&](Value c) { store(kb.i32(0), classes, {c}); });
      gpu::BarrierOp::create(b);
      // Every slot's row (including -1, as the rule compares every hot
      // entry) counted in its class: the bounds at most the row. kUnroll
      // loads at once.
      Value slotIndexCount = kb.toIndex(slotCount);
      kb.forLoop(tid, slotIndexCount, kb.index(kThreads * kUnroll), [&](Value s0) {
        SmallVector<Value> valid, loaded;
        for (int64_t u = 0; u < kUnroll; ++u) {
          Value s = add(s0, kb.index(u * kThreads));
          Value inTable = kb.cmpi(P::ult, s, slotIndexCount);
          valid.push_back(inTable);
          loaded.push_back(load(hot, {kb.select(inTable, s, s0)}));
        }
        for (int64_t u = 0; u < kUnroll; ++u)
          kb.ifThen(valid[u], [&] {
            memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addi, kb.i32(1), classes,
                                        ValueRange{boundsBelow(loaded[u], true)});
          });
      });
      gpu::BarrierOp::create(b);
      // Prefix sums: classes[c] = the rows in the classes before c.
      kb.ifThen(first, [&] {
        auto prefix = scf::ForOp::create(b, kb.index(0), kb.index(2 * n + 2), kb.index(1),
                                         ValueRange{kb.i32(0)});
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(prefix.getBody());
        Value c = prefix.getInductionVar();
        Value sum = prefix.getRegionIterArgs()[0];
        Value here = load(classes, {c});
        store(sum, classes, {c});
        scf::YieldOp::create(b, ValueRange{add(sum, here)});
      });
      gpu::BarrierOp::create(b);
      // A row r lies in [begin, end) exactly when
      // #bounds <= begin <= #bounds <= r <= #bounds < end.
      overCTA(nIndex, [&](Value i) {
        Value lo = boundsBelow(load(entries, {i, kb.index(Layout::kOwnerBegin)}), true);
        Value last = boundsBelow(load(entries, {i, kb.index(Layout::kOwnerEnd)}), false);
        Value hi = add(last, kb.index(1));
        Value some = kb.cmpi(P::ugt, hi, lo);
        Value atHi = load(classes, {hi});
        Value atLo = load(classes, {kb.select(some, lo, hi)});
        store(kb.select(some, sub(atHi, atLo), kb.i32(0)), owned, {i});
      });
      kb.ifThen(first, [&] { setScalar(kb.i32(1), kCounted); });
      gpu::BarrierOp::create(b);
    };

    // 3. The appends, in call order: the whole CTA steps through them (its
    // control flow uniform: the decisions are shared words read after a
    // barrier); the first thread does the sequential parts.
    kb.forLoop(kb.index(0), kb.select(bad, kb.index(0), nIndex), kb.index(1), [&](Value i) {
      Value aged = load(entries, {i, kb.index(Layout::kAged)});
      Value fresh = load(entries, {i, kb.index(Layout::kFresh)});

      // 3a. The checks and the aged row's slot (first thread).
      kb.ifThen(first, [&] {
        Value padding = kb.cmpi(P::slt, fresh, kb.i64(0));
        Value badRow = andI(notI(padding),
                            orI(kb.cmpi(P::sge, fresh, hostRows), kb.cmpi(P::sge, aged, hostRows)));
        kb.ifThen(badRow, [&] { report(abi::kStatusBadHostRow); });
        setScalar(flag(notI(orI(padding, badRow))), kGoOn);
        setScalar(kb.i32(0), kAging);
        setScalar(kb.i32(0), kOwnerCheck);
        setScalar(kb.i32(0), kRelease);
        setScalar(kb.i32(0), kSearch);
        setScalar(kb.i32(-1), kVictim);
        kb.ifThen(andI(isSet(kGoOn), kb.cmpi(P::sge, aged, kb.i64(0))), [&] {
          Value s = load(map, {kb.toIndex(aged)});
          Value outside = orI(kb.cmpi(P::slt, s, kb.i32(0)), kb.cmpi(P::sge, s, slotCount));
          Value clamped = kb.toIndex(kb.select(outside, kb.i32(0), s));
          Value badAged = orI(outside, kb.cmpi(P::sge, load(hot, {clamped}), kb.i64(0)));
          kb.ifThen(badAged, [&] {
            report(abi::kStatusBadSlot);
            setScalar(kb.i32(0), kGoOn);
          });
          kb.ifThen(notI(badAged), [&] {
            setScalar(kb.i32(1), kAging);
            setScalar(s, kSlot);
            // The request's first hot row resets the memo; only a memo that
            // holds the step decides anything, so the check runs only then.
            setScalar(flag(memoHoldsStep()), kOwnerCheck);
          });
        });
      });
      gpu::BarrierOp::create(b);

      // 3b. The owner check: the counts, built by the CTA at the launch's
      // first check; no hot row in the range resets the memo (first thread).
      kb.ifThen(isSet(kOwnerCheck), [&] {
        kb.ifThen(notI(isSet(kCounted)), countOwners);
        Value none = kb.cmpi(P::eq, load(owned, {i}), kb.i32(0));
        kb.ifThen(andI(first, none), [&] { setScalar(kb.i32(0), kMemo); });
      });

      // 3c. The aged row becomes hot; over the budget, a search unless the
      // memo holds the step (first thread).
      kb.ifThen(andI(first, isSet(kAging)), [&] {
        Value agedSlot = kb.toIndex(scalar(kSlot));
        store(aged, hot, {agedSlot});
        countCandidate([&] { return candidateAt(agedSlot, aged); }, 1);
        setScalar(add(scalar(kExcess), kb.i32(1)), kExcess);
        setScalar(sub(scalar(kBudget), kb.i32(1)), kBudget);
        kb.ifThen(kb.cmpi(P::slt, scalar(kBudget), kb.i32(0)), [&] {
          setScalar(kb.i32(1), kRelease);
          setScalar(flag(notI(memoHoldsStep())), kSearch);
        });
      });
      gpu::BarrierOp::create(b);

      // 3d. findVictim, non-forced (the CTA): CLOCK from the hand over two
      // laps at most, 4096 slots a trip (fewer when the table has fewer, so
      // that a trip never sees one slot twice). Thread t examines positions
      // p = k + t + 1024 u (slot (hand + p) mod slots, if p < 2 x slots); the
      // victim is the lowest position with an unreferenced candidate (hot,
      // last use < the step): per warp a ballot's lowest lane, over the
      // warps a shuffle min; the referenced candidates before it (all, if
      // none) get their second chance (cleared = last use), as the hand
      // passes them in order; the hand stops right after the victim.
      kb.ifThen(isSet(kSearch), [&] {
        // The candidates, counted by the CTA at the launch's first search
        // (a ballot per warp over 1024 slots at a time) and kept current by
        // the first thread from then on. With none the search would walk
        // its two laps, clear nothing (a candidate it passes is taken, or
        // cleared on the first lap and taken on the second) and fail: it is
        // not walked.
        kb.ifThen(notI(isSet(kCandidatesCounted)), [&] {
          Value slotIndexCount = kb.toIndex(slotCount);
          kb.forLoop(kb.index(0), slotIndexCount, threads, [&](Value base) {
            Value s = add(base, tid);
            Value inTable = kb.cmpi(P::ult, s, slotIndexCount);
            Value at = kb.select(inTable, s, kb.index(0));
            Value row = load(hot, {at});
            Value mask = kb.ballot(andI(inTable, candidateAt(at, row)));
            Value leader = kb.cmpi(P::eq, lane, kb.i32(0));
            kb.ifThen(andI(leader, kb.cmpi(P::ne, mask, kb.i32(0))), [&] {
              Value count = LLVM::CtPopOp::create(b, i32, mask);
              memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addi, count, scalars,
                                          ValueRange{kb.index(kCandidates)});
            });
          });
          gpu::BarrierOp::create(b);
          kb.ifThen(first, [&] { setScalar(kb.i32(1), kCandidatesCounted); });
        });
        Value anyCandidate = kb.cmpi(P::sgt, scalar(kCandidates), kb.i32(0));
        Value victim = ifValue(
            anyCandidate, i32,
            [&] {
              Value hand = scalar(kHand);
              Value laps = add(slotCount, slotCount);
              Value width = arith::MinSIOp::create(b, slotCount, kb.i32(kTripSlots));
              return scan(
                  laps, width, kb.i32(-1),
                  [&](Value k) {
                    // Position u x 1024 + t of the trip for u < kTripRounds:
                    // the rounds' loads issue together.
                    struct Examined {
                      Value slotIndex, last, candidate, referenced, position;
                    };
                    SmallVector<Examined> examined;
                    for (int64_t u = 0; u < kTripRounds; ++u) {
                      Value position = add(thread, kb.i32(u * kThreads));
                      Value at = add(k, position);
                      Value inTrip = kb.cmpi(P::slt, position, width);
                      Value inLaps = kb.cmpi(P::slt, at, laps);
                      Value valid = andI(inTrip, inLaps);
                      Value wrapped = arith::RemUIOp::create(b, add(hand, at), slotCount);
                      Value slotIndex = kb.toIndex(kb.select(valid, wrapped, kb.i32(0)));
                      // (One op per statement: the IR's order must not depend
                      // on the compiler's order of evaluating arguments.)
                      Value last = load(recency, {slotIndex, kb.index(0)});
                      Value earlier = kb.cmpi(P::ult, last, step);
                      Value isHot = kb.cmpi(P::sge, load(hot, {slotIndex}), kb.i64(0));
                      Value candidate = andI(valid, andI(isHot, earlier));
                      Value referenced = kb.cmpi(P::ne, last, load(cleared, {slotIndex}));
                      examined.push_back({slotIndex, last, candidate, referenced, position});
                    }
                    // The warp's lowest position over the rounds (kTripSlots:
                    // none), then the trip's.
                    Value warpBase = arith::IndexCastOp::create(
                        b, i32, arith::MulIOp::create(b, warp, kb.index(kWarpSize)));
                    Value mine = kb.i32(kTripSlots);
                    for (int64_t u = kTripRounds - 1; u >= 0; --u) {
                      const Examined &e = examined[static_cast<size_t>(u)];
                      Value mask = kb.ballot(andI(e.candidate, notI(e.referenced)));
                      Value lowestLane = LLVM::CountTrailingZerosOp::create(b, i32, mask, false);
                      Value some = kb.cmpi(P::ne, mask, kb.i32(0));
                      Value at = add(kb.i32(u * kThreads), add(warpBase, lowestLane));
                      mine = kb.select(some, at, mine);
                    }
                    kb.ifThen(kb.cmpi(P::eq, lane, kb.i32(0)),
                              [&] { store(mine, warpLowest, {warp}); });
                    gpu::BarrierOp::create(b);
                    Value lowest = warpMin(load(warpLowest, {kb.laneOf(tid)}));
                    // A referenced candidate the hand passes gets its second chance.
                    for (const Examined &e : examined) {
                      Value passed = kb.cmpi(P::slt, e.position, lowest);
                      Value chance = andI(andI(e.candidate, e.referenced), passed);
                      kb.ifThen(chance, [&] { store(e.last, cleared, {e.slotIndex}); });
                    }
                    // (The second lap reads what the first cleared; the next trip
                    // writes the warps' words again.)
                    gpu::BarrierOp::create(b);
                    Value victimAt = add(add(hand, k), lowest);
                    Value victimSlot = arith::RemUIOp::create(b, victimAt, slotCount);
                    Value found = kb.cmpi(P::slt, lowest, kb.i32(kTripSlots));
                    return kb.select(found, victimSlot, kb.i32(-1));
                  },
                  [&](Value found) { return kb.cmpi(P::sge, found, kb.i32(0)); });
            },
            [&] { return kb.i32(-1); });
        kb.ifThen(first, [&] {
          Value hand = scalar(kHand);
          Value missed = kb.cmpi(P::slt, victim, kb.i32(0));
          Value next = add(victim, kb.i32(1));
          Value wraps = kb.cmpi(P::eq, next, slotCount);
          Value after = kb.select(wraps, kb.i32(0), next);
          setScalar(kb.select(missed, hand, after), kHand);
          setScalar(victim, kVictim);
          kb.ifThen(missed, [&] { setScalar(step, kMemo); });
        });
      });
      gpu::BarrierOp::create(b);

      // 3e. The victim, or else the aged row itself, leaves; the new row
      // takes the free stack's top (first thread).
      kb.ifThen(first, [&] {
        Value pushed = kb.i32(-1); // the slot pushed (-1: none)
        {
          auto release = scf::IfOp::create(b, TypeRange{i32}, isSet(kRelease),
                                           /*withElseRegion=*/true);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(release.elseBlock());
          scf::YieldOp::create(b, kb.i32(-1));
          b.setInsertionPointToStart(release.thenBlock());
          Value victim = scalar(kVictim);
          Value e32 = kb.select(kb.cmpi(P::sge, victim, kb.i32(0)), victim, scalar(kSlot));
          Value e = kb.toIndex(e32);
          Value gone = load(hot, {e});
          countCandidate([&] { return candidateAt(e, gone); }, -1);
          store(gone, goneRow, {kb.index(0)});
          store(kb.i32(-1), map, {kb.toIndex(gone)});
          store(kb.i64(-1), hot, {e});
          store(load(recency, {e, kb.index(0)}), cleared, {e});
          setScalar(sub(scalar(kExcess), kb.i32(1)), kExcess);
          setScalar(add(scalar(kBudget), kb.i32(1)), kBudget);
          store(gone, rows, {add(nIndex, i)});
          Value pushAt = scalar(kTop);
          Value full = kb.cmpi(P::sge, pushAt, dim32(freeStack));
          kb.ifThen(full, [&] {
            report(abi::kStatusBadSlot);
            setScalar(kb.i32(0), kGoOn);
          });
          kb.ifThen(notI(full), [&] {
            store(e32, freeStack, {kb.toIndex(pushAt)});
            setScalar(add(pushAt, kb.i32(1)), kTop);
          });
          scf::YieldOp::create(b, kb.select(full, kb.i32(-1), e32));
          pushed = release.getResult(0);
        }
        kb.ifThen(isSet(kGoOn), [&] {
          Value count = scalar(kTop);
          Value empty = kb.cmpi(P::eq, count, kb.i32(0));
          kb.ifThen(empty, [&] { report(abi::kStatusBadSlot); });
          kb.ifThen(notI(empty), [&] {
            Value left = sub(count, kb.i32(1));
            setScalar(left, kTop);
            // The top is the slot just pushed, if one was (no reload).
            Value slot = ifValue(
                kb.cmpi(P::sge, pushed, kb.i32(0)), i32, [&] { return pushed; },
                [&] { return load(freeStack, {kb.toIndex(left)}); });
            Value inTable =
                andI(kb.cmpi(P::sge, slot, kb.i32(0)), kb.cmpi(P::slt, slot, slotCount));
            kb.ifThen(notI(inTable), [&] { report(abi::kStatusBadSlot); });
            kb.ifThen(inTable, [&] {
              Value slotIndex = kb.toIndex(slot);
              // (A hot slot on the free stack, a bad state: its last use
              // becomes the step.)
              countCandidate([&] { return candidateAt(slotIndex, load(hot, {slotIndex})); }, -1);
              store(slot, map, {kb.toIndex(fresh)});
              store(step, recency, {slotIndex, kb.index(0)});
              store(kb.i32(0), recency, {slotIndex, kb.index(1)});
              store(kb.i32(-1), cleared, {slotIndex});
            });
          });
        });
      });
      gpu::BarrierOp::create(b);

      // 3f. Once built, the counts follow the aged row (now hot) and the
      // released row (no longer): a thread an append.
      kb.ifThen(isSet(kCounted), [&] {
        Value aging = isSet(kAging), released = isSet(kRelease);
        Value gone = load(goneRow, {kb.index(0)});
        overCTA(nIndex, [&](Value j) {
          Value plus = andI(aging, inRange(aged, j));
          Value minus = andI(released, inRange(gone, j));
          Value delta = sub(flag(plus), flag(minus));
          store(add(load(owned, {j}), delta), owned, {j});
        });
        // (The next append's first thread rewrites the words read here.)
        gpu::BarrierOp::create(b);
      });
    });

    // 4. The new rows still mapped (the CTA); the control words (first
    // thread).
    overCTA(kb.select(bad, kb.index(0), nIndex), [&](Value i) {
      Value fresh = load(entries, {i, kb.index(Layout::kFresh)});
      kb.ifThen(andI(kb.cmpi(P::sge, fresh, kb.i64(0)), kb.cmpi(P::slt, fresh, hostRows)), [&] {
        Value slot = load(map, {kb.toIndex(fresh)});
        kb.ifThen(kb.cmpi(P::sge, slot, kb.i32(0)), [&] {
          store(fresh, rows, {i});
          store(slot, slots, {i});
        });
      });
    });
    kb.ifThen(andI(first, notI(bad)), [&] {
      store(scalar(kHand), control, {kb.index(Layout::kHand)});
      store(scalar(kTop), control, {kb.index(Layout::kFreeCount)});
      store(scalar(kBudget), control, {kb.index(Layout::kFreeBudget)});
      store(scalar(kMemo), control, {kb.index(Layout::kNoVictimStep)});
      store(scalar(kExcess), control, {kb.index(Layout::kExcess)});
    });
    gpu::ReturnOp::create(b);
  };
  return spec;
}
