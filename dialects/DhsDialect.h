//===- DhsDialect.h - the dhs dialect, its enums and types ------*- C++ -*-===//

#ifndef DHS_DIALECTS_DHSDIALECT_H
#define DHS_DIALECTS_DHSDIALECT_H

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"

#include "dialects/DhsDialect.h.inc"
#include "dialects/DhsEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/DhsAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/DhsTypes.h.inc"

namespace mlir::dhs {

/// Elements per row of a row format.
int64_t getRowElements(RowFormat format);
/// Bytes per row of a row format.
int64_t getRowBytes(RowFormat format);
/// Key (and query) dimension of a row format.
int64_t getQKDim(RowFormat format);
/// Value dimension of a row format (values are a row's leading elements).
int64_t getVDim(RowFormat format);
/// Element type rows of a format are stored in.
Type getRowElementType(MLIRContext *context, RowFormat format);

} // namespace mlir::dhs

#endif // DHS_DIALECTS_DHSDIALECT_H
