//===- CudaStorage.h - The KV tiers' memory on a CUDA device ----*- C++ -*-===//
//
// Internal to the CUDA tiers: per pool an HBM buffer [slots, P, row_bytes]
// (cuMemAlloc) and a host store [host_rows, P, row_bytes] in pinned memory
// mapped into the device's address space (the kernels read missing rows from
// it directly). Row copies into HBM go to the driver as one batch of copies,
// or, once a placement step is loaded, to its kernel (CudaPlacement).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDASTORAGE_H
#define DHS_RUNTIME_CUDA_CUDASTORAGE_H

#include "runtime/core/Tiers.h"
#include "runtime/cuda/CudaPlacement.h"
#include "runtime/cuda/CudaQueue.h"

#include <memory>
#include <string>
#include <vector>

namespace dhs::runtime::cuda_detail {

/// The host store and HBM pools on a device, and its residency state once a
/// placement step is loaded.
class CudaStorage final : public TierStorage {
public:
  /// Allocates the pools after checking the HBM they need against the
  /// device's free memory (CapacityError). `logWords` sizes the step logs of
  /// a placement step (see CudaPlacement).
  CudaStorage(const TierLayout &layout, std::shared_ptr<CudaQueue> queue, std::size_t logWords);
  ~CudaStorage() override { queue_->drain(); }

  std::string describe() const override;
  const TierLayout &layout() const override { return layout_; }
  std::uint8_t *hostRow(std::int32_t layer, std::int64_t row) override;
  void waitForSubmittedWork() override;
  void copyToHbm(const std::vector<RowCopy> &copies) override;
  void writeSlot(std::int32_t layer, std::int32_t slot, const std::uint8_t *row) override;
  void setPlacementStep(const Manifest &manifest, const ResidencyController &controller) override;
  void restoreRecency(const ResidencyController &controller) override;
  const std::int32_t *recencySnapshot(std::int32_t group) override;
  const std::int32_t *residencyMapSnapshot(std::int32_t group) override;
  const std::uint8_t *hbmSnapshot(std::int32_t layer) override;

  /// The pools (for the step runner's launches).
  const CudaPools &pools() const { return pools_; }
  /// The device residency state, or nullptr without a placement step.
  CudaPlacement *placement() const { return placement_.get(); }

private:
  std::shared_ptr<CudaQueue> queue_;
  TierLayout layout_;
  std::size_t logWords_;
  CudaPools pools_;
  std::vector<std::uint8_t> snapshot_;
  // copyToHbm's address and size lists.
  std::vector<CUdeviceptr> copySources_, copyDestinations_;
  std::vector<std::size_t> copySizes_;
  std::unique_ptr<CudaPlacement> placement_;
};

} // namespace dhs::runtime::cuda_detail

#endif // DHS_RUNTIME_CUDA_CUDASTORAGE_H
