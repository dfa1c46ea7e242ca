//===- AcceptKernel.cpp - speculative acceptance kernel -------------------===//
//
// Greedy acceptance (a block argmax per verified position) and rejection
// sampling for dhs.accept (docs/compiler.md).
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"
#include "codegen/Kernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/Support/MathExtras.h"

#include <limits>

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;

static constexpr int64_t kThreads = 1024;
static constexpr int64_t kWarps = kThreads / kWarpSize;

/// The parameters and geometry both forms share: the draft, the target's
/// (and for rejection sampling the drafter's) distributions, seeds, the step
/// counter and the results; one CTA per request.
static KernelSpec declareAcceptKernel(AcceptOp op) {
  MemRefType draft = op.getDraft().getType();
  MemRefType target = op.getTarget().getType();
  KernelSpec spec{abi::LaunchKind::Accept,
                  kernelKey(stringifyAcceptRule(op.getRule()), draft, target)};
  spec.signature.add(Role::DraftTokens, draft);
  spec.signature.add(Role::TargetProbs, target);
  if (Value q = op.getDraftProbs())
    spec.signature.add(Role::DraftProbs, q.getType());
  spec.signature.add(Role::Seeds, op.getSeeds().getType());
  spec.signature.add(Role::StepCounter, op.getStep().getType());
  spec.signature.add(Role::Accepted, op.getAccepted().getType());
  spec.signature.add(Role::NextToken, op.getNextToken().getType());
  spec.geometry.grid = {draft.getDimSize(0), 1, 1};
  spec.geometry.block = {kThreads, 1, 1};
  return spec;
}

/// The drafts accepted before the first rejection: a loop over the `gamma`
/// drafts carrying (count, still accepting), where `accepts(i)` builds the
/// test of draft i.
static Value countAccepted(KernelBuilder &kb, int64_t gamma, function_ref<Value(Value i)> accepts) {
  ImplicitLocOpBuilder &b = kb.b;
  auto walk = scf::ForOp::create(b, kb.index(0), kb.index(gamma), kb.index(1),
                                 ValueRange{kb.i32(0), kb.i32(1)});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(walk.getBody());
  Value i = walk.getInductionVar();
  Value count = walk.getRegionIterArgs()[0];
  Value going = walk.getRegionIterArgs()[1];
  Value ok = accepts(i);
  Value still = arith::AndIOp::create(b, kb.cmpi(arith::CmpIPredicate::ne, going, kb.i32(0)), ok);
  Value still32 = arith::ExtUIOp::create(b, b.getI32Type(), still);
  scf::YieldOp::create(b, ValueRange{arith::AddIOp::create(b, count, still32), still32});
  return walk.getResult(0);
}

