//===- DhsOps.cpp - dhs operation verifiers and folders -------------------===//

#include "dialects/DhsOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::dhs;

/// Formats a dimension for a diagnostic: the number, or `?`.
static std::string dimToString(int64_t dim) {
  return ShapedType::isDynamic(dim) ? "?" : std::to_string(dim);
}

/// Checks that dimension `dim` of `type` equals `expected` where both are
/// static; `what` names the dimension in the diagnostic.
static LogicalResult checkDim(Operation *op, StringRef operand, MemRefType type, unsigned dim,
                              int64_t expected, StringRef what) {
  int64_t actual = type.getDimSize(dim);
  if (ShapedType::isDynamic(actual) || ShapedType::isDynamic(expected) || actual == expected)
    return success();
  return op->emitOpError() << operand << " dimension " << dim << " (" << what << ") is " << actual
                           << ", expected " << dimToString(expected);
}

/// Checks that the trailing [layers, row bytes] of a row buffer match `pool`.
static LogicalResult checkRowBlock(Operation *op, StringRef operand, MemRefType type,
                                   KVPoolType pool) {
  unsigned rank = type.getRank();
  int64_t layers = type.getDimSize(rank - 2);
  int64_t bytes = type.getDimSize(rank - 1);
  RowFormatAttrInterface format = pool.getFormat();
  if (!ShapedType::isDynamic(bytes) && bytes != format.getRowBytes())
    return op->emitOpError() << operand << " holds rows of " << bytes << " bytes but row format "
                             << format.getFormatName() << " has " << format.getRowBytes();
  if (!ShapedType::isDynamic(layers) && layers != pool.getLayers())
    return op->emitOpError() << operand << " holds " << layers
                             << " layers per token but the pool's group has " << pool.getLayers();
  return success();
}

/// Checks an optional operand pair that comes together (`first` read, `second`
/// written beside it), and that each has the shape `expected` of the buffer
/// it goes with (`what` names it).
static LogicalResult checkCarried(Operation *op, StringRef firstName, Value first,
                                  StringRef secondName, Value second, MemRefType firstExpected,
                                  MemRefType secondExpected) {
  if (static_cast<bool>(first) != static_cast<bool>(second))
    return op->emitOpError() << firstName << " and " << secondName << " come together";
  if (!first)
    return success();
  for (auto [name, value, expected] : {std::tuple{firstName, first, firstExpected},
                                       std::tuple{secondName, second, secondExpected}})
    if (failed(verifyCompatibleShape(cast<MemRefType>(value.getType()).getShape(),
                                     expected.getShape())))
      return op->emitOpError() << name << " must have the shape " << expected << ", got "
                               << value.getType();
  return success();
}

/// Checks the operands common to both attention ops: queries [B, Q, H, qk],
/// rows and slots [B, Q, K], output [B, Q, H, v], a layer of the group and a
/// positive scale.
static LogicalResult verifyAttention(Operation *op, MemRefType queries, MemRefType rows,
                                     MemRefType slots, MemRefType output, KVPoolType pool,
                                     int64_t layer, APFloat scaleValue) {
  RowFormatAttrInterface format = pool.getFormat();
  StringRef name = format.getFormatName();
  if (layer >= pool.getLayers())
    return op->emitOpError() << "layer " << layer << " is outside the pool's group of "
                             << pool.getLayers() << " layers";
  int64_t qkDim = queries.getDimSize(3);
  if (!ShapedType::isDynamic(qkDim) && qkDim != format.getQKDim())
    return op->emitOpError() << "queries have " << qkDim << " dims per head but row format " << name
                             << " has keys of " << format.getQKDim() << " dims";
  int64_t vDim = output.getDimSize(3);
  if (!ShapedType::isDynamic(vDim) && vDim != format.getVDim())
    return op->emitOpError() << "output has " << vDim << " dims per head but row format " << name
                             << " has values of " << format.getVDim() << " dims";
  int64_t heads = queries.getDimSize(2);
  if (!ShapedType::isDynamic(heads) && heads % format.getKVHeads() != 0)
    return op->emitOpError() << heads << " query heads cannot share " << format.getKVHeads()
                             << " KV heads evenly";

  int64_t batch = queries.getDimSize(0);
  int64_t positions = queries.getDimSize(1);
  if (failed(checkDim(op, "row_ids", rows, 0, batch, "requests")) ||
      failed(checkDim(op, "row_ids", rows, 1, positions, "query positions")) ||
      failed(checkDim(op, "output", output, 0, batch, "requests")) ||
      failed(checkDim(op, "output", output, 1, positions, "query positions")) ||
      failed(checkDim(op, "output", output, 2, heads, "heads")))
    return failure();
  if (failed(verifyCompatibleShape(slots.getShape(), rows.getShape())))
    return op->emitOpError() << "slots must have the shape of row_ids: one "
                                "slot per selected row, got "
                             << slots << " for " << rows;
  if (rows.getDimSize(2) == 0)
    return op->emitOpError() << "selects no rows (K = 0)";
  for (MemRefType type : {queries, rows, output})
    if (llvm::is_contained(type.getShape(), 0))
      return op->emitOpError() << "has an empty operand of type " << type;
  float scale = scaleValue.convertToFloat();
  if (!(scale > 0.0f) || std::isinf(scale))
    return op->emitOpError() << "softmax scale must be a positive finite "
                                "number, got "
                             << scale;
  return success();
}

