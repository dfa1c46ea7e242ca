//===- RelaxSharedAtomics.cpp - Relaxed, CTA-scoped shared-memory atomics -===//
//
// The memref atomics lower to acquire-release atomics at system scope; on
// shared memory that is a system-wide fence the kernels never need (their
// phases are ordered by barriers). See the pass description in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "codegen/Passes.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::dhs {
#define GEN_PASS_DEF_DHSRELAXSHAREDATOMICS
#include "codegen/Passes.h.inc"
} // namespace mlir::dhs

using namespace mlir;

namespace {

/// The CTA's scope in the NVPTX backend's names.
constexpr llvm::StringLiteral kBlockScope = "block";

/// True for a pointer into shared memory.
bool isShared(Value pointer) {
  auto type = dyn_cast<LLVM::LLVMPointerType>(pointer.getType());
  return type && type.getAddressSpace() == static_cast<unsigned>(NVVM::NVVMMemorySpace::Shared);
}

struct RelaxSharedAtomics : public dhs::impl::DhsRelaxSharedAtomicsBase<RelaxSharedAtomics> {
  void runOnOperation() override {
    MLIRContext *context = &getContext();
    auto block = StringAttr::get(context, kBlockScope);
    getOperation()->walk([&](Operation *op) {
      if (auto cas = dyn_cast<LLVM::AtomicCmpXchgOp>(op)) {
        if (!isShared(cas.getPtr()))
          return;
        cas.setSuccessOrdering(LLVM::AtomicOrdering::monotonic);
        cas.setFailureOrdering(LLVM::AtomicOrdering::monotonic);
        cas.setSyncscopeAttr(block);
        ++relaxedAtomics;
      } else if (auto rmw = dyn_cast<LLVM::AtomicRMWOp>(op)) {
        if (!isShared(rmw.getPtr()))
          return;
        rmw.setOrdering(LLVM::AtomicOrdering::monotonic);
        rmw.setSyncscopeAttr(block);
        ++relaxedAtomics;
      }
    });
  }
};

} // namespace