/// The rejection-sampling form (see getKernelSpec(AcceptOp)).
static FailureOr<KernelSpec> getRejectionSamplingKernel(AcceptOp op);

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(AcceptOp op) {
  MemRefType draft = op.getDraft().getType();
  MemRefType target = op.getTarget().getType();
  if (!draft.hasStaticShape() || !target.hasStaticShape())
    return op.emitOpError() << "needs static shapes to generate a kernel" << kStaticShapesHint;
  if (op.getRule() == AcceptRule::rejection_sampling)
    return getRejectionSamplingKernel(op);
  int64_t gamma = draft.getDimSize(1), vocabulary = target.getDimSize(2);
  if (vocabulary > std::numeric_limits<int32_t>::max())
    return op.emitOpError() << "vocabulary too large for i32 token ids";

  KernelSpec spec = declareAcceptKernel(op);
  Type f32 = Float32Type::get(op.getContext()), i32 = IntegerType::get(op.getContext(), 32);
  spec.workgroup = {sharedBuffer(kWarps, f32), sharedBuffer(kWarps, i32),
                    sharedBuffer(gamma + 1, i32)};
  spec.emitBody = [=](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    KernelBuilder kb{b};
    Value draftArg = args[Role::DraftTokens], targetArg = args[Role::TargetProbs];
    Value acceptedArg = args[Role::Accepted], nextArg = args[Role::NextToken];
    Value warpValues = args.workgroup(0);
    Value warpTokens = args.workgroup(1);
    Value argmaxes = args.workgroup(2);
    Value tid = kb.threadId();
    Value request = kb.blockId();
    Value lane = kb.laneOf(tid);
    Value warp = kb.warpOf(tid);
    Value negInf = arith::ConstantFloatOp::create(b, b.getF32Type(),
                                                  APFloat(-std::numeric_limits<float>::infinity()));

    /// (value, token) wins over (v2, t2): larger value, then lower token.
    auto better = [&](Value v1, Value t1, Value v2, Value t2) {
      // (One value at a time: the IR's order must not depend on the host
      // compiler's order of evaluating arguments.)
      Value larger = arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, v1, v2);
      Value equal = arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, v1, v2);
      Value lower = kb.cmpi(arith::CmpIPredicate::slt, t1, t2);
      Value tie = arith::AndIOp::create(b, equal, lower);
      return arith::OrIOp::create(b, larger, tie);
    };
    /// Folds the warp's pairs into every lane.
    auto warpArgmax = [&](Value v, Value t) -> std::pair<Value, Value> {
      for (int64_t offset = kWarpSize / 2; offset >= 1; offset /= 2) {
        Value ov = gpu::ShuffleOp::create(b, v, offset, kWarpSize, gpu::ShuffleMode::XOR)
                       .getShuffleResult();
        Value ot = gpu::ShuffleOp::create(b, t, offset, kWarpSize, gpu::ShuffleMode::XOR)
                       .getShuffleResult();
        Value take = better(ov, ot, v, t);
        v = kb.select(take, ov, v);
        t = kb.select(take, ot, t);
      }
      return {v, t};
    };
    Value isLane0 = kb.cmpi(arith::CmpIPredicate::eq, lane, kb.index(0));
    Value isWarp0 = kb.cmpi(arith::CmpIPredicate::eq, warp, kb.index(0));

    // One block argmax per verified position.
    auto positions = scf::ForOp::create(b, kb.index(0), kb.index(gamma + 1), kb.index(1));
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(positions.getBody()->getTerminator());
      Value position = positions.getInductionVar();
      auto scan = scf::ForOp::create(b, tid, kb.index(vocabulary), kb.index(kThreads),
                                     ValueRange{negInf, kb.i32(0)});
      {
        OpBuilder::InsertionGuard scanGuard(b);
        b.setInsertionPointToStart(scan.getBody());
        Value token = scan.getInductionVar();
        Value p = memref::LoadOp::create(b, targetArg, ValueRange{request, position, token});
        Value t = arith::IndexCastOp::create(b, i32, token);
        Value bestV = scan.getRegionIterArgs()[0];
        Value bestT = scan.getRegionIterArgs()[1];
        // Strided visits are in increasing token order: keep the first max.
        Value take = arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, p, bestV);
        scf::YieldOp::create(b, ValueRange{kb.select(take, p, bestV), kb.select(take, t, bestT)});
      }
      auto [v, t] = warpArgmax(scan.getResult(0), scan.getResult(1));
      auto writeWarp = scf::IfOp::create(b, isLane0, /*withElse=*/false);
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPoint(writeWarp.thenBlock()->getTerminator());
        memref::StoreOp::create(b, v, warpValues, ValueRange{warp});
        memref::StoreOp::create(b, t, warpTokens, ValueRange{warp});
      }
      gpu::BarrierOp::create(b);
      auto combine = scf::IfOp::create(b, isWarp0, /*withElse=*/false);
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPoint(combine.thenBlock()->getTerminator());
        Value wv = memref::LoadOp::create(b, warpValues, ValueRange{lane});
        Value wt = memref::LoadOp::create(b, warpTokens, ValueRange{lane});
        auto [fv, ft] = warpArgmax(wv, wt);
        (void)fv;
        auto write = scf::IfOp::create(b, isLane0, /*withElse=*/false);
        b.setInsertionPoint(write.thenBlock()->getTerminator());
        memref::StoreOp::create(b, ft, argmaxes, ValueRange{position});
      }
      // Shared memory is reused by the next position.
      gpu::BarrierOp::create(b);
    }

    // Thread 0 accepts drafts while they match the target's argmax.
    Value isThread0 = kb.cmpi(arith::CmpIPredicate::eq, tid, kb.index(0));
    auto decide = scf::IfOp::create(b, isThread0, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(decide.thenBlock()->getTerminator());
      // Accepted count: positions before the first mismatch.
      Value accepted = countAccepted(kb, gamma, [&](Value i) {
        Value drafted = memref::LoadOp::create(b, draftArg, ValueRange{request, i});
        Value best = memref::LoadOp::create(b, argmaxes, ValueRange{i});
        return kb.cmpi(arith::CmpIPredicate::eq, drafted, best);
      });
      memref::StoreOp::create(b, accepted, acceptedArg, ValueRange{request});
      Value next = memref::LoadOp::create(
          b, argmaxes, ValueRange{arith::IndexCastOp::create(b, b.getIndexType(), accepted)});
      memref::StoreOp::create(b, next, nextArg, ValueRange{request});
    }
    gpu::ReturnOp::create(b);
  };
  return spec;
}

