//===- ShareTiles.cpp - verify positions gather their shared rows once ----===//

#include "passes/Passes.h"

#include "llvm/ADT/MapVector.h"

namespace mlir::dhs {
#define GEN_PASS_DEF_DHSSHARETILES
#include "passes/Passes.h.inc"
} // namespace mlir::dhs

using namespace mlir;
using namespace mlir::dhs;

namespace {

/// Rows of a shared tile: the tensor-core kernel's tile.
constexpr int64_t kTileRows = 64;

struct DhsShareTiles : public dhs::impl::DhsShareTilesBase<DhsShareTiles> {
  using Base::Base;
  void runOnOperation() final;

private:
  /// Orders the selections of the sharing attention ops of `phase`.
  void share(VerifyOp phase);
};

/// The selection (row ids, slots) attention op `op` reads, if the
/// tensor-core kernel computes it with a request's positions sharing tiles.
/// With `minMissing` > 0 only fused attention shares: staged attention
/// reads its missing rows from the staging arena in HBM, where sharing
/// saves no host read.
std::optional<std::pair<Value, Value>> getShareableSelection(Operation *op, int64_t minMissing) {
  auto attention = dyn_cast<AttentionOp>(op);
  auto fused = dyn_cast<SparseAttentionOp>(op);
  if ((!attention || minMissing > 0) && !fused)
    return std::nullopt;
  Value rows = attention ? attention.getRowIds() : fused.getRowIds();
  Value slots = attention ? attention.getSlots() : fused.getSlots();
  MemRefType queries = attention ? attention.getQueries().getType() : fused.getQueries().getType();
  KVPoolType pool = attention ? attention.getPool().getType() : fused.getPool().getType();
  bool shared = attention ? static_cast<bool>(attention.getSharedTiles())
                          : static_cast<bool>(fused.getSharedTiles());
  bool window =
      attention ? static_cast<bool>(attention.getWindow()) : static_cast<bool>(fused.getWindow());
  auto rowsType = cast<MemRefType>(rows.getType());
  if (shared || window || !queries.hasStaticShape() || !rowsType.hasStaticShape())
    return std::nullopt;
  RowFormatAttrInterface format = pool.getFormat();
  int64_t positions = rowsType.getDimSize(1), selected = rowsType.getDimSize(2);
  bool tensorCoreShape = isa<MlaBf16Attr, MlaFp8Attr>(format) && format.getQKDim() == 576 &&
                         format.getVDim() == 512 && queries.getDimSize(2) % 64 == 0 &&
                         selected % kTileRows == 0;
  // dhs.share_rows's bounds: a cluster of positions, its lists in shared
  // memory.
  if (!tensorCoreShape || positions < 2 || positions > 8 || positions * selected > 16384)
    return std::nullopt;
  return std::make_pair(rows, slots);
}

} // namespace

void DhsShareTiles::share(VerifyOp phase) {
  // The sharing attention ops of each selection, in order.
  llvm::MapVector<std::pair<Value, Value>, SmallVector<Operation *>> selections;
  for (Operation &op : phase.getBody().front())
    if (auto selection = getShareableSelection(&op, minMissing))
      selections[*selection].push_back(&op);

  Block &body = phase.getBody().front();
  Type i32 = IntegerType::get(&getContext(), 32);
  for (auto &[selection, attentions] : selections) {
    auto [rows, slots] = selection;
    // The selection's readers in the phase from its first fetch, union or
    // attention on: they read the ordered selection instead.
    SmallVector<Operation *> readers;
    for (Operation &op : body) {
      if (!isa<FetchOp, UnionMissingOp, AttentionOp, SparseAttentionOp>(op))
        continue;
      if (llvm::is_contained(op.getOperands(), rows) || llvm::is_contained(op.getOperands(), slots))
        readers.push_back(&op);
    }
    // Selections written in the phase after a reader (a resolve between
    // two attentions) keep their order.
    Operation *first = readers.front();
    bool writtenLater = false;
    for (Operation *op = first->getNextNode(); op; op = op->getNextNode())
      if (isa<ResolveOp, TopKOp>(op) && (llvm::is_contained(op->getOperands(), rows) ||
                                         llvm::is_contained(op->getOperands(), slots)))
        writtenLater = true;
    if (writtenLater)
      continue;

    auto type = cast<MemRefType>(rows.getType());
    OpBuilder builder(first);
    Location loc = first->getLoc();
    Value sharedRows = ScratchOp::create(builder, loc, type, /*offset=*/nullptr, /*slot=*/nullptr);
    Value sharedSlots = ScratchOp::create(builder, loc, type, /*offset=*/nullptr, /*slot=*/nullptr);
    Value tiles = ScratchOp::create(builder, loc, MemRefType::get({type.getDimSize(0)}, i32),
                                    /*offset=*/nullptr, /*slot=*/nullptr);
    ShareRowsOp::create(builder, loc, rows, slots, builder.getI64IntegerAttr(kTileRows),
                        builder.getI64IntegerAttr(minMissing), sharedRows, sharedSlots, tiles);
    ++numOrdered;
    for (Operation *reader : readers) {
      reader->replaceUsesOfWith(rows, sharedRows);
      reader->replaceUsesOfWith(slots, sharedSlots);
    }
    for (Operation *op : attentions) {
      if (auto attention = dyn_cast<AttentionOp>(op))
        attention.getSharedTilesMutable().assign(tiles);
      else
        cast<SparseAttentionOp>(op).getSharedTilesMutable().assign(tiles);
      ++numSharing;
    }
  }
}

void DhsShareTiles::runOnOperation() {
  // dhs.share_rows holds the option as its min_missing (a count of rows).
  if (minMissing < 0) {
    getOperation()->emitError() << "dhs-share-tiles: min-missing must be 0 or more, got "
                                << static_cast<int64_t>(minMissing);
    return signalPassFailure();
  }
  getOperation().walk([&](VerifyOp phase) { share(phase); });
}
