//===- CpuTiers.cpp - The KV tiers in host memory, CPU attention ----------===//
//
// The CPU backend's tiers: host vectors for the host store, the HBM pools
// and the rings, and CpuAttention (float) over views of them (no copies per
// step). The same semantics as the CUDA tiers, checked against them by the
// unit tests.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Checked.h"
#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/Tiers.h"
#include "runtime/cpu/CpuAttention.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

namespace dhs::runtime {

TierStorage::~TierStorage() = default;
StepRunner::~StepRunner() = default;
RingStore::~RingStore() = default;

namespace {

/// " (injected fault)" while `fault` has failed since it was armed.
std::string injectedNote(Fault fault) {
  return faults::kCompiledIn && faults::failed(fault) ? " (injected fault)" : "";
}

/// The two tiers as host vectors [pool][rows x token], in bf16-sized units as
/// CpuAttention's views expect.
class CpuStorage final : public TierStorage {
public:
  explicit CpuStorage(const TierLayout &layout) : layout_(layout) {
    if (layout.rowBytes <= 0 || layout.tokenBytes() % 2 != 0)
      throw Error("the CPU tiers need an even number of bytes per token (row_bytes " +
                  std::to_string(layout.rowBytes) + ")");
    const std::size_t tokenUnits = static_cast<std::size_t>(layout.tokenBytes() / 2);
    host_.resize(static_cast<std::size_t>(layout.pools()));
    hbm_.resize(static_cast<std::size_t>(layout.pools()));
    try {
      if (DHS_FAULT(HostAlloc))
        throw std::bad_alloc();
      for (std::int32_t p = 0; p < layout.pools(); ++p) {
        host_[static_cast<std::size_t>(p)].assign(
            static_cast<std::size_t>(layout.hostRows) * tokenUnits, 0);
        hbm_[static_cast<std::size_t>(p)].assign(
            static_cast<std::size_t>(layout.hbmSlots) * tokenUnits, 0);
      }
    } catch (const std::bad_alloc &) {
      throw CapacityError(
          "out of host memory for the CPU tiers (" + std::to_string(layout.pools()) + " pools x (" +
          std::to_string(layout.hostRows) + " host rows + " + std::to_string(layout.hbmSlots) +
          " slots) x " + std::to_string(layout.tokenBytes()) + " bytes)" +
          injectedNote(Fault::HostAlloc));
    }
  }

  std::string describe() const override { return "cpu"; }
  const TierLayout &layout() const override { return layout_; }

  std::uint8_t *hostRow(std::int32_t layer, std::int64_t row) override {
    return bytes(host_[layout_.poolOf(layer)]) + row * layout_.tokenBytes() +
           layout_.layerOffset(layer);
  }

  void copyToHbm(const std::vector<RowCopy> &copies) override {
    if (DHS_FAULT(Copy))
      throw DeviceError("copying " + std::to_string(copies.size()) +
                        " host rows into the HBM tier failed (injected fault)");
    // Whole tokens of every pool of the copy's group (a pool per layer, or
    // the group's one pool).
    const std::size_t tokenBytes = static_cast<std::size_t>(layout_.tokenBytes());
    for (const RowCopy &copy : copies)
      for (std::int32_t l = layout_.firstLayer(copy.group);
           copy.slot >= 0 && l < layout_.endLayer(copy.group); l += layout_.layersPerPool) {
        const std::size_t pool = layout_.poolOf(l);
        std::memcpy(bytes(hbm_[pool]) + static_cast<std::size_t>(copy.slot) * tokenBytes,
                    bytes(host_[pool]) + static_cast<std::size_t>(copy.hostRow) * tokenBytes,
                    tokenBytes);
      }
    if (!copies.empty() && copies.front().slot >= 0 && DHS_FAULT(CorruptCopy)) {
      const std::size_t pool = layout_.poolOf(layout_.firstLayer(copies.front().group));
      bytes(hbm_[pool])[static_cast<std::size_t>(copies.front().slot) * tokenBytes] ^= 0xff;
    }
  }

