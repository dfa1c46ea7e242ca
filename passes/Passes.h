//===- Passes.h - dhs -> dhs transformations --------------------*- C++ -*-===//

#ifndef DHS_PASSES_PASSES_H
#define DHS_PASSES_PASSES_H

#include "dialects/DhsOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::dhs {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace mlir::dhs

#endif // DHS_PASSES_PASSES_H
