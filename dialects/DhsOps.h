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
/// The values of a ready flag. The runtime clears the flags before the
/// fetch; the fetch claims a tile (unclaimed -> staging) before it copies its
/// rows and marks it staged after; an attention that reaches a tile nobody
/// claimed takes it (unclaimed -> fromHost) and reads its missing rows from
/// the host store itself, and the fetch skips it.
enum ReadyFlag : int32_t {
  kTileUnclaimed = 0,
  kTileStaged = 1,
  kTileStaging = 2,
  kTileFromHost = 3,
};
} // namespace mlir::dhs

#define GET_OP_CLASSES
#include "dialects/DhsOps.h.inc"

#endif // DHS_DIALECTS_DHSOPS_H