/// splitmix64: the finalizer of a counter-based generator.
static Value splitmix64(ImplicitLocOpBuilder &b, Value x) {
  auto c = [&](uint64_t v) -> Value {
    return arith::ConstantIntOp::create(b, static_cast<int64_t>(v), 64);
  };
  Value z = arith::AddIOp::create(b, x, c(0x9E3779B97F4A7C15ull));
  z = arith::MulIOp::create(b, arith::XOrIOp::create(b, z, arith::ShRUIOp::create(b, z, c(30))),
                            c(0xBF58476D1CE4E5B9ull));
  z = arith::MulIOp::create(b, arith::XOrIOp::create(b, z, arith::ShRUIOp::create(b, z, c(27))),
                            c(0x94D049BB133111EBull));
  return arith::XOrIOp::create(b, z, arith::ShRUIOp::create(b, z, c(31)));
}

/// A uniform f32 in [0, 1) from (seed, step, counter): 24 random bits, exact.
static Value uniform(ImplicitLocOpBuilder &b, Value seed, Value step, Value counter) {
  Value z = splitmix64(
      b, arith::XOrIOp::create(
             b, splitmix64(b, arith::XOrIOp::create(b, splitmix64(b, seed), step)), counter));
  Value bits = arith::TruncIOp::create(
      b, b.getI32Type(), arith::ShRUIOp::create(b, z, arith::ConstantIntOp::create(b, 40, 64)));
  return arith::MulFOp::create(
      b, arith::UIToFPOp::create(b, b.getF32Type(), bits),
      arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(1.0f / 16777216.0f)));
}

