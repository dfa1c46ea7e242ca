//===- CpuTiers.cpp - The KV tiers in host memory, CPU attention ----------===//

#include "runtime/CpuBackend.h"
#include "runtime/Error.h"
#include "runtime/Tiers.h"

#include <algorithm>
#include <cstring>

namespace dhs::runtime {

TierBackend::~TierBackend() = default;

void TierBackend::setGraphs(bool on) {
  if (on)
    throw Error("CUDA graphs need the CUDA backend (this runtime runs on " + describe() + ")");
}

namespace {

class CpuTiers final : public TierBackend {
public:
  CpuTiers(const TierLayout &layout, unsigned threads)
      : layout_(layout), backend_(CpuPrecision::Float, threads) {
    if (layout.rowBytes <= 0 || layout.tokenBytes() % 2 != 0)
      throw Error("the CPU tiers need an even number of bytes per token (row_bytes " +
                  std::to_string(layout.rowBytes) + ")");
    // Stored as bf16-sized units, as the CPU backend's views expect.
    const std::size_t tokenUnits = static_cast<std::size_t>(layout.tokenBytes() / 2);
    host_.resize(static_cast<std::size_t>(layout.pools()));
    hbm_.resize(static_cast<std::size_t>(layout.pools()));
    try {
      for (std::int32_t p = 0; p < layout.pools(); ++p) {
        host_[static_cast<std::size_t>(p)].assign(
            static_cast<std::size_t>(layout.hostRows) * tokenUnits, 0);
        hbm_[static_cast<std::size_t>(p)].assign(
            static_cast<std::size_t>(layout.hbmSlots) * tokenUnits, 0);
      }
    } catch (const std::bad_alloc &) {
      throw CapacityError("out of host memory for the CPU tiers (" +
                          std::to_string(layout.pools()) + " pools x (" +
                          std::to_string(layout.hostRows) + " host rows + " +
                          std::to_string(layout.hbmSlots) + " slots) x " +
                          std::to_string(layout.tokenBytes()) + " bytes)");
    }
  }

  std::string describe() const override { return "cpu"; }
  const TierLayout &layout() const override { return layout_; }

  std::uint8_t *hostRow(std::int32_t layer, std::int64_t row) override {
    return reinterpret_cast<std::uint8_t *>(
               host_[static_cast<std::size_t>(layer / layout_.layersPerPool)].data()) +
           row * layout_.tokenBytes() + layout_.layerOffset(layer);
  }

  void copyToHbm(const std::vector<RowCopy> &copies) override {
    // Whole tokens of every pool of the copy's group (a pool per layer, or
    // the group's one pool).
    const std::size_t tokenBytes = static_cast<std::size_t>(layout_.tokenBytes());
    for (const RowCopy &copy : copies)
      for (std::int32_t l = layout_.firstLayer(copy.group); l < layout_.endLayer(copy.group);
           l += layout_.layersPerPool) {
        const std::size_t pool = static_cast<std::size_t>(l / layout_.layersPerPool);
        std::memcpy(bytes(hbm_[pool]) + static_cast<std::size_t>(copy.slot) * tokenBytes,
                    bytes(host_[pool]) + static_cast<std::size_t>(copy.hostRow) * tokenBytes,
                    tokenBytes);
      }
  }

  const std::uint8_t *hbmSnapshot(std::int32_t layer) override {
    return bytes(hbm_[static_cast<std::size_t>(layer / layout_.layersPerPool)]);
  }

  void attend(std::int32_t layer, const LayerStep &step) override {
    if (step.memory != MemorySpace::Host)
      throw InputError("the CPU backend takes host pointers only");
    const ProblemShape &shape = *step.shape;
    problem_.shape = shape;
    problem_.shape.hbmSlots = layout_.hbmSlots;
    problem_.shape.hostRows = layout_.hostRows;
    problem_.shape.layers = layout_.layersPerPool;
    problem_.shape.layer = layer % layout_.layersPerPool;
    problem_.shape.rowElems = layout_.tokenBytes() / 2;
    const std::size_t pool = static_cast<std::size_t>(layer / layout_.layersPerPool);
    const std::int64_t perLane = shape.queries * shape.heads;
    problem_.queries.assign(step.queries, step.queries + step.lanes * perLane * shape.qkDim);
    problem_.queries.resize(static_cast<std::size_t>(shape.queryCount()), 0);
    problem_.rowIds.assign(step.rowIds, step.rowIds + shape.selectionCount());
    problem_.slots.assign(step.slots, step.slots + shape.selectionCount());
    problem_.historyStart.assign(step.historyStart, step.historyStart + shape.batch);
    problem_.historyLen.assign(step.historyLen, step.historyLen + shape.batch);
    problem_.hostStoreView = host_[pool].data();
    problem_.hbmPoolView = hbm_[pool].data();
    std::vector<bf16_t> out = backend_.run(problem_);
    std::copy(out.begin(), out.begin() + step.lanes * perLane * shape.vDim, step.output);
  }

  void finishStep() override {}
  bool acceptsDevicePointers() const override { return false; }

private:
  static std::uint8_t *bytes(std::vector<bf16_t> &v) {
    return reinterpret_cast<std::uint8_t *>(v.data());
  }

  TierLayout layout_;
  CpuBackend backend_;
  std::vector<std::vector<bf16_t>> host_; // [pool][host_rows * token]
  std::vector<std::vector<bf16_t>> hbm_;  // [pool][slots * token]
  SparseAttentionProblem problem_;        // reused between layers
};

} // namespace

std::unique_ptr<TierBackend> makeCpuTiers(const TierLayout &layout, unsigned threads) {
  return std::make_unique<CpuTiers>(layout, threads);
}

} // namespace dhs::runtime
