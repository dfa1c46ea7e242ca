//===- CudaTiers.cpp - The KV tiers on a CUDA device ----------------------===//
//
// The runtime's tiers on a GPU: per pool an HBM buffer [slots, P, row_bytes]
// (cuMemAlloc) and a host store [host_rows, P, row_bytes] in pinned memory
// mapped into the device's address space (the kernels read missing rows from
// it directly); one set of device buffers for the step's memref arguments,
// the status word, and pinned staging per layer for what is uploaded or
// downloaded. A step is stream-ordered on one stream: per layer, the padded
// selections, slot map, history bounds and queries are uploaded and the
// step's kernels launched; outputs are copied back; promotions (row copies
// from the host store into HBM slots) follow in the same stream, after the
// reads. The only host synchronization is finishStep's (the status word and
// host outputs), plus the waits of checks and of host-store writes between
// steps.
//
// Layer groups: when a pool holds a group's G layers, a compiled step reads
// one fixed layer of the token (its kernels take the layer as a constant),
// so the tiers hold G loaded steps, one per layer index, and layer l runs
// the step of index l % G. They share every buffer (same arguments).
//
// Draft rings: per request and layer group a device buffer [W_draft, G,
// row_bytes], allocated at admission, freed at finish. Only compiler-
// generated kernels touch them: a loaded draft-ring step (setDraftStep, e.g.
// examples/draft_ring_step.mlir) whose launches are ring_index + copy_rows.
// Its memrefs are one batch of B rings; the ring of the request is copied
// into lane 0 of a staging batch (cuMemcpyDtoDAsync), the append pair
// (positions) or the read pair (ends) runs over the batch as often as the
// step's block N / read window R require, and an append copies lane 0 back.
// Other lanes are scratch. An append of count >= N rows runs ceil(count / N)
// blocks, the last one overlapping its predecessor (rows rewritten with the
// same bytes); count < N rows are completed to a block by the ring's own
// rows just before `position`, read by the read pair first and rewritten
// unchanged. Each draft call ends with a stream synchronization and a check
// of the draft step's own status word.
//
// CUDA graphs (setGraphs): once a session's shapes are fixed, a step's work
// for all its layers (uploads from the pinned staging, kernels, downloads)
// is captured into one graph the first time and replayed afterwards. With
// graphs on, attend() only stages its inputs on the host; the whole step is
// launched by finishStep. A graph is reused while the step looks the same
// (the layers in order, the batch, where inputs and outputs live, device
// pointers), else captured again.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/Tiers.h"
#include "runtime/cuda/CudaResources.h"
#include "runtime/cuda/CudaStep.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

namespace dhs::runtime {

namespace {

using namespace cuda_detail;

/// A captured step graph and its executable; destroyed quietly.
class StepGraph {
public:
  StepGraph() = default;
  ~StepGraph() { reset(); }
  StepGraph(const StepGraph &) = delete;
  StepGraph &operator=(const StepGraph &) = delete;

  /// Takes ownership of a captured graph and instantiates it.
  void instantiate(CUgraph graph) {
    reset();
    graph_ = graph;
    driver().check(driver().graphInstantiate(&exec_, graph_, 0), "cuGraphInstantiate");
  }
  /// Launches the executable graph on `stream`.
  void launch(CUstream stream) const {
    driver().check(driver().graphLaunch(exec_, stream), "cuGraphLaunch");
  }
  /// True once instantiated.
  bool ready() const { return exec_ != nullptr; }
  /// Destroys the graph and its executable.
  void reset() {
    if (exec_)
      driver().graphExecDestroy(exec_);
    if (graph_)
      driver().graphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
  }

private:
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

class CudaTiers final : public TierBackend {
public:
  CudaTiers(const TierLayout &layout, const std::vector<const Manifest *> &steps, int ordinal)
      : layout_(layout) {
    if (steps.empty())
      throw Error("the CUDA tiers need at least one compiled step");
    const std::size_t expected =
        layout.layersPerPool > 1 ? static_cast<std::size_t>(layout.layersPerPool) : 1;
    if (steps.size() != expected)
      throw Error("the CUDA tiers over pools of " + std::to_string(layout.layersPerPool) +
                  " layers need " + std::to_string(expected) +
                  " compiled steps (one per layer index), got " + std::to_string(steps.size()));
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const ProblemShape shape = problemShapeFromManifest(*steps[i]);
      if (expected > 1 && shape.layer != static_cast<std::int64_t>(i))
        throw Error("the step " + steps[i]->directory + " reads layer " +
                    std::to_string(shape.layer) + " of its group's pool, expected layer " +
                    std::to_string(i));
      backends_.push_back(std::make_unique<CudaStep>(*steps[i], ordinal));
      for (const Launch &launch : steps[i]->launches)
        resolveLaunches_ = resolveLaunches_ || launch.op == "resolve";
    }
    const Manifest &manifest = *steps.front();
    const CudaDriver &cuda = driver();
    CudaStep &backend = *backends_.front();
    backend.makeCurrent();
    // Memory: check against what the device has before allocating.
    const std::size_t tokenBytes = static_cast<std::size_t>(layout.tokenBytes());
    const std::size_t hbmBytes =
        static_cast<std::size_t>(layout.pools()) * layout.hbmSlots * tokenBytes;
    std::size_t freeBytes = 0, totalBytes = 0;
    cuda.check(cuda.memGetInfo(&freeBytes, &totalBytes), "cuMemGetInfo");
    if (hbmBytes + (64u << 20) > freeBytes)
      throw CapacityError(
          "the HBM tier needs " + formatBytes(hbmBytes) + " (" + std::to_string(layout.pools()) +
          " pools x " + std::to_string(layout.hbmSlots) + " slots x " + std::to_string(tokenBytes) +
          " bytes), the device has " + formatBytes(freeBytes) + " free");
    for (std::int32_t p = 0; p < layout.pools(); ++p) {
      hbm_.push_back(std::make_unique<DeviceBuffer>(
          static_cast<std::size_t>(layout.hbmSlots) * tokenBytes, "HBM pool " + std::to_string(p)));
      host_.push_back(
          std::make_unique<MappedHostBuffer>(static_cast<std::size_t>(layout.hostRows) * tokenBytes,
                                             "host store " + std::to_string(p)));
    }
    // The step's memref arguments: one device buffer each, reused by every
    // layer (uploads are stream-ordered behind the previous layer's kernels).
    buffers_.arguments.assign(manifest.arguments.size(), 0);
    for (const Argument &arg : manifest.arguments) {
      if (arg.isPool)
        continue;
      std::size_t bytes = dtypeSize(arg.dtype);
      for (std::int64_t d : arg.shape)
        bytes *= static_cast<std::size_t>(d);
      arguments_.push_back(std::make_unique<DeviceBuffer>(bytes, roleName(arg.role)));
      buffers_.arguments[static_cast<std::size_t>(arg.index)] = arguments_.back()->get();
      argumentBytes_[static_cast<int>(arg.role)] = bytes;
      argumentIndex_[static_cast<int>(arg.role)] = arg.index;
    }
    status_ = std::make_unique<DeviceBuffer>(sizeof(std::uint32_t), "the status word");
    buffers_.status = status_->get();
    buffers_.hbmSlots = layout.hbmSlots;
    buffers_.hostRows = layout.hostRows;
    // The staging arena of staged steps (fetched rows, union lists), shared
    // by the layers: each layer's kernels run after the previous layer's.
    std::int64_t arenaBytes = 0;
    for (const Manifest *step : steps)
      arenaBytes = std::max(arenaBytes, step->arenaBytes);
    if (arenaBytes > 0) {
      arena_ =
          std::make_unique<DeviceBuffer>(static_cast<std::size_t>(arenaBytes), "the staging arena");
      buffers_.arena = arena_->get();
    }
    // Pinned staging per layer: selections, slots, history bounds, queries in;
    // output back.
    stagingIn_ =
        std::make_unique<MappedHostBuffer>(stagingInBytes() * layout.layers, "upload staging");
    stagingOut_ = std::make_unique<MappedHostBuffer>(bytesOf(ArgumentRole::Output) * layout.layers,
                                                     "download staging");
    stream_ = std::make_unique<Stream>();
    snapshot_.resize(static_cast<std::size_t>(layout.hbmSlots) * tokenBytes);
    describe_ = "cuda on " + backend.device().name + " (" + backend.device().arch + ")";
  }

