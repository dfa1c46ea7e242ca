//===- AgeRowsKernel.cpp - the appends between steps on the device --------===//
//
// The kernel of dhs.age_rows (the op's description gives the rule). Correct
// first: one warp per launch (one pool group), and its first thread replays
// the appends in call order, exactly as the controller's append does them
// (runtime/residency/PromotionPlan's planAgeRows is the host reference):
//
//   1. every entry of the list becomes (-1, -1);
//   2. the control words are read and checked (bad words plan nothing);
//   3. per append: the aged row's slot becomes hot (while the memo holds
//      the step, a scan of the hot rows for the request's range decides
//      whether it is the request's first, which resets the memo; a memo of
//      another step decides nothing and stays); over the budget, a CLOCK
//      search from the hand
//      (unless the memo holds the step) and the release of the victim or
//      the aged row; the new row takes the free stack's top;
//   4. the list: the new rows that are still mapped, and the released rows;
//      the control words.
//
// The scans are sequential, one thread's (up to 2 x slots per search).
// Measured on the H200 at dhs-decision-bench's large step (32 appends a step
// over 16384 slots, most hot slots used in the last step): 80 ms a step,
// with the owner scan on every append and with it only under a memo that
// holds the step (as now): the CLOCK searches dominate, thousands of slots
// each at a dependent load per slot. A warp-wide form (a ballot over 32
// slots a trip) is the next step.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"
#include "codegen/Kernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;
using Layout = abi::AgeRowsLayout;

