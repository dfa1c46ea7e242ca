//===- Passes.h - dhs code generation passes and pipelines ------*- C++ -*-===//

#ifndef DHS_CODEGEN_PASSES_H
#define DHS_CODEGEN_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "passes/Passes.h"

#include <optional>
#include <string>

namespace mlir::dhs {

#define GEN_PASS_DECL
#include "codegen/Passes.h.inc"

/// Options of the device half of code generation (gpu.module -> PTX).
struct PtxOptions {
  /// Target chip; wgmma and setmaxnreg need the `a` variant.
  std::string chip = "sm_90a";
  /// PTX ISA features; +ptx80 is the first that knows sm_90a.
  std::string features = "+ptx81";
  /// LLVM optimization level for the NVPTX backend.
  unsigned optLevel = 3;
};

/// Adds the passes that turn every `gpu.module` into a `gpu.binary` holding
/// PTX text (format=isa), leaving host code untouched.
void buildGpuModuleToPtxPipeline(OpPassManager &pm, const PtxOptions &options);

/// Adds the whole compiler: the serving configuration folded in (options
/// left 0 keep their dimensions), dhs -> dhs passes, GPU kernels, PTX.
/// `shareTiles` adds dhs-share-tiles with its options (verify positions
/// share the tiles they all selected where enough of them are missing from
/// HBM: bench/NOTES.md).
void buildDhsToPtxPipeline(OpPassManager &pm, const PtxOptions &options,
                           const DhsSpecializeOptions &config = {},
                           const DhsLowerToGPUOptions &tiles = {},
                           std::optional<DhsShareTilesOptions> shareTiles = std::nullopt);

/// Registers the dhs code generation passes and the `dhs-to-ptx` pipeline.
void registerCodegenPasses();

/// Registers every dialect and external model the compiler creates or
/// parses: dhs, the upstream dialects of the GPU path, the NVVM target and the
/// LLVM IR translations that serialization needs.
void registerCompilerDialects(DialectRegistry &registry);

#define GEN_PASS_REGISTRATION
#include "codegen/Passes.h.inc"

} // namespace mlir::dhs

#endif // DHS_CODEGEN_PASSES_H
