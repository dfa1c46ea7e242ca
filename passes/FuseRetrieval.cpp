//===- FuseRetrieval.cpp - attention that reads missing rows itself -------===//

#include "passes/Passes.h"

namespace mlir::dhs {
#define GEN_PASS_DEF_DHSFUSERETRIEVAL
#include "passes/Passes.h.inc"
} // namespace mlir::dhs

using namespace mlir;
using namespace mlir::dhs;

namespace {

struct DhsFuseRetrieval : public dhs::impl::DhsFuseRetrievalBase<DhsFuseRetrieval> {
  using Base::Base;
  void runOnOperation() final;

private:
  /// Fuses `fetch` into the attention ops that read its staged rows; returns
  /// false when the fetch must stay.
  bool fuse(FetchOp fetch);
};

} // namespace

bool DhsFuseRetrieval::fuse(FetchOp fetch) {
  // Union fetches (no slots) exist to be shared, overlapped ones (ready
  // flags) to run beside their attention: they stay staged.
  Value slots = fetch.getSlots();
  if (!slots || fetch.getReady())
    return false;
  Value staging = fetch.getStaging();
  FailureOr<SmallVector<AttentionOp>> readers = fetch.getSelectionOrderReaders();
  if (failed(readers) || readers->empty())
    return false;

  for (AttentionOp attention : *readers) {
    OpBuilder builder(attention);
    SparseAttentionOp::create(
        builder, attention.getLoc(), attention.getQueries(), attention.getRowIds(),
        attention.getSlots(), fetch.getHistoryStart(), fetch.getHistoryLen(), fetch.getWriteBack(),
        attention.getSharedTiles(), attention.getPool(), attention.getWindow(),
        attention.getWindowTokens(), attention.getOutput(), attention.getLayerAttr(),
        attention.getSoftmaxScaleAttr(), attention.getWindowSizeAttr());
    attention.erase();
    ++numFused;
  }
  fetch.erase();
  ++numFetchesRemoved;
  if (auto scratch = staging.getDefiningOp<ScratchOp>(); scratch && scratch->use_empty())
    scratch.erase();
  return true;
}

void DhsFuseRetrieval::runOnOperation() {
  SmallVector<FetchOp> fetches;
  getOperation().walk([&](FetchOp fetch) { fetches.push_back(fetch); });
  for (FetchOp fetch : fetches)
    (void)fuse(fetch);
}