  void writeSlot(std::int32_t layer, std::int32_t slot, const std::uint8_t *row) override {
    std::memcpy(bytes(hbm_[layout_.poolOf(layer)]) +
                    static_cast<std::size_t>(slot) *
                        static_cast<std::size_t>(layout_.tokenBytes()) +
                    layout_.layerOffset(layer),
                row, static_cast<std::size_t>(layout_.rowBytes));
  }

  // The CPU keeps no device residency state.
  void setPlacementStep(const Manifest &, const ResidencyController &) override {}
  void restoreRecency(const ResidencyController &) override {}
  const std::int32_t *recencySnapshot(std::int32_t) override { return nullptr; }
  const std::int32_t *residencyMapSnapshot(std::int32_t) override { return nullptr; }

  const std::uint8_t *hbmSnapshot(std::int32_t layer) override {
    return bytes(hbm_[layout_.poolOf(layer)]);
  }

  /// A pool's host store and HBM slots, for CpuAttention's views.
  const bf16_t *hostPool(std::size_t pool) const { return host_[pool].data(); }
  const bf16_t *hbmPool(std::size_t pool) const { return hbm_[pool].data(); }

private:
  static std::uint8_t *bytes(std::vector<bf16_t> &v) {
    return reinterpret_cast<std::uint8_t *>(v.data());
  }

  TierLayout layout_;
  std::vector<std::vector<bf16_t>> host_; // [pool][host_rows * token]
  std::vector<std::vector<bf16_t>> hbm_;  // [pool][slots * token]
};

/// Draft rings, host vectors [W_draft][G * row_bytes] per group, and window
/// rings, host vectors [pools][R][token] per request: plain copies with the
/// modulo arithmetic.
class CpuRings final : public RingStore {
public:
  explicit CpuRings(const TierLayout &layout) : layout_(layout) {}

  void setDraftStep(const Manifest &) override {}

  void allocateDraftRings(std::int32_t index) override {
    const std::size_t ringBytes = layout_.draftRingBytes();
    std::vector<std::vector<std::uint8_t>> rings;
    try {
      // (The rings stand for device memory: the CUDA tiers keep them in HBM.)
      if (DHS_FAULT(DeviceAlloc))
        throw std::bad_alloc();
      rings.assign(static_cast<std::size_t>(layout_.groups()),
                   std::vector<std::uint8_t>(ringBytes, 0));
    } catch (const std::bad_alloc &) {
      throw CapacityError("out of host memory for the draft rings (" +
                          std::to_string(layout_.groups()) + " x " + std::to_string(ringBytes) +
                          " bytes)" + injectedNote(Fault::DeviceAlloc));
    }
    drafts_[index] = std::move(rings);
  }

  void freeDraftRings(std::int32_t index) override { drafts_.erase(index); }

  void writeDraft(std::int32_t index, std::int32_t group, std::int64_t position, std::int64_t count,
                  const std::uint8_t *tokens) override {
    std::uint8_t *ring = draftRing(index, group);
    const std::size_t token = static_cast<std::size_t>(layout_.draftTokenBytes());
    for (std::int64_t i = 0; i < count; ++i)
      std::memcpy(ring + draftSlot(position + i) * token,
                  tokens + static_cast<std::size_t>(i) * token, token);
  }

  void readDraft(std::int32_t index, std::int32_t group, std::int64_t end, std::int64_t count,
                 std::uint8_t *tokens) override {
    const std::uint8_t *ring = draftRing(index, group);
    const std::size_t token = static_cast<std::size_t>(layout_.draftTokenBytes());
    for (std::int64_t i = 0; i < count; ++i)
      std::memcpy(tokens + static_cast<std::size_t>(i) * token,
                  ring + draftSlot(end - count + i) * token, token);
  }

  void allocateWindowRings(std::int32_t index) override {
    const std::size_t bytes = static_cast<std::size_t>(layout_.pools()) * layout_.windowRingBytes();
    try {
      if (DHS_FAULT(DeviceAlloc))
        throw std::bad_alloc();
      windows_[index].assign(bytes, 0);
    } catch (const std::bad_alloc &) {
      windows_.erase(index);
      throw CapacityError("out of host memory for the window rings (" + std::to_string(bytes) +
                          " bytes)" + injectedNote(Fault::DeviceAlloc));
    }
  }

  void freeWindowRings(std::int32_t index) override { windows_.erase(index); }

