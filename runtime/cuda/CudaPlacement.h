//===- CudaPlacement.h - The residency state on a CUDA device ---*- C++ -*-===//
//
// Internal to the CUDA tiers. Once a placement step is loaded
// (Runtime::loadPlacementStep), each layer group keeps on the device its
// residency map (the slot of every host row), its replacement state (last
// and previous use of every slot) and its step log; the placement kernel
// (dhs.place_rows) carries out row copies and releases on them, and the
// resolve kernels of the attention steps read the map, stamp the recency and
// fill the log. docs/runtime.md describes the protocol.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDAPLACEMENT_H
#define DHS_RUNTIME_CUDA_CUDAPLACEMENT_H

#include "runtime/core/Tiers.h"
#include "runtime/cuda/CudaQueue.h"
#include "runtime/cuda/CudaResources.h"
#include "runtime/cuda/CudaStep.h"

#include <memory>
#include <vector>

namespace dhs::runtime::cuda_detail {

/// The tiers' memory on a device: per pool the HBM slots and the host store
/// (pinned, mapped into the device's address space).
struct CudaPools {
  std::vector<std::unique_ptr<DeviceBuffer>> hbm;      ///< [pool]
  std::vector<std::unique_ptr<MappedHostBuffer>> host; ///< [pool]
  /// [pool] the write-back rings (TierLayout::writeBackRows tokens; none
  /// when 0).
  std::vector<std::unique_ptr<DeviceBuffer>> writeBack;
  /// Binds pool `pool`'s ring into `buffers` (an empty one when the layout
  /// has none, or with `enabled` false).
  void bindWriteBack(std::size_t pool, std::int64_t rows, bool enabled,
                     CudaStepBuffers &buffers) const {
    const bool has = enabled && rows > 0 && pool < writeBack.size();
    buffers.writeBack = has ? writeBack[pool]->get() : 0;
    buffers.writeBackRows = has ? rows : 0;
  }
};

/// The device residency state of every layer group and the placement kernel.
class CudaPlacement {
public:
  /// Loads the placement step and uploads each group's residency map and
  /// replacement state from `controller`. `logWords` sizes each group's step
  /// log (StepLogLayout::kHeader when the steps do not resolve).
  CudaPlacement(const Manifest &manifest, const TierLayout &layout,
                std::shared_ptr<CudaQueue> queue, const ResidencyController &controller,
                std::size_t logWords);
  ~CudaPlacement() {
    queue_->drain();
    queue_->exchange().release(headers_);
  }

  /// Carries out copies and releases with the placement kernel: per group,
  /// lists of N (row, slot) pairs read by the kernel from mapped pinned
  /// memory, one launch per list and pool of the group.
  void place(const std::vector<RowCopy> &changes, const CudaPools &pools);
  /// Uploads the controller's replacement state over the device one.
  void restoreRecency(const ResidencyController &controller);
  /// Uploads group g's replacement state [slots x 2] (between steps).
  void uploadRecency(std::int32_t group, const std::vector<std::int32_t> &recency);
  /// Downloads group g's replacement state [slots x 2].
  const std::int32_t *recencySnapshot(std::int32_t group);
  /// Group `group`'s replacement state (as recencySnapshot) downloaded into
  /// `recency` (resized to 2 x slots words).
  void downloadRecency(std::int32_t group, std::vector<std::int32_t> &recency);
  /// Downloads group g's residency map [host rows], after checking the
  /// placement kernel's status word.
  const std::int32_t *mapSnapshot(std::int32_t group);

  /// Notes `step` in the queue's exchange for the next enqueueStamps.
  void setStep(std::uint32_t step);
  /// Enqueues clearing every group's step log header and stamping it with
  /// the step of the last setStep, read from the exchange's mirror (the
  /// caller copies the exchange to the device first; a CUDA graph may
  /// capture both): one copy for all groups.
  void enqueueStamps();
  /// Gives a launch of a layer of `group` the group's map, replacement state
  /// and log (a log of no words unless `logs`: only the group's first layer
  /// books its selections).
  void bind(std::int32_t group, bool logs, CudaStepBuffers &buffers) const;
  /// Enqueues the copy of group g's log to the host (and, unless inside a
  /// graph capture, an event that marks it).
  void copyLogToHost(std::int32_t group, bool recordEvent);
  /// Waits for the copy of group g's log (see copyLogToHost).
  void waitForLog(std::int32_t group);
  /// Group g's log as its host copy holds it: the hits and misses its header
  /// counts. Throws Error when it overflowed.
  const StepLog &parseLog(std::int32_t group);

  /// The groups' replacement states: group g's at base + g * stride, all
  /// in one allocation of groups x stride bytes (recencyStride).
  CUdeviceptr recencyBase() const { return recency_->get(); }
  /// The groups' step logs: group g's at logBase() + g * logStride().
  CUdeviceptr logBase() const { return logs_->get(); }
  std::size_t logStride() const { return logStride_; }
  /// Bytes from one group's replacement state to the next's.
  static std::size_t recencyStride(const TierLayout &layout) {
    return alignedStride(2 * static_cast<std::size_t>(layout.hbmSlots) * sizeof(std::int32_t));
  }

private:
  std::shared_ptr<CudaQueue> queue_;
  TierLayout layout_;
  std::unique_ptr<CudaStep> step_;
  int rowsIndex_ = -1, slotsIndex_ = -1;
  std::size_t perLaunch_ = 0;                          // N: rows per launch
  CUdeviceptr recencyOf(std::size_t group) const {
    return recency_->get() + group * recencyStride_;
  }
  CUdeviceptr logOf(std::size_t group) const { return logs_->get() + group * logStride_; }

  std::vector<std::unique_ptr<DeviceBuffer>> maps_; // [group]
  // The groups' replacement states [slots x 2] and step logs, each kind in
  // one buffer (one copy covers all groups), recencyStride_ / logStride_
  // bytes apart.
  std::unique_ptr<DeviceBuffer> recency_, logs_;
  std::size_t recencyStride_ = 0, logStride_ = 0;
  std::size_t logWords_ = 0;                   // words per log
  std::unique_ptr<MappedHostBuffer> logsHost_; // [group x logWords]
  // The log headers enqueueStamps copies (a part of the queue's exchange):
  // [group][kHeader], the step of the
  // last setStep, zeros.
  HostExchange::Part headers_ = 0;
  std::vector<std::unique_ptr<Event>> logReady_;       // [group] logsHost_ holds it
  std::vector<std::vector<const RowCopy *>> byGroup_;  // [group] place's changes
  std::unique_ptr<MappedHostBuffer> lists_;            // rows then slots per launch
  std::size_t listLaunches_ = 0;                       // launches lists_ has room for
  std::unique_ptr<DeviceBuffer> status_;
  std::unique_ptr<Event> done_; // after the last placement
  bool pending_ = false;        // done_ was recorded
  CudaStepBuffers buffers_;
  std::vector<StepLog> parsedLogs_;                         // [group]
  std::vector<std::int32_t> mapSnapshot_, recencySnapshot_; // downloads for checks
  /// One group's replacement state as restoreRecency uploads it, sized at
  /// construction: a step's abort restores without allocating.
  std::vector<std::int32_t> recencyUpload_;
};

} // namespace dhs::runtime::cuda_detail

#endif // DHS_RUNTIME_CUDA_CUDAPLACEMENT_H
