//===- Manifest.h - a compiled step: manifest and PTX -----------*- C++ -*-===//
//
// The runtime never parses MLIR: buildCompiledStep writes what it needs from
// a module after the dhs-to-ptx pipeline (docs/compiler.md, "The manifest").
//
//===----------------------------------------------------------------------===//

#ifndef DHS_CODEGEN_MANIFEST_H
#define DHS_CODEGEN_MANIFEST_H

#include "codegen/Passes.h"

#include <string>
#include <vector>

namespace mlir::dhs {

/// One file of a compiled step.
struct CompiledFile {
  std::string name;
  std::string contents;
};

/// What dhs-compile writes: `manifest.json` and one PTX file per kernel.
struct CompiledStep {
  std::string manifest;
  std::vector<CompiledFile> ptx;
};

/// Extracts the compiled step `stepName` (the only function when empty) from
/// a module that went through the dhs-to-ptx pipeline. Emits an error and
/// fails when the host code does something the runtime cannot replay.
FailureOr<CompiledStep> buildCompiledStep(ModuleOp module, StringRef stepName,
                                          const PtxOptions &options);

} // namespace mlir::dhs

#endif // DHS_CODEGEN_MANIFEST_H