  ~CudaTiers() override {
    try {
      backends_.front()->makeCurrent();
      driver().streamSynchronize(stream_->get());
      graph_.reset();
    } catch (...) {
    }
  }

  std::string describe() const override { return describe_; }
  const TierLayout &layout() const override { return layout_; }
  bool acceptsDevicePointers() const override { return true; }

  void setGraphs(bool on) override {
    if (stepOpen_)
      throw StateError("CUDA graphs can be turned on or off only between steps");
    if (on && !driver().graphsAvailable())
      throw Error("CUDA graphs are unavailable: " + driver().graphsUnavailableReason());
    graphs_ = on;
    if (!on) {
      backends_.front()->makeCurrent();
      graph_.reset();
      graphKey_.clear();
    }
  }
  bool graphsOn() const override { return graphs_; }
  TierGraphStats graphStats() const override { return graphStats_; }

  std::uint8_t *hostRow(std::int32_t layer, std::int64_t row) override {
    // The caller may write: nothing in flight may still read the store.
    quiesce();
    return static_cast<std::uint8_t *>(
               host_[static_cast<std::size_t>(layer / layout_.layersPerPool)]->host()) +
           row * layout_.tokenBytes() + layout_.layerOffset(layer);
  }

  void copyToHbm(const std::vector<RowCopy> &copies) override {
    backends_.front()->makeCurrent();
    if (placement_) {
      place(copies);
      return;
    }
    const std::size_t tokenBytes = static_cast<std::size_t>(layout_.tokenBytes());
    // Every copy is one token of one pool, from the mapped host store to its
    // slot; all of them go to the driver as one batch. (Releases need no
    // copy.)
    std::vector<CUdeviceptr> sources, destinations;
    for (const RowCopy &copy : copies)
      for (std::int32_t l = layout_.firstLayer(copy.group);
           copy.slot >= 0 && l < layout_.endLayer(copy.group); l += layout_.layersPerPool) {
        const std::size_t pool = static_cast<std::size_t>(l / layout_.layersPerPool);
        sources.push_back(host_[pool]->device() +
                          static_cast<std::size_t>(copy.hostRow) * tokenBytes);
        destinations.push_back(hbm_[pool]->get() +
                               static_cast<std::size_t>(copy.slot) * tokenBytes);
      }
    copyBatch(destinations, sources, tokenBytes, stream_->get(),
              "copying " + std::to_string(copies.size()) + " host rows into HBM slots");
    busy_ = busy_ || !copies.empty();
  }

  void setPlacementStep(const Manifest &manifest, const ResidencyController &controller) override {
    const CudaDriver &cuda = driver();
    backends_.front()->makeCurrent();
    quiesce();
    auto placement = std::make_unique<Placement>();
    placement->backend = std::make_unique<CudaStep>(manifest, backends_.front()->device().ordinal);
    placement->backend->makeCurrent();
    placement->rowsIndex = manifest.argument(ArgumentRole::PlaceRows).index;
    placement->slotsIndex = manifest.argument(ArgumentRole::PlaceSlots).index;
    placement->perLaunch =
        static_cast<std::size_t>(manifest.argument(ArgumentRole::PlaceRows).shape.at(0));
    placement->buffers.arguments.assign(manifest.arguments.size(), 0);
    placement->buffers.hbmSlots = layout_.hbmSlots;
    placement->buffers.hostRows = layout_.hostRows;
    placement->status =
        std::make_unique<DeviceBuffer>(sizeof(std::uint32_t), "the placement status");
    cuda.check(cuda.memsetD32(placement->status->get(), 0, 1), "clearing the placement status");
    placement->buffers.status = placement->status->get();
    const std::size_t mapBytes = static_cast<std::size_t>(layout_.hostRows) * sizeof(std::int32_t);
    const std::size_t slots = static_cast<std::size_t>(layout_.hbmSlots);
    // The step log: room for every selection of a step (resolving steps).
    const std::size_t logWords = resolveLaunches_
                                     ? StepLogLayout::words(bytesOf(ArgumentRole::RowIds) / 4)
                                     : StepLogLayout::kHeader;
    placement->logWords = logWords;
    for (std::int32_t g = 0; g < layout_.groups(); ++g) {
      const std::string group = std::to_string(g);
      placement->recency.push_back(
          std::make_unique<DeviceBuffer>(std::max<std::size_t>(2 * slots, 1) * sizeof(std::int32_t),
                                         "the replacement state of group " + group));
      placement->logs.push_back(std::make_unique<DeviceBuffer>(logWords * sizeof(std::int32_t),
                                                               "the step log of group " + group));
      cuda.check(cuda.memsetD32(placement->logs.back()->get(), 0, logWords), "clearing a step log");
      cuda.check(cuda.memsetD32(placement->logs.back()->get(), controller.stepCount(), 1),
                 "stamping a step log");
      const std::vector<std::int32_t> &table = controller.residencyTable(g);
      if (table.size() * sizeof(std::int32_t) != mapBytes)
        throw Error("the residency table of group " + std::to_string(g) + " has " +
                    std::to_string(table.size()) + " rows, the host store " +
                    std::to_string(layout_.hostRows));
      placement->maps.push_back(std::make_unique<DeviceBuffer>(
          mapBytes, "the residency map of group " + std::to_string(g)));
      cuda.check(cuda.memcpyHtoD(placement->maps.back()->get(), table.data(), mapBytes),
                 "uploading a residency map");
    }
    for (std::int32_t g = 0; g < layout_.groups(); ++g)
      placement->logReady.push_back(std::make_unique<Event>());
    placement->logsHost = std::make_unique<MappedHostBuffer>(
        static_cast<std::size_t>(layout_.groups()) * logWords * sizeof(std::int32_t),
        "the step logs' host copy");
    placement->done = std::make_unique<Event>();
    placement_ = std::move(placement);
    stepLogs_.assign(static_cast<std::size_t>(layout_.groups()), StepLog{});
    backends_.front()->makeCurrent();
    restoreRecency(controller);
  }

