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
#include "runtime/core/LaunchForms.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/StepPlan.h"
#include "runtime/core/Tiers.h"
#include "runtime/cpu/CpuLaunches.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <unordered_map>

namespace dhs::runtime {

TierStorage::~TierStorage() = default;
StepRunner::~StepRunner() = default;

void StepRunner::setDecisionStep(const Manifest &, bool) {
  throw InputError("residency decisions on the device need the CUDA backend, steps that resolve "
                   "their selections there (dhs.resolve) and a placement step");
}
void StepRunner::setStepDecisions(bool) { throw StateError("no decision step is loaded"); }
void StepRunner::setEngineStream(void *stream) {
  if (stream)
    throw StateError(
        "the CPU backend runs no CUDA streams: an engine stream needs the CUDA backend");
}
void StepRunner::uploadDecisionState(std::int32_t, const DeviceGroupState &, std::int32_t) {
  throw StateError("no decision step is loaded");
}
void StepRunner::downloadDecisionState(std::int32_t, DeviceGroupState &) {
  throw StateError("no decision step is loaded");
}
void StepRunner::setDecisionBudget(std::int32_t, std::int32_t) {
  throw StateError("no decision step is loaded");
}
DeviceDecisionCounts StepRunner::decisionCounts(std::int32_t) const {
  throw StateError("no decision step is loaded");
}
void StepRunner::decisionList(std::int32_t, std::vector<std::int64_t> &,
                              std::vector<std::int32_t> &) const {
  throw StateError("no decision step is loaded");
}
void StepRunner::rollBackDecisions() {}
void StepRunner::setAgingStep(const Manifest &) {
  throw InputError("appends replayed on the device need the CUDA backend and a decision step");
}
void StepRunner::enqueueAging(const std::vector<AgingReplay> &) {
  throw StateError("no aging step is loaded");
}
std::vector<std::int32_t> StepRunner::agedSlots(std::int32_t, std::size_t) const {
  throw StateError("no aging step is loaded");
}
void StepRunner::waitForAging() {}
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
    if (layout.rowBytes <= 0 || layout.rowBytes % 2 != 0)
      throw Error("the CPU tiers need an even number of bytes per row (row_bytes " +
                  std::to_string(layout.rowBytes) + ")");
    const std::size_t pools = static_cast<std::size_t>(layout.pools());
    host_.resize(pools);
    hbm_.resize(pools);
    try {
      if (DHS_FAULT(HostAlloc))
        throw std::bad_alloc();
      for (std::size_t p = 0; p < pools; ++p) {
        const std::size_t tokenUnits = static_cast<std::size_t>(layout.tokenBytes(p) / 2);
        host_[p].assign(static_cast<std::size_t>(layout.hostRows) * tokenUnits, 0);
        hbm_[p].assign(static_cast<std::size_t>(layout.hbmSlots) * tokenUnits, 0);
      }
    } catch (const std::bad_alloc &) {
      throw CapacityError(
          "out of host memory for the CPU tiers ((" + std::to_string(layout.hostRows) +
          " host rows + " + std::to_string(layout.hbmSlots) + " slots) x " +
          std::to_string(layout.storedTokenBytes()) + " bytes in " +
          std::to_string(layout.pools()) + " pools)" + injectedNote(Fault::HostAlloc));
    }
  }

  std::string describe() const override { return "cpu"; }
  const TierLayout &layout() const override { return layout_; }

  std::uint8_t *hostRow(std::int32_t layer, std::int64_t row) override {
    return bytes(host_[layout_.poolOf(layer)]) + layout_.rowOffset(layer, row);
  }

  void waitForSubmittedWork() override {
    // (Nothing runs asynchronously on the CPU; tests make the wait fail.)
    if (DHS_FAULT(Wait))
      throw DeviceError("waiting for the submitted work failed (injected fault)");
  }

  void copyToHbm(const std::vector<RowCopy> &copies) override {
    if (DHS_FAULT(Copy))
      throw DeviceError("copying " + std::to_string(copies.size()) +
                        " host rows into the HBM tier failed (injected fault)");
    // Whole tokens of every pool of the copy's group (a pool per layer, or
    // the group's one pool).
    for (const RowCopy &copy : copies)
      for (std::int32_t l = layout_.firstLayer(copy.group);
           copy.slot >= 0 && l < layout_.endLayer(copy.group); l += layout_.layersPerPool) {
        const std::size_t pool = layout_.poolOf(l);
        const std::size_t tokenBytes = static_cast<std::size_t>(layout_.tokenBytes(pool));
        std::memcpy(bytes(hbm_[pool]) + static_cast<std::size_t>(copy.slot) * tokenBytes,
                    bytes(host_[pool]) + static_cast<std::size_t>(copy.hostRow) * tokenBytes,
                    tokenBytes);
      }
    if (!copies.empty() && copies.front().slot >= 0 && DHS_FAULT(CorruptCopy)) {
      const std::int32_t layer = layout_.firstLayer(copies.front().group);
      bytes(hbm_[layout_.poolOf(layer)])[layout_.rowOffset(layer, copies.front().slot)] ^= 0xff;
    }
  }

  void writeSlot(std::int32_t layer, std::int32_t slot, const std::uint8_t *row) override {
    std::memcpy(bytes(hbm_[layout_.poolOf(layer)]) + layout_.rowOffset(layer, slot), row,
                static_cast<std::size_t>(layout_.rowBytes));
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
/// rings, host vectors per request of each pool's [R][token] one after
/// another: plain copies with the modulo arithmetic.
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
    if (DHS_FAULT(RingWrite))
      throw DeviceError("writing draft tokens into layer group " + std::to_string(group) +
                        "'s ring failed (injected fault)");
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
    const std::size_t bytes = layout_.windowRingsBytes();
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
    if (DHS_FAULT(RingWrite))
      throw DeviceError("writing window tokens failed (injected fault)");
    std::vector<std::uint8_t> &ring = windows_.at(index);
    forEachWindowCopy(layout_, position, count,
                      [&](std::size_t ringOffset, std::size_t tokenOffset, std::size_t bytes) {
                        std::memcpy(ring.data() + ringOffset, tokens + tokenOffset, bytes);
                      });
  }

  /// Request index `index`'s window ring of a pool [R][token].
  const std::uint8_t *windowRing(std::int32_t index, std::size_t pool) const {
    return windows_.at(index).data() + layout_.windowRingOffset(pool);
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

/// Runs each layer at once: its launches of the compiled step (a
/// whole-model step's layer, or a one-layer step replayed for every layer)
/// with their kernels' semantics (CpuLaunches) over the step's argument
/// buffers, the staging arena the compiler planned and views of the tiers.
/// The selections are always in host memory (resolved by the Runtime).
class CpuStepRunner final : public StepRunner {
public:
  CpuStepRunner(const TierLayout &layout, const CpuStorage &storage, const CpuRings &rings,
                const std::vector<const Manifest *> &steps, unsigned threads)
      : layout_(layout), storage_(storage), rings_(rings), launches_(threads) {
    if (steps.empty())
      throw Error("the CPU tiers need a compiled step");
    for (const Manifest *step : steps) {
      steps_.push_back(*step);
      plans_.push_back(planStep(*step));
    }
    // One buffer per memref argument (the steps of a layer group's layer
    // indices take the same arguments) and the largest planned arena.
    const Manifest &first = steps_.front();
    buffers_.resize(first.arguments.size());
    memory_.arguments.assign(first.arguments.size(), nullptr);
    memory_.pools.resize(first.arguments.size());
    for (const Argument &arg : first.arguments) {
      if (arg.isPool)
        continue;
      buffers_[static_cast<std::size_t>(arg.index)].assign(arg.bytes(), 0);
      memory_.arguments[static_cast<std::size_t>(arg.index)] =
          buffers_[static_cast<std::size_t>(arg.index)].data();
    }
    std::int64_t arenaBytes = 0;
    for (const Manifest &step : steps_)
      arenaBytes = std::max(arenaBytes, step.arenaBytes);
    arena_.assign(static_cast<std::size_t>(arenaBytes), 0);
    memory_.arena = arena_.data();
    fetchedByLayer_.assign(static_cast<std::size_t>(layout.layers), -1);
    hostRowsByLayer_.assign(static_cast<std::size_t>(layout.layers), -1);
    groupShares_.assign(static_cast<std::size_t>(layout.groups()), -1.0);
    layerShares_.assign(static_cast<std::size_t>(layout.layers), 1.0);
  }

  bool acceptsDevicePointers() const override { return false; }
  bool resolvesOnDevice() const override { return false; }
  void takeSelections(std::int32_t, const std::int32_t *, std::int64_t) override {
    throw InputError("the cpu backend takes selections in host memory only");
  }
  const std::int32_t *selectionsOnHost(std::int32_t) override {
    throw StateError("no selections were taken on the device");
  }
  void beginStep(std::uint32_t) override {
    std::fill(fetchedByLayer_.begin(), fetchedByLayer_.end(), -1);
    std::fill(hostRowsByLayer_.begin(), hostRowsByLayer_.end(), -1);
  }
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
    // The step and layer of its plan that run this layer: a whole-model
    // step's own, or a one-layer step's (the one of the layer's index in its
    // pool where given) reading the layer's row of the pool's tokens.
    const bool wholeModel = plans_.front().wholeModel();
    const std::size_t index =
        wholeModel
            ? 0
            : std::min(static_cast<std::size_t>(layer % layout_.layersPerPool), steps_.size() - 1);
    const Manifest &manifest = steps_[index];
    const StepPlan &plan = plans_[index];
    const StepLayerPlan &planned = plan.layers[wholeModel ? static_cast<std::size_t>(layer) : 0];
    const StepGroupPlan &group = plan.groups[static_cast<std::size_t>(planned.group)];
    const ProblemShape &shape = *step.shape;
    auto put = [&](int argument, const void *data, std::size_t bytes) {
      std::vector<std::uint8_t> &buffer = buffers_[static_cast<std::size_t>(argument)];
      if (bytes > 0) // (data is null for an empty batch)
        std::memcpy(buffer.data(), data, bytes);
      std::fill(buffer.begin() + static_cast<std::ptrdiff_t>(bytes), buffer.end(), 0);
    };
    const std::size_t lanes = static_cast<std::size_t>(step.lanes);
    const std::size_t B = static_cast<std::size_t>(shape.batch);
    put(planned.queries, step.queries,
        lanes * static_cast<std::size_t>(shape.queries * shape.heads * shape.qkDim) *
            sizeof(bf16_t));
    const std::size_t selections = static_cast<std::size_t>(shape.selectionCount());
    put(group.rowIds, step.rowIds, selections * sizeof(std::int32_t));
    put(group.slots, step.slots, selections * sizeof(std::int32_t));
    put(plan.historyStart, step.historyStart, B * sizeof(std::int64_t));
    put(plan.historyLen, step.historyLen, B * sizeof(std::int32_t));
    const std::size_t pool = layout_.poolOf(layer);
    if (group.windowRing >= 0) {
      // The lanes' rings of this pool, [B][R][token].
      const std::size_t ringBytes = layout_.windowRingBytes(pool);
      std::vector<std::uint8_t> &ring = buffers_[static_cast<std::size_t>(group.windowRing)];
      std::fill(ring.begin(), ring.end(), 0);
      for (std::size_t b = 0; b < B; ++b)
        if (step.laneRequests[b] >= 0)
          std::memcpy(ring.data() + b * ringBytes, rings_.windowRing(step.laneRequests[b], pool),
                      ringBytes);
      put(plan.windowTokens, step.windowTokens, B * sizeof(std::int32_t));
    }
    CpuStepMemory::Pool &view = memory_.pools[static_cast<std::size_t>(group.pool)];
    view.hbm = reinterpret_cast<const std::uint8_t *>(storage_.hbmPool(pool));
    view.host = reinterpret_cast<const std::uint8_t *>(storage_.hostPool(pool));
    view.hbmSlots = layout_.hbmSlots;
    view.hostRows = layout_.hostRows;
    view.tokenBytes = layout_.tokenBytes(pool);
    memory_.status = 0;
    // The group's form, as the CUDA tiers choose it (LaunchForms.h).
    double &share = groupShares_[static_cast<std::size_t>(layer / layout_.layersPerGroup)];
    share = runtime::formShare(formLines(manifest, planned.firstLaunch, planned.endLaunch),
                               missingShare(step.missingRows, step.selectedRows), share);
    layerShares_[static_cast<std::size_t>(layer)] = share;
    launches_.resetFetched();
    try {
      launches_.run(manifest, planned.firstLaunch, planned.endLaunch, memory_,
                    wholeModel ? -1 : layer % layout_.layersPerPool, share);
    } catch (const std::bad_alloc &) {
      throw CapacityError("out of host memory for layer " + std::to_string(layer) +
                          "'s attention on the CPU" + injectedNote(Fault::HostAlloc));
    }
    if (memory_.status != 0)
      throw Error("the kernels rejected their input: status " + describeStatus(memory_.status));
    fetchedByLayer_[static_cast<std::size_t>(layer)] =
        launches_.fetched() ? launches_.fetchedRows() : -1;
    hostRowsByLayer_[static_cast<std::size_t>(layer)] = launches_.hostRowsRead();
    lastLayer_ = layer;
    if (lanes > 0) // (output is null for an empty batch)
      std::memcpy(step.output, buffers_[static_cast<std::size_t>(planned.output)].data(),
                  lanes * static_cast<std::size_t>(shape.queries * shape.heads * shape.vDim) *
                      sizeof(bf16_t));
  }

  void finishStep() override {}
  void abandonStep() override {}

  void setGraphs(bool on) override {
    if (on)
      throw Error("CUDA graphs need the CUDA backend (this runtime runs on cpu)");
  }
  bool graphsOn() const override { return false; }
  TierGraphStats graphStats() const override { return {}; }
  const DeviceInfo *device() const override { return nullptr; }
  std::vector<KernelInfo> kernels() const override { return {}; }
  std::int64_t arenaBytes() const override { return static_cast<std::int64_t>(arena_.size()); }
  std::int64_t hostRowsRead(std::int32_t layer) override {
    return hostRowsByLayer_[static_cast<std::size_t>(layer)];
  }
  double formShare(std::int32_t layer) const override {
    return layerShares_[static_cast<std::size_t>(layer)];
  }
  void setAcceptStep(const Manifest &, AcceptRule) override {}
  bool accept(const AcceptProblem &, std::int32_t *, std::int32_t *) override { return false; }
  void setTopKStep(const Manifest &) override {}
  bool topK(std::int64_t, const float *, const std::int32_t *, std::int32_t *) override {
    return false;
  }
  std::int64_t fetchedRows() override {
    return groupFetchedRows(lastLayer_ / layout_.layersPerGroup);
  }
  void setCountFetches(bool) override {}
  std::int64_t groupFetchedRows(std::int32_t group) override {
    // A whole-model step fetches in a group's first layer, a replayed
    // one-layer step in each (the same rows).
    std::int64_t rows = -1;
    for (std::int32_t l = layout_.firstLayer(group); l < layout_.endLayer(group); ++l)
      rows = std::max(rows, fetchedByLayer_[static_cast<std::size_t>(l)]);
    return rows;
  }

private:
  TierLayout layout_;
  const CpuStorage &storage_;
  const CpuRings &rings_;
  CpuLaunches launches_;
  std::vector<Manifest> steps_;
  std::vector<StepPlan> plans_;
  std::vector<std::vector<std::uint8_t>> buffers_; // by argument index
  std::vector<std::uint8_t> arena_;
  CpuStepMemory memory_;
  std::vector<double> groupShares_;           // the form each group ran last (-1: none)
  std::vector<double> layerShares_;           // the form each layer ran last
  std::vector<std::int64_t> fetchedByLayer_;  // this step's, -1: no fetch
  std::vector<std::int64_t> hostRowsByLayer_; // this step's host-store reads, -1: not run
  std::int32_t lastLayer_ = 0;
};

} // namespace

Tiers makeCpuTiers(const TierLayout &layout, const std::vector<const Manifest *> &steps,
                   unsigned threads) {
  auto storage = std::make_unique<CpuStorage>(layout);
  auto rings = std::make_unique<CpuRings>(layout);
  auto runner = std::make_unique<CpuStepRunner>(layout, *storage, *rings, steps, threads);
  return Tiers{std::move(storage), std::move(rings), std::move(runner)};
}

} // namespace dhs::runtime
