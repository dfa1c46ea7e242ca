//===- RingKernels.cpp - draft ring index and row-copy kernels ------------===//
//
// What dhs-draft-ring lowers ring appends and reads to: slot indices modulo
// the window (dhs.ring_index) and row moves through them (dhs.copy_rows).
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"
#include "codegen/Kernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;

static constexpr int64_t kThreads = 256;
/// Rows a copy CTA moves.
static constexpr int64_t kRowsPerBlock = 16;

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(RingIndexOp op) {
  MemRefType slots = op.getSlots().getType();
  if (!slots.hasStaticShape())
    return op.emitOpError() << "needs static shapes to generate a kernel" << kStaticShapesHint;
  int64_t count = slots.getDimSize(1);
  int64_t offset = op.getOffset(), window = op.getWindow();
  KernelSpec spec{abi::LaunchKind::RingIndex, kernelKey(slots, offset, window)};
  spec.signature.add(Role::Positions, op.getPositions().getType());
  spec.signature.add(Role::RingSlots, slots);
  spec.geometry.grid = {slots.getDimSize(0), 1, 1};
  spec.geometry.block = {kThreads, 1, 1};

  spec.emitBody = [=](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    KernelBuilder kb{b};
    Value positions = args[Role::Positions], out = args[Role::RingSlots];
    Value tid = kb.threadId();
    Value request = kb.blockId();
    Value windowSize = kb.i64(window);
    Value base = arith::AddIOp::create(
        b,
        arith::ExtSIOp::create(b, b.getI64Type(),
                               memref::LoadOp::create(b, positions, ValueRange{request})),
        kb.i64(offset));
    auto loop = scf::ForOp::create(b, tid, kb.index(count), kb.index(kThreads));
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(loop.getBody()->getTerminator());
      Value i = loop.getInductionVar();
      Value position =
          arith::AddIOp::create(b, base, arith::IndexCastOp::create(b, b.getI64Type(), i));
      // A non-negative remainder, also for positions before the window start.
      Value remainder = arith::RemSIOp::create(b, position, windowSize);
      Value slot = kb.select(kb.cmpi(arith::CmpIPredicate::slt, remainder, kb.i64(0)),
                             arith::AddIOp::create(b, remainder, windowSize), remainder);
      memref::StoreOp::create(b, arith::TruncIOp::create(b, b.getI32Type(), slot), out,
                              ValueRange{request, i});
    }
    gpu::ReturnOp::create(b);
  };
  return spec;
}

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(CopyRowsOp op) {
  MemRefType src = op.getSrc().getType(), dst = op.getDst().getType();
  if (!src.hasStaticShape() || !dst.hasStaticShape())
    return op.emitOpError() << "needs static shapes to generate a kernel" << kStaticShapesHint;
  int64_t rowBytes = src.getDimSize(2) * src.getDimSize(3);
  if (rowBytes % kCopyBytes != 0)
    return op.emitOpError() << "rows of " << rowBytes << " bytes cannot be moved in 16-byte pieces";
  bool scatter = static_cast<bool>(op.getDstIndex());
  Value indexValue = scatter ? op.getDstIndex() : op.getSrcIndex();
  // The index walks the rows of one side and points into the other.
  int64_t walked = scatter ? src.getDimSize(1) : dst.getDimSize(1);
  int64_t pointed = scatter ? dst.getDimSize(1) : src.getDimSize(1);
  int64_t chunks = rowBytes / kCopyBytes;

  KernelSpec spec{abi::LaunchKind::CopyRows, kernelKey(src, dst, scatter, indexValue.getType())};
  spec.signature.add(Role::CopySource, src);
  spec.signature.add(Role::CopyDestination, dst);
  spec.signature.add(Role::RingSlots, indexValue.getType());
  spec.signature.add(Role::Status, getStatusType(op.getContext()));
  spec.geometry.grid = {src.getDimSize(0), llvm::divideCeilSigned(walked, kRowsPerBlock), 1};
  spec.geometry.block = {kThreads, 1, 1};

  spec.emitBody = [=](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    auto bytesOf = [&](Value rows) {
      return memref::CollapseShapeOp::create(b, rows,
                                             ArrayRef<ReassociationIndices>{{0}, {1}, {2, 3}});
    };
    Value srcBytes = bytesOf(args[Role::CopySource]);
    Value dstBytes = bytesOf(args[Role::CopyDestination]);
    Value indices = args[Role::RingSlots], status = args[Role::Status];
    KernelBuilder kb{b};
    Value tid = kb.threadId();
    Value request = kb.blockId();
    Value first = arith::MulIOp::create(b, kb.blockId(gpu::Dimension::y), kb.index(kRowsPerBlock));
    auto chunkType = VectorType::get({kCopyBytes}, b.getI8Type());

    auto loop = scf::ForOp::create(b, tid, kb.index(kRowsPerBlock * chunks), kb.index(kThreads));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(loop.getBody()->getTerminator());
    Value item = loop.getInductionVar();
    Value i = arith::AddIOp::create(b, first, arith::DivUIOp::create(b, item, kb.index(chunks)));
    Value byte = arith::MulIOp::create(b, arith::RemUIOp::create(b, item, kb.index(chunks)),
                                       kb.index(kCopyBytes));
    auto inRange = scf::IfOp::create(b, kb.cmpi(arith::CmpIPredicate::ult, i, kb.index(walked)),
                                     /*withElse=*/false);
    b.setInsertionPoint(inRange.thenBlock()->getTerminator());
    Value target = memref::LoadOp::create(b, indices, ValueRange{request, i});
    Value valid =
        arith::AndIOp::create(b, kb.cmpi(arith::CmpIPredicate::sge, target, kb.i32(0)),
                              kb.cmpi(arith::CmpIPredicate::slt, target, kb.i32(pointed)));
    auto branch = scf::IfOp::create(b, valid, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard thenGuard(b);
      b.setInsertionPoint(branch.thenBlock()->getTerminator());
      Value j = arith::IndexCastOp::create(b, b.getIndexType(), target);
      Value from = scatter ? i : j, to = scatter ? j : i;
      Value data = vector::LoadOp::create(b, chunkType, srcBytes, ValueRange{request, from, byte},
                                          /*nontemporal=*/false, llvm::MaybeAlign(kCopyBytes));
      vector::StoreOp::create(b, data, dstBytes, ValueRange{request, to, byte},
                              /*nontemporal=*/false, llvm::MaybeAlign(kCopyBytes));
      // A bad index is reported once per row and its row left alone.
      b.setInsertionPoint(branch.elseBlock()->getTerminator());
      auto once = scf::IfOp::create(b, kb.cmpi(arith::CmpIPredicate::eq, byte, kb.index(0)),
                                    /*withElse=*/false);
      b.setInsertionPoint(once.thenBlock()->getTerminator());
      memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori, kb.i32(abi::kStatusBadStagingIndex),
                                  status, ValueRange{kb.index(0)});
    }
    b.setInsertionPointAfter(loop);
    gpu::ReturnOp::create(b);
  };
  return spec;
}
