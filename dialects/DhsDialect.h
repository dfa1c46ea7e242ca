//===- DhsDialect.h - the dhs dialect, its enums and types ------*- C++ -*-===//

#ifndef DHS_DIALECTS_DHSDIALECT_H
#define DHS_DIALECTS_DHSDIALECT_H

#include "runtime/abi/Contract.h"

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

/// The compiler-runtime contract (status bits, row layouts, roles, launch
/// kinds, the manifest's format): runtime/abi/Contract.h.
namespace abi = ::dhs_abi;

} // namespace mlir::dhs

#endif // DHS_DIALECTS_DHSDIALECT_H
