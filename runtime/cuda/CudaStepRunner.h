//===- CudaStepRunner.h - Running decode steps on a CUDA device -*- C++ -*-===//
//
// Internal to the CUDA tiers: runs a decode step's layers on the tiers' one
// stream (per layer: uploads from pinned staging, the step's kernels over the
// layer's pool, the output copy), takes selections in device memory, and
// replays whole steps as CUDA graphs. A group pool runs from one loaded step
// per layer index. docs/runtime.md ("The tiers") describes it.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDASTEPRUNNER_H
#define DHS_RUNTIME_CUDA_CUDASTEPRUNNER_H

#include "runtime/core/Manifest.h"
#include "runtime/core/StepPlan.h"
#include "runtime/core/Tiers.h"
#include "runtime/cuda/CudaAccept.h"
#include "runtime/cuda/CudaDecisions.h"
#include "runtime/cuda/CudaGraph.h"
#include "runtime/cuda/CudaRings.h"
#include "runtime/cuda/CudaStorage.h"
#include "runtime/cuda/CudaTopK.h"

#include <map>
#include <memory>
#include <vector>

namespace dhs::runtime::cuda_detail {

/// Runs the layers of decode steps over a CudaStorage's pools.
class CudaStepRunner final : public StepRunner {
public:
  /// `steps` holds one whole-model step, or the loaded step of each layer
  /// index of a pool (one when the pools hold one layer), all with the
  /// arguments of `manifest`.
  CudaStepRunner(const TierLayout &layout, std::shared_ptr<CudaQueue> queue,
                 std::vector<std::unique_ptr<CudaStep>> steps, const Manifest &manifest,
                 bool resolveLaunches, CudaStorage &storage, const CudaRings &rings);
  ~CudaStepRunner() override;

  bool acceptsDevicePointers() const override { return true; }
  bool resolvesOnDevice() const override { return resolveLaunches_ && storage_.placement(); }
  void takeSelections(std::int32_t group, const std::int32_t *rowIds, std::int64_t count) override;
  const std::int32_t *selectionsOnHost(std::int32_t group) override;
  void beginStep(std::uint32_t step) override;
  const StepLog &stepLog(std::int32_t group) override;
  bool stepLogsEarly() const override { return resolvesOnDevice() && !graphs_; }
  void attend(std::int32_t layer, const LayerStep &step) override;
  void finishStep() override;
  void abandonStep() override;
  void setEngineStream(void *stream) override;
  void setGraphs(bool on) override;
  bool graphsOn() const override { return graphs_; }
  TierGraphStats graphStats() const override { return graphCache_.stats(); }
  const DeviceInfo *device() const override { return &queue_->device(); }
  std::vector<KernelInfo> kernels() const override;
  std::int64_t arenaBytes() const override {
    return arena_ ? static_cast<std::int64_t>(arena_->bytes()) : 0;
  }
  std::int64_t fetchedRows() override;
  std::int64_t residentFormLayers() const override { return residentFormLayers_; }
  double formShare(std::int32_t layer) const override {
    return layerShares_[static_cast<std::size_t>(layer)];
  }
  std::int64_t hostRowsRead(std::int32_t) override { return -1; }
  void setAcceptStep(const Manifest &manifest, AcceptRule rule) override {
    accept_[static_cast<std::size_t>(rule)] = std::make_unique<CudaAccept>(manifest, queue_);
  }
  bool accept(const AcceptProblem &problem, std::int32_t *accepted, std::int32_t *next) override {
    CudaAccept *kernel = accept_[static_cast<std::size_t>(problem.rule)].get();
    if (!kernel || !kernel->fits(problem))
      return false;
    kernel->run(problem, accepted, next);
    return true;
  }
  void setTopKStep(const Manifest &manifest) override {
    topK_ = std::make_unique<CudaTopK>(manifest, queue_);
  }
  bool topK(std::int64_t batch, const float *scores, const std::int32_t *historyLen,
            std::int32_t *rows) override {
    if (!topK_)
      return false;
    topK_->run(batch, scores, historyLen, rows);
    return true;
  }
  std::int64_t groupFetchedRows(std::int32_t group) override;
  void setCountFetches(bool on) override;
  void setDecisionStep(const Manifest &manifest, bool copyLists) override;
  bool decidesOnDevice() const override { return decisions_ != nullptr; }
  void setStepDecisions(bool on) override;
  void uploadDecisionState(std::int32_t group, const DeviceGroupState &state,
                           std::int32_t budget) override;
  void downloadDecisionState(std::int32_t group, DeviceGroupState &state) override;
  void setDecisionBudget(std::int32_t group, std::int32_t budget) override;
  DeviceDecisionCounts decisionCounts(std::int32_t group) const override;
  void decisionList(std::int32_t group, std::vector<std::int64_t> &rows,
                    std::vector<std::int32_t> &slots) const override;
  void rollBackDecisions() override;
  StepTimes lastStepTimes() const override { return lastTimes_; }
  void setAgingStep(const Manifest &manifest) override;
  void enqueueAging(const std::vector<AgingReplay> &replays) override;
  std::vector<std::int32_t> agedSlots(std::int32_t group, std::size_t count) const override {
    return decisions_->agedSlots(group, count);
  }
  void waitForAging() override;

private:
  struct HostOutput {
    void *destination;
    const void *staging;
    std::size_t bytes;
  };

