//===- CudaRings.cpp - Draft and window rings on a CUDA device ------------===//

#include "runtime/cuda/CudaRings.h"

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"

#include <algorithm>

namespace dhs::runtime::cuda_detail {

void CudaRings::setDraftStep(const Manifest &manifest) {
  const CudaDriver &cuda = driver();
  const DraftStepInfo info = draftStepInfo(manifest);
  auto draft = std::make_unique<DraftStep>();
  draft->info = info;
  draft->step = std::make_unique<CudaStep>(manifest, queue_->device().ordinal);
  queue_->makeCurrent();
  draft->buffers.arguments.assign(manifest.arguments.size(), 0);
  for (const Argument &arg : manifest.arguments) {
    const std::size_t bytes = arg.bytes();
    draft->arguments.push_back(std::make_unique<DeviceBuffer>(
        bytes, std::string("draft step argument ") + std::to_string(arg.index)));
    cuda.check(
        cuda.memsetD32(draft->arguments.back()->get(), 0, std::max<std::size_t>(bytes, 16) / 4),
        "clearing a draft step argument");
    draft->buffers.arguments[static_cast<std::size_t>(arg.index)] = draft->arguments.back()->get();
  }
  draft->arena = std::make_unique<DeviceBuffer>(
      static_cast<std::size_t>(std::max<std::int64_t>(manifest.arenaBytes, 16)),
      "the draft step's arena");
  draft->status = std::make_unique<DeviceBuffer>(sizeof(std::uint32_t), "the draft status word");
  draft->buffers.arena = draft->arena->get();
  draft->buffers.status = draft->status->get();
  draftStep_ = std::move(draft);
}

void CudaRings::requireFree(std::size_t bytes, const char *what) const {
  const CudaDriver &cuda = driver();
  std::size_t freeBytes = 0, totalBytes = 0;
  cuda.check(cuda.memGetInfo(&freeBytes, &totalBytes), "cuMemGetInfo");
  if (bytes + (16u << 20) > freeBytes)
    throw CapacityError(std::string(what) + " need " + formatBytes(bytes) + ", the device has " +
                        formatBytes(freeBytes) + " free");
}

void CudaRings::allocateDraftRings(std::int32_t index) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  const std::size_t ringBytes = layout_.draftRingBytes();
  requireFree(ringBytes * static_cast<std::size_t>(layout_.groups()),
              "the draft rings of a request");
  std::vector<std::unique_ptr<DeviceBuffer>> rings;
  const std::vector<std::uint8_t> zeros(ringBytes, 0);
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    rings.push_back(
        std::make_unique<DeviceBuffer>(ringBytes, "the draft ring of group " + std::to_string(g)));
    cuda.check(cuda.memcpyHtoD(rings.back()->get(), zeros.data(), ringBytes),
               "clearing a draft ring");
  }
  drafts_[index] = std::move(rings);
}

void CudaRings::freeDraftRings(std::int32_t index) { release(drafts_, index); }

void CudaRings::allocateWindowRings(std::int32_t index) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  const std::size_t bytes = layout_.windowRingsBytes();
  requireFree(bytes, "the window rings of a request");
  auto ring = std::make_unique<DeviceBuffer>(bytes, "a request's window rings");
  cuda.check(cuda.memsetD32(ring->get(), 0, bytes / 4), "clearing window rings");
  windows_[index] = std::move(ring);
}

void CudaRings::freeWindowRings(std::int32_t index) { release(windows_, index); }

void CudaRings::writeWindow(std::int32_t index, std::int64_t position, std::int64_t count,
                            const std::uint8_t *tokens) {
  if (DHS_FAULT(RingWrite))
    throw DeviceError("writing window tokens failed (injected fault)");
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce(); // steps in flight may read the slots being rewritten
  const CUdeviceptr ring = windows_.at(index)->get();
  forEachWindowCopy(layout_, position, count,
                    [&](std::size_t ringOffset, std::size_t tokenOffset, std::size_t bytes) {
                      cuda.check(cuda.memcpyHtoD(ring + ringOffset, tokens + tokenOffset, bytes),
                                 "writing a window token");
                    });
}