/// The kernel of a rejection-sampling dhs.accept: accepts each draft with
/// probability min(1, p / q) up to the first rejection, then samples the
/// next token from norm(max(0, p - q)), or from p after the block's last
/// draft.
static FailureOr<KernelSpec> getRejectionSamplingKernel(AcceptOp op) {
  MemRefType draft = op.getDraft().getType();
  MemRefType target = op.getTarget().getType();
  int64_t gamma = draft.getDimSize(1), vocabulary = target.getDimSize(2);
  int64_t chunk = llvm::divideCeil(vocabulary, kThreads);

  KernelSpec spec = declareAcceptKernel(op);
  Type f32 = Float32Type::get(op.getContext()), i32 = IntegerType::get(op.getContext(), 32);
  spec.workgroup = {sharedBuffer(kWarps, f32), sharedBuffer(1, i32)};
  spec.emitBody = [=](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    KernelBuilder kb{b};
    Value draftArg = args[Role::DraftTokens], targetArg = args[Role::TargetProbs],
          qArg = args[Role::DraftProbs], seedsArg = args[Role::Seeds],
          stepArg = args[Role::StepCounter], acceptedArg = args[Role::Accepted],
          nextArg = args[Role::NextToken];
    Value warpSums = args.workgroup(0);
    Value decision = args.workgroup(1);
    Value tid = kb.threadId();
    Value request = kb.blockId();
    Value lane = kb.laneOf(tid);
    Value warp = kb.warpOf(tid);
    Value seed = memref::LoadOp::create(b, seedsArg, ValueRange{request});
    Value step = memref::LoadOp::create(b, stepArg, ValueRange{kb.index(0)});
    Value isThread0 = kb.cmpi(arith::CmpIPredicate::eq, tid, kb.index(0));

    // 1. Thread 0 accepts draft i with probability min(1, p(x) / q(x)):
    // u q(x) < p(x), u from (seed, step, i); the count stops at the first
    // rejection.
    auto walkIf = scf::IfOp::create(b, isThread0, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(walkIf.thenBlock()->getTerminator());
      Value accepted = countAccepted(kb, gamma, [&](Value i) -> Value {
        // A -1 ends a block shorter than gamma (its p and q are not read).
        Value x32 = memref::LoadOp::create(b, draftArg, ValueRange{request, i});
        Value drafted = kb.cmpi(arith::CmpIPredicate::sge, x32, kb.i32(0));
        Value x =
            arith::IndexCastOp::create(b, b.getIndexType(), kb.select(drafted, x32, kb.i32(0)));
        Value p = memref::LoadOp::create(b, targetArg, ValueRange{request, i, x});
        Value q = memref::LoadOp::create(b, qArg, ValueRange{request, i, x});
        Value u = uniform(b, seed, step, arith::IndexCastOp::create(b, b.getI64Type(), i));
        return arith::AndIOp::create(
            b, drafted,
            arith::CmpFOp::create(b, arith::CmpFPredicate::OLT, arith::MulFOp::create(b, u, q), p));
      });
      memref::StoreOp::create(b, accepted, decision, ValueRange{kb.index(0)});
      memref::StoreOp::create(b, accepted, acceptedArg, ValueRange{request});
    }
    gpu::BarrierOp::create(b);

    // 2. Sample the next token at position n: from norm(max(0, p - q)) after a
    // rejection, from p after gamma acceptances. Threads own contiguous chunks
    // of the vocabulary; a block scan of the chunk sums finds the chunk where
    // u S falls, whose thread walks it.
    Value n32 = memref::LoadOp::create(b, decision, ValueRange{kb.index(0)});
    Value n = arith::IndexCastOp::create(b, b.getIndexType(), n32);
    // The decision word now records the lowest sampled token (INT32_MAX:
    // none yet).
    const int32_t none = std::numeric_limits<int32_t>::max();
    gpu::BarrierOp::create(b);
    auto reset = scf::IfOp::create(b, isThread0, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(reset.thenBlock()->getTerminator());
      memref::StoreOp::create(b, kb.i32(none), decision, ValueRange{kb.index(0)});
    }
    // The bonus token (from p) follows the block's last draft: after gamma
    // acceptances, or where a shorter block's -1 ends it.
    Value bonus = kb.cmpi(arith::CmpIPredicate::eq, n32, kb.i32(gamma));
    if (gamma > 0) {
      Value at = arith::MinUIOp::create(b, n, kb.index(gamma - 1));
      Value ended =
          kb.cmpi(arith::CmpIPredicate::slt,
                  memref::LoadOp::create(b, draftArg, ValueRange{request, at}), kb.i32(0));
      bonus = arith::OrIOp::create(b, bonus, ended);
    }
    // q at position n exists only for n < gamma.
    Value qPosition = kb.select(bonus, kb.index(0), n);
    auto weight = [&](Value token) -> Value {
      Value p = memref::LoadOp::create(b, targetArg, ValueRange{request, n, token});
      Value q = memref::LoadOp::create(b, qArg, ValueRange{request, qPosition, token});
      Value residual = arith::MaximumFOp::create(b, arith::SubFOp::create(b, p, q), kb.f32(0.0));
      return kb.select(bonus, p, residual);
    };
    Value begin = arith::MinUIOp::create(b, arith::MulIOp::create(b, tid, kb.index(chunk)),
                                         kb.index(vocabulary));
    Value end = arith::MinUIOp::create(b, arith::AddIOp::create(b, begin, kb.index(chunk)),
                                       kb.index(vocabulary));
    auto local = scf::ForOp::create(b, begin, end, kb.index(1), ValueRange{kb.f32(0.0)});
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(local.getBody());
      scf::YieldOp::create(
          b, arith::AddFOp::create(b, local.getRegionIterArgs()[0], weight(local.getInductionVar()))
                 .getResult());
    }
    Value mine = local.getResult(0);
    // Inclusive scan within the warp.
    Value scan = mine;
    for (int64_t offset = 1; offset < kWarpSize; offset *= 2) {
      Value up = gpu::ShuffleOp::create(b, scan, offset, kWarpSize, gpu::ShuffleMode::UP)
                     .getShuffleResult();
      Value has = kb.cmpi(arith::CmpIPredicate::uge, lane, kb.index(offset));
      scan = arith::AddFOp::create(b, scan, kb.select(has, up, kb.f32(0.0)));
    }
    Value isLast = kb.cmpi(arith::CmpIPredicate::eq, lane, kb.index(kWarpSize - 1));
    auto publish = scf::IfOp::create(b, isLast, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(publish.thenBlock()->getTerminator());
      memref::StoreOp::create(b, scan, warpSums, ValueRange{warp});
    }
    gpu::BarrierOp::create(b);
    // Warps before this one, and everything.
    auto totals = scf::ForOp::create(b, kb.index(0), kb.index(kWarps), kb.index(1),
                                     ValueRange{kb.f32(0.0), kb.f32(0.0)});
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(totals.getBody());
      Value w = totals.getInductionVar();
      Value sum = memref::LoadOp::create(b, warpSums, ValueRange{w});
      Value before = kb.cmpi(arith::CmpIPredicate::ult, w, warp);
      Value prior = arith::AddFOp::create(b, totals.getRegionIterArgs()[0],
                                          kb.select(before, sum, kb.f32(0.0)));
      scf::YieldOp::create(
          b, ValueRange{prior, arith::AddFOp::create(b, totals.getRegionIterArgs()[1], sum)});
    }
    Value exclusive =
        arith::AddFOp::create(b, totals.getResult(0), arith::SubFOp::create(b, scan, mine));
    Value total = totals.getResult(1);
    Value counter = arith::AddIOp::create(b, arith::ConstantIntOp::create(b, gamma, 64),
                                          arith::ExtUIOp::create(b, b.getI64Type(), n32));
    Value threshold = arith::MulFOp::create(b, uniform(b, seed, step, counter), total);
    // The owner: exclusive <= threshold < exclusive + mine (the last thread
    // with weight also takes a threshold lost to rounding at the very end).
    Value owns = arith::AndIOp::create(
        b, arith::CmpFOp::create(b, arith::CmpFPredicate::OLE, exclusive, threshold),
        arith::CmpFOp::create(b, arith::CmpFPredicate::OLT, threshold,
                              arith::AddFOp::create(b, exclusive, mine)));
    auto pick = scf::IfOp::create(b, owns, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(pick.thenBlock()->getTerminator());
      // First token whose running sum passes the threshold; the chunk's last
      // token with weight if rounding leaves none.
      auto find = scf::ForOp::create(b, begin, end, kb.index(1),
                                     ValueRange{exclusive, kb.i32(-1), kb.i32(-1)});
      {
        OpBuilder::InsertionGuard fg(b);
        b.setInsertionPointToStart(find.getBody());
        Value t = find.getInductionVar();
        Value w = weight(t);
        Value running = arith::AddFOp::create(b, find.getRegionIterArgs()[0], w);
        Value found = find.getRegionIterArgs()[1];
        Value lastPositive = find.getRegionIterArgs()[2];
        Value t32 = arith::IndexCastOp::create(b, i32, t);
        Value none = kb.cmpi(arith::CmpIPredicate::eq, found, kb.i32(-1));
        Value passes = arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, running, threshold);
        Value positive = arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, w, kb.f32(0.0));
        scf::YieldOp::create(
            b, ValueRange{running, kb.select(arith::AndIOp::create(b, none, passes), t32, found),
                          kb.select(positive, t32, lastPositive)});
      }
      Value token = arith::SelectOp::create(
          b, kb.cmpi(arith::CmpIPredicate::eq, find.getResult(1), kb.i32(-1)), find.getResult(2),
          find.getResult(1));
      // Rounding may make two chunks own the threshold: the lower token wins.
      memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::mins, token, decision,
                                  ValueRange{kb.index(0)});
    }
    gpu::BarrierOp::create(b);
    // A threshold that rounding put past every chunk takes the last token
    // with weight.
    auto finish = scf::IfOp::create(b, isThread0, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(finish.thenBlock()->getTerminator());
      Value picked = memref::LoadOp::create(b, decision, ValueRange{kb.index(0)});
      Value missing = kb.cmpi(arith::CmpIPredicate::eq, picked, kb.i32(none));
      auto fallback = scf::IfOp::create(b, TypeRange{i32}, missing,
                                        /*withElse=*/true);
      {
        OpBuilder::InsertionGuard fg(b);
        b.setInsertionPointToStart(fallback.thenBlock());
        auto scanAll = scf::ForOp::create(b, kb.index(0), kb.index(vocabulary), kb.index(1),
                                          ValueRange{kb.i32(0)});
        {
          OpBuilder::InsertionGuard sg(b);
          b.setInsertionPointToStart(scanAll.getBody());
          Value t = scanAll.getInductionVar();
          Value positive =
              arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, weight(t), kb.f32(0.0));
          scf::YieldOp::create(b, kb.select(positive, arith::IndexCastOp::create(b, i32, t),
                                            scanAll.getRegionIterArgs()[0]));
        }
        scf::YieldOp::create(b, scanAll.getResult(0));
        b.setInsertionPointToStart(fallback.elseBlock());
        scf::YieldOp::create(b, picked);
      }
      memref::StoreOp::create(b, fallback.getResult(0), nextArg, ValueRange{request});
    }
    gpu::ReturnOp::create(b);
  };
  return spec;
}
