//===- CudaRings.h - Draft and window rings on a CUDA device ----*- C++ -*-===//
//
// Internal to the CUDA tiers: per request, draft rings (device buffers run
// only by a loaded draft-ring step's ring_index + copy_rows kernels, a
// request's ring staged in lane 0 of the step's batch) and window rings (read
// by the attention steps). docs/runtime.md ("Rings") describes them.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDARINGS_H
#define DHS_RUNTIME_CUDA_CUDARINGS_H

#include "runtime/core/DraftRingStep.h"
#include "runtime/core/Tiers.h"
#include "runtime/cuda/CudaQueue.h"

#include <map>
#include <memory>
#include <vector>

namespace dhs::runtime::cuda_detail {

/// Draft rings (run by a draft-ring step's kernels) and window rings.
class CudaRings final : public RingStore {
public:
  CudaRings(const TierLayout &layout, std::shared_ptr<CudaQueue> queue)
      : queue_(std::move(queue)), layout_(layout) {}
  ~CudaRings() override { queue_->drain(); }

  void setDraftStep(const Manifest &manifest) override;
  void allocateDraftRings(std::int32_t index) override;
  void freeDraftRings(std::int32_t index) override;
  void writeDraft(std::int32_t index, std::int32_t group, std::int64_t position, std::int64_t count,
                  const std::uint8_t *tokens) override;
  void readDraft(std::int32_t index, std::int32_t group, std::int64_t end, std::int64_t count,
                 std::uint8_t *tokens) override;
  void allocateWindowRings(std::int32_t index) override;
  void freeWindowRings(std::int32_t index) override;
  void writeWindow(std::int32_t index, std::int64_t position, std::int64_t count,
                   const std::uint8_t *tokens) override;

  /// Request index `index`'s window rings [pools][R][token].
  CUdeviceptr windowRings(std::int32_t index) const { return windows_.at(index)->get(); }

private:
  /// The loaded draft-ring step and its buffers (lane 0 is the request's).
  struct DraftStep {
    DraftStepInfo info;
    std::unique_ptr<CudaStep> step;
    std::vector<std::unique_ptr<DeviceBuffer>> arguments;
    std::unique_ptr<DeviceBuffer> arena, status;
    CudaStepBuffers buffers;
    CUdeviceptr argument(int index) const {
      return buffers.arguments[static_cast<std::size_t>(index)];
    }
  };

  DraftStep &requireDraftStep();
  CUdeviceptr draftRing(std::int32_t index, std::int32_t group) const;
  /// Waits for other work, clears the draft status, stages `ring` in lane 0.
  void beginDraft(DraftStep &d, CUdeviceptr ring);
  /// Sets lane 0 of an i32 [B] argument to `position` mod W.
  void setLane(DraftStep &d, int argument, std::int64_t position);
  /// The append pair: the staged block at positions position .. +N-1.
  void draftAppend(DraftStep &d, std::int64_t position);
  /// The read pair: positions end-R .. end-1 into the window argument.
  void draftRead(DraftStep &d, std::int64_t end);
  /// Waits for the draft work and checks its status word.
  void endDraft(DraftStep &d, const char *what);
  /// Frees request index `index`'s rings in `rings` (none: no effect) once
  /// nothing in flight may still use them.
  template <typename Rings> void release(Rings &rings, std::int32_t index) {
    auto it = rings.find(index);
    if (it == rings.end())
      return;
    queue_->makeCurrent();
    queue_->quiesce();
    rings.erase(it);
  }
  /// Throws CapacityError unless `bytes` (and 16 MiB to spare) fit the
  /// device's free memory.
  void requireFree(std::size_t bytes, const char *what) const;

  std::shared_ptr<CudaQueue> queue_;
  TierLayout layout_;
  std::unique_ptr<DraftStep> draftStep_;
  std::map<std::int32_t, std::vector<std::unique_ptr<DeviceBuffer>>> drafts_; // [index][group]
  std::map<std::int32_t, std::unique_ptr<DeviceBuffer>> windows_;             // [index]
};

} // namespace dhs::runtime::cuda_detail

#endif // DHS_RUNTIME_CUDA_CUDARINGS_H
