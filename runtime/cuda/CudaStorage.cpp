//===- CudaStorage.cpp - The KV tiers' memory on a CUDA device ------------===//

#include "runtime/cuda/CudaStorage.h"

#include "runtime/core/Error.h"

namespace dhs::runtime::cuda_detail {

CudaStorage::CudaStorage(const TierLayout &layout, std::shared_ptr<CudaQueue> queue,
                         std::size_t logWords)
    : queue_(std::move(queue)), layout_(layout), logWords_(logWords) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  // Memory: check against what the device has before allocating.
  // (The write-back rings hold a token of every layer per entry, as the
  // slots do.)
  const std::size_t hbmBytes =
      (static_cast<std::size_t>(layout.hbmSlots) + static_cast<std::size_t>(layout.writeBackRows)) *
      static_cast<std::size_t>(layout.storedTokenBytes());
  std::size_t freeBytes = 0, totalBytes = 0;
  cuda.check(cuda.memGetInfo(&freeBytes, &totalBytes), "cuMemGetInfo");
  if (hbmBytes + (64u << 20) > freeBytes)
    throw CapacityError(
        "the HBM tier needs " + formatBytes(hbmBytes) + " (" + std::to_string(layout.hbmSlots) +
        " slots and " + std::to_string(layout.writeBackRows) + " write-back entries x " +
        std::to_string(layout.storedTokenBytes()) + " bytes in " + std::to_string(layout.pools()) +
        " pools), the device has " + formatBytes(freeBytes) + " free");
  for (std::int32_t p = 0; p < layout.pools(); ++p) {
    const std::size_t tokenBytes =
        static_cast<std::size_t>(layout.tokenBytes(static_cast<std::size_t>(p)));
    pools_.hbm.push_back(std::make_unique<DeviceBuffer>(
        static_cast<std::size_t>(layout.hbmSlots) * tokenBytes, "HBM pool " + std::to_string(p)));
    pools_.host.push_back(std::make_unique<MappedHostBuffer>(
        static_cast<std::size_t>(layout.hostRows) * tokenBytes, "host store " + std::to_string(p)));
    if (layout.writeBackRows > 0)
      pools_.writeBack.push_back(std::make_unique<DeviceBuffer>(
          static_cast<std::size_t>(layout.writeBackRows) * tokenBytes,
          "write-back ring " + std::to_string(p)));
  }
  // (The first pool's tokens are the largest.)
  snapshot_.resize(static_cast<std::size_t>(layout.hbmSlots) *
                   static_cast<std::size_t>(layout.tokenBytes(0)));
}

std::string CudaStorage::describe() const {
  return "cuda on " + queue_->device().name + " (" + queue_->device().arch + ")";
}

std::uint8_t *CudaStorage::hostRow(std::int32_t layer, std::int64_t row) {
  return static_cast<std::uint8_t *>(pools_.host[layout_.poolOf(layer)]->host()) +
         layout_.rowOffset(layer, row);
}

void CudaStorage::waitForSubmittedWork() {
  if (DHS_FAULT(Wait))
    throw DeviceError("waiting for the device's submitted work failed (injected fault)");
  queue_->makeCurrent();
  queue_->quiesce();
}

void CudaStorage::writeSlot(std::int32_t layer, std::int32_t slot, const std::uint8_t *row) {
  // (Untested on a GPU.) From pageable host memory: the driver has read
  // `row` when the call returns.
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  cuda.check(cuda.memcpyHtoDAsync(
                 pools_.hbm[layout_.poolOf(layer)]->get() + layout_.rowOffset(layer, slot), row,
                 static_cast<std::size_t>(layout_.rowBytes), queue_->stream()),
             "writing a pending row into HBM slot " + std::to_string(slot));
  queue_->submitted();
}

void CudaStorage::copyToHbm(const std::vector<RowCopy> &copies) {
  if (DHS_FAULT(Copy))
    throw DeviceError("copying " + std::to_string(copies.size()) +
                      " host rows into HBM slots failed (injected fault)");
  queue_->makeCurrent();
  if (placement_) {
    placement_->place(copies, pools_);
    return;
  }
  // Every copy is one token of one pool, from the mapped host store to its
  // slot; all of them go to the driver as one batch per token size (the
  // last pool's tokens may be smaller). (Releases need no copy.)
  const std::size_t lastPool = static_cast<std::size_t>(layout_.pools() - 1);
  CUdeviceptr first = 0;
  // (The address lists are kept between calls: a copy allocates only for a
  // batch larger than any before.)
  for (bool last : {false, true}) {
    std::vector<CUdeviceptr> &sources = copySources_, &destinations = copyDestinations_;
    sources.clear();
    destinations.clear();
    for (const RowCopy &copy : copies)
      for (std::int32_t l = layout_.firstLayer(copy.group);
           copy.slot >= 0 && l < layout_.endLayer(copy.group); l += layout_.layersPerPool) {
        const std::size_t pool = layout_.poolOf(l);
        if ((pool == lastPool) != last)
          continue;
        sources.push_back(pools_.host[pool]->device() + layout_.rowOffset(l, copy.hostRow));
        destinations.push_back(pools_.hbm[pool]->get() + layout_.rowOffset(l, copy.slot));
      }
    if (destinations.empty())
      continue;
    first = first ? first : destinations.front();
    copyBatch(destinations, sources,
              static_cast<std::size_t>(layout_.tokenBytes(last ? lastPool : 0)), copySizes_,
              queue_->stream(), "copying host rows into HBM slots");
  }
  if (first && DHS_FAULT(CorruptCopy))
    driver().check(driver().memsetD16Async(first, 0x7fc1, 1, queue_->stream()),
                   "corrupting a copied row (injected fault)");
  if (!copies.empty())
    queue_->submitted();
}

void CudaStorage::setPlacementStep(const Manifest &manifest,
                                   const ResidencyController &controller) {
  queue_->makeCurrent();
  queue_->quiesce();
  placement_ = std::make_unique<CudaPlacement>(manifest, layout_, queue_, controller, logWords_);
}

void CudaStorage::restoreRecency(const ResidencyController &controller) {
  if (placement_)
    placement_->restoreRecency(controller);
}

const std::int32_t *CudaStorage::recencySnapshot(std::int32_t group) {
  return placement_ ? placement_->recencySnapshot(group) : nullptr;
}

const std::int32_t *CudaStorage::residencyMapSnapshot(std::int32_t group) {
  return placement_ ? placement_->mapSnapshot(group) : nullptr;
}

const std::uint8_t *CudaStorage::hbmSnapshot(std::int32_t layer) {
  const CudaDriver &cuda = driver();
  // The context may not be current: checks run on whichever engine thread
  // calls (quiesce makes it current only when work is in flight).
  queue_->makeCurrent();
  queue_->quiesce();
  if (!snapshot_.empty())
    cuda.check(
        cuda.memcpyDtoH(snapshot_.data(), pools_.hbm[layout_.poolOf(layer)]->get(),
                        static_cast<std::size_t>(layout_.hbmSlots) *
                            static_cast<std::size_t>(layout_.tokenBytes(layout_.poolOf(layer)))),
        "reading the HBM tier for a check");
  return snapshot_.data();
}

} // namespace dhs::runtime::cuda_detail