  void restoreRecency(const ResidencyController &controller) override {
    if (!placement_)
      return;
    const CudaDriver &cuda = driver();
    backends_.front()->makeCurrent();
    quiesce();
    const std::size_t slots = static_cast<std::size_t>(layout_.hbmSlots);
    std::vector<std::int32_t> recency(2 * slots);
    for (std::int32_t g = 0; g < layout_.groups() && slots > 0; ++g) {
      for (std::size_t s = 0; s < slots; ++s) {
        const auto [last, previous] = controller.slotRecency(g, static_cast<std::int32_t>(s));
        recency[2 * s] = static_cast<std::int32_t>(last);
        recency[2 * s + 1] = static_cast<std::int32_t>(previous);
      }
      cuda.check(cuda.memcpyHtoD(placement_->recency[static_cast<std::size_t>(g)]->get(),
                                 recency.data(), recency.size() * sizeof(std::int32_t)),
                 "uploading a replacement state");
    }
  }

  void beginStep(std::uint32_t step) override {
    if (!placement_ || !resolveLaunches_)
      return;
    const CudaDriver &cuda = driver();
    backends_.front()->makeCurrent();
    // Before any of the step's work (outside any graph: the step number
    // changes every step).
    for (const auto &log : placement_->logs) {
      cuda.check(cuda.memsetD32Async(log->get(), 0, StepLogLayout::kHeader, stream_->get()),
                 "clearing a step log");
      cuda.check(
          cuda.memsetD32Async(log->get() + StepLogLayout::kStep * 4, step, 1, stream_->get()),
          "stamping a step log");
    }
    busy_ = true;
  }

  /// Group g's log as the host copy made right after the group's first
  /// layer (see enqueue) holds it: the hits and misses its header counts.
  const StepLog &parseStepLog(std::size_t g) {
    Placement &p = *placement_;
    const std::size_t words = p.logWords;
    const std::size_t room = (words - StepLogLayout::kHeader) / 3;
    const std::int32_t *log = static_cast<const std::int32_t *>(p.logsHost->host()) + g * words;
    const auto hits = static_cast<std::uint32_t>(log[StepLogLayout::kHits]);
    const auto misses = static_cast<std::uint32_t>(log[StepLogLayout::kMisses]);
    if (hits > room || misses > room)
      throw Error("the step log of group " + std::to_string(g) +
                  " overflowed: " + std::to_string(hits) + " hits and " + std::to_string(misses) +
                  " misses, room for " + std::to_string(room));
    StepLog &out = stepLogs_[g];
    out.hitSlots.assign(log + StepLogLayout::kHeader, log + StepLogLayout::kHeader + hits);
    out.misses.assign(log + StepLogLayout::kHeader + room,
                      log + StepLogLayout::kHeader + room + 2 * misses);
    out.entries = static_cast<std::uint32_t>(log[StepLogLayout::kEntries]);
    return out;
  }

  const StepLog &stepLog(std::int32_t group) override {
    if (!resolvesOnDevice())
      throw StateError("no step log: the steps do not resolve on the device");
    if (group < 0 || group >= layout_.groups())
      throw OutOfRangeError("layer group " + std::to_string(group) + " does not exist");
    backends_.front()->makeCurrent();
    // Without graphs the group's copy is ready once its event is: the
    // later layers may still run. With graphs, after finishStep.
    if (!graphs_ && stepOpen_)
      driver().check(
          driver().eventSynchronize(placement_->logReady[static_cast<std::size_t>(group)]->get()),
          "waiting for a step log");
    else if (stepOpen_)
      throw StateError("the step logs of a CUDA-graph step arrive with finishStep");
    return parseStepLog(static_cast<std::size_t>(group));
  }

  bool stepLogsEarly() const override { return resolvesOnDevice() && !graphs_; }

  const std::int32_t *recencySnapshot(std::int32_t group) override {
    if (!placement_)
      return nullptr;
    const CudaDriver &cuda = driver();
    backends_.front()->makeCurrent();
    quiesce();
    recencySnapshot_.resize(2 * static_cast<std::size_t>(layout_.hbmSlots));
    if (!recencySnapshot_.empty())
      cuda.check(cuda.memcpyDtoH(recencySnapshot_.data(),
                                 placement_->recency.at(static_cast<std::size_t>(group))->get(),
                                 recencySnapshot_.size() * sizeof(std::int32_t)),
                 "reading a replacement state");
    return recencySnapshot_.data();
  }

  bool resolvesOnDevice() const override { return resolveLaunches_ && placement_; }

  void takeSelections(std::int32_t group, const std::int32_t *rowIds, std::int64_t count) override {
    const CudaDriver &cuda = driver();
    backends_.front()->makeCurrent();
    if (!resolvesOnDevice())
      throw Error(resolveLaunches_
                      ? "selections in device memory need the residency maps: load a "
                        "placement step"
                      : "selections in device memory need a step that resolves them on the "
                        "device (dhs.resolve before the attention)");
    const std::size_t bytes = bytesOf(ArgumentRole::RowIds);
    if (count < 0 || static_cast<std::size_t>(count) * sizeof(std::int32_t) > bytes)
      throw InputError(std::to_string(count) + " selections; the step takes " +
                       std::to_string(bytes / sizeof(std::int32_t)));
    if (selections_.empty())
      for (std::int32_t g = 0; g < layout_.groups(); ++g)
        selections_.push_back(std::make_unique<DeviceBuffer>(bytes, "selections"));
    CUstream stream = stream_->get();
    const std::size_t g = static_cast<std::size_t>(group);
    // -1 pads the lanes past the batch. The host never reads them in a
    // step: the resolve kernel logs what the controller books.
    cuda.check(cuda.memsetD32Async(selections_[g]->get(), 0xFFFFFFFFu, bytes / 4, stream),
               "padding the selections");
    if (count > 0)
      cuda.check(cuda.memcpyDtoDAsync(selections_[g]->get(), reinterpret_cast<CUdeviceptr>(rowIds),
                                      static_cast<std::size_t>(count) * sizeof(std::int32_t),
                                      stream),
                 "copying the engine's selections");
    busy_ = true;
  }

