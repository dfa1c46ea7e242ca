//===- DhsOps.h - dhs operations --------------------------------*- C++ -*-===//

#ifndef DHS_DIALECTS_DHSOPS_H
#define DHS_DIALECTS_DHSOPS_H

#include "dialects/DhsDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::dhs {
/// Listed rows a ready flag of dhs.fetch and dhs.attention covers (a tile of
/// the tensor-core attention).
inline constexpr int64_t kReadyTileRows = 64;
} // namespace mlir::dhs

#define GET_OP_CLASSES
#include "dialects/DhsOps.h.inc"

#endif // DHS_DIALECTS_DHSOPS_H