/// Query positions of a selection-shaped operand ([B, Q, ...]), if static.
static std::optional<int64_t> getQueryPositions(Operation *op) {
  Value rows = TypeSwitch<Operation *, Value>(op)
                   .Case<AttentionOp, SparseAttentionOp>([](auto op) { return op.getRowIds(); })
                   .Case<TopKOp, ResolveOp, UnionMissingOp, ShareRowsOp>(
                       [](auto op) { return op.getRows(); })
                   .Default([](Operation *) { return Value(); });
  if (!rows)
    return std::nullopt;
  auto type = cast<MemRefType>(rows.getType());
  if (type.getRank() < 2 || type.isDynamicDim(1))
    return std::nullopt;
  return type.getDimSize(1);
}

//===----------------------------------------------------------------------===//
// Tiers and buffers
//===----------------------------------------------------------------------===//

LogicalResult PoolTierOp::verify() {
  KVPoolType pool = getPool().getType();
  MemRefType expected = pool.getTierMemRefType(getTier());
  MemRefType actual = getRows().getType();
  if (!actual.getLayout().isIdentity())
    return emitOpError() << "rows must have the identity layout";
  if (failed(checkRowBlock(*this, "the result", actual, pool)))
    return failure();
  if (actual.getDimSize(0) != expected.getDimSize(0))
    return emitOpError() << "the " << stringifyTier(getTier()) << " tier holds "
                         << dimToString(expected.getDimSize(0)) << " tokens but the result has "
                         << dimToString(actual.getDimSize(0));
  return success();
}

LogicalResult PoolMapOp::verify() {
  int64_t capacity = getPool().getType().getCapacity(Tier::host);
  int64_t size = getMap().getType().getDimSize(0);
  if (!ShapedType::isDynamic(capacity) && !ShapedType::isDynamic(size) && size != capacity)
    return emitOpError() << "a residency map has one entry per host row (" << capacity << "), got "
                         << size;
  return success();
}

LogicalResult PoolRecencyOp::verify() {
  int64_t capacity = getPool().getType().getCapacity(Tier::hbm);
  MemRefType type = getRecency().getType();
  if (type.getDimSize(1) != 2)
    return emitOpError() << "the replacement state is [last use, previous "
                            "use] per slot: expected [slots, 2], got "
                         << type;
  int64_t size = type.getDimSize(0);
  if (!ShapedType::isDynamic(capacity) && !ShapedType::isDynamic(size) && size != capacity)
    return emitOpError() << "the replacement state has one entry per HBM slot (" << capacity
                         << "), got " << size;
  return success();
}

LogicalResult PoolWriteBackOp::verify() {
  MemRefType type = getRing().getType();
  if (!type.getLayout().isIdentity())
    return emitOpError() << "the ring must have the identity layout";
  if (!type.isDynamicDim(0))
    return emitOpError() << "the ring's entries are the runtime's choice: expected a dynamic "
                            "first dimension, got "
                         << type;
  return checkRowBlock(*this, "the ring", type, getPool().getType());
}

LogicalResult PlaceRowsOp::verify() {
  int64_t placed = getRows().getType().getDimSize(0);
  if (failed(checkDim(*this, "slots", getSlots().getType(), 0, placed, "rows placed")))
    return failure();
  if (getSources() &&
      failed(checkDim(*this, "sources", getSources().getType(), 0, placed, "rows placed")))
    return failure();
  return success();
}

LogicalResult StepStatusOp::verify() {
  MemRefType type = getStatus().getType();
  if (type.getRank() != 1 || type.getDimSize(0) != 1)
    return emitOpError() << "the status is one word: expected memref<1xi32>, "
                            "got "
                         << type;
  return success();
}

