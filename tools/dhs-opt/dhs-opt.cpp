//===- dhs-opt.cpp - the dhs optimizer driver -----------------------------===//
//
// mlir-opt for dhs programs: parses the dhs dialect and the upstream dialects
// the pipeline produces, and runs dhs passes and codegen by name.
//
//===----------------------------------------------------------------------===//

#include "codegen/Passes.h"
#include "dialects/DhsDialect.h"
#include "passes/Passes.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mlir::dhs::registerCompilerDialects(registry);
  mlir::dhs::registerDhsPasses();
  mlir::dhs::registerCodegenPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "dhs optimizer driver\n", registry));
}
