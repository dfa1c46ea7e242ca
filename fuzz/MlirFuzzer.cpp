//===- MlirFuzzer.cpp - libFuzzer: a .mlir step through the whole compiler ===//
//
// Parses the input as .mlir text (the parser verifies), runs dhs-compile's
// pipeline on it (dhs passes, lowering to GPU kernels, PTX) and builds the
// manifest, as dhs-compile does. Any input may be rejected with
// diagnostics; none may crash, leak, trip a sanitizer or hang.
//
//===----------------------------------------------------------------------===//

#include "codegen/Manifest.h"
#include "codegen/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cstddef>
#include <cstdint>

using namespace mlir;

namespace {

const DialectRegistry &registry() {
  static const DialectRegistry *registry = [] {
    auto *r = new DialectRegistry();
    dhs::registerCompilerDialects(*r);
    return r;
  }();
  return *registry;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  // A fresh context per input: nothing uniqued by one input outlives it.
  MLIRContext context(registry(), MLIRContext::Threading::DISABLED);
  // Diagnostics are the expected outcome of most inputs: swallowed.
  ScopedDiagnosticHandler quiet(&context, [](Diagnostic &) { return success(); });
  // MLIR's lexer reads up to a NUL after the buffer, which every file read
  // through llvm::MemoryBuffer (dhs-compile's input) has: the bytes are
  // copied into such a buffer (parseSourceString's buffer has none; the
  // lexer then read past the fuzzer's input).
  llvm::SourceMgr sources;
  sources.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size), "fuzz.mlir"),
      llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sources, &context);
  if (!module)
    return 0;
  dhs::PtxOptions options;
  PassManager pm(&context);
  dhs::buildDhsToPtxPipeline(pm, options, dhs::DhsSpecializeOptions(), dhs::DhsLowerToGPUOptions());
  if (failed(pm.run(*module)))
    return 0;
  (void)dhs::buildCompiledStep(*module, "", options);
  return 0;
}
