//===- AgeRowsKernel.cpp - the appends between steps on the device --------===//
//
// The kernel of dhs.age_rows (the op's description gives the rule). One warp
// per launch (one pool group) replays the appends in call order, exactly as
// the controller's append does them (runtime/residency/PromotionPlan's
// planAgeRows is the host reference):
//
//   1. every entry of the list becomes (-1, -1) (the warp);
//   2. the control words are read and checked (bad words plan nothing);
//   3. per append (the whole warp steps through the appends; its first
//      thread does the sequential parts and leaves its decisions in shared
//      words that the warp reads after a barrier, so that the control flow
//      around the scans is uniform):
//      a. the checks, the aged row's slot;
//      b. while the memo holds the step: the owner scan (the warp, 32 hot
//         rows a trip, a ballot of those in the request's range; the first
//         trip with one ends it) decides whether the aged row is the
//         request's first hot row, which resets the memo (a memo of another
//         step decides nothing and stays);
//      c. the slot becomes hot; the budget drops;
//      d. over the budget, unless the memo holds the step, findVictim (the
//         warp): CLOCK from the hand over two laps at most, 32 slots a trip
//         (min(32, slots): a trip never sees a slot twice); lane l examines
//         position k + l; a ballot of the unreferenced candidates (hot, last
//         use < the step) gives the victim, its lowest lane; the referenced
//         candidates in the lanes before it (all, if none) get their second
//         chance (cleared = last use), a barrier after each trip (the second
//         lap reads what the first cleared); the hand stops right after the
//         victim, or comes back to where it was; no victim sets the memo;
//      e. the release of the victim or the aged row; the new row takes the
//         free stack's top;
//   4. the list: the new rows that are still mapped, and the released rows;
//      the control words.
//
// Measured on the H200 at dhs-decision-bench's large step (32 appends a step
// over 16384 slots, most hot slots used in the last step) with the scans on
// the first thread alone (one dependent load a slot): 80 ms a step, the
// CLOCK searches dominating. The warp-wide scans above load 32 slots a trip
// (coalesced); not yet measured on a GPU.
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

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;
using Layout = abi::AgeRowsLayout;