  const std::int32_t *selectionsOnHost(std::int32_t group) override {
    if (selections_.empty())
      throw StateError("no selections were taken on the device");
    const CudaDriver &cuda = driver();
    backends_.front()->makeCurrent();
    quiesce();
    const DeviceBuffer &taken = *selections_.at(static_cast<std::size_t>(group));
    selectionsHost_.resize(bytesOf(ArgumentRole::RowIds) / sizeof(std::int32_t));
    cuda.check(cuda.memcpyDtoH(selectionsHost_.data(), taken.get(),
                               selectionsHost_.size() * sizeof(std::int32_t)),
               "downloading selections");
    return selectionsHost_.data();
  }

  const std::int32_t *residencyMapSnapshot(std::int32_t group) override {
    if (!placement_)
      return nullptr;
    const CudaDriver &cuda = driver();
    backends_.front()->makeCurrent();
    quiesce();
    std::uint32_t word = 0;
    cuda.check(cuda.memcpyDtoH(&word, placement_->status->get(), sizeof(word)),
               "reading the placement status");
    if (word != 0)
      throw Error("the placement kernel rejected its input: status " + describeStatus(word));
    mapSnapshot_.resize(static_cast<std::size_t>(layout_.hostRows));
    cuda.check(cuda.memcpyDtoH(mapSnapshot_.data(),
                               placement_->maps.at(static_cast<std::size_t>(group))->get(),
                               mapSnapshot_.size() * sizeof(std::int32_t)),
               "reading a residency map");
    return mapSnapshot_.data();
  }

  const std::uint8_t *hbmSnapshot(std::int32_t layer) override {
    const CudaDriver &cuda = driver();
    quiesce();
    const std::size_t pool = static_cast<std::size_t>(layer / layout_.layersPerPool);
    if (!snapshot_.empty())
      cuda.check(cuda.memcpyDtoH(snapshot_.data(), hbm_[pool]->get(), snapshot_.size()),
                 "reading the HBM tier for a check");
    return snapshot_.data();
  }

  void attend(std::int32_t layer, const LayerStep &step) override {
    backends_.front()->makeCurrent();
    if (!stepOpen_) {
      stepOpen_ = true;
      hostOutputs_.clear();
      pending_.clear();
      if (!graphs_)
        driver().check(driver().memsetD32Async(buffers_.status, 0, 1, stream_->get()),
                       "clearing the status word");
    }
    LayerWork work = stage(layer, step);
    if (graphs_) {
      pending_.push_back(work); // launched as one graph by finishStep
    } else {
      enqueue(work);
      busy_ = true;
    }
  }

  void finishStep() override {
    const CudaDriver &cuda = driver();
    backends_.front()->makeCurrent();
    std::uint32_t word = 0;
    if (stepOpen_) {
      if (graphs_ && !pending_.empty()) {
        try {
          launchGraph();
        } catch (...) {
          stepOpen_ = false;
          pending_.clear();
          hostOutputs_.clear();
          cuda.streamSynchronize(stream_->get());
          throw;
        }
      }
      pending_.clear();
      cuda.check(cuda.memcpyDtoHAsync(&word, buffers_.status, sizeof(word), stream_->get()),
                 "reading the status word");
    }
    cuda.check(cuda.streamSynchronize(stream_->get()), "the step's kernels failed");
    busy_ = false;
    const bool wasOpen = stepOpen_;
    stepOpen_ = false;
    if (!wasOpen)
      return;
    if (word != 0)
      throw Error("the kernels rejected their input: status " + describeStatus(word));
    // Every output element of the engine's lanes was written (the poison
    // is a NaN the kernels never produce).
    for (const HostOutput &o : hostOutputs_) {
      const auto *values = static_cast<const bf16_t *>(o.staging);
      std::size_t unwritten = 0;
      for (std::size_t i = 0; i < o.bytes / sizeof(bf16_t); ++i)
        unwritten += values[i] == kBf16Poison;
      if (unwritten)
        throw Error(std::to_string(unwritten) + " output elements were not written by the kernels");
      std::memcpy(o.destination, o.staging, o.bytes);
    }
    hostOutputs_.clear();
  }

  void setDraftStep(const Manifest &manifest) override {
    const CudaDriver &cuda = driver();
    const DraftStepInfo info = draftStepInfo(manifest);
    auto draft = std::make_unique<Draft>();
    draft->info = info;
    draft->backend = std::make_unique<CudaStep>(manifest, backends_.front()->device().ordinal);
    backends_.front()->makeCurrent();
    draft->buffers.arguments.assign(manifest.arguments.size(), 0);
    for (const Argument &arg : manifest.arguments) {
      std::size_t bytes = dtypeSize(arg.dtype);
      for (std::int64_t d : arg.shape)
        bytes *= static_cast<std::size_t>(d);
      draft->arguments.push_back(std::make_unique<DeviceBuffer>(
          bytes, std::string("draft step argument ") + std::to_string(arg.index)));
      cuda.check(
          cuda.memsetD32(draft->arguments.back()->get(), 0, std::max<std::size_t>(bytes, 16) / 4),
          "clearing a draft step argument");
      draft->buffers.arguments[static_cast<std::size_t>(arg.index)] =
          draft->arguments.back()->get();
    }
    draft->arena = std::make_unique<DeviceBuffer>(
        static_cast<std::size_t>(std::max<std::int64_t>(manifest.arenaBytes, 16)),
        "the draft step's arena");
    draft->status = std::make_unique<DeviceBuffer>(sizeof(std::uint32_t), "the draft status word");
    draft->buffers.arena = draft->arena->get();
    draft->buffers.status = draft->status->get();
    draft_ = std::move(draft);
  }