  void writeWindow(std::int32_t index, std::int64_t position, std::int64_t count,
                   const std::uint8_t *tokens) override {
    std::vector<std::uint8_t> &ring = windows_.at(index);
    forEachWindowCopy(layout_, position, count,
                      [&](std::size_t ringOffset, std::size_t tokenOffset, std::size_t bytes) {
                        std::memcpy(ring.data() + ringOffset, tokens + tokenOffset, bytes);
                      });
  }

  /// Request index `index`'s window ring of a pool [R][token].
  const std::uint8_t *windowRing(std::int32_t index, std::size_t pool) const {
    return windows_.at(index).data() + pool * layout_.windowRingBytes();
  }

private:
  std::uint8_t *draftRing(std::int32_t index, std::int32_t group) {
    auto it = drafts_.find(index);
    if (it == drafts_.end() || group < 0 || group >= layout_.groups())
      throw Error("no draft ring for request index " + std::to_string(index) + ", group " +
                  std::to_string(group));
    return it->second[static_cast<std::size_t>(group)].data();
  }
  std::size_t draftSlot(std::int64_t position) const {
    return static_cast<std::size_t>(floorMod(position, layout_.draftWindow));
  }

  TierLayout layout_;
  std::unordered_map<std::int32_t, std::vector<std::vector<std::uint8_t>>>
      drafts_;                                                          // [index][group]
  std::unordered_map<std::int32_t, std::vector<std::uint8_t>> windows_; // [index]
};

/// Runs each layer at once with CpuAttention over views of the tiers; the
/// selections are always in host memory (resolved by the Runtime).
class CpuStepRunner final : public StepRunner {
public:
  CpuStepRunner(const TierLayout &layout, const CpuStorage &storage, const CpuRings &rings,
                unsigned threads)
      : layout_(layout), storage_(storage), rings_(rings),
        attention_(CpuPrecision::Float, threads) {}

  bool acceptsDevicePointers() const override { return false; }
  bool resolvesOnDevice() const override { return false; }
  void takeSelections(std::int32_t, const std::int32_t *, std::int64_t) override {
    throw InputError("the cpu backend takes selections in host memory only");
  }
  const std::int32_t *selectionsOnHost(std::int32_t) override {
    throw StateError("no selections were taken on the device");
  }
  void beginStep(std::uint32_t) override {}
  const StepLog &stepLog(std::int32_t) override {
    throw StateError("the cpu backend keeps no step log");
  }
  bool stepLogsEarly() const override { return false; }

  void attend(std::int32_t layer, const LayerStep &step) override {
    if (step.memory != MemorySpace::Host)
      throw InputError("the CPU backend takes host pointers only");
    if (DHS_FAULT(Launch))
      throw DeviceError("layer " + std::to_string(layer) +
                        "'s attention failed to launch (injected fault)");
    const ProblemShape &shape = *step.shape;
    problem_.shape = shape;
    problem_.shape.hbmSlots = layout_.hbmSlots;
    problem_.shape.hostRows = layout_.hostRows;
    problem_.shape.layers = layout_.layersPerPool;
    problem_.shape.layer = layer % layout_.layersPerPool;
    problem_.shape.rowElems = layout_.tokenBytes() / 2;
    const std::size_t pool = layout_.poolOf(layer);
    const std::int64_t perLane = shape.queries * shape.heads;
    problem_.queries.assign(step.queries, step.queries + step.lanes * perLane * shape.qkDim);
    problem_.queries.resize(static_cast<std::size_t>(shape.queryCount()), 0);
    problem_.rowIds.assign(step.rowIds, step.rowIds + shape.selectionCount());
    problem_.slots.assign(step.slots, step.slots + shape.selectionCount());
    problem_.historyLen.assign(step.historyLen, step.historyLen + shape.batch);
    stageMissingRows(layer, step, pool);
    problem_.hbmPoolView = storage_.hbmPool(pool);
    if (shape.windowSize > 0) {
      // The lanes' rings of this pool, [B][R][token].
      const std::size_t ringBytes = layout_.windowRingBytes();
      problem_.windowRing.assign(static_cast<std::size_t>(shape.batch) * ringBytes / 2, 0);
      for (std::int64_t b = 0; b < shape.batch; ++b)
        if (step.laneRequests[b] >= 0)
          std::memcpy(reinterpret_cast<std::uint8_t *>(problem_.windowRing.data()) +
                          static_cast<std::size_t>(b) * ringBytes,
                      rings_.windowRing(step.laneRequests[b], pool), ringBytes);
      problem_.windowTokens.assign(step.windowTokens, step.windowTokens + shape.batch);
    }
    std::vector<bf16_t> out = attention_.run(problem_);
    std::copy(out.begin(), out.begin() + step.lanes * perLane * shape.vDim, step.output);
  }

