//===- DraftRing.cpp - draft KV ring ops to index arithmetic --------------===//

#include "passes/Passes.h"

namespace mlir::dhs {
#define GEN_PASS_DEF_DHSDRAFTRING
#include "passes/Passes.h.inc"
} // namespace mlir::dhs

using namespace mlir;
using namespace mlir::dhs;

namespace {

struct DhsDraftRing : public dhs::impl::DhsDraftRingBase<DhsDraftRing> {
  using Base::Base;
  void runOnOperation() final;
};

/// Emits the ring slots of `count` positions starting at `positions + offset`
/// into a new scratch buffer.
Value emitRingSlots(OpBuilder &builder, Location loc, Value positions, MemRefType ring,
                    int64_t count, int64_t offset) {
  Type i32 = builder.getI32Type();
  Value slots = ScratchOp::create(builder, loc, MemRefType::get({ring.getDimSize(0), count}, i32),
                                  /*offset=*/nullptr, /*slot=*/nullptr);
  RingIndexOp::create(builder, loc, positions, offset, ring.getDimSize(1), slots);
  return slots;
}

} // namespace

void DhsDraftRing::runOnOperation() {
  SmallVector<Operation *> ringOps;
  getOperation().walk([&](Operation *op) {
    if (isa<RingAppendOp, RingReadOp>(op))
      ringOps.push_back(op);
  });
  for (Operation *op : ringOps) {
    OpBuilder builder(op);
    Location loc = op->getLoc();
    if (auto append = dyn_cast<RingAppendOp>(op)) {
      MemRefType ring = append.getRing().getType();
      MemRefType rows = append.getRows().getType();
      if (!ring.hasStaticShape() || !rows.hasStaticShape()) {
        append.emitOpError() << "needs a static ring and row count to lower";
        return signalPassFailure();
      }
      // Position p lands in slot p mod W.
      Value slots = emitRingSlots(builder, loc, append.getPositions(), ring, rows.getDimSize(1),
                                  /*offset=*/0);
      CopyRowsOp::create(builder, loc, append.getRows(), append.getRing(),
                         /*src_index=*/Value(), /*dst_index=*/slots);
    } else {
      auto read = cast<RingReadOp>(op);
      MemRefType ring = read.getRing().getType();
      MemRefType rows = read.getRows().getType();
      if (!ring.hasStaticShape() || !rows.hasStaticShape()) {
        read.emitOpError() << "needs a static ring and row count to lower";
        return signalPassFailure();
      }
      // The N newest rows end at `positions` (exclusive): start N earlier.
      int64_t count = rows.getDimSize(1);
      Value slots =
          emitRingSlots(builder, loc, read.getPositions(), ring, count, /*offset=*/-count);
      CopyRowsOp::create(builder, loc, read.getRing(), read.getRows(),
                         /*src_index=*/slots, /*dst_index=*/Value());
    }
    op->erase();
    ++numLowered;
  }
}