  void allocateDraftRings(std::int32_t index) override {
    const CudaDriver &cuda = driver();
    backends_.front()->makeCurrent();
    const std::size_t ringBytes = draftRingBytes();
    const std::size_t total = ringBytes * static_cast<std::size_t>(layout_.groups());
    std::size_t freeBytes = 0, totalBytes = 0;
    cuda.check(cuda.memGetInfo(&freeBytes, &totalBytes), "cuMemGetInfo");
    if (total + (16u << 20) > freeBytes)
      throw CapacityError("the draft rings of a request need " + formatBytes(total) +
                          ", the device has " + formatBytes(freeBytes) + " free");
    std::vector<std::unique_ptr<DeviceBuffer>> rings;
    const std::vector<std::uint8_t> zeros(ringBytes, 0);
    for (std::int32_t g = 0; g < layout_.groups(); ++g) {
      rings.push_back(std::make_unique<DeviceBuffer>(ringBytes, "the draft ring of group " +
                                                                    std::to_string(g)));
      cuda.check(cuda.memcpyHtoD(rings.back()->get(), zeros.data(), ringBytes),
                 "clearing a draft ring");
    }
    drafts_[index] = std::move(rings);
  }

  void allocateWindowRings(std::int32_t index) override {
    const CudaDriver &cuda = driver();
    backends_.front()->makeCurrent();
    const std::size_t bytes = static_cast<std::size_t>(layout_.pools()) *
                              static_cast<std::size_t>(layout_.windowRing) *
                              static_cast<std::size_t>(layout_.tokenBytes());
    std::size_t freeBytes = 0, totalBytes = 0;
    cuda.check(cuda.memGetInfo(&freeBytes, &totalBytes), "cuMemGetInfo");
    if (bytes + (16u << 20) > freeBytes)
      throw CapacityError("the window rings of a request need " + formatBytes(bytes) +
                          ", the device has " + formatBytes(freeBytes) + " free");
    auto ring = std::make_unique<DeviceBuffer>(bytes, "a request's window rings");
    cuda.check(cuda.memsetD32(ring->get(), 0, bytes / 4), "clearing window rings");
    windows_[index] = std::move(ring);
  }

  void freeWindowRings(std::int32_t index) override {
    auto it = windows_.find(index);
    if (it == windows_.end())
      return;
    backends_.front()->makeCurrent();
    quiesce(); // nothing in flight may still read the rings
    windows_.erase(it);
  }

  void writeWindow(std::int32_t index, std::int64_t position, std::int64_t count,
                   const std::uint8_t *tokens) override {
    const CudaDriver &cuda = driver();
    backends_.front()->makeCurrent();
    quiesce(); // steps in flight may read the slots being rewritten
    const CUdeviceptr ring = windows_.at(index)->get();
    forEachWindowCopy(layout_, position, count,
                      [&](std::size_t ringOffset, std::size_t tokenOffset, std::size_t bytes) {
                        cuda.check(cuda.memcpyHtoD(ring + ringOffset, tokens + tokenOffset, bytes),
                                   "writing a window token");
                      });
  }

  void freeDraftRings(std::int32_t index) override {
    auto it = drafts_.find(index);
    if (it == drafts_.end())
      return;
    backends_.front()->makeCurrent();
    quiesce(); // nothing in flight may still use the rings
    drafts_.erase(it);
  }

  void writeDraft(std::int32_t index, std::int32_t group, std::int64_t position, std::int64_t count,
                  const std::uint8_t *tokens) override {
    const CudaDriver &cuda = driver();
    Draft &d = requireDraft();
    const CUdeviceptr ring = draftRing(index, group);
    beginDraft(d, ring);
    const DraftStepInfo &info = d.info;
    const std::size_t token = static_cast<std::size_t>(info.tokenBytes);
    const CUdeviceptr rows = d.argument(info.rowsArgument);
    CUstream stream = stream_->get();
    if (count < info.block) {
      // Complete the block with the ring's own rows before `position`.
      const std::int64_t prefix = info.block - count;
      draftRead(d, position);
      cuda.check(cuda.memcpyDtoDAsync(rows,
                                      d.argument(info.windowArgument) +
                                          static_cast<std::size_t>(info.readRows - prefix) * token,
                                      static_cast<std::size_t>(prefix) * token, stream),
                 "staging the ring's rows before the append");
      cuda.check(cuda.memcpyHtoDAsync(rows + static_cast<std::size_t>(prefix) * token, tokens,
                                      static_cast<std::size_t>(count) * token, stream),
                 "uploading draft rows");
      draftAppend(d, position - prefix);
    } else {
      for (std::int64_t offset = 0; offset < count; offset += info.block) {
        const std::int64_t start = std::min(offset, count - info.block);
        cuda.check(cuda.memcpyHtoDAsync(rows, tokens + static_cast<std::size_t>(start) * token,
                                        static_cast<std::size_t>(info.block) * token, stream),
                   "uploading draft rows");
        draftAppend(d, position + start);
      }
    }
    // Lane 0 back into the request's ring.
    cuda.check(cuda.memcpyDtoDAsync(ring, d.argument(info.ringArgument), draftRingBytes(), stream),
               "copying the draft ring back");
    endDraft(d, "appending draft rows");
  }

  void readDraft(std::int32_t index, std::int32_t group, std::int64_t end, std::int64_t count,
                 std::uint8_t *tokens) override {
    const CudaDriver &cuda = driver();
    Draft &d = requireDraft();
    beginDraft(d, draftRing(index, group));
    const DraftStepInfo &info = d.info;
    const std::size_t token = static_cast<std::size_t>(info.tokenBytes);
    const std::int64_t first = end - count;
    for (std::int64_t chunkEnd = end; chunkEnd > first; chunkEnd -= info.readRows) {
      draftRead(d, chunkEnd);
      // Row i of the window holds position chunkEnd - R + i.
      const std::int64_t from = std::max(first, chunkEnd - info.readRows);
      cuda.check(cuda.memcpyDtoHAsync(
                     tokens + static_cast<std::size_t>(from - first) * token,
                     d.argument(info.windowArgument) +
                         static_cast<std::size_t>(from - (chunkEnd - info.readRows)) * token,
                     static_cast<std::size_t>(chunkEnd - from) * token, stream_->get()),
                 "downloading draft rows");
    }
    endDraft(d, "reading draft rows");
  }

private:
  /// The loaded placement step (dhs.place_rows), its lists and the groups'
  /// residency maps.
  struct Placement {
    std::unique_ptr<CudaStep> backend;
    int rowsIndex = -1, slotsIndex = -1;
    std::size_t perLaunch = 0;                          // N: rows per launch
    std::vector<std::unique_ptr<DeviceBuffer>> maps;    // [group]
    std::vector<std::unique_ptr<DeviceBuffer>> recency; // [group] [slots x 2]
    std::vector<std::unique_ptr<DeviceBuffer>> logs;    // [group] step logs
    std::size_t logWords = 0;                           // words per log
    std::unique_ptr<MappedHostBuffer> logsHost;         // [group x logWords]
    std::vector<std::unique_ptr<Event>> logReady;       // [group] logsHost holds it
    std::unique_ptr<MappedHostBuffer> lists;            // rows then slots per launch
    std::size_t listLaunches = 0;                       // launches lists has room for
    std::unique_ptr<DeviceBuffer> status;
    std::unique_ptr<Event> done; // after the last placement
    bool pending = false;        // `done` was recorded
    CudaStepBuffers buffers;
  };

