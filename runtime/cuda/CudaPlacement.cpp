//===- CudaPlacement.cpp - The residency state on a CUDA device -----------===//

#include "runtime/cuda/CudaPlacement.h"

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"

#include <algorithm>
#include <cstring>

namespace dhs::runtime::cuda_detail {

CudaPlacement::CudaPlacement(const Manifest &manifest, const TierLayout &layout,
                             std::shared_ptr<CudaQueue> queue,
                             const ResidencyController &controller, std::size_t logWords)
    : queue_(std::move(queue)), layout_(layout), logWords_(logWords) {
  const CudaDriver &cuda = driver();
  step_ = std::make_unique<CudaStep>(manifest, queue_->device().ordinal);
  step_->makeCurrent();
  rowsIndex_ = manifest.argument(ArgumentRole::PlaceRows).index;
  slotsIndex_ = manifest.argument(ArgumentRole::PlaceSlots).index;
  perLaunch_ = static_cast<std::size_t>(manifest.argument(ArgumentRole::PlaceRows).shape.at(0));
  buffers_.arguments.assign(manifest.arguments.size(), 0);
  buffers_.hbmSlots = layout.hbmSlots;
  buffers_.hostRows = layout.hostRows;
  status_ = std::make_unique<DeviceBuffer>(sizeof(std::uint32_t), "the placement status");
  cuda.check(cuda.memsetD32(status_->get(), 0, 1), "clearing the placement status");
  buffers_.status = status_->get();
  const std::size_t mapBytes = static_cast<std::size_t>(layout.hostRows) * sizeof(std::int32_t);
  const std::size_t groups = static_cast<std::size_t>(layout.groups());
  recencyStride_ = recencyStride(layout);
  logStride_ = alignedStride(logWords * sizeof(std::int32_t));
  recency_ = std::make_unique<DeviceBuffer>(std::max<std::size_t>(groups, 1) * recencyStride_,
                                            "the groups' replacement states");
  logs_ = std::make_unique<DeviceBuffer>(std::max<std::size_t>(groups, 1) * logStride_,
                                         "the groups' step logs");
  for (std::int32_t g = 0; g < layout.groups(); ++g) {
    const CUdeviceptr log = logOf(static_cast<std::size_t>(g));
    cuda.check(cuda.memsetD32(log, 0, logWords), "clearing a step log");
    cuda.check(cuda.memsetD32(log, controller.stepCount(), 1), "stamping a step log");
    const std::vector<std::int32_t> &table = controller.residencyTable(g);
    if (table.size() * sizeof(std::int32_t) != mapBytes)
      throw Error("the residency table of group " + std::to_string(g) + " has " +
                  std::to_string(table.size()) + " rows, the host store " +
                  std::to_string(layout.hostRows));
    maps_.push_back(std::make_unique<DeviceBuffer>(mapBytes, "the residency map of group " +
                                                                 std::to_string(g)));
    cuda.check(cuda.memcpyHtoD(maps_.back()->get(), table.data(), mapBytes),
               "uploading a residency map");
  }
  for (std::int32_t g = 0; g < layout.groups(); ++g)
    logReady_.push_back(std::make_unique<Event>());
  byGroup_.resize(groups);
  logsHost_ = std::make_unique<MappedHostBuffer>(static_cast<std::size_t>(layout.groups()) *
                                                     logWords * sizeof(std::int32_t),
                                                 "the step logs' host copy");
  done_ = std::make_unique<Event>();
  recencyUpload_.resize(2 * static_cast<std::size_t>(layout.hbmSlots));
  // (Parts of the exchange move its areas: the stream is idle.)
  queue_->quiesce();
  headers_ = queue_->exchange().add(HostExchange::Direction::ToDevice,
                                    groups * StepLogLayout::kHeader * sizeof(std::int32_t),
                                    "the step logs' headers");
  parsedLogs_.assign(static_cast<std::size_t>(layout.groups()), StepLog{});
  queue_->makeCurrent();
  restoreRecency(controller);
}

void CudaPlacement::place(const std::vector<RowCopy> &changes, const CudaPools &pools) {
  if (changes.empty())
    return;
  const CudaDriver &cuda = driver();
  const std::size_t n = perLaunch_;
  // The changes by group, in their order (lists kept between calls: a
  // placement allocates only for a batch larger than any before).
  for (std::vector<const RowCopy *> &list : byGroup_)
    list.clear();
  for (const RowCopy &change : changes)
    byGroup_.at(static_cast<std::size_t>(change.group)).push_back(&change);
  std::size_t launches = 0;
  for (const std::vector<const RowCopy *> &list : byGroup_)
    launches += (list.size() + n - 1) / n;
  // The lists of the previous placement may still be read: wait for it
  // (between steps; it has long finished by now).
  if (pending_)
    cuda.check(cuda.eventSynchronize(done_->get()), "waiting for the last placement");
  if (launches > listLaunches_) {
    lists_ = std::make_unique<MappedHostBuffer>(launches * n * 12, "the placement lists");
    listLaunches_ = launches;
  }
  auto *base = static_cast<std::uint8_t *>(lists_->host());
  std::size_t launch = 0;
  for (std::size_t group = 0; group < byGroup_.size(); ++group) {
    const std::vector<const RowCopy *> &list = byGroup_[group];
    for (std::size_t begin = 0; begin < list.size(); begin += n, ++launch) {
      auto *rows = reinterpret_cast<std::int64_t *>(base + launch * n * 12);
      auto *slots = reinterpret_cast<std::int32_t *>(rows + n);
      for (std::size_t i = 0; i < n; ++i) {
        const bool used = begin + i < list.size();
        rows[i] = used ? list[begin + i]->hostRow : -1;
        slots[i] = used ? list[begin + i]->slot : -1;
      }
      const CUdeviceptr device = lists_->device() + launch * n * 12;
      buffers_.arguments[static_cast<std::size_t>(rowsIndex_)] = device;
      buffers_.arguments[static_cast<std::size_t>(slotsIndex_)] = device + n * 8;
      buffers_.map = maps_[group]->get();
      buffers_.recency = recencyOf(group);
      buffers_.log = logOf(group);
      buffers_.logWords = static_cast<std::int64_t>(logWords_);
      const auto g = static_cast<std::int32_t>(group);
      for (std::int32_t l = layout_.firstLayer(g); l < layout_.endLayer(g);
           l += layout_.layersPerPool) {
        const std::size_t pool = layout_.poolOf(l);
        buffers_.hbm = pools.hbm[pool]->get();
        buffers_.host = pools.host[pool]->device();
        step_->launchAsync(buffers_, queue_->stream());
      }
    }
  }
  cuda.check(cuda.eventRecord(done_->get(), queue_->stream()), "recording the placement");
  pending_ = true;
  queue_->submitted();
}

void CudaPlacement::restoreRecency(const ResidencyController &controller) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce();
  const std::size_t slots = static_cast<std::size_t>(layout_.hbmSlots);
  std::vector<std::int32_t> &recency = recencyUpload_;
  for (std::int32_t g = 0; g < layout_.groups() && slots > 0; ++g) {
    for (std::size_t s = 0; s < slots; ++s) {
      const auto [last, previous] = controller.slotRecency(g, static_cast<std::int32_t>(s));
      recency[2 * s] = static_cast<std::int32_t>(last);
      recency[2 * s + 1] = static_cast<std::int32_t>(previous);
    }
    cuda.check(cuda.memcpyHtoD(recencyOf(static_cast<std::size_t>(g)), recency.data(),
                               recency.size() * sizeof(std::int32_t)),
               "uploading a replacement state");
  }
}

