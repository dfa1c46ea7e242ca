//===- DhsDialect.h - the dhs dialect, its enums and types ------*- C++ -*-===//

#ifndef DHS_DIALECTS_DHSDIALECT_H
#define DHS_DIALECTS_DHSDIALECT_H

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"

#include "dialects/DhsAttrInterfaces.h.inc"
#include "dialects/DhsDialect.h.inc"
#include "dialects/DhsEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/DhsAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/DhsTypes.h.inc"

namespace mlir::dhs {

/// Status bits kernels OR into the step status (see dhs.step_status).
enum StatusBits : int32_t {
  kStatusBadRowId = 1,
  kStatusBadSlot = 2,
  kStatusBadHostRow = 4,
  kStatusBadStagingIndex = 8,
  kStatusHistoryBeyondScores = 16,
  kStatusBadWindowTokens = 32,
};

} // namespace mlir::dhs

#endif // DHS_DIALECTS_DHSDIALECT_H