  /// Carries out copies and releases with the placement kernel: per group,
  /// lists of N (row, slot) pairs read by the kernel from mapped pinned
  /// memory, one launch per list and pool of the group.
  void place(const std::vector<RowCopy> &changes) {
    if (changes.empty())
      return;
    const CudaDriver &cuda = driver();
    Placement &p = *placement_;
    const std::size_t n = p.perLaunch;
    std::map<std::int32_t, std::vector<const RowCopy *>> byGroup;
    for (const RowCopy &change : changes)
      byGroup[change.group].push_back(&change);
    std::size_t launches = 0;
    for (const auto &[group, list] : byGroup)
      launches += (list.size() + n - 1) / n;
    // The lists of the previous placement may still be read: wait for it
    // (between steps; it has long finished by now).
    if (p.pending)
      cuda.check(cuda.eventSynchronize(p.done->get()), "waiting for the last placement");
    if (launches > p.listLaunches) {
      p.lists = std::make_unique<MappedHostBuffer>(launches * n * 12, "the placement lists");
      p.listLaunches = launches;
    }
    auto *base = static_cast<std::uint8_t *>(p.lists->host());
    std::size_t launch = 0;
    for (const auto &[group, list] : byGroup) {
      for (std::size_t begin = 0; begin < list.size(); begin += n, ++launch) {
        auto *rows = reinterpret_cast<std::int64_t *>(base + launch * n * 12);
        auto *slots = reinterpret_cast<std::int32_t *>(rows + n);
        for (std::size_t i = 0; i < n; ++i) {
          const bool used = begin + i < list.size();
          rows[i] = used ? list[begin + i]->hostRow : -1;
          slots[i] = used ? list[begin + i]->slot : -1;
        }
        const CUdeviceptr device = p.lists->device() + launch * n * 12;
        p.buffers.arguments[static_cast<std::size_t>(p.rowsIndex)] = device;
        p.buffers.arguments[static_cast<std::size_t>(p.slotsIndex)] = device + n * 8;
        p.buffers.map = p.maps[static_cast<std::size_t>(group)]->get();
        p.buffers.recency = p.recency[static_cast<std::size_t>(group)]->get();
        p.buffers.log = p.logs[static_cast<std::size_t>(group)]->get();
        p.buffers.logWords = static_cast<std::int64_t>(p.logWords);
        for (std::int32_t l = layout_.firstLayer(group); l < layout_.endLayer(group);
             l += layout_.layersPerPool) {
          const std::size_t pool = static_cast<std::size_t>(l / layout_.layersPerPool);
          p.buffers.hbm = hbm_[pool]->get();
          p.buffers.host = host_[pool]->device();
          p.backend->launchAsync(p.buffers, stream_->get());
        }
      }
    }
    cuda.check(cuda.eventRecord(p.done->get(), stream_->get()), "recording the placement");
    p.pending = true;
    busy_ = true;
  }

  /// The loaded draft-ring step and its buffers (lane 0 is the request's).
  struct Draft {
    DraftStepInfo info;
    std::unique_ptr<CudaStep> backend;
    std::vector<std::unique_ptr<DeviceBuffer>> arguments;
    std::unique_ptr<DeviceBuffer> arena, status;
    CudaStepBuffers buffers;
    CUdeviceptr argument(int index) const {
      return buffers.arguments[static_cast<std::size_t>(index)];
    }
  };

  std::size_t draftRingBytes() const {
    return static_cast<std::size_t>(layout_.draftWindow) *
           static_cast<std::size_t>(layout_.draftTokenBytes());
  }
  Draft &requireDraft() {
    if (!draft_)
      throw StateError("the CUDA tiers run the draft rings with the compiler's ring kernels: "
                       "load a compiled draft-ring step first (Runtime::loadDraftStep, "
                       "dhs_runtime_load_draft_step; e.g. dhs-compile "
                       "examples/draft_ring_step.mlir)");
    return *draft_;
  }
  CUdeviceptr draftRing(std::int32_t index, std::int32_t group) const {
    auto it = drafts_.find(index);
    if (it == drafts_.end() || group < 0 || group >= layout_.groups())
      throw Error("no draft ring for request index " + std::to_string(index) + ", group " +
                  std::to_string(group));
    return it->second[static_cast<std::size_t>(group)]->get();
  }
  /// Waits for other work, clears the draft status, stages `ring` in lane 0.
  void beginDraft(Draft &d, CUdeviceptr ring) {
    const CudaDriver &cuda = driver();
    backends_.front()->makeCurrent();
    quiesce();
    busy_ = true;
    cuda.check(cuda.memsetD32Async(d.buffers.status, 0, 1, stream_->get()),
               "clearing the draft status word");
    cuda.check(cuda.memcpyDtoDAsync(d.argument(d.info.ringArgument), ring, draftRingBytes(),
                                    stream_->get()),
               "staging a draft ring");
  }
  /// Sets lane 0 of an i32 [B] argument to `position` mod W.
  void setLane(Draft &d, int argument, std::int64_t position) {
    const std::int64_t w = d.info.window;
    const std::int32_t value = static_cast<std::int32_t>(((position % w) + w) % w);
    driver().check(
        driver().memcpyHtoDAsync(d.argument(argument), &value, sizeof(value), stream_->get()),
        "uploading a draft position");
  }
  /// The append pair: the staged block at positions position .. +N-1.
  void draftAppend(Draft &d, std::int64_t position) {
    setLane(d, d.info.positionsArgument, position);
    d.backend->launchAsync(d.buffers, stream_->get(), 0, 2);
  }
  /// The read pair: positions end-R .. end-1 into the window argument.
  void draftRead(Draft &d, std::int64_t end) {
    setLane(d, d.info.endsArgument, end);
    d.backend->launchAsync(d.buffers, stream_->get(), 2, 2);
  }
  /// Waits for the draft work and checks its status word.
  void endDraft(Draft &d, const char *what) {
    const CudaDriver &cuda = driver();
    std::uint32_t word = 0;
    cuda.check(cuda.memcpyDtoHAsync(&word, d.buffers.status, sizeof(word), stream_->get()),
               "reading the draft status word");
    cuda.check(cuda.streamSynchronize(stream_->get()), std::string(what) + " failed");
    busy_ = false;
    if (word != 0)
      throw Error(std::string(what) + ": the ring kernels reported status " + describeStatus(word));
  }

  struct HostOutput {
    void *destination;
    const void *staging;
    std::size_t bytes;
  };