/// Words of the kernel's shared scalars: the control words while they
/// change; whether the control words are bad; and the current append's
/// state, which the first thread decides and the warp reads after a barrier:
/// whether it goes on, whether its aged row is aged (and its slot), whether
/// the owner scan runs, whether a row is released, whether the CLOCK search
/// runs, and its victim (-1: none).
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
  kOwnerScan,
  kRelease,
  kSearch,
  kVictim,
  kScalars
};

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(AgeRowsOp op) {
  MemRefType appends = op.getAppends().getType();
  if (!appends.hasStaticShape() || !op.getRows().getType().hasStaticShape())
    return op.emitOpError() << "needs static shapes to generate a kernel";
  int64_t n = appends.getDimSize(0);
  if (n == 0)
    return op.emitOpError() << "has no appends to replay";

  MLIRContext *context = op.getContext();
  Type i32 = IntegerType::get(context, 32);
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
  spec.geometry.grid = {1, 1, 1};
  spec.geometry.block = {kWarpSize, 1, 1};
  spec.workgroup = {sharedBuffer(kScalars, i32)};

  spec.emitBody = [=](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    KernelBuilder kb{b};
    using P = arith::CmpIPredicate;
    Value list = args[Role::AgeList], hot = args[Role::HotRows], cleared = args[Role::ClockCleared],
          freeStack = args[Role::FreeStack], control = args[Role::PromotionControl],
          rows = args[Role::PlaceRows], slots = args[Role::PlaceSlots],
          map = args[Role::ResidencyMap], recency = args[Role::ReplacementState],
          log = args[Role::StepLog], status = args[Role::Status];
    Value scalars = args.workgroup(0);
    Type i64 = b.getI64Type();
    Value tid = kb.threadId();
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
    /// An scf.if with one result: `then` and `otherwise` build the values.
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
    Value lane = arith::IndexCastOp::create(b, i32, tid);
    Value first = kb.cmpi(P::eq, tid, kb.index(0));
    auto flag = [&](Value condition) { return arith::ExtUIOp::create(b, i32, condition); };
    auto isSet = [&](Scalar word) { return kb.cmpi(P::ne, scalar(word), kb.i32(0)); };
    auto memoHoldsStep = [&] {
      Value same = kb.cmpi(P::eq, scalar(kMemo), step);
      Value stepped = kb.cmpi(P::ne, step, kb.i32(0));
      return andI(same, stepped);
    };
    /// The warp's ballot of `bit`: bit l of the result is lane l's.
    auto ballot = [&](Value bit) {
      return NVVM::VoteSyncOp::create(b, i32, kb.i32(-1), bit, NVVM::VoteSyncKind::ballot)
          .getResult();
    };
    /// A warp-wide scan: `trip(t)` examines positions t + lane (all lanes
    /// together) and yields the trip's result; the loop ends at `end` or once
    /// `done(result)`. Returns the last trip's result (`none` if no trip ran).
    auto warpScan = [&](Value end, Value width, Value none, function_ref<Value(Value)> trip,
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

    // 1. An empty list.
    kb.forLoop(tid, entriesIndex, kb.index(kWarpSize), [&](Value i) {
      store(kb.i64(-1), rows, {i});
      store(kb.i32(-1), slots, {i});
    });
    gpu::BarrierOp::create(b);

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
    });
    gpu::BarrierOp::create(b);
    Value bad = isSet(kBad);

    // 3. The appends, in call order: the whole warp steps through them (its
    // control flow uniform: the decisions are shared words read after a
    // barrier); the first thread does the sequential parts.
    kb.forLoop(kb.index(0), kb.select(bad, kb.index(0), nIndex), kb.index(1), [&](Value i) {
      Value aged = load(list, {i, kb.index(Layout::kAged)});
      Value fresh = load(list, {i, kb.index(Layout::kFresh)});
      Value begin = load(list, {i, kb.index(Layout::kOwnerBegin)});
      Value end = load(list, {i, kb.index(Layout::kOwnerEnd)});

      // 3a. The checks and the aged row's slot (first thread).
      kb.ifThen(first, [&] {
        Value padding = kb.cmpi(P::slt, fresh, kb.i64(0));
        Value badRow = andI(notI(padding),
                            orI(kb.cmpi(P::sge, fresh, hostRows), kb.cmpi(P::sge, aged, hostRows)));
        kb.ifThen(badRow, [&] { report(abi::kStatusBadHostRow); });
        setScalar(flag(notI(orI(padding, badRow))), kGoOn);
        setScalar(kb.i32(0), kAging);
        setScalar(kb.i32(0), kOwnerScan);
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
            // holds the step decides anything, so the scan runs only then.
            setScalar(flag(memoHoldsStep()), kOwnerScan);
          });
        });
      });
      gpu::BarrierOp::create(b);

      // 3b. The owner scan (the warp): 32 hot rows a trip, a ballot of those
      // in the request's range; the first trip with one ends it.
      kb.ifThen(isSet(kOwnerScan), [&] {
        Value found = warpScan(
            slotCount, kb.i32(kWarpSize), kb.i32(0),
            [&](Value t) {
              Value at = add(t, lane);
              Value valid = kb.cmpi(P::slt, at, slotCount);
              Value index = kb.toIndex(kb.select(valid, at, kb.i32(0)));
              Value row = load(hot, {index});
              Value above = kb.cmpi(P::sge, row, begin);
              Value below = kb.cmpi(P::slt, row, end);
              Value inRange = andI(valid, andI(above, below));
              return ballot(inRange);
            },
            [&](Value mask) { return kb.cmpi(P::ne, mask, kb.i32(0)); });
        Value none = kb.cmpi(P::eq, found, kb.i32(0));
        kb.ifThen(andI(first, none), [&] { setScalar(kb.i32(0), kMemo); });
      });

      // 3c. The aged row becomes hot; over the budget, a search unless the
      // memo holds the step (first thread).
      kb.ifThen(andI(first, isSet(kAging)), [&] {
        store(aged, hot, {kb.toIndex(scalar(kSlot))});
        setScalar(add(scalar(kExcess), kb.i32(1)), kExcess);
        setScalar(sub(scalar(kBudget), kb.i32(1)), kBudget);
        kb.ifThen(kb.cmpi(P::slt, scalar(kBudget), kb.i32(0)), [&] {
          setScalar(kb.i32(1), kRelease);
          setScalar(flag(notI(memoHoldsStep())), kSearch);
        });
      });
      gpu::BarrierOp::create(b);

      // 3d. findVictim, non-forced (the warp): CLOCK from the hand over two
      // laps at most, 32 slots a trip (fewer when the table has fewer, so
      // that a trip never sees one slot twice). Lane l examines position
      // k + l (slot (hand + k + l) mod slots, if k + l < 2 x slots); the
      // victim is the lowest lane with an unreferenced candidate (hot, last
      // use < the step); the referenced candidates before it (all, if none)
      // get their second chance (cleared = last use), as the hand passes
      // them in order; the hand stops right after the victim.
      kb.ifThen(isSet(kSearch), [&] {
        Value hand = scalar(kHand);
        Value laps = add(slotCount, slotCount);
        Value width = arith::MinSIOp::create(b, slotCount, kb.i32(kWarpSize));
        Value victim = warpScan(
            laps, width, kb.i32(-1),
            [&](Value k) {
              Value at = add(k, lane);
              Value inTrip = kb.cmpi(P::slt, lane, width);
              Value inLaps = kb.cmpi(P::slt, at, laps);
              Value valid = andI(inTrip, inLaps);
              Value position = add(hand, at);
              Value wrapped = arith::RemUIOp::create(b, position, slotCount);
              Value slotIndex = kb.toIndex(kb.select(valid, wrapped, kb.i32(0)));
              // (One op per statement: the IR's order must not depend on
              // the compiler's order of evaluating arguments.)
              Value last = load(recency, {slotIndex, kb.index(0)});
              Value earlier = kb.cmpi(P::ult, last, step);
              Value isHot = kb.cmpi(P::sge, load(hot, {slotIndex}), kb.i64(0));
              Value candidate = andI(valid, andI(isHot, earlier));
              Value referenced = kb.cmpi(P::ne, last, load(cleared, {slotIndex}));
              Value taken = andI(candidate, notI(referenced));
              Value mask = ballot(taken);
              Value lowest = LLVM::CountTrailingZerosOp::create(b, i32, mask, false);
              // A referenced candidate the hand passes gets its second chance.
              Value passed = kb.cmpi(P::ult, lane, lowest);
              Value chance = andI(andI(candidate, referenced), passed);
              kb.ifThen(chance, [&] { store(last, cleared, {slotIndex}); });
              // (The second lap reads what the first cleared.)
              gpu::BarrierOp::create(b);
              Value victimAt = add(add(hand, k), lowest);
              Value victimSlot = arith::RemUIOp::create(b, victimAt, slotCount);
              Value some = kb.cmpi(P::ne, mask, kb.i32(0));
              return kb.select(some, victimSlot, kb.i32(-1));
            },
            [&](Value found) { return kb.cmpi(P::sge, found, kb.i32(0)); });
        kb.ifThen(first, [&] {
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
        kb.ifThen(isSet(kRelease), [&] {
          Value victim = scalar(kVictim);
          Value e =
              kb.toIndex(kb.select(kb.cmpi(P::sge, victim, kb.i32(0)), victim, scalar(kSlot)));
          Value gone = load(hot, {e});
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
            store(arith::IndexCastOp::create(b, i32, e), freeStack, {kb.toIndex(pushAt)});
            setScalar(add(pushAt, kb.i32(1)), kTop);
          });
        });
        kb.ifThen(isSet(kGoOn), [&] {
          Value count = scalar(kTop);
          Value empty = kb.cmpi(P::eq, count, kb.i32(0));
          kb.ifThen(empty, [&] { report(abi::kStatusBadSlot); });
          kb.ifThen(notI(empty), [&] {
            Value left = sub(count, kb.i32(1));
            setScalar(left, kTop);
            Value slot = load(freeStack, {kb.toIndex(left)});
            Value inTable =
                andI(kb.cmpi(P::sge, slot, kb.i32(0)), kb.cmpi(P::slt, slot, slotCount));
            kb.ifThen(notI(inTable), [&] { report(abi::kStatusBadSlot); });
            kb.ifThen(inTable, [&] {
              Value slotIndex = kb.toIndex(slot);
              store(slot, map, {kb.toIndex(fresh)});
              store(step, recency, {slotIndex, kb.index(0)});
              store(kb.i32(0), recency, {slotIndex, kb.index(1)});
              store(kb.i32(-1), cleared, {slotIndex});
            });
          });
        });
      });
      gpu::BarrierOp::create(b);
    });

    // 4. The new rows still mapped; the control words (first thread).
    kb.ifThen(first, [&] {
      kb.forLoop(kb.index(0), kb.select(bad, kb.index(0), nIndex), kb.index(1), [&](Value i) {
        Value fresh = load(list, {i, kb.index(Layout::kFresh)});
        kb.ifThen(andI(kb.cmpi(P::sge, fresh, kb.i64(0)), kb.cmpi(P::slt, fresh, hostRows)), [&] {
          Value slot = load(map, {kb.toIndex(fresh)});
          kb.ifThen(kb.cmpi(P::sge, slot, kb.i32(0)), [&] {
            store(fresh, rows, {i});
            store(slot, slots, {i});
          });
        });
      });
      kb.ifThen(notI(bad), [&] {
        store(scalar(kHand), control, {kb.index(Layout::kHand)});
        store(scalar(kTop), control, {kb.index(Layout::kFreeCount)});
        store(scalar(kBudget), control, {kb.index(Layout::kFreeBudget)});
        store(scalar(kMemo), control, {kb.index(Layout::kNoVictimStep)});
        store(scalar(kExcess), control, {kb.index(Layout::kExcess)});
      });
    });
    gpu::ReturnOp::create(b);
  };
  return spec;
}
