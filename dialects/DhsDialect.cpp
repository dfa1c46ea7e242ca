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

#include "dialects/DhsAttrInterfaces.cpp.inc"

// Sizes and names are the contract's (runtime/abi/Contract.h).

/// Whether a format's mnemonic is its name in manifests.
static constexpr bool isFormatMnemonic(llvm::StringLiteral mnemonic, abi::RowFormat format) {
  return std::string_view(mnemonic.data(), mnemonic.size()) == abi::name(format);
}
static_assert(isFormatMnemonic(MlaBf16Attr::getMnemonic(), abi::RowFormat::MlaBf16) &&
                  isFormatMnemonic(MlaFp8Attr::getMnemonic(), abi::RowFormat::MlaFp8) &&
                  isFormatMnemonic(V41Fp8Attr::getMnemonic(), abi::RowFormat::V41Fp8) &&
                  isFormatMnemonic(GqaAttr::getMnemonic(), abi::RowFormat::Gqa),
              "row format mnemonics are the contract's names");

int64_t MlaBf16Attr::getRowBytes() const { return abi::MlaBf16Row::kRowBytes; }
int64_t MlaBf16Attr::getKVHeads() const { return 1; }
int64_t MlaBf16Attr::getQKDim() const { return abi::MlaBf16Row::kQKDim; }
int64_t MlaBf16Attr::getVDim() const { return abi::MlaBf16Row::kVDim; }
StringRef MlaBf16Attr::getFormatName() const { return abi::name(abi::RowFormat::MlaBf16); }

int64_t MlaFp8Attr::getRowBytes() const { return abi::MlaFp8Row::kRowBytes; }
int64_t MlaFp8Attr::getKVHeads() const { return 1; }
int64_t MlaFp8Attr::getQKDim() const { return abi::MlaFp8Row::kQKDim; }
int64_t MlaFp8Attr::getVDim() const { return abi::MlaFp8Row::kVDim; }
StringRef MlaFp8Attr::getFormatName() const { return abi::name(abi::RowFormat::MlaFp8); }

int64_t V41Fp8Attr::getRowBytes() const { return abi::V41Fp8Row::kRowBytes; }
int64_t V41Fp8Attr::getKVHeads() const { return 1; }
int64_t V41Fp8Attr::getQKDim() const { return abi::V41Fp8Row::kQKDim; }
int64_t V41Fp8Attr::getVDim() const { return abi::V41Fp8Row::kVDim; }
StringRef V41Fp8Attr::getFormatName() const { return abi::name(abi::RowFormat::V41Fp8); }

LogicalResult GqaAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t kvHeads,
                              int64_t headDim, Type dtype) {
  if (kvHeads <= 0)
    return emitError() << "a GQA row needs at least one KV head, got " << kvHeads;
  if (headDim <= 0 || headDim % 32 != 0)
    return emitError() << "GQA head_dim must be a positive multiple of 32, "
                          "got "
                       << headDim;
  if (!dtype.isBF16() && !dtype.isF16() && !dtype.isF32())
    return emitError() << "GQA rows hold bf16, f16 or f32, not " << dtype;
  return success();
}
abi::RowElement GqaAttr::getRowElement() const {
  // The verifier allows bf16, f16 and f32.
  Type dtype = getDtype();
  return dtype.isBF16()  ? abi::RowElement::BF16
         : dtype.isF16() ? abi::RowElement::F16
                         : abi::RowElement::F32;
}
int64_t GqaAttr::getRowBytes() const {
  return abi::GqaRow::rowBytes(getKvHeads(), getHeadDim(), getRowElement());
}
int64_t GqaAttr::getKVHeads() const { return getKvHeads(); }
int64_t GqaAttr::getQKDim() const { return getHeadDim(); }
int64_t GqaAttr::getVDim() const { return getHeadDim(); }
StringRef GqaAttr::getFormatName() const { return abi::name(abi::RowFormat::Gqa); }

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

/// Prints a row capacity: the integer, or `?` for one chosen at run time.
static void printCapacity(AsmPrinter &printer, int64_t capacity) {
  if (ShapedType::isDynamic(capacity))
    printer << "?";
  else
    printer << capacity;
}

LogicalResult KVPoolType::verify(function_ref<InFlightDiagnostic()> emitError,
                                 RowFormatAttrInterface format, int64_t layers, int64_t hbmSlots,
                                 int64_t hostRows) {
  if (!format)
    return emitError() << "a KV pool needs a row format";
  if (layers <= 0)
    return emitError() << "a layer group has at least one layer, got " << layers;
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

int64_t KVPoolType::getCapacity(Tier tier) const {
  return tier == Tier::hbm ? getHbmSlots() : getHostRows();
}

MemRefType KVPoolType::getTierMemRefType(Tier tier) const {
  return MemRefType::get({getCapacity(tier), getLayers(), getFormat().getRowBytes()},
                         IntegerType::get(getContext(), 8));
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