/// Words of the kernel's shared scalars: the control words while they
/// change, and whether the current append goes on.
enum Scalar : int64_t { kHand, kTop, kBudget, kMemo, kExcess, kGoOn, kScalars };

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

    // 1. An empty list.
    kb.forLoop(tid, entriesIndex, kb.index(kWarpSize), [&](Value i) {
      store(kb.i64(-1), rows, {i});
      store(kb.i32(-1), slots, {i});
    });
    gpu::BarrierOp::create(b);

    kb.ifThen(kb.cmpi(P::eq, tid, kb.index(0)), [&] {
      // 2. The control words; bad ones replay nothing.
      Value hand = load(control, {kb.index(Layout::kHand)});
      Value top = load(control, {kb.index(Layout::kFreeCount)});
      Value bad =
          orI(orI(kb.cmpi(P::slt, hand, kb.i32(0)),
                  kb.cmpi(P::sge, hand, arith::MaxSIOp::create(b, slotCount, kb.i32(1)))),
              orI(orI(kb.cmpi(P::slt, top, kb.i32(0)), kb.cmpi(P::sgt, top, dim32(freeStack))),
                  orI(kb.cmpi(P::slt, dim32(cleared), slotCount),
                      kb.cmpi(P::slt, dim32(recency), slotCount))));
      kb.ifThen(bad, [&] { report(abi::kStatusBadSlot); });
      setScalar(hand, kHand);
      setScalar(top, kTop);
      setScalar(load(control, {kb.index(Layout::kFreeBudget)}), kBudget);
      setScalar(load(control, {kb.index(Layout::kNoVictimStep)}), kMemo);
      setScalar(load(control, {kb.index(Layout::kExcess)}), kExcess);

      // 3. The appends, in call order.
      kb.forLoop(kb.index(0), kb.select(bad, kb.index(0), nIndex), kb.index(1), [&](Value i) {
        Value aged = load(list, {i, kb.index(Layout::kAged)});
        Value fresh = load(list, {i, kb.index(Layout::kFresh)});
        Value begin = load(list, {i, kb.index(Layout::kOwnerBegin)});
        Value end = load(list, {i, kb.index(Layout::kOwnerEnd)});
        Value padding = kb.cmpi(P::slt, fresh, kb.i64(0));
        Value badRow = andI(notI(padding),
                            orI(kb.cmpi(P::sge, fresh, hostRows), kb.cmpi(P::sge, aged, hostRows)));
        kb.ifThen(badRow, [&] { report(abi::kStatusBadHostRow); });
        setScalar(arith::ExtUIOp::create(b, i32, notI(orI(padding, badRow))), kGoOn);
        Value goOn = kb.cmpi(P::ne, scalar(kGoOn), kb.i32(0));
        kb.ifThen(andI(goOn, kb.cmpi(P::sge, aged, kb.i64(0))), [&] {
          Value s = load(map, {kb.toIndex(aged)});
          Value outside = orI(kb.cmpi(P::slt, s, kb.i32(0)), kb.cmpi(P::sge, s, slotCount));
          Value clamped = kb.toIndex(kb.select(outside, kb.i32(0), s));
          Value badAged = orI(outside, kb.cmpi(P::sge, load(hot, {clamped}), kb.i64(0)));
          kb.ifThen(badAged, [&] {
            report(abi::kStatusBadSlot);
            setScalar(kb.i32(0), kGoOn);
          });
          kb.ifThen(notI(badAged), [&] {
            Value sIndex = kb.toIndex(s);
            // The request's first hot row resets the memo; only a memo that
            // holds the step decides anything, so the scan runs only then.
            Value memoIdle =
                notI(andI(kb.cmpi(P::eq, scalar(kMemo), step), kb.cmpi(P::ne, step, kb.i32(0))));
            auto scan = scf::WhileOp::create(b, TypeRange{i32, b.getI1Type()},
                                             ValueRange{kb.i32(0), memoIdle});
            {
              OpBuilder::InsertionGuard guard(b);
              Location loc = b.getLoc();
              Block *before =
                  b.createBlock(&scan.getBefore(), {}, {i32, b.getI1Type()}, {loc, loc});
              Value t = before->getArgument(0), found = before->getArgument(1);
              scf::ConditionOp::create(b, andI(kb.cmpi(P::slt, t, slotCount), notI(found)),
                                       ValueRange{t, found});
              Block *after = b.createBlock(&scan.getAfter(), {}, {i32, b.getI1Type()}, {loc, loc});
              Value at = after->getArgument(0);
              Value row = load(hot, {kb.toIndex(at)});
              Value inRange = andI(kb.cmpi(P::sge, row, begin), kb.cmpi(P::slt, row, end));
              scf::YieldOp::create(b, ValueRange{add(at, kb.i32(1)), inRange});
            }
            kb.ifThen(notI(scan.getResult(1)), [&] { setScalar(kb.i32(0), kMemo); });
            store(aged, hot, {sIndex});
            setScalar(add(scalar(kExcess), kb.i32(1)), kExcess);
            setScalar(sub(scalar(kBudget), kb.i32(1)), kBudget);
            kb.ifThen(kb.cmpi(P::slt, scalar(kBudget), kb.i32(0)), [&] {
              // Over the budget: findVictim, non-forced (the memo first).
              Value memoHolds =
                  andI(kb.cmpi(P::eq, scalar(kMemo), step), kb.cmpi(P::ne, step, kb.i32(0)));
              Value victim = ifValue(
                  memoHolds, i32, [&] { return kb.i32(-1); },
                  [&] {
                    auto search = scf::WhileOp::create(b, TypeRange{i32, i32},
                                                       ValueRange{kb.i32(0), kb.i32(-1)});
                    {
                      OpBuilder::InsertionGuard guard(b);
                      Location loc = b.getLoc();
                      Block *before =
                          b.createBlock(&search.getBefore(), {}, {i32, i32}, {loc, loc});
                      Value k = before->getArgument(0), found = before->getArgument(1);
                      scf::ConditionOp::create(b,
                                               andI(kb.cmpi(P::slt, k, add(slotCount, slotCount)),
                                                    kb.cmpi(P::slt, found, kb.i32(0))),
                                               ValueRange{k, found});
                      Block *after = b.createBlock(&search.getAfter(), {}, {i32, i32}, {loc, loc});
                      Value slot = scalar(kHand);
                      Value next = add(slot, kb.i32(1));
                      setScalar(kb.select(kb.cmpi(P::eq, next, slotCount), kb.i32(0), next), kHand);
                      Value slotIndex = kb.toIndex(slot);
                      Value last = load(recency, {slotIndex, kb.index(0)});
                      // (One op per statement: the IR's order must not
                      // depend on the compiler's order of evaluating
                      // arguments.)
                      Value earlier = kb.cmpi(P::ult, last, step);
                      Value isHot = kb.cmpi(P::sge, load(hot, {slotIndex}), kb.i64(0));
                      Value candidate = andI(isHot, earlier);
                      Value referenced = kb.cmpi(P::ne, last, load(cleared, {slotIndex}));
                      // A referenced candidate gets its second chance.
                      kb.ifThen(andI(candidate, referenced),
                                [&] { store(last, cleared, {slotIndex}); });
                      Value taken = andI(candidate, notI(referenced));
                      scf::YieldOp::create(
                          b, ValueRange{add(after->getArgument(0), kb.i32(1)),
                                        kb.select(taken, slot, after->getArgument(1))});
                    }
                    Value found = search.getResult(1);
                    kb.ifThen(kb.cmpi(P::slt, found, kb.i32(0)), [&] { setScalar(step, kMemo); });
                    return found;
                  });
              // The victim, or else the aged row itself, leaves.
              Value e = kb.toIndex(kb.select(kb.cmpi(P::sge, victim, kb.i32(0)), victim, s));
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
          });
        });
        // The new row takes the free stack's top.
        kb.ifThen(kb.cmpi(P::ne, scalar(kGoOn), kb.i32(0)), [&] {
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

      // 4. The new rows still mapped; the control words.
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