LogicalResult GroupBindingsOp::verify() {
  MemRefType type = getTable().getType();
  if (!type.isDynamicDim(0) || !type.isDynamicDim(1) || !type.getLayout().isIdentity())
    return emitOpError() << "the table's groups and parameters are the launch's: expected "
                            "memref<?x?xi64>, got "
                         << type;
  return success();
}

LogicalResult ScratchOp::verify() {
  MemRefType type = getBuffer().getType();
  if (!type.getLayout().isIdentity())
    return emitOpError() << "scratch buffers are dense: identity layout only";
  // (The attributes are signed: their getters would read -1 as 2^64 - 1.)
  if (IntegerAttr offset = getOffsetAttr(); offset && offset.getInt() < 0)
    return emitOpError() << "arena offset must be non-negative, got " << offset.getInt();
  if (IntegerAttr slot = getSlotAttr(); slot && (slot.getInt() < 0 || slot.getInt() > 1))
    return emitOpError() << "staging is double-buffered: slot 0 or 1, got " << slot.getInt();
  return success();
}

//===----------------------------------------------------------------------===//
// Selection and residency
//===----------------------------------------------------------------------===//

LogicalResult TopKOp::verify() {
  MemRefType scores = getScores().getType();
  MemRefType rows = getRows().getType();
  if (failed(checkDim(*this, "rows", rows, 0, scores.getDimSize(0), "requests")) ||
      failed(checkDim(*this, "rows", rows, 1, scores.getDimSize(1), "query positions")) ||
      failed(checkDim(*this, "history_len", getHistoryLen().getType(), 0, scores.getDimSize(0),
                      "requests")))
    return failure();
  int64_t k = rows.getDimSize(2), n = scores.getDimSize(2);
  if (k == 0)
    return emitOpError() << "selects no rows (k = 0)";
  if (!ShapedType::isDynamic(k) && !ShapedType::isDynamic(n) && k > n)
    return emitOpError() << "selects k = " << k << " rows out of " << n << " scored rows";
  return success();
}

Replacement ResidencyOp::getEffectiveReplacement() {
  if (std::optional<Replacement> given = getReplacement())
    return *given;
  return getPolicy() == ResidencyPolicy::fixed ? Replacement::lru : Replacement::clock;
}

LogicalResult ResidencyOp::verify() {
  KVPoolType pool = getPool().getType();
  int64_t newest = static_cast<int64_t>(getNewest());
  int64_t floor = static_cast<int64_t>(getFloor());
  if (getPolicy() == ResidencyPolicy::fixed && floor == 0)
    return emitOpError() << "a fixed hot buffer needs floor > 0 slots per "
                            "request";
  if (!pool.isDynamicHbm() && newest + floor > pool.getHbmSlots())
    return emitOpError() << "the working set of one request (newest " << newest << " + floor "
                         << floor << " = " << newest + floor << " slots) does not fit the pool's "
                         << pool.getHbmSlots() << " HBM slots";
  // One spec per pool; the tokens a query attends from are among the newest.
  for (OpOperand &use : getPool().getUses()) {
    Operation *user = use.getOwner();
    // The later of two specs in a block is the one reported.
    if (auto other = dyn_cast<ResidencyOp>(user);
        other && other != *this &&
        (other->getBlock() != (*this)->getBlock() || other->isBeforeInBlock(*this)))
      return emitOpError() << "is the second residency spec of its pool";
    if (!isa<AttentionOp, SparseAttentionOp>(user))
      continue;
    std::optional<int64_t> positions = getQueryPositions(user);
    if (positions && *positions > newest)
      return emitOpError() << "protects the " << newest
                           << " newest tokens, but attention on this pool "
                              "queries from "
                           << *positions
                           << " positions: the tokens being decoded or "
                              "verified must stay resident";
  }
  return success();
}

LogicalResult ResolveOp::verify() {
  MemRefType rows = getRows().getType();
  if (failed(verifyCompatibleShape(getSlots().getType().getShape(), rows.getShape())))
    return emitOpError() << "slots must have the shape of rows, got " << getSlots().getType()
                         << " for " << rows;
  if (failed(checkDim(*this, "history_start", getHistoryStart().getType(), 0, rows.getDimSize(0),
                      "requests")) ||
      failed(checkDim(*this, "history_len", getHistoryLen().getType(), 0, rows.getDimSize(0),
                      "requests")))
    return failure();
  if (getWriteBack() &&
      failed(verifyCompatibleShape(getWriteBack().getType().getShape(), rows.getShape())))
    return emitOpError() << "write_back must have the shape of rows, got "
                         << getWriteBack().getType() << " for " << rows;
  return success();
}