  /// One layer's stream work, with every address fixed (what a graph keys on).
  struct LayerWork {
    std::int32_t layer = 0;
    MemorySpace memory = MemorySpace::Host;
    std::size_t queryBytes = 0, outputBytes = 0;
    CUdeviceptr queries = 0;                  ///< device queries (MemorySpace::Device)
    CUdeviceptr output = 0;                   ///< device output (MemorySpace::Device)
    bool selectionsOnDevice = false;          ///< row ids from takeSelections
    std::vector<std::int32_t> windowRequests; ///< [B] lanes' requests (sliding window)

    bool operator==(const LayerWork &o) const {
      return layer == o.layer && memory == o.memory && queryBytes == o.queryBytes &&
             outputBytes == o.outputBytes && queries == o.queries && output == o.output &&
             selectionsOnDevice == o.selectionsOnDevice && windowRequests == o.windowRequests;
    }
  };

  std::size_t bytesOf(ArgumentRole role) const {
    auto it = argumentBytes_.find(static_cast<int>(role));
    return it == argumentBytes_.end() ? 0 : it->second;
  }
  std::size_t stagingInBytes() const {
    return bytesOf(ArgumentRole::RowIds) + bytesOf(ArgumentRole::Slots) +
           bytesOf(ArgumentRole::HistoryStart) + bytesOf(ArgumentRole::HistoryLen) +
           bytesOf(ArgumentRole::WindowTokens) + bytesOf(ArgumentRole::Queries);
  }
  std::uint8_t *stagingIn(std::int32_t layer) const {
    return static_cast<std::uint8_t *>(stagingIn_->host()) +
           static_cast<std::size_t>(layer) * stagingInBytes();
  }
  std::uint8_t *stagingOut(std::int32_t layer) const {
    return static_cast<std::uint8_t *>(stagingOut_->host()) +
           static_cast<std::size_t>(layer) * bytesOf(ArgumentRole::Output);
  }
  CUdeviceptr argument(ArgumentRole role) const {
    return buffers_.arguments[static_cast<std::size_t>(argumentIndex_.at(static_cast<int>(role)))];
  }

  /// Copies a layer's host inputs into its own pinned staging region (host
  /// work only) and describes the stream work that uploads them.
  LayerWork stage(std::int32_t layer, const LayerStep &step) {
    const ProblemShape &s = *step.shape;
    LayerWork work;
    work.layer = layer;
    work.memory = step.memory;
    work.queryBytes = static_cast<std::size_t>(step.lanes * s.queries * s.heads * s.qkDim *
                                               static_cast<std::int64_t>(sizeof(bf16_t)));
    work.outputBytes = static_cast<std::size_t>(step.lanes * s.queries * s.heads * s.vDim *
                                                static_cast<std::int64_t>(sizeof(bf16_t)));
    work.selectionsOnDevice = step.selectionsOnDevice;
    if (step.selectionsOnDevice && !resolvesOnDevice())
      throw Error("selections in device memory need steps that resolve them (dhs.resolve) and "
                  "a placement step");
    std::uint8_t *stage = stagingIn(layer);
    auto put = [&](ArgumentRole role, const void *data) {
      // Selections taken on the device are not staged.
      if (data)
        std::memcpy(stage, data, bytesOf(role));
      stage += bytesOf(role);
    };
    put(ArgumentRole::RowIds, step.selectionsOnDevice ? nullptr : step.rowIds);
    put(ArgumentRole::Slots, step.selectionsOnDevice ? nullptr : step.slots);
    put(ArgumentRole::HistoryStart, step.historyStart);
    put(ArgumentRole::HistoryLen, step.historyLen);
    if (bytesOf(ArgumentRole::WindowTokens) > 0) {
      put(ArgumentRole::WindowTokens, step.windowTokens);
      work.windowRequests.assign(step.laneRequests, step.laneRequests + s.batch);
    }
    if (step.memory == MemorySpace::Host) {
      if (work.queryBytes > 0)
        std::memcpy(stage, step.queries, work.queryBytes);
      if (work.outputBytes > 0)
        hostOutputs_.push_back({step.output, stagingOut(layer), work.outputBytes});
    } else {
      work.queries = reinterpret_cast<CUdeviceptr>(step.queries);
      work.output = reinterpret_cast<CUdeviceptr>(step.output);
    }
    return work;
  }

