//===- DhsOps.cpp - dhs operation verifiers -------------------------------===//

#include "dialects/DhsOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace mlir::dhs;

/// Formats a dimension for a diagnostic: the number, or `?`.
static std::string dimToString(int64_t dim) {
  return ShapedType::isDynamic(dim) ? "?" : std::to_string(dim);
}

/// Checks that dimension `dim` of `type` equals `expected` where both are
/// static; `what` names the dimension in the diagnostic.
static LogicalResult checkDim(Operation *op, StringRef operand,
                              MemRefType type, unsigned dim, int64_t expected,
                              StringRef what) {
  int64_t actual = type.getDimSize(dim);
  if (ShapedType::isDynamic(actual) || ShapedType::isDynamic(expected) ||
      actual == expected)
    return success();
  return op->emitOpError() << operand << " dimension " << dim << " (" << what
                           << ") is " << actual << ", expected "
                           << dimToString(expected);
}

//===----------------------------------------------------------------------===//
// PoolTierOp
//===----------------------------------------------------------------------===//

LogicalResult PoolTierOp::verify() {
  MemRefType expected = getPool().getType().getTierMemRefType(getTier());
  MemRefType actual = getRows().getType();
  if (actual.getElementType() != expected.getElementType())
    return emitOpError() << "rows have element type "
                         << actual.getElementType() << " but row format "
                         << stringifyRowFormat(getPool().getType().getFormat())
                         << " stores " << expected.getElementType();
  if (!actual.getLayout().isIdentity())
    return emitOpError() << "rows must have the identity layout";
  if (actual.getDimSize(1) != expected.getDimSize(1))
    return emitOpError() << "rows have " << dimToString(actual.getDimSize(1))
                         << " elements, row format "
                         << stringifyRowFormat(getPool().getType().getFormat())
                         << " has " << expected.getDimSize(1);
  if (actual.getDimSize(0) != expected.getDimSize(0))
    return emitOpError() << "the " << stringifyTier(getTier())
                         << " tier holds " << dimToString(expected.getDimSize(0))
                         << " rows but the result has "
                         << dimToString(actual.getDimSize(0));
  return success();
}

//===----------------------------------------------------------------------===//
// StepStatusOp
//===----------------------------------------------------------------------===//

LogicalResult StepStatusOp::verify() {
  MemRefType type = getStatus().getType();
  if (type.getRank() != 1 || type.getDimSize(0) != 1)
    return emitOpError() << "the status is one word: expected memref<1xi32>, "
                            "got "
                         << type;
  return success();
}

//===----------------------------------------------------------------------===//
// SparseAttentionOp
//===----------------------------------------------------------------------===//

LogicalResult SparseAttentionOp::verify() {
  KVPoolType pool = getPool().getType();
  MemRefType queries = getQueries().getType();
  MemRefType rows = getRowIds().getType();
  MemRefType slots = getSlots().getType();
  MemRefType start = getHistoryStart().getType();
  MemRefType length = getHistoryLen().getType();
  MemRefType output = getOutput().getType();
  Operation *op = getOperation();
  StringRef format = stringifyRowFormat(pool.getFormat());

  if (queries.getElementType() != pool.getElementType())
    return emitOpError() << "queries are " << queries.getElementType()
                         << " but row format " << format << " stores "
                         << pool.getElementType();
  if (output.getElementType() != pool.getElementType())
    return emitOpError() << "output is " << output.getElementType()
                         << " but row format " << format << " produces "
                         << pool.getElementType();

  // The query's last dimension is the key dimension of the row format, the
  // output's the value dimension.
  int64_t qkDim = queries.getDimSize(3);
  if (!ShapedType::isDynamic(qkDim) && qkDim != pool.getQKDim())
    return emitOpError() << "queries have " << qkDim
                         << " dims per head but row format " << format
                         << " has keys of " << pool.getQKDim() << " dims";
  int64_t vDim = output.getDimSize(3);
  if (!ShapedType::isDynamic(vDim) && vDim != pool.getVDim())
    return emitOpError() << "output has " << vDim
                         << " dims per head but row format " << format
                         << " has values of " << pool.getVDim() << " dims";

  // Batch [B], query positions [Q], heads [H] and selection width [K] agree.
  int64_t batch = queries.getDimSize(0);
  int64_t positions = queries.getDimSize(1);
  int64_t heads = queries.getDimSize(2);
  if (failed(checkDim(op, "row_ids", rows, 0, batch, "requests")) ||
      failed(checkDim(op, "row_ids", rows, 1, positions, "query positions")) ||
      failed(checkDim(op, "output", output, 0, batch, "requests")) ||
      failed(checkDim(op, "output", output, 1, positions, "query positions")) ||
      failed(checkDim(op, "output", output, 2, heads, "heads")) ||
      failed(checkDim(op, "history_start", start, 0, batch, "requests")) ||
      failed(checkDim(op, "history_len", length, 0, batch, "requests")))
    return failure();
  if (failed(verifyCompatibleShape(slots.getShape(), rows.getShape())))
    return emitOpError() << "slots must have the shape of row_ids: one slot "
                            "per selected row, got "
                         << slots << " for " << rows;
  if (rows.getDimSize(2) == 0)
    return emitOpError() << "selects no rows (K = 0)";
  for (MemRefType type : {queries, rows, slots, output})
    if (llvm::is_contained(type.getShape(), 0))
      return emitOpError() << "has an empty operand of type " << type;

  float scale = getSoftmaxScale().convertToFloat();
  if (!(scale > 0.0f) || std::isinf(scale))
    return emitOpError() << "softmax scale must be a positive finite number, "
                            "got "
                         << scale;
  return success();
}

LogicalResult SparseAttentionOp::fold(FoldAdaptor adaptor,
                                      SmallVectorImpl<OpFoldResult> &results) {
  // Static shapes are what code generation needs; keep them.
  return memref::foldMemRefCast(*this);
}

#define GET_OP_CLASSES
#include "dialects/DhsOps.cpp.inc"