LogicalResult PlanPromotionsOp::verify() {
  if (getReplacement() != Replacement::clock)
    return emitOpError() << "decides CLOCK promotions only: "
                         << stringifyReplacement(getReplacement())
                         << " victim orders are not generated on the device yet (use the host "
                            "controller)";
  MemRefType fetched = getFetched().getType();
  int64_t lanes = fetched.getDimSize(0), listed = fetched.getDimSize(1);
  if (failed(checkDim(*this, "history_start", getHistoryStart().getType(), 0, lanes, "requests")))
    return failure();
  // The slot tables: one entry per HBM slot of the pool.
  int64_t slots = getPool().getType().getCapacity(Tier::hbm);
  for (auto [name, value] : {std::pair<StringRef, Value>{"hot", getHot()},
                             {"cleared", getCleared()},
                             {"free", getFree()}}) {
    int64_t size = cast<MemRefType>(value.getType()).getDimSize(0);
    if (ShapedType::isDynamic(slots))
      slots = size;
    else if (failed(checkDim(*this, name, cast<MemRefType>(value.getType()), 0, slots, "slots")))
      return failure();
  }
  // A residency spec of the pool in the step must be the rule's: adaptive,
  // no floor, CLOCK, and the same per-request cap.
  for (Operation *user : getPool().getUsers()) {
    auto spec = dyn_cast<ResidencyOp>(user);
    if (!spec)
      continue;
    if (spec.getPolicy() != ResidencyPolicy::adaptive || spec.getFloor() != 0 ||
        spec.getEffectiveReplacement() != Replacement::clock)
      return emitOpError() << "plans the adaptive policy with floor 0 and CLOCK, but the pool's "
                              "residency spec is "
                           << stringifyResidencyPolicy(spec.getPolicy()) << " with floor "
                           << spec.getFloor() << " and "
                           << stringifyReplacement(spec.getEffectiveReplacement());
    auto cap = [](std::optional<uint64_t> promotions) {
      return promotions ? std::to_string(*promotions) : std::string("no cap");
    };
    if (spec.getPromotions() != getPromotions())
      return emitOpError() << "promotes " << cap(getPromotions())
                           << " rows per request and step, but the pool's residency spec says "
                           << cap(spec.getPromotions());
  }
  if (failed(checkDim(*this, "control", getControl().getType(), 0,
                      static_cast<int64_t>(abi::PromotionPlanLayout::kWords), "control words")))
    return failure();
  int64_t entries = ShapedType::isDynamic(lanes) || ShapedType::isDynamic(listed)
                        ? ShapedType::kDynamic
                        : static_cast<int64_t>(abi::PromotionPlanLayout::entries(lanes * listed));
  if (failed(checkDim(*this, "rows", getRows().getType(), 0, entries,
                      "2 x fetched rows: promotions, then releases")) ||
      failed(checkDim(*this, "slots", getSlots().getType(), 0, getRows().getType().getDimSize(0),
                      "rows placed")))
    return failure();
  return checkCarried(*this, "fetched sources", getFetchedSources(), "sources", getSources(),
                      fetched, getSlots().getType());
}

LogicalResult SortRowsOp::verify() {
  MemRefType rows = getRows().getType();
  if (failed(verifyCompatibleShape(getSorted().getType().getShape(), rows.getShape())))
    return emitOpError() << "sorted must have the shape of rows " << rows << ", got "
                         << getSorted().getType();
  return checkCarried(*this, "values", getValues(), "sorted values", getSortedValues(), rows, rows);
}