  /// What runs a layer: a step's launches [first, first + count) over the
  /// arguments of the layer and its group.
  struct LayerBinding {
    const CudaStep *step = nullptr;
    std::size_t first = 0, count = 0;
    int queries = -1, output = -1, rowIds = -1, slots = -1, windowRing = -1, writeBack = -1;
    /// Upload the group's selections and slots with this layer (a
    /// whole-model step's group's first layer, every layer of a replayed
    /// one-layer step).
    bool uploadSelections = true;
  };

  /// One layer's stream work, with every address fixed (what a graph keys on).
  struct LayerWork {
    std::int32_t layer = 0;
    MemorySpace memory = MemorySpace::Host;
    std::size_t queryBytes = 0, outputBytes = 0;
    CUdeviceptr queries = 0;                  ///< device queries (MemorySpace::Device)
    CUdeviceptr output = 0;                   ///< device output (MemorySpace::Device)
    bool selectionsOnDevice = false;          ///< row ids from takeSelections
    CUdeviceptr selections = 0;               ///< and where: the engine's buffer
    std::size_t selectionCount = 0;           ///< its row ids (the rest pads with -1)
    std::vector<std::int32_t> windowRequests; ///< [B] lanes' requests (sliding window)
    bool decisions = false;                   ///< the step ends with the device's decisions
    /// The form its launches take (CudaStepBuffers::formShare).
    double formShare = 1.0;
    /// Upload the history bounds: the step's first layer, or one whose
    /// bounds differ from those uploaded last in the step (the argument
    /// keeps them otherwise).
    bool uploadHistory = true;

    bool operator==(const LayerWork &o) const {
      return layer == o.layer && memory == o.memory && queryBytes == o.queryBytes &&
             outputBytes == o.outputBytes && queries == o.queries && output == o.output &&
             selectionsOnDevice == o.selectionsOnDevice && selections == o.selections &&
             selectionCount == o.selectionCount && windowRequests == o.windowRequests &&
             decisions == o.decisions && uploadHistory == o.uploadHistory &&
             formShare == o.formShare;
    }
  };

  /// What a step's graph keys on: its layers' work, the aging replays it
  /// takes first (none: empty) with the generation of their tables, and the
  /// generation of the queue's exchange (its copies and the work's read
  /// and write its parts where they are now).
  struct GraphKey {
    std::vector<LayerWork> layers;
    CudaDecisions::AgingShape aging;
    std::uint64_t agingTables = 0;
    std::uint64_t exchange = 0;

    bool operator==(const GraphKey &o) const {
      return layers == o.layers && aging == o.aging && agingTables == o.agingTables &&
             exchange == o.exchange;
    }
    bool operator!=(const GraphKey &o) const { return !(*this == o); }
  };

