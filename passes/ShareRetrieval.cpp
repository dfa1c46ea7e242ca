//===- ShareRetrieval.cpp - one fetch of the union of missing rows --------===//

#include "passes/Passes.h"

namespace mlir::dhs {
#define GEN_PASS_DEF_DHSSHARERETRIEVAL
#include "passes/Passes.h.inc"
} // namespace mlir::dhs

using namespace mlir;
using namespace mlir::dhs;

namespace {

struct DhsShareRetrieval : public dhs::impl::DhsShareRetrievalBase<DhsShareRetrieval> {
  using Base::Base;
  void runOnOperation() final;

private:
  /// Rewrites `fetch` to fetch the union of its missing rows; returns false
  /// (leaving the IR alone) when its staged rows have readers other than
  /// attention over the same selection.
  bool share(FetchOp fetch);
};

} // namespace

bool DhsShareRetrieval::share(FetchOp fetch) {
  // A fetch of selections [B, Q, K] with Q > 1 positions; a fetch without
  // slots already lists missing rows only, and an overlapped one (ready
  // flags) shares its tiles with an attention that reads staging in
  // selection order, which a union's staging index would break. One that
  // writes back keeps its selections' ring entries: it stays per position.
  Value slots = fetch.getSlots();
  MemRefType rows = fetch.getRows().getType();
  if (!slots || fetch.getReady() || fetch.getWriteBack() || rows.getRank() != 3 ||
      !rows.hasStaticShape() || rows.getDimSize(1) < 2)
    return false;

  // Its staged rows must be read only by attention over the same selection,
  // in staging order (no index yet).
  FailureOr<SmallVector<AttentionOp>> readers = fetch.getSelectionOrderReaders();
  if (failed(readers))
    return false;

  int64_t batch = rows.getDimSize(0);
  int64_t selections = rows.getDimSize(1) * rows.getDimSize(2);
  Type i32 = IntegerType::get(&getContext(), 32);
  OpBuilder builder(fetch);
  Location loc = fetch.getLoc();
  Value missing = ScratchOp::create(builder, loc, MemRefType::get({batch, selections}, i32),
                                    /*offset=*/nullptr, /*slot=*/nullptr);
  Value remap = ScratchOp::create(builder, loc, MemRefType::get(rows.getShape(), i32),
                                  /*offset=*/nullptr, /*slot=*/nullptr);
  UnionMissingOp::create(builder, loc, fetch.getRows(), slots, missing, remap,
                         /*write_back=*/Value(), /*sources=*/Value());

  // Staging position i now holds union entry i: the same [B, Q*K] room.
  fetch.getRowsMutable().assign(missing);
  fetch.getSlotsMutable().clear();
  for (AttentionOp attention : *readers)
    attention.getStagingIndexMutable().assign(remap);
  return true;
}

void DhsShareRetrieval::runOnOperation() {
  SmallVector<FetchOp> fetches;
  getOperation().walk([&](VerifyOp phase) {
    for (auto fetch : phase.getBody().getOps<FetchOp>())
      fetches.push_back(fetch);
  });
  for (FetchOp fetch : fetches)
    if (share(fetch))
      ++numShared;
}
