//===- CpuTiers.cpp - The KV tiers in host memory, CPU attention ----------===//

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/Tiers.h"
#include "runtime/cpu/CpuAttention.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

namespace dhs::runtime {

TierBackend::~TierBackend() = default;

void TierBackend::setGraphs(bool on) {
  if (on)
    throw Error("CUDA graphs need the CUDA backend (this runtime runs on " + describe() + ")");
}

void TierBackend::setDraftStep(const Manifest &) {}

void TierBackend::setPlacementStep(const Manifest &, const ResidencyController &) {}

const std::int32_t *TierBackend::residencyMapSnapshot(std::int32_t) { return nullptr; }

void TierBackend::takeSelections(std::int32_t, const std::int32_t *, std::int64_t) {
  throw InputError("the " + describe() + " backend takes selections in host memory only");
}

const std::int32_t *TierBackend::selectionsOnHost(std::int32_t) {
  throw StateError("no selections were taken on the device");
}

void TierBackend::beginStep(std::uint32_t) {}

const TierBackend::StepLog &TierBackend::stepLog(std::int32_t) {
  throw StateError("the " + describe() + " backend keeps no step log");
}

const std::int32_t *TierBackend::recencySnapshot(std::int32_t) { return nullptr; }

void TierBackend::restoreRecency(const ResidencyController &) {}

DraftStepInfo draftStepInfo(const Manifest &m) {
  auto fail = [&](const std::string &what) {
    throw Error("the step " + m.directory + " is not a draft-ring step (" + what +
                "); compile one like examples/draft_ring_step.mlir: ring_append then ring_read "
                "in a dhs.draft region");
  };
  if (m.launches.size() != 4)
    fail(std::to_string(m.launches.size()) + " launches, expected 4");
  const char *ops[] = {"ring_index", "copy_rows", "ring_index", "copy_rows"};
  for (std::size_t i = 0; i < 4; ++i) {
    if (m.launches[i].op != ops[i])
      fail("launch " + std::to_string(i) + " is " + m.launches[i].op + ", expected " + ops[i]);
    const std::size_t params = i % 2 == 0 ? 2 : 4;
    if (m.launches[i].params.size() != params)
      fail("launch " + std::to_string(i) + " has " + std::to_string(m.launches[i].params.size()) +
           " parameters");
  }
  auto argumentOf = [&](std::size_t launch, std::size_t param) {
    const LaunchParam &p = m.launches[launch].params[param];
    if (p.source != ParamSource::Argument || p.argumentIndex < 0 ||
        p.argumentIndex >= static_cast<int>(m.arguments.size()))
      fail("parameter " + std::to_string(param) + " of launch " + std::to_string(launch) +
           " is not an argument");
    return p.argumentIndex;
  };
  DraftStepInfo info;
  info.positionsArgument = argumentOf(0, 0);
  info.rowsArgument = argumentOf(1, 0);
  info.ringArgument = argumentOf(1, 1);
  info.endsArgument = argumentOf(2, 0);
  info.windowArgument = argumentOf(3, 1);
  if (argumentOf(3, 0) != info.ringArgument)
    fail("the read does not gather from the ring the append scatters into");
  auto rows = [&](int index, const char *name) {
    const Argument &a = m.arguments[static_cast<std::size_t>(index)];
    if (a.isPool || a.dtype != DType::I8 || a.shape.size() != 4)
      fail(std::string("the ") + name + " are not an i8 memref [B, rows, a, b]");
    return a.shape;
  };
  auto lanes = [&](int index, const char *name) {
    const Argument &a = m.arguments[static_cast<std::size_t>(index)];
    if (a.isPool || a.dtype != DType::I32 || a.shape.size() != 1)
      fail(std::string("the ") + name + " are not an i32 memref [B]");
    return a.shape[0];
  };
  const std::vector<std::int64_t> ring = rows(info.ringArgument, "ring"),
                                  fresh = rows(info.rowsArgument, "appended rows"),
                                  window = rows(info.windowArgument, "rows read");
  info.lanes = ring[0];
  info.window = ring[1];
  info.block = fresh[1];
  info.readRows = window[1];
  info.tokenBytes = ring[2] * ring[3];
  for (const auto &shape : {fresh, window})
    if (shape[0] != info.lanes || shape[2] * shape[3] != info.tokenBytes)
      fail("the rings, appended rows and rows read disagree in batch or row bytes");
  if (lanes(info.positionsArgument, "positions") != info.lanes ||
      lanes(info.endsArgument, "ends") != info.lanes)
    fail("the positions or ends are not one per ring");
  if (info.lanes < 1 || info.window < 1 || info.block < 1 || info.readRows < 1)
    fail("an empty dimension");
  return info;
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
      throw CapacityError(
          "out of host memory for the CPU tiers (" + std::to_string(layout.pools()) + " pools x (" +
          std::to_string(layout.hostRows) + " host rows + " + std::to_string(layout.hbmSlots) +
          " slots) x " + std::to_string(layout.tokenBytes()) + " bytes)");
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
      for (std::int32_t l = layout_.firstLayer(copy.group);
           copy.slot >= 0 && l < layout_.endLayer(copy.group); l += layout_.layersPerPool) {
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
    if (shape.windowSize > 0) {
      // The lanes' rings of this pool, [B][R][token].
      const std::size_t ringBytes = static_cast<std::size_t>(layout_.windowRing) *
                                    static_cast<std::size_t>(layout_.tokenBytes());
      problem_.windowRing.assign(static_cast<std::size_t>(shape.batch) * ringBytes / 2, 0);
      for (std::int64_t b = 0; b < shape.batch; ++b)
        if (step.laneRequests[b] >= 0)
          std::memcpy(reinterpret_cast<std::uint8_t *>(problem_.windowRing.data()) +
                          static_cast<std::size_t>(b) * ringBytes,
                      windows_.at(step.laneRequests[b]).data() + pool * ringBytes, ringBytes);
      problem_.windowTokens.assign(step.windowTokens, step.windowTokens + shape.batch);
    }
    std::vector<bf16_t> out = backend_.run(problem_);
    std::copy(out.begin(), out.begin() + step.lanes * perLane * shape.vDim, step.output);
  }

  void finishStep() override {}
  bool acceptsDevicePointers() const override { return false; }

  // Draft rings: host vectors [W_draft][G * row_bytes] per group, plain
  // copies with the modulo arithmetic.
  void allocateDraftRings(std::int32_t index) override {
    const std::size_t ringBytes = static_cast<std::size_t>(layout_.draftWindow) *
                                  static_cast<std::size_t>(layout_.draftTokenBytes());
    std::vector<std::vector<std::uint8_t>> rings;
    try {
      rings.assign(static_cast<std::size_t>(layout_.groups()),
                   std::vector<std::uint8_t>(ringBytes, 0));
    } catch (const std::bad_alloc &) {
      throw CapacityError("out of host memory for the draft rings (" +
                          std::to_string(layout_.groups()) + " x " + std::to_string(ringBytes) +
                          " bytes)");
    }
    drafts_[index] = std::move(rings);
  }

  void freeDraftRings(std::int32_t index) override { drafts_.erase(index); }

  // Window rings: host vectors [pools][R][token] per request.
  void allocateWindowRings(std::int32_t index) override {
    const std::size_t bytes = static_cast<std::size_t>(layout_.pools()) *
                              static_cast<std::size_t>(layout_.windowRing) *
                              static_cast<std::size_t>(layout_.tokenBytes());
    try {
      windows_[index].assign(bytes, 0);
    } catch (const std::bad_alloc &) {
      windows_.erase(index);
      throw CapacityError("out of host memory for the window rings (" + std::to_string(bytes) +
                          " bytes)");
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

private:
  static std::uint8_t *bytes(std::vector<bf16_t> &v) {
    return reinterpret_cast<std::uint8_t *>(v.data());
  }

  std::uint8_t *draftRing(std::int32_t index, std::int32_t group) {
    auto it = drafts_.find(index);
    if (it == drafts_.end() || group < 0 || group >= layout_.groups())
      throw Error("no draft ring for request index " + std::to_string(index) + ", group " +
                  std::to_string(group));
    return it->second[static_cast<std::size_t>(group)].data();
  }
  std::size_t draftSlot(std::int64_t position) const {
    const std::int64_t w = layout_.draftWindow;
    return static_cast<std::size_t>(((position % w) + w) % w);
  }

  TierLayout layout_;
  CpuAttention backend_;
  std::unordered_map<std::int32_t, std::vector<std::vector<std::uint8_t>>>
      drafts_;                                                          // [index][group]
  std::unordered_map<std::int32_t, std::vector<std::uint8_t>> windows_; // [index]
  std::vector<std::vector<bf16_t>> host_;                               // [pool][host_rows * token]
  std::vector<std::vector<bf16_t>> hbm_;                                // [pool][slots * token]
  SparseAttentionProblem problem_;                                      // reused between layers
};

} // namespace

std::unique_ptr<TierBackend> makeCpuTiers(const TierLayout &layout, unsigned threads) {
  return std::make_unique<CpuTiers>(layout, threads);
}

} // namespace dhs::runtime
