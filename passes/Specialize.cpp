//===- Specialize.cpp - a serving configuration into static shapes --------===//

#include "passes/Passes.h"

namespace mlir::dhs {
#define GEN_PASS_DEF_DHSSPECIALIZE
#include "passes/Passes.h.inc"
} // namespace mlir::dhs

using namespace mlir;
using namespace mlir::dhs;

namespace {

/// What one dimension of an operand means: Selections = Q x K (a request's
/// selections, or its union of missing rows), Slots = the pool's HBM slots,
/// PlanEntries = 2 x B x Q x K (a plan's promotions, then its releases),
/// AppendEntries = 2 x B (an aging step's list: one recorded append per
/// request at most, its placements then its releases; AgeRowsLayout::entries).
enum class Dim {
  None,
  Request,
  Position,
  Head,
  TopK,
  Selections,
  Slots,
  PlanEntries,
  AppendEntries
};

struct DhsSpecialize : public dhs::impl::DhsSpecializeBase<DhsSpecialize> {
  using Base::Base;
  void runOnOperation() final;

private:
  /// The configured size of `dim`, or 0 when left open.
  int64_t sizeOf(Dim dim) const;
};

/// Meanings of the dimensions of operand `operand` of `op` (None beyond).
SmallVector<Dim, 4> getDims(Operation *op, OpOperand &operand) {
  Value v = operand.get();
  // Queries and outputs: [B, Q, H, dim]; selections: [B, Q, K].
  auto attentionDims = [&](Value queries, Value output,
                           ArrayRef<Value> selections) -> SmallVector<Dim, 4> {
    if (v == queries || v == output)
      return {Dim::Request, Dim::Position, Dim::Head, Dim::None};
    if (llvm::is_contained(selections, v))
      return {Dim::Request, Dim::Position, Dim::TopK};
    return {Dim::Request};
  };
  if (auto sparseAttention = dyn_cast<SparseAttentionOp>(op))
    return attentionDims(
        sparseAttention.getQueries(), sparseAttention.getOutput(),
        {sparseAttention.getRowIds(), sparseAttention.getSlots(), sparseAttention.getWriteBack()});
  if (auto attention = dyn_cast<AttentionOp>(op)) {
    if (v == attention.getStaging())
      return {Dim::Request, Dim::Selections, Dim::None, Dim::None};
    return attentionDims(
        attention.getQueries(), attention.getOutput(),
        {attention.getRowIds(), attention.getSlots(), attention.getStagingIndex()});
  }
  if (auto fetch = dyn_cast<FetchOp>(op)) {
    auto rows = cast<MemRefType>(fetch.getRows().getType());
    if (v == fetch.getStaging())
      return {Dim::Request, Dim::Selections, Dim::None, Dim::None};
    bool selections = v == fetch.getRows() || v == fetch.getSlots() || v == fetch.getWriteBack();
    if (selections && rows.getRank() == 3)
      return {Dim::Request, Dim::Position, Dim::TopK};
    if (selections)
      return {Dim::Request, Dim::Selections};
    return {Dim::Request};
  }
  if (auto unionMissing = dyn_cast<UnionMissingOp>(op)) {
    if (v == unionMissing.getMissing() || v == unionMissing.getSources())
      return {Dim::Request, Dim::Selections};
    return {Dim::Request, Dim::Position, Dim::TopK};
  }
  if (auto shareRows = dyn_cast<ShareRowsOp>(op))
    return v == shareRows.getTiles() ? SmallVector<Dim, 4>{Dim::Request}
                                     : SmallVector<Dim, 4>{Dim::Request, Dim::Position, Dim::TopK};
  if (isa<SortRowsOp>(op))
    return {Dim::Request, Dim::Selections};
  if (auto planPromotions = dyn_cast<PlanPromotionsOp>(op)) {
    if (v == planPromotions.getFetched() || v == planPromotions.getFetchedSources())
      return {Dim::Request, Dim::Selections};
    if (v == planPromotions.getHistoryStart())
      return {Dim::Request};
    if (v == planPromotions.getHot() || v == planPromotions.getCleared() ||
        v == planPromotions.getFree())
      return {Dim::Slots};
    if (v == planPromotions.getRows() || v == planPromotions.getSlots() ||
        v == planPromotions.getSources())
      return {Dim::PlanEntries};
    return {};
  }
  // The appends recorded between steps: one per request at most, [B, words].
  if (auto ageRows = dyn_cast<AgeRowsOp>(op)) {
    if (v == ageRows.getAppends())
      return {Dim::Request, Dim::None};
    if (v == ageRows.getHot() || v == ageRows.getCleared() || v == ageRows.getFree())
      return {Dim::Slots};
    if (v == ageRows.getRows() || v == ageRows.getSlots())
      return {Dim::AppendEntries};
    return {};
  }
  if (auto topk = dyn_cast<TopKOp>(op))
    return v == topk.getHistoryLen()
               ? SmallVector<Dim, 4>{Dim::Request}
               : SmallVector<Dim, 4>{Dim::Request, Dim::Position,
                                     v == topk.getRows() ? Dim::TopK : Dim::None};
  if (auto resolve = dyn_cast<ResolveOp>(op))
    return v == resolve.getRows() || v == resolve.getSlots() || v == resolve.getWriteBack()
               ? SmallVector<Dim, 4>{Dim::Request, Dim::Position, Dim::TopK}
               : SmallVector<Dim, 4>{Dim::Request};
  // Every other batched operand (rings, positions, acceptance): requests.
  if (isa<RingAppendOp, RingReadOp, RingIndexOp, CopyRowsOp, AcceptOp, DraftOp>(op))
    return {Dim::Request};
  return {};
}

} // namespace