  void finishStep() override {}

  void setGraphs(bool on) override {
    if (on)
      throw Error("CUDA graphs need the CUDA backend (this runtime runs on cpu)");
  }
  bool graphsOn() const override { return false; }
  TierGraphStats graphStats() const override { return {}; }
  const DeviceInfo *device() const override { return nullptr; }
  std::vector<KernelInfo> kernels() const override { return {}; }
  std::int64_t fetchedRows() override { return -1; }
  std::int64_t hostRowsRead(std::int32_t layer) override {
    return hostRowsRead_.empty() ? -1 : hostRowsRead_[static_cast<std::size_t>(layer)];
  }
  void setAcceptStep(const Manifest &, AcceptRule) override {}
  bool accept(const AcceptProblem &, std::int32_t *, std::int32_t *) override { return false; }

private:
  /// Shared retrieval: copies each distinct missing row (slot -1) of a lane
  /// from the host store once into staging and points its selections there
  /// (the problem's host store becomes the staging), counting the rows.
  void stageMissingRows(std::int32_t layer, const LayerStep &step, std::size_t pool) {
    const ProblemShape &shape = *step.shape;
    const std::int64_t perLane = shape.queries * shape.topk;
    const std::size_t tokenUnits = static_cast<std::size_t>(layout_.tokenBytes() / 2);
    const bf16_t *host = storage_.hostPool(pool);
    staging_.clear();
    std::int32_t staged = 0;
    for (std::int64_t b = 0; b < shape.batch; ++b) {
      stagedIndex_.clear();
      for (std::int64_t i = 0; i < perLane; ++i) {
        const std::size_t e = static_cast<std::size_t>(b * perLane + i);
        const std::int32_t row = problem_.rowIds[e];
        if (row < 0 || problem_.slots[e] >= 0)
          continue;
        auto [at, added] = stagedIndex_.emplace(row, staged);
        if (added) {
          const bf16_t *token =
              host + static_cast<std::size_t>(step.historyStart[b] + row) * tokenUnits;
          staging_.insert(staging_.end(), token, token + tokenUnits);
          ++staged;
        }
        problem_.rowIds[e] = at->second;
      }
    }
    // Staged rows are read at history start 0 + their index, inside every
    // lane's bounds.
    problem_.historyStart.assign(static_cast<std::size_t>(shape.batch), 0);
    for (std::int32_t &len : problem_.historyLen)
      len = std::max(len, staged);
    problem_.shape.hostRows = staged;
    problem_.hostStoreView = staged > 0 ? staging_.data() : nullptr;
    if (hostRowsRead_.empty())
      hostRowsRead_.assign(static_cast<std::size_t>(layout_.layers), -1);
    hostRowsRead_[static_cast<std::size_t>(layer)] = staged;
  }

  TierLayout layout_;
  const CpuStorage &storage_;
  const CpuRings &rings_;
  CpuAttention attention_;
  SparseAttentionProblem problem_; // reused between layers
  std::vector<bf16_t> staging_;    // the layer's missing rows [staged][token]
  std::unordered_map<std::int32_t, std::int32_t> stagedIndex_; // a lane's row -> staged index
  std::vector<std::int64_t> hostRowsRead_;                     // [layer]
};

} // namespace

Tiers makeCpuTiers(const TierLayout &layout, unsigned threads) {
  auto storage = std::make_unique<CpuStorage>(layout);
  auto rings = std::make_unique<CpuRings>(layout);
  auto runner = std::make_unique<CpuStepRunner>(layout, *storage, *rings, threads);
  return Tiers{std::move(storage), std::move(rings), std::move(runner)};
}

} // namespace dhs::runtime
