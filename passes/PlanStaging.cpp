//===- PlanStaging.cpp - one reused staging arena for a step --------------===//

#include "passes/Passes.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::dhs {
#define GEN_PASS_DEF_DHSPLANSTAGING
#include "passes/Passes.h.inc"
} // namespace mlir::dhs

using namespace mlir;
using namespace mlir::dhs;

/// Alignment of every buffer in the arena.
static constexpr int64_t kArenaAlignment = 256;

namespace {

/// A scratch buffer to place: its size and the span of the step, in op
/// order, during which it holds data.
struct Buffer {
  ScratchOp op;
  int64_t bytes = 0;
  int64_t start = 0, end = 0;
  /// Written by a fetch: staged rows of a layer group.
  bool staged = false;
  int64_t offset = -1;
  int64_t slot = -1;

  bool overlapsInTime(const Buffer &other) const {
    return start <= other.end && other.start <= end;
  }
  bool overlapsInSpace(int64_t offset, int64_t bytes) const {
    return this->offset < offset + bytes && offset < this->offset + this->bytes;
  }
};

struct DhsPlanStaging : public dhs::impl::DhsPlanStagingBase<DhsPlanStaging> {
  using Base::Base;
  void runOnOperation() final;

private:
  /// Removes fetches that repeat an earlier fetch of the same group's miss
  /// plan; their readers read the earlier fetch's staging.
  void replayMissPlans(func::FuncOp func);
};

/// True when `op` may write `buffer`: anything without declared effects, or
/// with a write effect on it (or on an unknown value).
bool mayWrite(Operation *op, Value buffer) {
  auto effects = dyn_cast<MemoryEffectOpInterface>(op);
  if (!effects)
    return !op->hasTrait<OpTrait::HasRecursiveMemoryEffects>();
  SmallVector<MemoryEffects::EffectInstance> instances;
  effects.getEffects(instances);
  return llvm::any_of(instances, [&](const MemoryEffects::EffectInstance &e) {
    return isa<MemoryEffects::Write>(e.getEffect()) && (!e.getValue() || e.getValue() == buffer);
  });
}

/// Bytes of a static memref.
int64_t getBytes(MemRefType type) {
  return type.getNumElements() * type.getElementTypeBitWidth() / 8;
}

} // namespace

void DhsPlanStaging::replayMissPlans(func::FuncOp func) {
  SmallVector<FetchOp> fetches;
  func.walk([&](FetchOp fetch) { fetches.push_back(fetch); });
  llvm::SmallPtrSet<Operation *, 8> erased;
  for (auto [i, first] : llvm::enumerate(fetches)) {
    if (erased.contains(first))
      continue;
    for (FetchOp later : ArrayRef(fetches).drop_front(i + 1)) {
      if (erased.contains(later) || later->getBlock() != first->getBlock() ||
          later.getPool() != first.getPool() || later.getRows() != first.getRows() ||
          later.getSlots() != first.getSlots() ||
          later.getHistoryStart() != first.getHistoryStart() ||
          later.getHistoryLen() != first.getHistoryLen() ||
          later.getStaging().getType() != first.getStaging().getType())
        continue;
      // Nothing in between may change the selection or the staged rows.
      bool clobbered = false;
      for (Operation *op = first->getNextNode(); op != later.getOperation();
           op = op->getNextNode()) {
        for (Value v : {first.getRows(), first.getSlots(), first.getStaging()})
          if (v && mayWrite(op, v))
            clobbered = true;
      }
      if (clobbered)
        continue;
      Value replaced = later.getStaging();
      replaced.replaceUsesWithIf(first.getStaging(), [&](OpOperand &use) {
        return use.getOwner() != later.getOperation();
      });
      erased.insert(later);
      later.erase();
      if (auto scratch = replaced.getDefiningOp<ScratchOp>(); scratch && scratch->use_empty())
        scratch.erase();
      ++numReplayed;
    }
  }
}