void CudaRings::writeDraft(std::int32_t index, std::int32_t group, std::int64_t position,
                           std::int64_t count, const std::uint8_t *tokens) {
  if (DHS_FAULT(RingWrite))
    throw DeviceError("writing draft tokens into layer group " + std::to_string(group) +
                      "'s ring failed (injected fault)");
  const CudaDriver &cuda = driver();
  DraftStep &d = requireDraftStep();
  const CUdeviceptr ring = draftRing(index, group);
  beginDraft(d, ring);
  const DraftStepInfo &info = d.info;
  const std::size_t token = static_cast<std::size_t>(info.tokenBytes);
  const CUdeviceptr rows = d.argument(info.rowsArgument);
  CUstream stream = queue_->stream();
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
  cuda.check(
      cuda.memcpyDtoDAsync(ring, d.argument(info.ringArgument), layout_.draftRingBytes(), stream),
      "copying the draft ring back");
  endDraft(d, "appending draft rows");
}

void CudaRings::readDraft(std::int32_t index, std::int32_t group, std::int64_t end,
                          std::int64_t count, std::uint8_t *tokens) {
  const CudaDriver &cuda = driver();
  DraftStep &d = requireDraftStep();
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
                   static_cast<std::size_t>(chunkEnd - from) * token, queue_->stream()),
               "downloading draft rows");
  }
  endDraft(d, "reading draft rows");
}

CudaRings::DraftStep &CudaRings::requireDraftStep() {
  if (!draftStep_)
    throw StateError("the CUDA tiers run the draft rings with the compiler's ring kernels: "
                     "load a compiled draft-ring step first (Runtime::loadDraftStep, "
                     "dhs_runtime_load_draft_step; e.g. dhs-compile "
                     "examples/draft_ring_step.mlir)");
  return *draftStep_;
}

CUdeviceptr CudaRings::draftRing(std::int32_t index, std::int32_t group) const {
  auto it = drafts_.find(index);
  if (it == drafts_.end() || group < 0 || group >= layout_.groups())
    throw Error("no draft ring for request index " + std::to_string(index) + ", group " +
                std::to_string(group));
  return it->second[static_cast<std::size_t>(group)]->get();
}

void CudaRings::beginDraft(DraftStep &d, CUdeviceptr ring) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce();
  queue_->submitted();
  cuda.check(cuda.memsetD32Async(d.buffers.status, 0, 1, queue_->stream()),
             "clearing the draft status word");
  cuda.check(cuda.memcpyDtoDAsync(d.argument(d.info.ringArgument), ring, layout_.draftRingBytes(),
                                  queue_->stream()),
             "staging a draft ring");
}

void CudaRings::setLane(DraftStep &d, int argument, std::int64_t position) {
  const std::int64_t w = d.info.window;
  const std::int32_t value = static_cast<std::int32_t>(((position % w) + w) % w);
  driver().check(
      driver().memcpyHtoDAsync(d.argument(argument), &value, sizeof(value), queue_->stream()),
      "uploading a draft position");
}

void CudaRings::draftAppend(DraftStep &d, std::int64_t position) {
  setLane(d, d.info.positionsArgument, position);
  d.step->launchAsync(d.buffers, queue_->stream(), 0, 2);
}

void CudaRings::draftRead(DraftStep &d, std::int64_t end) {
  setLane(d, d.info.endsArgument, end);
  d.step->launchAsync(d.buffers, queue_->stream(), 2, 2);
}

void CudaRings::endDraft(DraftStep &d, const char *what) {
  const CudaDriver &cuda = driver();
  std::uint32_t word = 0;
  cuda.check(cuda.memcpyDtoHAsync(&word, d.buffers.status, sizeof(word), queue_->stream()),
             "reading the draft status word");
  queue_->synchronize(std::string(what) + " failed");
  if (word != 0)
    throw Error(std::string(what) + ": the ring kernels reported status " + describeStatus(word));
}

} // namespace dhs::runtime::cuda_detail
