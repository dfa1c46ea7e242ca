//===- DhsDialect.cpp - dhs dialect, enums, types and row formats ---------===//

#include "dialects/DhsDialect.h"
#include "dialects/DhsOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::dhs;

#include "dialects/DhsDialect.cpp.inc"
#include "dialects/DhsEnums.cpp.inc"

//===----------------------------------------------------------------------===//
// Row formats
//===----------------------------------------------------------------------===//

int64_t mlir::dhs::getRowElements(RowFormat format) {
  switch (format) {
  case RowFormat::mla_bf16:
    return 576;
  }
  llvm_unreachable("unknown row format");
}

int64_t mlir::dhs::getRowBytes(RowFormat format) {
  switch (format) {
  case RowFormat::mla_bf16:
    return 576 * 2;
  }
  llvm_unreachable("unknown row format");
}

int64_t mlir::dhs::getQKDim(RowFormat format) {
  switch (format) {
  case RowFormat::mla_bf16:
    return 576;
  }
  llvm_unreachable("unknown row format");
}

int64_t mlir::dhs::getVDim(RowFormat format) {
  switch (format) {
  case RowFormat::mla_bf16:
    return 512;
  }
  llvm_unreachable("unknown row format");
}

Type mlir::dhs::getRowElementType(MLIRContext *context, RowFormat format) {
  switch (format) {
  case RowFormat::mla_bf16:
    return BFloat16Type::get(context);
  }
  llvm_unreachable("unknown row format");
}

//===----------------------------------------------------------------------===//
// KVPoolType
//===----------------------------------------------------------------------===//

/// Parses a row capacity: a positive integer, or `?` for one chosen at run
/// time.
static ParseResult parseCapacity(AsmParser &parser, int64_t &capacity) {
  if (succeeded(parser.parseOptionalQuestion())) {
    capacity = ShapedType::kDynamic;
    return success();
  }
  return parser.parseInteger(capacity);
}

static void printCapacity(AsmPrinter &printer, int64_t capacity) {
  if (ShapedType::isDynamic(capacity))
    printer << "?";
  else
    printer << capacity;
}

LogicalResult
KVPoolType::verify(function_ref<InFlightDiagnostic()> emitError,
                   RowFormat format, int64_t hbmSlots, int64_t hostRows) {
  if (!ShapedType::isDynamic(hbmSlots) && hbmSlots <= 0)
    return emitError() << "HBM capacity must be a positive number of slots "
                          "or '?', got "
                       << hbmSlots;
  if (!ShapedType::isDynamic(hostRows) && hostRows <= 0)
    return emitError() << "host capacity must be a positive number of rows "
                          "or '?', got "
                       << hostRows;
  return success();
}

int64_t KVPoolType::getRowElements() const {
  return dhs::getRowElements(getFormat());
}
int64_t KVPoolType::getRowBytes() const { return dhs::getRowBytes(getFormat()); }
int64_t KVPoolType::getQKDim() const { return dhs::getQKDim(getFormat()); }
int64_t KVPoolType::getVDim() const { return dhs::getVDim(getFormat()); }
Type KVPoolType::getElementType() const {
  return getRowElementType(getContext(), getFormat());
}

int64_t KVPoolType::getCapacity(Tier tier) const {
  return tier == Tier::hbm ? getHbmSlots() : getHostRows();
}

MemRefType KVPoolType::getTierMemRefType(Tier tier) const {
  return MemRefType::get({getCapacity(tier), getRowElements()},
                         getElementType());
}

#define GET_ATTRDEF_CLASSES
#include "dialects/DhsAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/DhsTypes.cpp.inc"

//===----------------------------------------------------------------------===//
// Dialect
//===----------------------------------------------------------------------===//

void DhsDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/DhsOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/DhsAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/DhsTypes.cpp.inc"
      >();
}
