//===- KernelBuilder.h - shared helpers of the kernel builders --*- C++ -*-===//
//
// What every generated kernel starts from: the gpu.func with its known block
// size and shared buffers, and a few builders over an ImplicitLocOpBuilder
// (constants, compares, loops, guarded regions).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_CODEGEN_KERNELBUILDER_H
#define DHS_CODEGEN_KERNELBUILDER_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::dhs {

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

/// The type of a shared-memory buffer of `elements` x `type`.
inline MemRefType sharedBuffer(int64_t elements, Type type) {
  auto workgroup = gpu::AddressSpaceAttr::get(type.getContext(), gpu::AddressSpace::Workgroup);
  return MemRefType::get({elements}, type, MemRefLayoutAttrInterface{}, workgroup);
}

/// Small helpers over an ImplicitLocOpBuilder.
struct KernelBuilder {
  ImplicitLocOpBuilder &b;
  Value index(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value i32(int64_t v) { return arith::ConstantIntOp::create(b, v, 32); }
  Value i64(int64_t v) { return arith::ConstantIntOp::create(b, v, 64); }
  Value cmpi(arith::CmpIPredicate p, Value l, Value r) { return arith::CmpIOp::create(b, p, l, r); }
  Value select(Value c, Value t, Value f) { return arith::SelectOp::create(b, c, t, f); }
  Value toIndex(Value v) { return arith::IndexCastOp::create(b, b.getIndexType(), v); }
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
};

} // namespace mlir::dhs

#endif // DHS_CODEGEN_KERNELBUILDER_H