void CudaPlacement::uploadRecency(std::int32_t group, const std::vector<std::int32_t> &recency) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce();
  if (group < 0 || group >= layout_.groups())
    throw OutOfRangeError("layer group " + std::to_string(group) + " does not exist");
  if (recency.size() != 2 * static_cast<std::size_t>(layout_.hbmSlots))
    throw Error("a replacement state of " + std::to_string(recency.size()) +
                " words for a group of " + std::to_string(layout_.hbmSlots) + " slots");
  if (!recency.empty())
    cuda.check(cuda.memcpyHtoD(recencyOf(static_cast<std::size_t>(group)), recency.data(),
                               recency.size() * sizeof(std::int32_t)),
               "uploading a replacement state");
}

const std::int32_t *CudaPlacement::recencySnapshot(std::int32_t group) {
  downloadRecency(group, recencySnapshot_);
  return recencySnapshot_.data();
}

void CudaPlacement::downloadRecency(std::int32_t group, std::vector<std::int32_t> &recency) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce();
  if (group < 0 || group >= layout_.groups())
    throw OutOfRangeError("layer group " + std::to_string(group) + " does not exist");
  recency.resize(2 * static_cast<std::size_t>(layout_.hbmSlots));
  if (!recency.empty())
    cuda.check(cuda.memcpyDtoH(recency.data(), recencyOf(static_cast<std::size_t>(group)),
                               recency.size() * sizeof(std::int32_t)),
               "reading a replacement state");
}

