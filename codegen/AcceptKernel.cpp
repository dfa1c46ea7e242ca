//===- AcceptKernel.cpp - speculative acceptance kernel -------------------===//
//
// Greedy acceptance: per request, the argmax of the target's distribution at
// each verified position. Each thread scans a strided slice of the
// vocabulary keeping its first maximum, warps combine (value, token) pairs by
// shuffles (larger value, then lower token), warp leaders meet in shared
// memory, and thread 0 compares with the drafts.
//
//===----------------------------------------------------------------------===//

#include "codegen/AcceptKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <limits>

using namespace mlir;
using namespace mlir::dhs;

static constexpr int64_t kThreads = 1024;
static constexpr int64_t kWarpSize = 32;
static constexpr int64_t kWarps = kThreads / kWarpSize;

FailureOr<gpu::GPUFuncOp>
mlir::dhs::buildAcceptKernel(OpBuilder &builder, AcceptOp op, StringRef name,
                             KernelGeometry &geometry) {
  if (op.getRule() != AcceptRule::greedy)
    return op.emitOpError() << "rejection sampling has no GPU kernel yet "
                               "(greedy acceptance has)";
  MemRefType draft = op.getDraft().getType();
  MemRefType target = op.getTarget().getType();
  if (!draft.hasStaticShape() || !target.hasStaticShape())
    return op.emitOpError() << "needs static shapes to generate a kernel";
  int64_t batch = draft.getDimSize(0), gamma = draft.getDimSize(1),
          vocabulary = target.getDimSize(2);
  if (vocabulary > std::numeric_limits<int32_t>::max())
    return op.emitOpError() << "vocabulary too large for i32 token ids";

  Location loc = op.getLoc();
  MLIRContext *ctx = builder.getContext();
  auto workgroup = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  Type f32 = builder.getF32Type(), i32 = builder.getI32Type();
  auto func = gpu::GPUFuncOp::create(
      builder, loc, name,
      builder.getFunctionType(
          {draft, target, op.getSeeds().getType(), op.getStep().getType(),
           op.getAccepted().getType(), op.getNextToken().getType()},
          {}),
      TypeRange{MemRefType::get({kWarps}, f32, MemRefLayoutAttrInterface{},
                                workgroup),
                MemRefType::get({kWarps}, i32, MemRefLayoutAttrInterface{},
                                workgroup),
                MemRefType::get({gamma + 1}, i32, MemRefLayoutAttrInterface{},
                                workgroup)});
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                builder.getUnitAttr());
  func.setKnownBlockSizeAttr(builder.getDenseI32ArrayAttr(
      {static_cast<int32_t>(kThreads), 1, 1}));
  geometry.grid = {batch, 1, 1};
  geometry.block = {kThreads, 1, 1};

  ImplicitLocOpBuilder b(loc, builder);
  b.setInsertionPointToStart(&func.getBody().front());
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, v);
  };
  auto c32 = [&](int64_t v) -> Value {
    return arith::ConstantIntOp::create(b, v, 32);
  };
  Value draftArg = func.getArgument(0), targetArg = func.getArgument(1);
  Value acceptedArg = func.getArgument(4), nextArg = func.getArgument(5);
  Value warpValues = func.getWorkgroupAttributions()[0];
  Value warpTokens = func.getWorkgroupAttributions()[1];
  Value argmaxes = func.getWorkgroupAttributions()[2];
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value request = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value lane = arith::RemUIOp::create(b, tid, index(kWarpSize));
  Value warp = arith::DivUIOp::create(b, tid, index(kWarpSize));
  Value negInf = arith::ConstantFloatOp::create(
      b, b.getF32Type(), APFloat(-std::numeric_limits<float>::infinity()));

  /// (value, token) wins over (v2, t2): larger value, then lower token.
  auto better = [&](Value v1, Value t1, Value v2, Value t2) {
    Value larger =
        arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, v1, v2);
    Value tie = arith::AndIOp::create(
        b, arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, v1, v2),
        arith::CmpIOp::create(b, arith::CmpIPredicate::slt, t1, t2));
    return arith::OrIOp::create(b, larger, tie);
  };
  /// Folds the warp's pairs into every lane.
  auto warpArgmax = [&](Value v, Value t) -> std::pair<Value, Value> {
    for (int64_t offset = kWarpSize / 2; offset >= 1; offset /= 2) {
      Value ov = gpu::ShuffleOp::create(b, v, offset, kWarpSize,
                                        gpu::ShuffleMode::XOR)
                     .getShuffleResult();
      Value ot = gpu::ShuffleOp::create(b, t, offset, kWarpSize,
                                        gpu::ShuffleMode::XOR)
                     .getShuffleResult();
      Value take = better(ov, ot, v, t);
      v = arith::SelectOp::create(b, take, ov, v);
      t = arith::SelectOp::create(b, take, ot, t);
    }
    return {v, t};
  };
  Value isLane0 = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, lane,
                                        index(0));
  Value isWarp0 = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, warp,
                                        index(0));

  // One block argmax per verified position.
  auto positions =
      scf::ForOp::create(b, index(0), index(gamma + 1), index(1));
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(positions.getBody()->getTerminator());
    Value position = positions.getInductionVar();
    auto scan = scf::ForOp::create(b, tid, index(vocabulary), index(kThreads),
                                   ValueRange{negInf, c32(0)});
    {
      OpBuilder::InsertionGuard scanGuard(b);
      b.setInsertionPointToStart(scan.getBody());
      Value token = scan.getInductionVar();
      Value p = memref::LoadOp::create(b, targetArg,
                                       ValueRange{request, position, token});
      Value t = arith::IndexCastOp::create(b, i32, token);
      Value bestV = scan.getRegionIterArgs()[0];
      Value bestT = scan.getRegionIterArgs()[1];
      // Strided visits are in increasing token order: keep the first max.
      Value take = arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, p,
                                         bestV);
      scf::YieldOp::create(
          b, ValueRange{arith::SelectOp::create(b, take, p, bestV),
                        arith::SelectOp::create(b, take, t, bestT)});
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
  Value isThread0 = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, tid,
                                          index(0));
  auto decide = scf::IfOp::create(b, isThread0, /*withElse=*/false);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(decide.thenBlock()->getTerminator());
    // Accepted count: positions before the first mismatch.
    auto walk = scf::ForOp::create(b, index(0), index(gamma), index(1),
                                   ValueRange{c32(0), c32(1)});
    {
      OpBuilder::InsertionGuard wg(b);
      b.setInsertionPointToStart(walk.getBody());
      Value i = walk.getInductionVar();
      Value count = walk.getRegionIterArgs()[0];
      Value matching = walk.getRegionIterArgs()[1];
      Value drafted = memref::LoadOp::create(b, draftArg, ValueRange{request, i});
      Value best = memref::LoadOp::create(b, argmaxes, ValueRange{i});
      Value still = arith::AndIOp::create(
          b,
          arith::CmpIOp::create(b, arith::CmpIPredicate::ne, matching, c32(0)),
          arith::CmpIOp::create(b, arith::CmpIPredicate::eq, drafted, best));
      Value still32 = arith::ExtUIOp::create(b, i32, still);
      scf::YieldOp::create(
          b, ValueRange{arith::AddIOp::create(b, count, still32), still32});
    }
    Value accepted = walk.getResult(0);
    memref::StoreOp::create(b, accepted, acceptedArg, ValueRange{request});
    Value next = memref::LoadOp::create(
        b, argmaxes, ValueRange{arith::IndexCastOp::create(
                         b, b.getIndexType(), accepted)});
    memref::StoreOp::create(b, next, nextArg, ValueRange{request});
  }
  gpu::ReturnOp::create(b);
  return func;
}