  /// Enqueues a staged layer: uploads, the layer's step's kernels over its
  /// pool, the output copy. Only async operations (capturable).
  void enqueue(const LayerWork &work) {
    const CudaDriver &cuda = driver();
    CUstream stream = stream_->get();
    std::uint8_t *stage = stagingIn(work.layer);
    const std::int32_t group = work.layer / layout_.layersPerGroup;
    for (ArgumentRole role : {ArgumentRole::RowIds, ArgumentRole::Slots, ArgumentRole::HistoryStart,
                              ArgumentRole::HistoryLen, ArgumentRole::WindowTokens}) {
      if (bytesOf(role) == 0)
        continue;
      if (work.selectionsOnDevice && role == ArgumentRole::RowIds)
        cuda.check(cuda.memcpyDtoDAsync(argument(role),
                                        selections_[static_cast<std::size_t>(group)]->get(),
                                        bytesOf(role), stream),
                   "copying the group's selections");
      else if (!(work.selectionsOnDevice && role == ArgumentRole::Slots)) // resolve writes them
        cuda.check(cuda.memcpyHtoDAsync(argument(role), stage, bytesOf(role), stream),
                   std::string("uploading ") + roleName(role));
      stage += bytesOf(role);
    }
    // Queries: the engine's lanes, zeros for the padding lanes.
    cuda.check(cuda.memsetD16Async(argument(ArgumentRole::Queries), 0,
                                   bytesOf(ArgumentRole::Queries) / 2, stream),
               "clearing the queries");
    if (work.queryBytes > 0) {
      if (work.memory == MemorySpace::Host)
        cuda.check(
            cuda.memcpyHtoDAsync(argument(ArgumentRole::Queries), stage, work.queryBytes, stream),
            "uploading queries");
      else
        cuda.check(cuda.memcpyDtoDAsync(argument(ArgumentRole::Queries), work.queries,
                                        work.queryBytes, stream),
                   "copying queries");
    }
    // The kernels of the layer's index in its pool, over the layer's pool.
    const std::size_t pool = static_cast<std::size_t>(work.layer / layout_.layersPerPool);
    const std::size_t index =
        backends_.size() > 1 ? static_cast<std::size_t>(work.layer % layout_.layersPerPool) : 0;
    // The lanes' window rings of this pool, side by side.
    const std::size_t ringBytes = static_cast<std::size_t>(layout_.windowRing) *
                                  static_cast<std::size_t>(layout_.tokenBytes());
    for (std::size_t b = 0; b < work.windowRequests.size(); ++b)
      if (work.windowRequests[b] >= 0)
        cuda.check(
            cuda.memcpyDtoDAsync(argument(ArgumentRole::WindowRing) + b * ringBytes,
                                 windows_.at(work.windowRequests[b])->get() + pool * ringBytes,
                                 ringBytes, stream),
            "gathering window rings");
    CudaStepBuffers buffers = buffers_;
    buffers.hbm = hbm_[pool]->get();
    buffers.host = host_[pool]->device();
    if (placement_) {
      const std::size_t g = static_cast<std::size_t>(group);
      buffers.map = placement_->maps[g]->get();
      buffers.recency = placement_->recency[g]->get();
      buffers.log = placement_->logs[g]->get();
      // The group's first layer books its selections; the others resolve
      // the same selections again and log nothing.
      buffers.logWords = work.layer == layout_.firstLayer(group)
                             ? static_cast<std::int64_t>(placement_->logWords)
                             : 0;
    } else if (resolveLaunches_)
      throw Error("the step resolves selections through the residency maps (dhs.resolve): "
                  "load a placement step first");
    cuda.check(cuda.memsetD16Async(argument(ArgumentRole::Output), kBf16Poison,
                                   bytesOf(ArgumentRole::Output) / 2, stream),
               "poisoning the output");
    backends_[index]->launchAsync(buffers, stream);
    // The group's step log, complete after its first layer's resolve: to
    // the host now, so that the controller books the group while the later
    // layers run (an event marks it, outside graphs). Host selections were
    // booked before the launch: their log stays on the device.
    if (placement_ && resolveLaunches_ && buffers.logWords > 0 && work.selectionsOnDevice) {
      const std::size_t g = static_cast<std::size_t>(group);
      cuda.check(cuda.memcpyDtoHAsync(static_cast<std::int32_t *>(placement_->logsHost->host()) +
                                          g * placement_->logWords,
                                      placement_->logs[g]->get(), placement_->logWords * 4, stream),
                 "copying a step log");
      if (!graphs_)
        cuda.check(cuda.eventRecord(placement_->logReady[g]->get(), stream),
                   "recording a step log");
    }
    // Outputs: the engine's lanes.
    if (work.outputBytes > 0) {
      if (work.memory == MemorySpace::Host)
        cuda.check(cuda.memcpyDtoHAsync(stagingOut(work.layer), argument(ArgumentRole::Output),
                                        work.outputBytes, stream),
                   "downloading the output");
      else
        cuda.check(cuda.memcpyDtoDAsync(work.output, argument(ArgumentRole::Output),
                                        work.outputBytes, stream),
                   "copying the output");
    }
  }

  /// Runs the pending layers as one graph: replayed when the step looks like
  /// the captured one, else captured (status clear + every layer) first.
  void launchGraph() {
    const CudaDriver &cuda = driver();
    CUstream stream = stream_->get();
    if (!graph_.ready() || graphKey_ != pending_) {
      graph_.reset();
      graphKey_.clear();
      cuda.check(cuda.streamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                 "cuStreamBeginCapture");
      CUgraph graph = nullptr;
      try {
        cuda.check(cuda.memsetD32Async(buffers_.status, 0, 1, stream), "clearing the status word");
        for (const LayerWork &work : pending_)
          enqueue(work);
      } catch (...) {
        // End the capture so the stream is usable again; drop what it made.
        if (cuda.streamEndCapture(stream, &graph) == CUDA_SUCCESS && graph)
          cuda.graphDestroy(graph);
        throw;
      }
      cuda.check(cuda.streamEndCapture(stream, &graph), "cuStreamEndCapture");
      graph_.instantiate(graph);
      graphKey_ = pending_;
      ++graphStats_.captures;
    } else {
      ++graphStats_.replays;
    }
    graph_.launch(stream);
    busy_ = true;
  }

  /// Waits for everything submitted (between steps only).
  void quiesce() {
    if (!busy_)
      return;
    backends_.front()->makeCurrent();
    driver().check(driver().streamSynchronize(stream_->get()), "waiting for the stream");
    busy_ = false;
  }

  TierLayout layout_;
  // Context and kernels per layer index; destroyed after the buffers.
  std::vector<std::unique_ptr<CudaStep>> backends_;
  std::vector<std::unique_ptr<DeviceBuffer>> hbm_;      // [pool]
  std::vector<std::unique_ptr<MappedHostBuffer>> host_; // [pool]
  std::vector<std::unique_ptr<DeviceBuffer>> arguments_;
  std::map<int, std::size_t> argumentBytes_;
  std::map<int, int> argumentIndex_;
  std::unique_ptr<DeviceBuffer> status_;
  std::unique_ptr<DeviceBuffer> arena_;
  std::unique_ptr<MappedHostBuffer> stagingIn_, stagingOut_;
  std::unique_ptr<Stream> stream_;
  CudaStepBuffers buffers_;
  std::vector<std::uint8_t> snapshot_;
  std::vector<HostOutput> hostOutputs_;
  std::string describe_;
  bool stepOpen_ = false;
  bool busy_ = false;
  // CUDA graphs.
  bool graphs_ = false;
  std::vector<LayerWork> pending_;  // the step's staged layers (graphs on)
  std::vector<LayerWork> graphKey_; // what graph_ was captured for
  StepGraph graph_;
  TierGraphStats graphStats_;
  // Placement (destroyed before the backends' contexts).
  std::unique_ptr<Placement> placement_;
  bool resolveLaunches_ = false; // the steps contain dhs.resolve
  // Selections taken on the device, per group, and a download of one.
  std::vector<std::unique_ptr<DeviceBuffer>> selections_;
  std::vector<std::int32_t> selectionsHost_;
  std::vector<std::int32_t> mapSnapshot_, recencySnapshot_;
  // What each group's resolve logged this step, parsed from logsHost.
  std::vector<StepLog> stepLogs_;
  // Draft rings (destroyed before the backends' contexts).
  std::unique_ptr<Draft> draft_;
  // Window rings per request index [pools][R][token] (destroyed before the
  // backends' contexts).
  std::map<std::int32_t, std::unique_ptr<DeviceBuffer>> windows_;
  std::map<std::int32_t, std::vector<std::unique_ptr<DeviceBuffer>>> drafts_; // [index][group]
};

} // namespace

std::unique_ptr<TierBackend> makeCudaTiers(const TierLayout &layout,
                                           const std::vector<const Manifest *> &stepsByLayer,
                                           int ordinal) {
  return std::make_unique<CudaTiers>(layout, stepsByLayer, ordinal);
}

} // namespace dhs::runtime
