//===- CudaStepRunner.cpp - Running decode steps on a CUDA device ---------===//

#include "runtime/cuda/CudaStepRunner.h"

#include "runtime/core/Error.h"

#include <cstring>

namespace dhs::runtime::cuda_detail {

CudaStepRunner::CudaStepRunner(const TierLayout &layout, std::shared_ptr<CudaQueue> queue,
                               std::vector<std::unique_ptr<CudaStep>> steps,
                               const Manifest &manifest, bool resolveLaunches, CudaStorage &storage,
                               const CudaRings &rings)
    : queue_(std::move(queue)), layout_(layout), storage_(storage), rings_(rings),
      steps_(std::move(steps)), resolveLaunches_(resolveLaunches) {
  queue_->makeCurrent();
  // The step's memref arguments: one device buffer each, reused by every
  // layer (uploads are stream-ordered behind the previous layer's kernels).
  buffers_.arguments.assign(manifest.arguments.size(), 0);
  for (const Argument &arg : manifest.arguments) {
    if (arg.isPool)
      continue;
    std::size_t bytes = abi::bytes(arg.dtype);
    for (std::int64_t d : arg.shape)
      bytes *= static_cast<std::size_t>(d);
    arguments_.push_back(std::make_unique<DeviceBuffer>(bytes, abi::name(arg.role)));
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
  std::int64_t arenaBytes = manifest.arenaBytes;
  for (const std::unique_ptr<CudaStep> &step : steps_)
    arenaBytes = std::max(arenaBytes, step->manifest().arenaBytes);
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
}

CudaStepRunner::~CudaStepRunner() {
  queue_->drain();
  try {
    graphCache_.reset();
  } catch (...) {
  }
}

void CudaStepRunner::setGraphs(bool on) {
  if (stepOpen_)
    throw StateError("CUDA graphs can be turned on or off only between steps");
  if (on && !driver().graphsAvailable())
    throw Error("CUDA graphs are unavailable: " + driver().graphsUnavailableReason());
  graphs_ = on;
  if (!on) {
    queue_->makeCurrent();
    graphCache_.reset();
  }
}

void CudaStepRunner::beginStep(std::uint32_t step) {
  if (storage_.placement() && resolveLaunches_)
    storage_.placement()->stampLogs(step);
}

const StepLog &CudaStepRunner::stepLog(std::int32_t group) {
  if (!resolvesOnDevice())
    throw StateError("no step log: the steps do not resolve on the device");
  if (group < 0 || group >= layout_.groups())
    throw OutOfRangeError("layer group " + std::to_string(group) + " does not exist");
  queue_->makeCurrent();
  // Without graphs the group's copy is ready once its event is: the
  // later layers may still run. With graphs, after finishStep.
  if (!graphs_ && stepOpen_)
    storage_.placement()->waitForLog(group);
  else if (stepOpen_)
    throw StateError("the step logs of a CUDA-graph step arrive with finishStep");
  return storage_.placement()->parseLog(group);
}

void CudaStepRunner::takeSelections(std::int32_t group, const std::int32_t *rowIds,
                                    std::int64_t count) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  if (!resolvesOnDevice())
    throw Error(resolveLaunches_ ? "selections in device memory need the residency maps: load a "
                                   "placement step"
                                 : "selections in device memory need a step that resolves them on "
                                   "the device (dhs.resolve before the attention)");
  const std::size_t bytes = bytesOf(ArgumentRole::RowIds);
  if (count < 0 || static_cast<std::size_t>(count) * sizeof(std::int32_t) > bytes)
    throw InputError(std::to_string(count) + " selections; the step takes " +
                     std::to_string(bytes / sizeof(std::int32_t)));
  if (selections_.empty())
    for (std::int32_t g = 0; g < layout_.groups(); ++g)
      selections_.push_back(std::make_unique<DeviceBuffer>(bytes, "selections"));
  CUstream stream = queue_->stream();
  const std::size_t g = static_cast<std::size_t>(group);
  // -1 pads the lanes past the batch. The host never reads them in a
  // step: the resolve kernel logs what the controller books.
  cuda.check(cuda.memsetD32Async(selections_[g]->get(), 0xFFFFFFFFu, bytes / 4, stream),
             "padding the selections");
  if (count > 0)
    cuda.check(cuda.memcpyDtoDAsync(selections_[g]->get(), reinterpret_cast<CUdeviceptr>(rowIds),
                                    static_cast<std::size_t>(count) * sizeof(std::int32_t), stream),
               "copying the engine's selections");
  queue_->submitted();
}

const std::int32_t *CudaStepRunner::selectionsOnHost(std::int32_t group) {
  if (selections_.empty())
    throw StateError("no selections were taken on the device");
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce();
  const DeviceBuffer &taken = *selections_.at(static_cast<std::size_t>(group));
  selectionsHost_.resize(bytesOf(ArgumentRole::RowIds) / sizeof(std::int32_t));
  cuda.check(cuda.memcpyDtoH(selectionsHost_.data(), taken.get(),
                             selectionsHost_.size() * sizeof(std::int32_t)),
             "downloading selections");
  return selectionsHost_.data();
}

void CudaStepRunner::attend(std::int32_t layer, const LayerStep &step) {
  queue_->makeCurrent();
  if (!stepOpen_) {
    stepOpen_ = true;
    hostOutputs_.clear();
    pending_.clear();
    if (!graphs_)
      driver().check(driver().memsetD32Async(buffers_.status, 0, 1, queue_->stream()),
                     "clearing the status word");
  }
  LayerWork work = stage(layer, step);
  if (graphs_) {
    pending_.push_back(work); // launched as one graph by finishStep
    return;
  }
  enqueue(work);
  queue_->submitted();
  if (step.outputNow && !hostOutputs_.empty())
    deliverHostOutputs();
}

void CudaStepRunner::deliverHostOutputs() {
  // The status word is cumulative over the step's layers (cleared when the
  // step's first layer was enqueued).
  std::uint32_t word = 0;
  driver().check(driver().memcpyDtoHAsync(&word, buffers_.status, sizeof(word), queue_->stream()),
                 "reading the status word");
  queue_->synchronize("the step's kernels failed");
  if (word != 0)
    throw Error("the kernels rejected their input: status " + describeStatus(word));
  copyHostOutputs();
}

void CudaStepRunner::copyHostOutputs() {
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

void CudaStepRunner::finishStep() {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  std::uint32_t word = 0;
  if (stepOpen_) {
    if (graphs_ && !pending_.empty()) {
      try {
        launchGraph();
      } catch (...) {
        stepOpen_ = false;
        pending_.clear();
        hostOutputs_.clear();
        cuda.streamSynchronize(queue_->stream());
        throw;
      }
    }
    pending_.clear();
    cuda.check(cuda.memcpyDtoHAsync(&word, buffers_.status, sizeof(word), queue_->stream()),
               "reading the status word");
  }
  queue_->synchronize("the step's kernels failed");
  const bool wasOpen = stepOpen_;
  stepOpen_ = false;
  if (!wasOpen)
    return;
  if (word != 0) {
    hostOutputs_.clear();
    throw Error("the kernels rejected their input: status " + describeStatus(word));
  }
  copyHostOutputs();
}

std::size_t CudaStepRunner::stagingInBytes() const {
  return bytesOf(ArgumentRole::RowIds) + bytesOf(ArgumentRole::Slots) +
         bytesOf(ArgumentRole::HistoryStart) + bytesOf(ArgumentRole::HistoryLen) +
         bytesOf(ArgumentRole::WindowTokens) + bytesOf(ArgumentRole::Queries);
}

std::uint8_t *CudaStepRunner::stagingIn(std::int32_t layer) const {
  return static_cast<std::uint8_t *>(stagingIn_->host()) +
         static_cast<std::size_t>(layer) * stagingInBytes();
}

std::uint8_t *CudaStepRunner::stagingOut(std::int32_t layer) const {
  return static_cast<std::uint8_t *>(stagingOut_->host()) +
         static_cast<std::size_t>(layer) * bytesOf(ArgumentRole::Output);
}

CudaStepRunner::LayerWork CudaStepRunner::stage(std::int32_t layer, const LayerStep &step) {
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

void CudaStepRunner::enqueue(const LayerWork &work) {
  const CudaDriver &cuda = driver();
  CUstream stream = queue_->stream();
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
                 std::string("uploading ") + abi::name(role));
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
  const std::size_t pool = layout_.poolOf(work.layer);
  // The lanes' window rings of this pool, side by side.
  const std::size_t ringBytes = layout_.windowRingBytes();
  for (std::size_t b = 0; b < work.windowRequests.size(); ++b)
    if (work.windowRequests[b] >= 0)
      cuda.check(cuda.memcpyDtoDAsync(argument(ArgumentRole::WindowRing) + b * ringBytes,
                                      rings_.windowRings(work.windowRequests[b]) + pool * ringBytes,
                                      ringBytes, stream),
                 "gathering window rings");
  CudaStepBuffers buffers = buffers_;
  buffers.hbm = storage_.pools().hbm[pool]->get();
  buffers.host = storage_.pools().host[pool]->device();
  CudaPlacement *placement = storage_.placement();
  if (placement)
    // The group's first layer books its selections; the others resolve
    // the same selections again and log nothing.
    placement->bind(group, work.layer == layout_.firstLayer(group), buffers);
  else if (resolveLaunches_)
    throw Error("the step resolves selections through the residency maps (dhs.resolve): "
                "load a placement step first");
  cuda.check(cuda.memsetD16Async(argument(ArgumentRole::Output), kBf16Poison,
                                 bytesOf(ArgumentRole::Output) / 2, stream),
             "poisoning the output");
  stepOf(work.layer).launchAsync(buffers, stream);
  lastLayer_ = work.layer;
  // The group's step log, complete after its first layer's resolve: to
  // the host now, so that the controller books the group while the later
  // layers run (an event marks it, outside graphs). Host selections were
  // booked before the launch: their log stays on the device.
  if (placement && resolveLaunches_ && buffers.logWords > 0 && work.selectionsOnDevice)
    placement->copyLogToHost(group, /*recordEvent=*/!graphs_);
  // Outputs: the engine's lanes.
  if (work.outputBytes > 0) {
    if (work.memory == MemorySpace::Host)
      cuda.check(cuda.memcpyDtoHAsync(stagingOut(work.layer), argument(ArgumentRole::Output),
                                      work.outputBytes, stream),
                 "downloading the output");
    else
      cuda.check(cuda.memcpyDtoDAsync(work.output, argument(ArgumentRole::Output), work.outputBytes,
                                      stream),
                 "copying the output");
  }
}

void CudaStepRunner::launchGraph() {
  CUstream stream = queue_->stream();
  graphCache_.run(pending_, stream, [&] {
    driver().check(driver().memsetD32Async(buffers_.status, 0, 1, stream),
                   "clearing the status word");
    for (const LayerWork &work : pending_)
      enqueue(work);
  });
  queue_->submitted();
}

std::vector<KernelInfo> CudaStepRunner::kernels() const {
  std::vector<KernelInfo> all;
  for (const std::unique_ptr<CudaStep> &step : steps_)
    all.insert(all.end(), step->kernels().begin(), step->kernels().end());
  return all;
}

std::int64_t CudaStepRunner::fetchedRows() {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce();
  auto download = [&](CUdeviceptr from, std::size_t count) {
    std::vector<std::int32_t> values(count);
    cuda.check(cuda.memcpyDtoH(values.data(), from, count * sizeof(std::int32_t)),
               "reading a fetch's rows");
    return values;
  };
  return countFetchedRows(
      stepOf(lastLayer_).manifest(),
      [&](const LaunchParam &list) {
        std::size_t count = 1;
        for (std::int64_t dim : list.shape)
          count *= static_cast<std::size_t>(dim);
        return download(list.source == ParamSource::Scratch
                            ? buffers_.arena + static_cast<CUdeviceptr>(list.offset)
                            : buffers_.arguments.at(static_cast<std::size_t>(list.argumentIndex)),
                        count);
      },
      [&] {
        return download(argument(ArgumentRole::Slots),
                        bytesOf(ArgumentRole::Slots) / sizeof(std::int32_t));
      });
}

} // namespace dhs::runtime::cuda_detail