  /// The engine's device buffers a layer's launches use in place of the
  /// step's arguments (no copies): where they fill the argument exactly and
  /// are aligned as an allocation is.
  struct Direct {
    bool selections = false, queries = false, output = false;
  };
  Direct directOf(const LayerWork &work, const LayerBinding &binding) const;
  /// Where a layer's slots live: its group's own buffer with a decision
  /// step (read in place by the decisions), else the step's argument.
  CUdeviceptr slotsOf(std::int32_t layer, const LayerBinding &binding) const;
  /// Where `layer`'s write-back ring entries are (the group's own with a
  /// decision step, else the argument's buffer).
  CUdeviceptr writeBackOf(std::int32_t layer, const LayerBinding &binding) const;
  /// True when no buffer the engine gave `works` in device memory overlaps
  /// another one where either is written (outputs).
  static bool engineBuffersApart(const std::vector<LayerWork> &works);

  /// Bytes of argument `index` (0 for -1).
  std::size_t bytesOf(int index) const {
    return index < 0 ? 0 : argumentBytes_[static_cast<std::size_t>(index)];
  }
  CUdeviceptr argument(int index) const {
    return buffers_.arguments[static_cast<std::size_t>(index)];
  }
  /// The binding of a layer.
  LayerBinding bindingOf(std::int32_t layer) const;
  /// Bytes a layer stages for upload: selections, slots, history bounds,
  /// window token counts, queries.
  std::size_t stagingInBytes() const;
  std::uint8_t *stagingIn(std::int32_t layer) const;
  std::uint8_t *stagingOut(std::int32_t layer) const;
  /// The form share layer `layer`'s launches run at in `step` (LaunchForms.h):
  /// 1 for a layer of one form; else by the rows the caller counted
  /// missing, else by its group's log of the last decided step (none yet:
  /// kUncountedMissing), held where the group ran last (formShare).
  double formShareOf(std::int32_t layer, const LayerStep &step);
  /// Copies a layer's host inputs into its own pinned staging region (host
  /// work only) and describes the stream work that uploads them.
  LayerWork stage(std::int32_t layer, const LayerStep &step);
  /// Enqueues a staged layer: uploads, its launches over its pool, the
  /// output copy, and (counting fetches) copies of its fetches' row lists.
  /// Only async operations (capturable).
  void enqueue(const LayerWork &work);
  /// With an engine stream: the queue's stream waits for the work enqueued
  /// on it so far (waitForEngine), or it for the queue's (releaseEngine).
  void waitForEngine();
  void releaseEngine();
  /// Waits for the stream, checks the status word and the poison of the
  /// host outputs enqueued so far, and copies them to the engine.
  void deliverHostOutputs();
  /// Checks the poison of the finished host outputs and copies them to the
  /// engine.
  void copyHostOutputs();
  /// Runs the pending layers as one graph (status clear + every layer).
  void launchGraph();
  /// Enqueues the step's decisions after its last layer (with
  /// setStepDecisions on).
  void enqueueDecisions();
  /// Enqueues a step's first work: the copy of the queue's exchange to the
  /// device (unless `exchanged`: the step's graph made it already), the
  /// step logs' stamps, the decisions' budget words and rollback copies.
  void enqueueStepStart(bool exchanged = false);

