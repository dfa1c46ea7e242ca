//===- CpuTiers.cpp - The KV tiers in host memory, CPU attention ----------===//

#include "runtime/CpuBackend.h"
#include "runtime/Error.h"
#include "runtime/Tiers.h"

#include <algorithm>
#include <cstring>

namespace dhs::runtime {

TierBackend::~TierBackend() = default;

namespace {

class CpuTiers final : public TierBackend {
public:
  CpuTiers(const TierLayout &layout, unsigned threads)
      : layout_(layout), backend_(CpuPrecision::Float, threads) {
    if (layout.rowBytes <= 0 || layout.rowBytes % 2 != 0)
      throw Error("the CPU backend needs rows of bf16 values (row_bytes " +
                  std::to_string(layout.rowBytes) + ")");
    const std::size_t rowBf16 = static_cast<std::size_t>(layout.rowBytes / 2);
    host_.resize(static_cast<std::size_t>(layout.layers));
    hbm_.resize(static_cast<std::size_t>(layout.layers));
    try {
      for (std::int32_t l = 0; l < layout.layers; ++l) {
        host_[static_cast<std::size_t>(l)].assign(
            static_cast<std::size_t>(layout.hostRows) * rowBf16, 0);
        hbm_[static_cast<std::size_t>(l)].assign(
            static_cast<std::size_t>(layout.hbmSlots) * rowBf16, 0);
      }
    } catch (const std::bad_alloc &) {
      throw CapacityError("out of host memory for the CPU tiers (" +
                          std::to_string(layout.layers) + " layers x (" +
                          std::to_string(layout.hostRows) + " host rows + " +
                          std::to_string(layout.hbmSlots) + " slots) x " +
                          std::to_string(layout.rowBytes) + " bytes)");
    }
  }

  std::string describe() const override { return "cpu"; }
  const TierLayout &layout() const override { return layout_; }

  std::uint8_t *hostRow(std::int32_t layer, std::int64_t row) override {
    return reinterpret_cast<std::uint8_t *>(host_[static_cast<std::size_t>(layer)].data()) +
           row * layout_.rowBytes;
  }

  void copyToHbm(const std::vector<RowCopy> &copies) override {
    for (const RowCopy &copy : copies)
      for (std::int32_t l = layout_.firstLayer(copy.group); l < layout_.endLayer(copy.group);
           ++l)
        std::memcpy(hbmRow(l, copy.slot), hostRow(l, copy.hostRow),
                    static_cast<std::size_t>(layout_.rowBytes));
  }

  const std::uint8_t *hbmSnapshot(std::int32_t layer) override {
    return hbmRow(layer, 0);
  }

  void attend(std::int32_t layer, const LayerStep &step) override {
    if (step.memory != MemorySpace::Host)
      throw InputError("the CPU backend takes host pointers only");
    const ProblemShape &shape = *step.shape;
    problem_.shape = shape;
    problem_.shape.hbmSlots = layout_.hbmSlots;
    problem_.shape.hostRows = layout_.hostRows;
    const std::int64_t perLane = shape.queries * shape.heads;
    problem_.queries.assign(step.queries, step.queries + step.lanes * perLane * shape.qkDim);
    problem_.queries.resize(static_cast<std::size_t>(shape.queryCount()), 0);
    problem_.rowIds.assign(step.rowIds, step.rowIds + shape.selectionCount());
    problem_.slots.assign(step.slots, step.slots + shape.selectionCount());
    problem_.historyStart.assign(step.historyStart, step.historyStart + shape.batch);
    problem_.historyLen.assign(step.historyLen, step.historyLen + shape.batch);
    problem_.hostStoreView = host_[static_cast<std::size_t>(layer)].data();
    problem_.hbmPoolView = hbm_[static_cast<std::size_t>(layer)].data();
    std::vector<bf16_t> out = backend_.run(problem_);
    std::copy(out.begin(), out.begin() + step.lanes * perLane * shape.vDim, step.output);
  }

  void finishStep() override {}
  bool acceptsDevicePointers() const override { return false; }

private:
  std::uint8_t *hbmRow(std::int32_t layer, std::int32_t slot) {
    return reinterpret_cast<std::uint8_t *>(hbm_[static_cast<std::size_t>(layer)].data()) +
           static_cast<std::int64_t>(slot) * layout_.rowBytes;
  }

  TierLayout layout_;
  CpuBackend backend_;
  std::vector<std::vector<bf16_t>> host_; // [layer][host_rows * row]
  std::vector<std::vector<bf16_t>> hbm_;  // [layer][slots * row]
  SparseAttentionProblem problem_;        // reused between layers
};

} // namespace

std::unique_ptr<TierBackend> makeCpuTiers(const TierLayout &layout, unsigned threads) {
  return std::make_unique<CpuTiers>(layout, threads);
}

} // namespace dhs::runtime
