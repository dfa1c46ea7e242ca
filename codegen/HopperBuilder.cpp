//===- HopperBuilder.cpp - Hopper operations of tensor-core kernels -------===//

#include "codegen/HopperBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::dhs;

Value HopperBuilder::getAddress(Value memref) {
  auto type = cast<MemRefType>(memref.getType());
  Value aligned = memref::ExtractAlignedPointerAsIndexOp::create(b, memref);
  auto metadata = memref::ExtractStridedMetadataOp::create(b, memref);
  Value offset =
      arith::MulIOp::create(b, metadata.getOffset(),
                            arith::ConstantIndexOp::create(b, type.getElementTypeBitWidth() / 8));
  return arith::IndexCastOp::create(b, b.getI64Type(), arith::AddIOp::create(b, aligned, offset));
}

Value HopperBuilder::globalPointer(Value address) {
  return LLVM::IntToPtrOp::create(b, LLVM::LLVMPointerType::get(b.getContext(), 1), address);
}

Value HopperBuilder::loadGlobal16(Value address, bool invariant) {
  return LLVM::LoadOp::create(b, VectorType::get({4}, b.getI32Type()), globalPointer(address),
                              /*alignment=*/16, /*isVolatile=*/false, /*isNonTemporal=*/false,
                              invariant);
}

void HopperBuilder::storeGlobal16(Value address, Value value) {
  LLVM::StoreOp::create(b, value, globalPointer(address), /*alignment=*/16);
}

void HopperBuilder::prefetchL2(Value address) {
  NVVM::PrefetchOp::create(
      b, NVVM::PrefetchCacheLevelAttr::get(b.getContext(), NVVM::PrefetchCacheLevel::L2),
      NVVM::CacheEvictionPriorityAttr(), globalPointer(address), /*predicate=*/Value(),
      /*tensormap=*/UnitAttr(), /*uniform=*/UnitAttr(), /*in_param_space=*/UnitAttr());
}

Value HopperBuilder::descriptor(Value address, int64_t leadingBytes, int64_t strideBytes) {
  // Bits 0-13: address >> 4; 16-29: leading byte offset >> 4; 32-45: stride
  // byte offset >> 4; 62-63: 1 = 128-byte swizzle. Shared addresses stay
  // below 2^18, so adding (bytes >> 4) to a descriptor moves its address.
  int64_t fields = ((leadingBytes >> 4) << 16) | ((strideBytes >> 4) << 32) | (int64_t(1) << 62);
  auto c64 = [&](int64_t v) { return arith::ConstantIntOp::create(b, v, 64); };
  Value value = arith::OrIOp::create(
      b, arith::AndIOp::create(b, arith::ShRUIOp::create(b, address, c64(4)), c64(0x3fff)),
      c64(fields));
  // An opaque copy where it is used: LLVM would otherwise hoist every
  // descriptor of every k step out of the tile loop (72 registers for Q^T
  // alone), and ptxas spills them and serializes the wgmma chains.
  return LLVM::InlineAsmOp::create(b, b.getI64Type(), ValueRange{value}, "mov.b64 $0, $1;", "=l,l",
                                   /*has_side_effects=*/true, /*is_align_stack=*/false,
                                   LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
                                   ArrayAttr())
      .getResult(0);
}

Type HopperBuilder::accumulatorType(int64_t n) {
  return LLVM::LLVMStructType::getLiteral(b.getContext(), SmallVector<Type>(n / 2, b.getF32Type()));
}

Value HopperBuilder::wgmma(Value accumulator, Value descA, Value descB, int64_t n, bool accumulate,
                           bool transposeB) {
  MLIRContext *ctx = b.getContext();
  return NVVM::WgmmaMmaAsyncOp::create(
      b, accumulatorType(n), accumulator, descA, descB, NVVM::MMAShapeAttr::get(ctx, 64, n, 16),
      NVVM::WGMMATypes::bf16, NVVM::WGMMATypes::bf16, NVVM::WGMMATypes::f32,
      accumulate ? NVVM::WGMMAScaleOut::one : NVVM::WGMMAScaleOut::zero, NVVM::WGMMAScaleIn::one,
      NVVM::WGMMAScaleIn::one, NVVM::MMALayout::row,
      // B K-major is `col`; N-major (the values, transposed) is `row`.
      transposeB ? NVVM::MMALayout::row : NVVM::MMALayout::col, nullptr);
}