LogicalResult AgeRowsOp::verify() {
  MemRefType appends = getAppends().getType();
  if (failed(checkDim(*this, "appends", appends, 1,
                      static_cast<int64_t>(abi::AgeRowsLayout::kEntryWords), "entry words")))
    return failure();
  // The slot tables: one entry per HBM slot of the pool.
  int64_t slots = getPool().getType().getCapacity(Tier::hbm);
  for (auto [name, value] : {std::pair<StringRef, Value>{"hot", getHot()},
                             {"cleared", getCleared()},
                             {"free", getFree()}}) {
    int64_t size = cast<MemRefType>(value.getType()).getDimSize(0);
    if (ShapedType::isDynamic(slots))
      slots = size;
    else if (failed(checkDim(*this, name, cast<MemRefType>(value.getType()), 0, slots, "slots")))
      return failure();
  }
  if (failed(checkDim(*this, "control", getControl().getType(), 0,
                      static_cast<int64_t>(abi::AgeRowsLayout::kWords), "control words")))
    return failure();
  int64_t n = appends.getDimSize(0);
  int64_t entries = ShapedType::isDynamic(n) ? ShapedType::kDynamic
                                             : static_cast<int64_t>(abi::AgeRowsLayout::entries(n));
  if (failed(checkDim(*this, "rows", getRows().getType(), 0, entries,
                      "2 x appends: new rows, then releases")) ||
      failed(checkDim(*this, "slots", getSlots().getType(), 0, getRows().getType().getDimSize(0),
                      "rows placed")))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Retrieval
//===----------------------------------------------------------------------===//

/// Ready flags [B, N / 64] of a list `rows` [B, ...] of N entries a request
/// (its innermost dimension a multiple of 64: a flag marks a tile of 64
/// entries of one query position).
static LogicalResult verifyReadyFlags(Operation *op, MemRefType ready, MemRefType rows) {
  if (failed(checkDim(op, "ready", ready, 0, rows.getDimSize(0), "requests")))
    return failure();
  if (!rows.hasStaticShape())
    return success();
  int64_t listed = rows.getNumElements() / rows.getDimSize(0);
  int64_t innermost = rows.getDimSize(rows.getRank() - 1);
  if (innermost % kReadyTileRows != 0)
    return op->emitOpError() << "ready flags mark tiles of " << kReadyTileRows
                             << " listed rows of a query position: a position lists " << innermost;
  return checkDim(op, "ready", ready, 1, listed / kReadyTileRows, "tiles of listed rows");
}

LogicalResult FetchOp::verify() {
  KVPoolType pool = getPool().getType();
  MemRefType rows = getRows().getType();
  MemRefType staging = getStaging().getType();
  if (rows.getRank() < 2)
    return emitOpError() << "rows are [requests, ...], got " << rows;
  if (getSlots() && failed(verifyCompatibleShape(getSlots().getType().getShape(), rows.getShape())))
    return emitOpError() << "slots must have the shape of rows, got " << getSlots().getType()
                         << " for " << rows;
  // Ring entries are those of resolved selections (a union fetch lists
  // distinct rows, not selections).
  if (Value entries = getWriteBack()) {
    if (!getSlots())
      return emitOpError() << "write_back needs slots: its entries belong to resolved selections "
                              "(dhs.resolve)";
    if (failed(
            verifyCompatibleShape(cast<MemRefType>(entries.getType()).getShape(), rows.getShape())))
      return emitOpError() << "write_back must have the shape of rows, got " << entries.getType()
                           << " for " << rows;
    // Beside a one-layer attention, the attention takes tiles and reads
    // their rows from the host store itself: the ring would miss them.
    if (getReady() && pool.getLayers() == 1)
      return emitOpError() << "write_back with ready flags needs a layer group's pool: beside a "
                              "one-layer attention, the tiles it takes are not written back";
  }
  if (failed(checkRowBlock(*this, "staging", staging, pool)) ||
      failed(checkDim(*this, "staging", staging, 0, rows.getDimSize(0), "requests")) ||
      failed(checkDim(*this, "history_start", getHistoryStart().getType(), 0, rows.getDimSize(0),
                      "requests")) ||
      failed(checkDim(*this, "history_len", getHistoryLen().getType(), 0, rows.getDimSize(0),
                      "requests")))
    return failure();
  // One staging row per listed row.
  if (rows.hasStaticShape()) {
    int64_t listed = rows.getNumElements() / rows.getDimSize(0);
    if (failed(checkDim(*this, "staging", staging, 1, listed, "rows per request")))
      return failure();
  }
  if (Value ready = getReady())
    return verifyReadyFlags(*this, cast<MemRefType>(ready.getType()), rows);
  return success();
}

FailureOr<SmallVector<AttentionOp>> FetchOp::getSelectionOrderReaders() {
  SmallVector<AttentionOp> readers;
  for (Operation *user : getStaging().getUsers()) {
    if (user == getOperation())
      continue;
    auto attention = dyn_cast<AttentionOp>(user);
    if (!attention || attention.getStagingIndex() || attention.getRowIds() != getRows() ||
        attention.getSlots() != getSlots() || attention.getPool() != getPool())
      return failure();
    readers.push_back(attention);
  }
  return readers;
}

LogicalResult UnionMissingOp::verify() {
  MemRefType rows = getRows().getType();
  if (failed(verifyCompatibleShape(getSlots().getType().getShape(), rows.getShape())) ||
      failed(verifyCompatibleShape(getRemap().getType().getShape(), rows.getShape())))
    return emitOpError() << "slots and remap must have the shape of rows " << rows;
  MemRefType unionType = getMissing().getType();
  if (failed(checkDim(*this, "missing", unionType, 0, rows.getDimSize(0), "requests")))
    return failure();
  // Room for the worst case: every selection distinct and missing.
  if (rows.hasStaticShape() && !unionType.isDynamicDim(1) &&
      unionType.getDimSize(1) < rows.getDimSize(1) * rows.getDimSize(2))
    return emitOpError() << "missing has room for " << unionType.getDimSize(1)
                         << " rows per request but the queries may select "
                         << rows.getDimSize(1) * rows.getDimSize(2) << " distinct missing rows";
  return checkCarried(*this, "write_back", getWriteBack(), "sources", getSources(), rows,
                      unionType);
}

LogicalResult ShareRowsOp::verify() {
  MemRefType rows = getRows().getType();
  for (auto [name, type] : {std::pair{"slots", getSlots().getType()},
                            std::pair{"shared_rows", getSharedRows().getType()},
                            std::pair{"shared_slots", getSharedSlots().getType()}})
    if (failed(verifyCompatibleShape(type.getShape(), rows.getShape())))
      return emitOpError() << name << " must have the shape of rows " << rows << ", got " << type;
  if (failed(checkDim(*this, "tiles", getTiles().getType(), 0, rows.getDimSize(0), "requests")))
    return failure();
  int64_t positions = rows.getDimSize(1), selected = rows.getDimSize(2);
  if (!ShapedType::isDynamic(positions) && positions > kMaxPositions)
    return emitOpError() << "shares rows among at most " << kMaxPositions
                         << " query positions (a portable cluster), got " << positions;
  if (!ShapedType::isDynamic(positions) && !ShapedType::isDynamic(selected) &&
      positions * selected > kMaxSelections)
    return emitOpError() << "sorts at most " << kMaxSelections
                         << " selections per request (Q x K) in shared memory, got " << positions
                         << " x " << selected << " = " << positions * selected;
  return success();
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// Checks an attention op's optional sliding window: ring [B, R, layers,
/// row bytes] with R >= W + Q - 1, token counts [B] and size W, all or none.
static LogicalResult verifyWindow(Operation *op, MemRefType queries, KVPoolType pool,
                                  TypedValue<MemRefType> window,
                                  TypedValue<MemRefType> windowTokens,
                                  std::optional<uint64_t> windowSize) {
  bool hasRing = static_cast<bool>(window);
  if (hasRing != static_cast<bool>(windowTokens) || hasRing != windowSize.has_value())
    return op->emitOpError() << "a sliding window needs its ring, its token "
                                "counts and its size together";
  if (!hasRing)
    return success();
  int64_t batch = queries.getDimSize(0);
  MemRefType ring = window.getType();
  if (failed(checkDim(op, "window ring", ring, 0, batch, "requests")) ||
      failed(checkRowBlock(op, "window ring", ring, pool)) ||
      failed(checkDim(op, "window tokens", windowTokens.getType(), 0, batch, "requests")))
    return failure();
  // Query position 0 looks W tokens back from Q - 1 tokens before the
  // newest: the ring must reach that far.
  int64_t size = static_cast<int64_t>(*windowSize);
  int64_t positions = queries.getDimSize(1);
  int64_t ringTokens = ring.getDimSize(1);
  if (!ShapedType::isDynamic(positions) && !ShapedType::isDynamic(ringTokens) &&
      ringTokens < size + positions - 1)
    return op->emitOpError() << "a window ring of " << ringTokens << " tokens cannot hold a "
                             << size << "-token window for " << positions
                             << " query positions; it needs at least " << size + positions - 1;
  return success();
}

/// Checks an attention's optional shared-prefix tile counts: [B] i32, and at
/// most a cluster's 8 query positions.
static LogicalResult verifySharedTiles(Operation *op, MemRefType queries, Value sharedTiles) {
  if (!sharedTiles)
    return success();
  if (failed(checkDim(op, "shared", cast<MemRefType>(sharedTiles.getType()), 0,
                      queries.getDimSize(0), "requests")))
    return failure();
  int64_t positions = queries.getDimSize(1);
  if (!ShapedType::isDynamic(positions) && positions > 8)
    return op->emitOpError() << "shares rows among " << positions
                             << " query positions; a cluster holds at most 8";
  return success();
}

LogicalResult AttentionOp::verify() {
  KVPoolType pool = getPool().getType();
  if (failed(verifyAttention(*this, getQueries().getType(), getRowIds().getType(),
                             getSlots().getType(), getOutput().getType(), pool, getLayer(),
                             getSoftmaxScale())))
    return failure();
  MemRefType rows = getRowIds().getType();
  MemRefType staging = getStaging().getType();
  if (failed(checkRowBlock(*this, "staging", staging, pool)) ||
      failed(checkDim(*this, "staging", staging, 0, rows.getDimSize(0), "requests")))
    return failure();
  if (Value index = getStagingIndex()) {
    if (failed(
            verifyCompatibleShape(cast<MemRefType>(index.getType()).getShape(), rows.getShape())))
      return emitOpError() << "the staging index must have the shape of "
                              "row_ids, got "
                           << index.getType() << " for " << rows;
  } else if (rows.hasStaticShape() &&
             failed(checkDim(*this, "staging", staging, 1, rows.getDimSize(1) * rows.getDimSize(2),
                             "rows per request, one per selection"))) {
    return failure();
  }
  if (failed(verifySharedTiles(*this, getQueries().getType(), getSharedTiles())))
    return failure();
  bool ready = static_cast<bool>(getReady());
  if (ready != static_cast<bool>(getHistoryStart()) || ready != static_cast<bool>(getHistoryLen()))
    return emitOpError() << "ready flags and history go together: the attention reads the "
                            "missing rows of a tile the fetch has not claimed from the host store";
  if (Value ready = getReady()) {
    if (getStagingIndex())
      return emitOpError() << "ready flags follow the selection order: no staging index";
    if (failed(verifyReadyFlags(*this, cast<MemRefType>(ready.getType()), rows)))
      return failure();
    int64_t batch = rows.getDimSize(0);
    if (failed(
            checkDim(*this, "history_start", getHistoryStart().getType(), 0, batch, "requests")) ||
        failed(checkDim(*this, "history_len", getHistoryLen().getType(), 0, batch, "requests")))
      return failure();
  }
  return verifyWindow(*this, getQueries().getType(), getPool().getType(), getWindow(),
                      getWindowTokens(), getWindowSize());
}

LogicalResult SparseAttentionOp::verify() {
  if (failed(verifyAttention(*this, getQueries().getType(), getRowIds().getType(),
                             getSlots().getType(), getOutput().getType(), getPool().getType(),
                             getLayer(), getSoftmaxScale())))
    return failure();
  int64_t batch = getQueries().getType().getDimSize(0);
  if (failed(checkDim(*this, "history_start", getHistoryStart().getType(), 0, batch, "requests")) ||
      failed(checkDim(*this, "history_len", getHistoryLen().getType(), 0, batch, "requests")) ||
      failed(verifySharedTiles(*this, getQueries().getType(), getSharedTiles())))
    return failure();
  if (getWriteBack() && failed(verifyCompatibleShape(getWriteBack().getType().getShape(),
                                                     getRowIds().getType().getShape())))
    return emitOpError() << "write_back must have the shape of rows, got "
                         << getWriteBack().getType() << " for " << getRowIds().getType();
  return verifyWindow(*this, getQueries().getType(), getPool().getType(), getWindow(),
                      getWindowTokens(), getWindowSize());
}

LogicalResult SparseAttentionOp::fold(FoldAdaptor adaptor, SmallVectorImpl<OpFoldResult> &results) {
  // Static shapes are what code generation needs: a cast that hides them
  // folds away, one that asserts them (dynamic to static) stays.
  // (memref::foldMemRefCast folds either way.)
  bool folded = false;
  for (OpOperand &operand : getOperation()->getOpOperands()) {
    auto cast = operand.get().getDefiningOp<memref::CastOp>();
    if (cast && memref::CastOp::canFoldIntoConsumerOp(cast)) {
      operand.set(cast.getSource());
      folded = true;
    }
  }
  return success(folded);
}

//===----------------------------------------------------------------------===//
// Speculative decoding
//===----------------------------------------------------------------------===//

LogicalResult VerifyOp::verify() {
  int64_t expected = getGamma() + 1;
  for (Operation &op : getBody().front()) {
    if (isa<VerifyOp, DraftOp>(op))
      return op.emitOpError() << "cannot nest inside a verify phase";
    std::optional<int64_t> positions = getQueryPositions(&op);
    if (positions && *positions != expected)
      return op.emitOpError() << "in a verify phase of gamma = " << getGamma() << " has "
                              << *positions
                              << " query positions; the phase checks gamma + 1 = " << expected;
  }
  return success();
}

LogicalResult DraftOp::verify() {
  MemRefType ring = getRing().getType();
  int64_t window = ring.getDimSize(1);
  if (!ShapedType::isDynamic(window) && window < static_cast<int64_t>(getBlock()))
    return emitOpError() << "a draft ring of " << window
                         << " tokens is smaller than a draft block of " << getBlock() << " tokens";
  for (Operation &op : getBody().front()) {
    if (isa<VerifyOp, DraftOp>(op))
      return op.emitOpError() << "cannot nest inside a draft phase";
    Value target = TypeSwitch<Operation *, Value>(&op)
                       .Case<RingAppendOp>([](auto o) { return o.getRing(); })
                       .Case<RingReadOp>([](auto o) { return o.getRing(); })
                       .Default([](Operation *) { return Value(); });
    if (target && target != getRing())
      return op.emitOpError() << "uses a ring other than its draft phase's";
  }
  return success();
}

/// Checks a ring op: [B, W, layers, bytes] ring, [B, N, layers, bytes] rows,
/// positions [B], N <= W.
static LogicalResult verifyRingAccess(Operation *op, MemRefType ring, MemRefType rows,
                                      MemRefType positions) {
  if (failed(checkDim(op, "rows", rows, 0, ring.getDimSize(0), "requests")) ||
      failed(checkDim(op, "positions", positions, 0, ring.getDimSize(0), "requests")) ||
      failed(checkDim(op, "rows", rows, 2, ring.getDimSize(2), "layers")) ||
      failed(checkDim(op, "rows", rows, 3, ring.getDimSize(3), "row bytes")))
    return failure();
  int64_t n = rows.getDimSize(1), window = ring.getDimSize(1);
  if (!ShapedType::isDynamic(n) && !ShapedType::isDynamic(window) && n > window)
    return op->emitOpError() << "moves " << n << " rows through a ring of " << window << " tokens";
  return success();
}

LogicalResult RingAppendOp::verify() {
  return verifyRingAccess(*this, getRing().getType(), getRows().getType(),
                          getPositions().getType());
}

LogicalResult RingReadOp::verify() {
  return verifyRingAccess(*this, getRing().getType(), getRows().getType(),
                          getPositions().getType());
}

LogicalResult RingIndexOp::verify() {
  return checkDim(*this, "slots", getSlots().getType(), 0, getPositions().getType().getDimSize(0),
                  "requests");
}

LogicalResult CopyRowsOp::verify() {
  if (!getSrcIndex() == !getDstIndex())
    return emitOpError() << "takes exactly one of src_index (gather) and "
                            "dst_index (scatter)";
  MemRefType src = getSrc().getType(), dst = getDst().getType();
  if (failed(checkDim(*this, "dst", dst, 0, src.getDimSize(0), "requests")) ||
      failed(checkDim(*this, "dst", dst, 2, src.getDimSize(2), "layers")) ||
      failed(checkDim(*this, "dst", dst, 3, src.getDimSize(3), "row bytes")))
    return failure();
  if (Value index = getSrcIndex())
    return checkDim(*this, "src_index", cast<MemRefType>(index.getType()), 1, dst.getDimSize(1),
                    "rows");
  return checkDim(*this, "dst_index", cast<MemRefType>(getDstIndex().getType()), 1,
                  src.getDimSize(1), "rows");
}

LogicalResult AcceptOp::verify() {
  MemRefType draft = getDraft().getType();
  MemRefType target = getTarget().getType();
  int64_t batch = draft.getDimSize(0), gamma = draft.getDimSize(1);
  if (failed(checkDim(*this, "target", target, 0, batch, "requests")) ||
      failed(checkDim(*this, "seeds", getSeeds().getType(), 0, batch, "requests")) ||
      failed(checkDim(*this, "accepted", getAccepted().getType(), 0, batch, "requests")) ||
      failed(checkDim(*this, "next_token", getNextToken().getType(), 0, batch, "requests")))
    return failure();
  if (!ShapedType::isDynamic(gamma) &&
      failed(checkDim(*this, "target", target, 1, gamma + 1, "positions: gamma + 1")))
    return failure();
  if (failed(checkDim(*this, "step", getStep().getType(), 0, 1, "one word")))
    return failure();
  Value q = getDraftProbs();
  if (getRule() == AcceptRule::rejection_sampling) {
    if (!q)
      return emitOpError() << "rejection sampling needs the drafter's "
                              "probabilities (draft_probs)";
    MemRefType qType = cast<MemRefType>(q.getType());
    if (failed(checkDim(*this, "draft_probs", qType, 0, batch, "requests")) ||
        failed(checkDim(*this, "draft_probs", qType, 1, gamma, "gamma")) ||
        failed(checkDim(*this, "draft_probs", qType, 2, target.getDimSize(2), "vocabulary")))
      return failure();
  } else if (q) {
    return emitOpError() << "greedy acceptance does not use draft_probs";
  }
  return success();
}

#define GET_OP_CLASSES
#include "dialects/DhsOps.cpp.inc"
