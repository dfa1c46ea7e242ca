//===- KernelBuilder.h - helpers of the kernel builders ---------*- C++ -*-===//
//
// What every generated kernel is built with: the gpu.func with its known
// block size and shared buffers, and small builders over an
// ImplicitLocOpBuilder (constants, compares, loops, guarded regions, warp
// reductions).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_CODEGEN_KERNELBUILDER_H
#define DHS_CODEGEN_KERNELBUILDER_H

#include "codegen/KernelSpec.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::dhs {

/// Threads of a warp.
inline constexpr int64_t kWarpSize = 32;
/// Bytes one thread moves per vector load or store of rows.
inline constexpr int64_t kCopyBytes = 16;

/// A kernel function with `arguments`, `threads` known threads per block and
/// the shared-memory buffers `workgroup` (see sharedBuffer).
inline gpu::GPUFuncOp createKernel(OpBuilder &builder, Location loc, StringRef name,
                                   ArrayRef<Type> arguments, int64_t threads,
                                   TypeRange workgroup = {}) {
  auto func =
      gpu::GPUFuncOp::create(builder, loc, name, builder.getFunctionType(arguments, {}), workgroup);
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), builder.getUnitAttr());
  func.setKnownBlockSizeAttr(builder.getDenseI32ArrayAttr({static_cast<int32_t>(threads), 1, 1}));
  return func;
}

/// The type of a shared-memory buffer of `shape` x `type`.
inline MemRefType sharedBuffer(ArrayRef<int64_t> shape, Type type) {
  auto workgroup = gpu::AddressSpaceAttr::get(type.getContext(), gpu::AddressSpace::Workgroup);
  return MemRefType::get(shape, type, MemRefLayoutAttrInterface{}, workgroup);
}
inline MemRefType sharedBuffer(int64_t elements, Type type) {
  return sharedBuffer(ArrayRef<int64_t>{elements}, type);
}

/// Small helpers over an ImplicitLocOpBuilder.
struct KernelBuilder {
  ImplicitLocOpBuilder &b;
  Value index(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value i32(int64_t v) { return arith::ConstantIntOp::create(b, v, 32); }
  Value i64(int64_t v) { return arith::ConstantIntOp::create(b, v, 64); }
  Value f32(double v) {
    return arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(static_cast<float>(v)));
  }
  Value cmpi(arith::CmpIPredicate p, Value l, Value r) { return arith::CmpIOp::create(b, p, l, r); }
  Value select(Value c, Value t, Value f) { return arith::SelectOp::create(b, c, t, f); }
  Value toIndex(Value v) { return arith::IndexCastOp::create(b, b.getIndexType(), v); }
  /// The entries of a write-back ring ([entries, layers, row bytes]), i32.
  Value ringRows(Value ring) {
    Value rows = memref::DimOp::create(b, ring, index(0));
    return arith::IndexCastOp::create(b, b.getI32Type(), rows);
  }
  /// Whether ring entry `entry` (i32) is bad: neither -1 (none) nor one of
  /// the ring's `rows` entries. (One value at a time: the IR's order must
  /// not depend on the host compiler's order of evaluating arguments.)
  Value outsideRing(Value entry, Value rows) {
    Value past = cmpi(arith::CmpIPredicate::sge, entry, rows);
    Value below = cmpi(arith::CmpIPredicate::slt, entry, i32(-1));
    return arith::OrIOp::create(b, below, past);
  }
  /// `memref[indices]` (i32) where `condition` holds, else `fallback`: the
  /// load runs only where it holds.
  Value loadI32Or(Value condition, Value memref, ValueRange indices, int32_t fallback) {
    auto loaded = scf::IfOp::create(b, b.getI32Type(), condition, /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loaded.thenBlock());
    scf::YieldOp::create(b, memref::LoadOp::create(b, memref, indices).getResult());
    b.setInsertionPointToStart(loaded.elseBlock());
    scf::YieldOp::create(b, i32(fallback));
    return loaded.getResult(0);
  }
  /// The thread's index in its block (x), and the block's along `dimension`.
  Value threadId() { return gpu::ThreadIdOp::create(b, gpu::Dimension::x); }
  Value blockId(gpu::Dimension dimension = gpu::Dimension::x) {
    return gpu::BlockIdOp::create(b, dimension);
  }
  /// The lane of thread `tid` (an index) in its warp, and its warp.
  Value laneOf(Value tid) { return arith::RemUIOp::create(b, tid, index(kWarpSize)); }
  Value warpOf(Value tid) { return arith::DivUIOp::create(b, tid, index(kWarpSize)); }
  /// Splats a scalar over a vector type.
  Value splat(VectorType type, Value scalar) {
    return vector::BroadcastOp::create(b, type, scalar);
  }
  /// Splats an i32 constant over a vector type.
  Value splatI32(VectorType type, int64_t v) {
    return arith::ConstantOp::create(b, type, DenseElementsAttr::get(type, b.getI32IntegerAttr(v)));
  }
  /// a * x + c, fused. (math.fma would become a libdevice call.)
  Value fma(Value a, Value x, Value c) { return LLVM::FMAOp::create(b, a, x, c); }
  /// 2^x by the hardware's ex2.approx (2 ulp), without libdevice.
  Value exp2(Value x) {
    return LLVM::CallIntrinsicOp::create(b, b.getF32Type(),
                                         b.getStringAttr("llvm.nvvm.ex2.approx.f32"), ValueRange{x})
        .getResult(0);
  }
  /// Sum of the f32 `v` over the warp; every lane gets the result.
  Value warpSum(Value v) {
    for (int64_t offset = kWarpSize / 2; offset >= 1; offset /= 2) {
      auto shuffle = gpu::ShuffleOp::create(b, v, offset, kWarpSize, gpu::ShuffleMode::XOR);
      v = arith::AddFOp::create(b, v, shuffle.getShuffleResult());
    }
    return v;
  }
  /// The warp's ballot of the i1 `bit` (all 32 lanes take part): bit l of
  /// the i32 result is lane l's.
  Value ballot(Value bit) {
    return NVVM::VoteSyncOp::create(b, b.getI32Type(), i32(-1), bit, NVVM::VoteSyncKind::ballot)
        .getResult();
  }
  /// A loop over [start, end) in steps of `step` whose body `body` builds.
  void forLoop(Value start, Value end, Value step, function_ref<void(Value)> body) {
    OpBuilder::InsertionGuard guard(b);
    auto loop = scf::ForOp::create(b, start, end, step);
    b.setInsertionPoint(loop.getBody()->getTerminator());
    body(loop.getInductionVar());
  }
  /// An scf.if without results whose then-region `body` builds.
  void ifThen(Value condition, function_ref<void()> body) {
    OpBuilder::InsertionGuard guard(b);
    auto op = scf::IfOp::create(b, condition, /*withElse=*/false);
    b.setInsertionPoint(op.thenBlock()->getTerminator());
    body();
  }
  /// An scf.if without results whose regions `then` and `otherwise` build.
  void ifThenElse(Value condition, function_ref<void()> then, function_ref<void()> otherwise) {
    OpBuilder::InsertionGuard guard(b);
    auto op = scf::IfOp::create(b, condition, /*withElse=*/true);
    b.setInsertionPoint(op.thenBlock()->getTerminator());
    then();
    b.setInsertionPoint(op.elseBlock()->getTerminator());
    otherwise();
  }
};

} // namespace mlir::dhs

#endif // DHS_CODEGEN_KERNELBUILDER_H