void HopperBuilder::fenceAsyncShared() {
  NVVM::FenceProxyOp::create(
      b, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
}

Value HopperBuilder::clusterRank() { return NVVM::ClusterId::create(b, b.getI32Type()); }

/// `pointer` (!llvm.ptr<3>) mapped into the CTA of cluster rank `rank`
/// (!llvm.ptr<7>).
static Value mapToCluster(ImplicitLocOpBuilder &b, Value pointer, Value rank) {
  auto clusterPointer = LLVM::LLVMPointerType::get(
      b.getContext(), static_cast<unsigned>(NVVM::NVVMMemorySpace::SharedCluster));
  return NVVM::MapaOp::create(b, clusterPointer, pointer, rank);
}

Value HopperBuilder::clusterAddress(Value pointer, Value rank) {
  return LLVM::PtrToIntOp::create(b, b.getI32Type(), mapToCluster(b, pointer, rank));
}

/// An inline-asm statement with side effects and a memory clobber.
static ValueRange asmStatement(ImplicitLocOpBuilder &b, TypeRange results, ValueRange operands,
                               StringRef ptx, StringRef constraints) {
  std::string clobbered = constraints.empty() ? "~{memory}" : (constraints + ",~{memory}").str();
  return LLVM::InlineAsmOp::create(b, results, operands, ptx, clobbered,
                                   /*has_side_effects=*/true, /*is_align_stack=*/false,
                                   LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
                                   ArrayAttr())
      .getResults();
}

Value HopperBuilder::loadAcquire(Value address) {
  return asmStatement(b, b.getI32Type(), address, "ld.acquire.gpu.global.u32 $0, [$1];", "=r,l")
      .front();
}

void HopperBuilder::storeRelease(Value address, Value value) {
  asmStatement(b, TypeRange(), ValueRange{address, value}, "st.release.gpu.global.u32 [$0], $1;",
               "l,r");
}

Value HopperBuilder::compareAndSwap(Value address, Value expected, Value desired) {
  return asmStatement(b, b.getI32Type(), ValueRange{address, expected, desired},
                      "atom.acquire.gpu.global.cas.b32 $0, [$1], $2, $3;", "=r,l,r,r")
      .front();
}

/// Polls the flag at `address` while it compares `predicate` to `value`,
/// at most `polls` times; returns the last value read.
static Value pollFlag(HopperBuilder &hb, ImplicitLocOpBuilder &b, Value address, int64_t polls,
                      int64_t sleepNs, arith::CmpIPredicate predicate, int32_t value) {
  Type i32 = b.getI32Type();
  auto c32 = [&](int64_t v) { return arith::ConstantIntOp::create(b, v, 32); };
  auto loop = scf::WhileOp::create(b, TypeRange{i32, i32}, ValueRange{c32(0), c32(0)});
  OpBuilder::InsertionGuard guard(b);
  Location loc = b.getLoc();
  Block *before = b.createBlock(&loop.getBefore(), {}, {i32, i32}, {loc, loc});
  Value flag = hb.loadAcquire(address);
  Value unset = arith::CmpIOp::create(b, predicate, flag, c32(value));
  Value more =
      arith::CmpIOp::create(b, arith::CmpIPredicate::slt, before->getArgument(0), c32(polls));
  scf::ConditionOp::create(b, arith::AndIOp::create(b, unset, more),
                           ValueRange{before->getArgument(0), flag});
  Block *after = b.createBlock(&loop.getAfter(), {}, {i32, i32}, {loc, loc});
  NVVM::NanosleepOp::create(b, c32(sleepNs));
  scf::YieldOp::create(b, ValueRange{arith::AddIOp::create(b, after->getArgument(0), c32(1)),
                                     after->getArgument(1)});
  b.setInsertionPointAfter(loop);
  return loop.getResult(1);
}

Value HopperBuilder::waitFlag(Value address, int64_t polls, int64_t sleepNs, int32_t pending) {
  Value flag = pollFlag(*this, b, address, polls, sleepNs, arith::CmpIPredicate::eq, pending);
  return arith::CmpIOp::create(b, arith::CmpIPredicate::ne, flag,
                               arith::ConstantIntOp::create(b, pending, 32));
}

Value HopperBuilder::waitFlagFor(Value address, int64_t polls, int64_t sleepNs, int32_t wanted) {
  Value flag = pollFlag(*this, b, address, polls, sleepNs, arith::CmpIPredicate::ne, wanted);
  return arith::CmpIOp::create(b, arith::CmpIPredicate::eq, flag,
                               arith::ConstantIntOp::create(b, wanted, 32));
}

void HopperBuilder::copyToCluster(Value destination, Value source, Value size, Value barrier) {
  LLVM::InlineAsmOp::create(b, TypeRange(), ValueRange{destination, source, size, barrier},
                            "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::"
                            "bytes [$0], [$1], $2, [$3];",
                            "r,r,r,r,~{memory}", /*has_side_effects=*/true,
                            /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
                            LLVM::AsmDialectAttr(), ArrayAttr());
}

void HopperBuilder::arriveRemote(Value barrier, Value rank) {
  NVVM::MBarrierArriveOp::create(b, Type(), mapToCluster(b, barrier, rank), Value(),
                                 NVVM::MemScopeKind::CLUSTER,
                                 /*relaxed=*/false);
}

void HopperBuilder::waitParityCluster(Value barrier, Value parity, int64_t ticks) {
  // The loop nvvm.mbarrier.try_wait.parity lowers to, with the scope added.
  std::string ptx = "{\n\t.reg .pred P1;\n\tLAB_WAIT:\n\t"
                    "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P1, [$0], $1, " +
                    std::to_string(ticks) +
                    ";\n\t@P1 bra.uni DONE;\n\tbra.uni LAB_WAIT;\n\tDONE:\n\t}";
  LLVM::InlineAsmOp::create(b, TypeRange(), ValueRange{barrier, parity}, ptx, "r,r,~{memory}",
                            /*has_side_effects=*/true, /*is_align_stack=*/false,
                            LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
                            ArrayAttr());
}

void HopperBuilder::racecheckArriveCluster(Value pointer, int64_t offset, int64_t ranks) {
  // arriveRemote's arrival (nvvm.mbarrier.arrive at cluster scope on a
  // mapped address), in a scope of its own for its registers.
  std::string ptx = "// dhs.racecheck: { .reg .b64 %dhs_rc<" + std::to_string(ranks + 1) +
                    ">; add.s64 %dhs_rc0, $0, " + std::to_string(offset) + ";";
  for (int64_t rank = 0; rank < ranks; ++rank)
    ptx += " mapa.shared::cluster.u64 %dhs_rc" + std::to_string(rank + 1) + ", %dhs_rc0, " +
           std::to_string(rank) +
           "; mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%dhs_rc" +
           std::to_string(rank + 1) + "];";
  ptx += " }";
  LLVM::InlineAsmOp::create(b, TypeRange(), ValueRange{pointer}, ptx, "l,~{memory}",
                            /*has_side_effects=*/true, /*is_align_stack=*/false,
                            LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
                            ArrayAttr());
}

Value HopperBuilder::racecheckConstant(int64_t value, int64_t racecheckValue) {
  std::string ptx = "mov.b32 $0, " + std::to_string(value) + "; // dhs.racecheck: mov.b32 $0, " +
                    std::to_string(racecheckValue) + ";";
  return LLVM::InlineAsmOp::create(b, b.getI32Type(), ValueRange{}, ptx, "=r",
                                   /*has_side_effects=*/false, /*is_align_stack=*/false,
                                   LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
                                   ArrayAttr())
      .getResult(0);
}

void HopperBuilder::clusterSync() {
  NVVM::ClusterArriveOp::create(b, UnitAttr());
  NVVM::ClusterWaitOp::create(b, UnitAttr());
}