  std::shared_ptr<CudaQueue> queue_;
  TierLayout layout_;
  CudaStorage &storage_;
  const CudaRings &rings_;
  // Kernels: one whole-model step, or one step per layer index (destroyed
  // after the buffers).
  std::vector<std::unique_ptr<CudaStep>> steps_;
  StepPlan plan_;                // of the first step
  bool resolveLaunches_ = false; // the steps contain dhs.resolve
  std::vector<std::unique_ptr<DeviceBuffer>> arguments_;
  std::vector<std::size_t> argumentBytes_; // by argument index (0: a pool)
  std::unique_ptr<DeviceBuffer> status_;
  std::unique_ptr<DeviceBuffer> arena_;
  std::unique_ptr<CudaAccept> accept_[2]; // [AcceptRule] loaded accept steps
  std::unique_ptr<CudaTopK> topK_;        // the loaded top-k step
  std::unique_ptr<MappedHostBuffer> stagingIn_, stagingOut_;
  CudaStepBuffers buffers_;
  std::vector<HostOutput> hostOutputs_;
  bool stepOpen_ = false;
  std::int32_t lastLayer_ = 0; // the layer enqueued last
  // CUDA graphs.
  bool graphs_ = false;
  std::vector<LayerWork> pending_; // the step's staged layers (graphs on)
  StepGraphCache<GraphKey> graphCache_;
  // Selections taken on the device, per group: the engine's buffer and its
  // row ids (the step's uploads read it), and a download of one.
  std::vector<std::pair<CUdeviceptr, std::size_t>> selections_;
  std::vector<std::int32_t> selectionsHost_;
  // Counting fetches: each layer's fetches' row lists (and slots), copied to
  // pinned memory right after its launches (a later group's may reuse the
  // arena), counted after the step (every layer ran in it).
  bool countFetches_ = false;
  std::size_t fetchListBytes_ = 0;               // per layer
  std::unique_ptr<MappedHostBuffer> fetchLists_; // [layer][fetchListBytes_]
  // Residency decisions on the device (a loaded decision step).
  std::unique_ptr<CudaDecisions> decisions_;
  bool decisionLists_ = false; // copy each group's place list to the host
  bool stepDecisions_ = false; // this step ends with them
  // With a decision step: each group's slots [group][groupSlotsStride_],
  // written by its resolve, read in place by the decisions.
  std::unique_ptr<DeviceBuffer> groupSlots_;
  std::size_t groupSlotsStride_ = 0;
  // With a decision step: each group's write-back ring entries, as the
  // slots (the decisions read them in place).
  std::unique_ptr<DeviceBuffer> groupWriteBack_;
  std::size_t groupWriteBackStride_ = 0;
  // Whether every launch of the steps that copies host rows (a fused
  // attention, a fetch) writes them into the pool's write-back ring (then
  // the rings are bound; else the kernels get empty ones, and resolve
  // gives no entries).
  bool writesBack_ = false;
  // The history bounds uploaded last in the open step (stage), and whether
  // the step's layers after the first upload none (launchGraph: the
  // decisions read them in place).
  std::vector<std::uint8_t> stepHistory_;
  bool historyStaged_ = false;
  bool historyShared_ = false;
  std::int64_t residentFormLayers_ = 0; // of the step in progress or the last
  // The engine's stream (setEngineStream; null: none) and the events that
  // order it with the queue's: the engine's work before a layer's, the
  // layer's before the engine's later work.
  CUstream engineStream_ = nullptr;
  std::unique_ptr<Event> engineReady_, layerDone_;
  std::vector<double> groupShares_;     // [group] the form share it ran at last (-1: none)
  std::vector<bool> formChosen_;        // [group] its first layer chose the step's form
  // [group] the share of its selections that missed in the last step whose
  // log the host parsed (-1: none), and whether the device decided a step
  // since (its counts are then the newer).
  std::vector<double> loggedShares_;
  std::vector<bool> decidedSinceLog_;
  std::vector<std::vector<double>> layerLines_; // [layer] its launches' form lines
  // [layer] the form share of its launches in the step in progress or the
  // last (counting fetches: which of them ran).
  std::vector<double> layerShares_;
  // The history bounds of each layer that uploads them in a step's graph
  // (a part of the queue's exchange: [layer][start, len]), copied from its
  // mirror: the graph's copies that touch host memory are the exchange's.
  HostExchange::Part historyPart_ = 0;
  std::size_t historyBytes_ = 0; // a layer's
  // While launchGraph captures a step whose engine buffers do not overlap
  // where it writes them (engineBuffersApart): the engine's selections are
  // bound in place, and its outputs bound in place were poisoned at the
  // step's start.
  bool engineInPlace_ = false;
  bool outputsPoisoned_ = false;
  // The engine's device selections may be read in place (no launch writes
  // the row_ids argument, none counts fetches from it after the step).
  bool selectionsInPlace_ = false;
  // The device's time of a step: events at its first stream work and after
  // its status read.
  std::unique_ptr<Event> stepStart_, stepEnd_;
  bool stepStarted_ = false;
  // Whether the decisions saved the replacement states at the last step's
  // start on the device (enqueueStepStart ran: at beginStep without graphs,
  // in the step's graph once it launched): what rollBackDecisions restores.
  bool statesSaved_ = false;
  StepTimes lastTimes_;
};

} // namespace dhs::runtime::cuda_detail

#endif // DHS_RUNTIME_CUDA_CUDASTEPRUNNER_H
