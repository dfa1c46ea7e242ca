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
#include "runtime/core/Tiers.h"
#include "runtime/cuda/CudaAccept.h"
#include "runtime/cuda/CudaGraph.h"
#include "runtime/cuda/CudaRings.h"
#include "runtime/cuda/CudaStorage.h"

#include <map>
#include <memory>
#include <vector>

namespace dhs::runtime::cuda_detail {

/// Runs the layers of decode steps over a CudaStorage's pools.
class CudaStepRunner final : public StepRunner {
public:
  /// `steps` holds the loaded step of each layer index of a pool (one when
  /// the pools hold one layer), all with the arguments of `manifest`.
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
  void setGraphs(bool on) override;
  bool graphsOn() const override { return graphs_; }
  TierGraphStats graphStats() const override { return graphCache_.stats(); }
  const DeviceInfo *device() const override { return &queue_->device(); }
  std::vector<KernelInfo> kernels() const override;
  std::int64_t fetchedRows() override;
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

private:
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
  std::size_t stagingInBytes() const;
  std::uint8_t *stagingIn(std::int32_t layer) const;
  std::uint8_t *stagingOut(std::int32_t layer) const;
  CUdeviceptr argument(ArgumentRole role) const {
    return buffers_.arguments[static_cast<std::size_t>(argumentIndex_.at(static_cast<int>(role)))];
  }
  /// Copies a layer's host inputs into its own pinned staging region (host
  /// work only) and describes the stream work that uploads them.
  LayerWork stage(std::int32_t layer, const LayerStep &step);
  /// Enqueues a staged layer: uploads, the layer's step's kernels over its
  /// pool, the output copy. Only async operations (capturable).
  void enqueue(const LayerWork &work);
  /// Waits for the stream, checks the status word and the poison of the
  /// host outputs enqueued so far, and copies them to the engine.
  void deliverHostOutputs();
  /// Checks the poison of the finished host outputs and copies them to the
  /// engine.
  void copyHostOutputs();
  /// Runs the pending layers as one graph (status clear + every layer).
  void launchGraph();
  /// The loaded step that runs a layer.
  const CudaStep &stepOf(std::int32_t layer) const {
    return *steps_[steps_.size() > 1 ? static_cast<std::size_t>(layer % layout_.layersPerPool) : 0];
  }

  std::shared_ptr<CudaQueue> queue_;
  TierLayout layout_;
  CudaStorage &storage_;
  const CudaRings &rings_;
  // Kernels per layer index (destroyed after the buffers).
  std::vector<std::unique_ptr<CudaStep>> steps_;
  bool resolveLaunches_ = false; // the steps contain dhs.resolve
  std::vector<std::unique_ptr<DeviceBuffer>> arguments_;
  std::map<int, std::size_t> argumentBytes_;
  std::map<int, int> argumentIndex_;
  std::unique_ptr<DeviceBuffer> status_;
  std::unique_ptr<DeviceBuffer> arena_;
  std::unique_ptr<CudaAccept> accept_[2]; // [AcceptRule] loaded accept steps
  std::unique_ptr<MappedHostBuffer> stagingIn_, stagingOut_;
  CudaStepBuffers buffers_;
  std::vector<HostOutput> hostOutputs_;
  bool stepOpen_ = false;
  std::int32_t lastLayer_ = 0; // the layer enqueued last
  // CUDA graphs.
  bool graphs_ = false;
  std::vector<LayerWork> pending_; // the step's staged layers (graphs on)
  StepGraphCache<std::vector<LayerWork>> graphCache_;
  // Selections taken on the device, per group, and a download of one.
  std::vector<std::unique_ptr<DeviceBuffer>> selections_;
  std::vector<std::int32_t> selectionsHost_;
};

} // namespace dhs::runtime::cuda_detail

#endif // DHS_RUNTIME_CUDA_CUDASTEPRUNNER_H