const std::int32_t *CudaPlacement::mapSnapshot(std::int32_t group) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce();
  std::uint32_t word = 0;
  cuda.check(cuda.memcpyDtoH(&word, status_->get(), sizeof(word)), "reading the placement status");
  if (word != 0)
    throw Error("the placement kernel rejected its input: status " + describeStatus(word));
  mapSnapshot_.resize(static_cast<std::size_t>(layout_.hostRows));
  cuda.check(cuda.memcpyDtoH(mapSnapshot_.data(), maps_.at(static_cast<std::size_t>(group))->get(),
                             mapSnapshot_.size() * sizeof(std::int32_t)),
             "reading a residency map");
  return mapSnapshot_.data();
}

void CudaPlacement::setStep(std::uint32_t step) {
  // (The stream finished the copies of the last step's stamps: a step ends
  // with a wait.)
  auto *headers = static_cast<std::uint32_t *>(queue_->exchange().host(headers_));
  for (std::int32_t g = 0; g < layout_.groups(); ++g)
    headers[static_cast<std::size_t>(g) * StepLogLayout::kHeader + StepLogLayout::kStep] = step;
}

void CudaPlacement::enqueueStamps() {
  queue_->makeCurrent();
  // Before any of the step's work: every group's header (cleared, the
  // step stamped) in one copy, from the exchange's mirror (the caller
  // copied the exchange to the device first).
  const std::size_t headerBytes = StepLogLayout::kHeader * sizeof(std::int32_t);
  copyRowsAsync(logs_->get(), logStride_, queue_->exchange().mirror(headers_), headerBytes,
                headerBytes, static_cast<std::size_t>(layout_.groups()), queue_->stream(),
                "clearing and stamping the step logs");
  queue_->submitted();
}

void CudaPlacement::bind(std::int32_t group, bool logs, CudaStepBuffers &buffers) const {
  const std::size_t g = static_cast<std::size_t>(group);
  buffers.map = maps_[g]->get();
  buffers.recency = recencyOf(g);
  buffers.log = logOf(g);
  buffers.logWords = logs ? static_cast<std::int64_t>(logWords_) : 0;
}

void CudaPlacement::copyLogToHost(std::int32_t group, bool recordEvent) {
  const CudaDriver &cuda = driver();
  const std::size_t g = static_cast<std::size_t>(group);
  cuda.check(cuda.memcpyDtoHAsync(static_cast<std::int32_t *>(logsHost_->host()) + g * logWords_,
                                  logOf(g), logWords_ * 4, queue_->stream()),
             "copying a step log");
  if (recordEvent)
    cuda.check(cuda.eventRecord(logReady_[g]->get(), queue_->stream()), "recording a step log");
}

void CudaPlacement::waitForLog(std::int32_t group) {
  driver().check(driver().eventSynchronize(logReady_[static_cast<std::size_t>(group)]->get()),
                 "waiting for a step log");
}

const StepLog &CudaPlacement::parseLog(std::int32_t group) {
  const std::size_t g = static_cast<std::size_t>(group);
  const std::size_t words = logWords_;
  const std::size_t room = (words - StepLogLayout::kHeader) / 3;
  const std::int32_t *log = static_cast<const std::int32_t *>(logsHost_->host()) + g * words;
  const auto hits = static_cast<std::uint32_t>(log[StepLogLayout::kHits]);
  const auto misses = static_cast<std::uint32_t>(log[StepLogLayout::kMisses]);
  if (hits > room || misses > room)
    throw Error("the step log of group " + std::to_string(g) +
                " overflowed: " + std::to_string(hits) + " hits and " + std::to_string(misses) +
                " misses, room for " + std::to_string(room));
  StepLog &out = parsedLogs_[g];
  out.hitSlots.assign(log + StepLogLayout::kHeader, log + StepLogLayout::kHeader + hits);
  out.misses.assign(log + StepLogLayout::kHeader + room,
                    log + StepLogLayout::kHeader + room + 2 * misses);
  out.entries = static_cast<std::uint32_t>(log[StepLogLayout::kEntries]);
  return out;
}

} // namespace dhs::runtime::cuda_detail