int64_t DhsSpecialize::sizeOf(Dim dim) const {
  switch (dim) {
  case Dim::Request:
    return requests;
  case Dim::Position:
    return positions;
  case Dim::Head:
    return heads;
  case Dim::TopK:
    return topk;
  case Dim::Selections:
    return positions && topk ? positions * topk : 0;
  case Dim::Slots:
    return hbmSlots;
  case Dim::PlanEntries:
    return requests && positions && topk ? 2 * requests * positions * topk : 0;
  case Dim::AppendEntries:
    return requests > 0 ? static_cast<int64_t>(abi::AgeRowsLayout::entries(requests)) : 0;
  case Dim::None:
    return 0;
  }
  llvm_unreachable("unknown dimension");
}

void DhsSpecialize::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  Block &entry = func.getBody().front();
  SmallVector<Type> argTypes;
  for (BlockArgument arg : entry.getArguments()) {
    Type type = arg.getType();
    if (auto pool = dyn_cast<KVPoolType>(type)) {
      if (hbmSlots > 0 && !pool.isDynamicHbm() && pool.getHbmSlots() != hbmSlots) {
        func.emitError() << "argument #" << arg.getArgNumber() << " " << pool
                         << " disagrees with the configured capacities";
        return signalPassFailure();
      }
      // The host store's size is the runtime's (its rows grow with the
      // histories): the kernels take it as it comes.
      int64_t slots = hbmSlots > 0 && pool.isDynamicHbm() ? hbmSlots : pool.getHbmSlots();
      type = KVPoolType::get(&getContext(), pool.getFormat(), pool.getLayers(), slots,
                             pool.getHostRows());
    } else if (auto memref = dyn_cast<MemRefType>(type)) {
      SmallVector<int64_t> shape(memref.getShape());
      for (OpOperand &use : arg.getUses()) {
        SmallVector<Dim, 4> dims = getDims(use.getOwner(), use);
        for (auto [i, dim] : llvm::enumerate(dims)) {
          int64_t size = sizeOf(dim);
          if (i >= shape.size() || size <= 0)
            continue;
          if (!ShapedType::isDynamic(shape[i]) && shape[i] != size) {
            use.getOwner()->emitOpError()
                << "operand #" << use.getOperandNumber() << " has " << shape[i] << " in dimension "
                << i << " but the configuration says " << size;
            return signalPassFailure();
          }
          if (ShapedType::isDynamic(shape[i])) {
            shape[i] = size;
            ++numDims;
          }
        }
      }
      type = MemRefType::get(shape, memref.getElementType(), memref.getLayout(),
                             memref.getMemorySpace());
    }
    arg.setType(type);
    argTypes.push_back(type);
  }
  func.setType(FunctionType::get(&getContext(), argTypes, func.getFunctionType().getResults()));
}