void DhsPlanStaging::runOnOperation() {
  func::FuncOp func = getOperation();
  replayMissPlans(func);

  // Number every op in program order (nested ones too): live ranges are
  // spans of these numbers.
  DenseMap<Operation *, int64_t> order;
  func.walk<WalkOrder::PreOrder>(
      [&](Operation *op) { order[op] = static_cast<int64_t>(order.size()); });

  std::vector<Buffer> buffers;
  func.walk([&](ScratchOp op) {
    MemRefType type = op.getBuffer().getType();
    Buffer buffer;
    buffer.op = op;
    buffer.bytes = llvm::alignTo(getBytes(type), kArenaAlignment);
    buffer.start = buffer.end = order[op];
    for (OpOperand &use : op.getBuffer().getUses()) {
      Operation *user = use.getOwner();
      // A use inside a phase keeps the buffer alive until the phase ends.
      buffer.end = std::max(buffer.end, order[user]);
      if (auto fetch = dyn_cast<FetchOp>(user); fetch && fetch.getStaging() == op.getBuffer())
        buffer.staged = true;
    }
    buffers.push_back(buffer);
  });

  // Staged rows: alternate between two slots in program order (one slot
  // without double buffering). A buffer whose lifetime collides with its
  // slot's previous tenant is placed like any other buffer below.
  std::array<int64_t, 2> slotBytes = {0, 0};
  std::array<const Buffer *, 2> lastInSlot = {nullptr, nullptr};
  int64_t nextSlot = 0;
  for (Buffer &buffer : buffers) {
    if (!buffer.staged)
      continue;
    int64_t slot = doubleBuffer ? nextSlot : 0;
    if (lastInSlot[slot] && lastInSlot[slot]->overlapsInTime(buffer))
      continue;
    buffer.slot = slot;
    slotBytes[slot] = std::max(slotBytes[slot], buffer.bytes);
    lastInSlot[slot] = &buffer;
    nextSlot = 1 - nextSlot;
  }
  int64_t slotsEnd = slotBytes[0] + slotBytes[1];
  for (Buffer &buffer : buffers)
    if (buffer.slot >= 0)
      buffer.offset = buffer.slot == 0 ? 0 : slotBytes[0];

  // Everything else: first fit past the slots among buffers live at the
  // same time, in order of first definition.
  int64_t arena = slotsEnd;
  for (Buffer &buffer : buffers) {
    if (buffer.offset >= 0)
      continue;
    int64_t offset = slotsEnd;
    bool moved = true;
    while (moved) {
      moved = false;
      for (const Buffer &placed : buffers) {
        if (placed.offset < 0 || &placed == &buffer || !placed.overlapsInTime(buffer) ||
            !placed.overlapsInSpace(offset, buffer.bytes))
          continue;
        offset = placed.offset + placed.bytes;
        moved = true;
      }
    }
    buffer.offset = offset;
    arena = std::max(arena, offset + buffer.bytes);
  }

  // Record the plan on the ops and on the function.
  Builder builder(&getContext());
  SmallVector<Attribute> entries;
  for (Buffer &buffer : buffers) {
    buffer.op.setOffsetAttr(builder.getI64IntegerAttr(buffer.offset));
    if (buffer.slot >= 0)
      buffer.op.setSlotAttr(builder.getI64IntegerAttr(buffer.slot));
    SmallVector<NamedAttribute> fields{
        builder.getNamedAttr("offset", builder.getI64IntegerAttr(buffer.offset)),
        builder.getNamedAttr("bytes", builder.getI64IntegerAttr(buffer.bytes)),
        builder.getNamedAttr("live", builder.getDenseI64ArrayAttr({buffer.start, buffer.end}))};
    if (buffer.slot >= 0)
      fields.push_back(builder.getNamedAttr("slot", builder.getI64IntegerAttr(buffer.slot)));
    entries.push_back(builder.getDictionaryAttr(fields));
  }
  DictionaryAttr plan = builder.getDictionaryAttr(
      {builder.getNamedAttr("arena_bytes", builder.getI64IntegerAttr(arena)),
       builder.getNamedAttr("slot_bytes", builder.getDenseI64ArrayAttr(slotBytes)),
       builder.getNamedAttr("buffers", builder.getArrayAttr(entries))});
  getContext().getLoadedDialect<DhsDialect>()->getStagingPlanAttrHelper().setAttr(func, plan);
  arenaBytes = arena;
}
