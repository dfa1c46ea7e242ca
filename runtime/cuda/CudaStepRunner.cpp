//===- CudaStepRunner.cpp - Running decode steps on a CUDA device ---------===//

#include "runtime/cuda/CudaStepRunner.h"

#include "runtime/core/Error.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <tuple>

namespace dhs::runtime::cuda_detail {

CudaStepRunner::CudaStepRunner(const TierLayout &layout, std::shared_ptr<CudaQueue> queue,
                               std::vector<std::unique_ptr<CudaStep>> steps,
                               const Manifest &manifest, bool resolveLaunches, CudaStorage &storage,
                               const CudaRings &rings)
    : queue_(std::move(queue)), layout_(layout), storage_(storage), rings_(rings),
      steps_(std::move(steps)), plan_(planStep(manifest)), resolveLaunches_(resolveLaunches) {
  queue_->makeCurrent();
  // The step's memref arguments: one device buffer each, reused by every
  // step (uploads are stream-ordered behind the previous layer's kernels).
  buffers_.arguments.assign(manifest.arguments.size(), 0);
  argumentBytes_.assign(manifest.arguments.size(), 0);
  for (const Argument &arg : manifest.arguments) {
    if (arg.isPool)
      continue;
    const std::size_t bytes = arg.bytes();
    arguments_.push_back(std::make_unique<DeviceBuffer>(bytes, abi::name(arg.role)));
    buffers_.arguments[static_cast<std::size_t>(arg.index)] = arguments_.back()->get();
    argumentBytes_[static_cast<std::size_t>(arg.index)] = bytes;
  }
  stepStart_ = std::make_unique<Event>();
  stepEnd_ = std::make_unique<Event>();
  status_ = std::make_unique<DeviceBuffer>(sizeof(std::uint32_t), "the status word");
  buffers_.status = status_->get();
  buffers_.hbmSlots = layout.hbmSlots;
  buffers_.hostRows = layout.hostRows;
  // The staging arena the compiler planned (fetched rows, union lists): a
  // whole-model step's serves all its groups in order; a replayed step's
  // is shared by the layers, each running after the previous one.
  std::int64_t arenaBytes = manifest.arenaBytes;
  for (const std::unique_ptr<CudaStep> &step : steps_)
    arenaBytes = std::max(arenaBytes, step->manifest().arenaBytes);
  if (arenaBytes > 0) {
    arena_ =
        std::make_unique<DeviceBuffer>(static_cast<std::size_t>(arenaBytes), "the staging arena");
    buffers_.arena = arena_->get();
  }
  // The rings are bound where every launch that copies missing rows from the
  // host store writes them back: the fused attentions and the fetches. (A
  // staged attention reads staging; the compiler stages a one-layer
  // attention beside its fetch, which takes tiles itself, only without
  // write_back, and then its fetch has no ring.)
  writesBack_ = true;
  bool attends = false;
  for (const std::unique_ptr<CudaStep> &step : steps_)
    for (const Launch &launch : step->manifest().launches) {
      attends = attends || launch.kind == abi::LaunchKind::SparseAttention ||
                launch.kind == abi::LaunchKind::Attention;
      if (launch.kind == abi::LaunchKind::SparseAttention || launch.kind == abi::LaunchKind::Fetch)
        writesBack_ = writesBack_ && std::any_of(launch.params.begin(), launch.params.end(),
                                                 [](const LaunchParam &p) {
                                                   return p.role == abi::ParamRole::WriteBackRing;
                                                 });
    }
  writesBack_ = writesBack_ && attends;
  layerShares_.assign(static_cast<std::size_t>(layout.layers), 1.0);
  groupShares_.assign(static_cast<std::size_t>(layout.groups()), -1.0);
  formChosen_.assign(static_cast<std::size_t>(layout.groups()), false);
  loggedShares_.assign(static_cast<std::size_t>(layout.groups()), -1.0);
  decidedSinceLog_.assign(static_cast<std::size_t>(layout.groups()), false);
  // Pinned staging per layer: selections, slots, history bounds, queries in;
  // output back.
  stagingIn_ =
      std::make_unique<MappedHostBuffer>(stagingInBytes() * layout.layers, "upload staging");
  stagingOut_ = std::make_unique<MappedHostBuffer>(
      bytesOf(plan_.layers.front().output) * layout.layers, "download staging");
  // The history bounds a step's graph uploads, in the exchange (the stream
  // is idle: nothing was enqueued on it yet by this runner).
  historyBytes_ = bytesOf(plan_.historyStart) + bytesOf(plan_.historyLen);
  queue_->quiesce();
  historyPart_ = queue_->exchange().add(HostExchange::Direction::ToDevice,
                                        historyBytes_ * static_cast<std::size_t>(layout.layers),
                                        "the history bounds");
  // Room for the row lists (and slots) of a layer's fetches.
  for (std::size_t l = 0; l < plan_.layers.size(); ++l) {
    const StepLayerPlan &planned = plan_.layers[l];
    std::size_t bytes = 0;
    for (std::size_t i = planned.firstLaunch; i < planned.endLaunch; ++i)
      for (const LaunchParam &param : manifest.launches[i].params)
        if (manifest.launches[i].kind == abi::LaunchKind::Fetch &&
            (param.role == abi::ParamRole::RowIds || param.role == abi::ParamRole::Slots)) {
          bytes += param.elements() * sizeof(std::int32_t);
        }
    fetchListBytes_ = std::max(fetchListBytes_, bytes);
  }
  // The engine's device selections may be bound in place of the row_ids
  // argument unless a launch writes the argument (dhs.topk) or a fetch's
  // row list is counted from it after the step (fetchedRows, when the
  // engine's buffer may be gone).
  selectionsInPlace_ = true;
  for (const std::unique_ptr<CudaStep> &step : steps_)
    for (const Launch &launch : step->manifest().launches)
      for (const LaunchParam &param : launch.params)
        if (param.role == abi::ParamRole::RowIds &&
            (launch.kind == abi::LaunchKind::TopK ||
             (launch.kind == abi::LaunchKind::Fetch && param.source != ParamSource::Scratch)))
          selectionsInPlace_ = false;
  // Each layer's form lines, once (formShareOf reads them every step).
  for (std::int32_t l = 0; l < layout.layers; ++l) {
    const LayerBinding binding = bindingOf(l);
    layerLines_.push_back(
        formLines(binding.step->manifest(), binding.first, binding.first + binding.count));
  }
}

CudaStepRunner::~CudaStepRunner() {
  queue_->drain();
  queue_->exchange().release(historyPart_);
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

void CudaStepRunner::setEngineStream(void *stream) {
  if (stepOpen_)
    throw StateError("the engine's stream can be set only between steps");
  queue_->makeCurrent();
  if (stream && !engineReady_) {
    engineReady_ = std::make_unique<Event>(CU_EVENT_DISABLE_TIMING);
    layerDone_ = std::make_unique<Event>(CU_EVENT_DISABLE_TIMING);
  }
  engineStream_ = static_cast<CUstream>(stream);
}

void CudaStepRunner::waitForEngine() {
  if (!engineStream_)
    return;
  const CudaDriver &cuda = driver();
  cuda.check(cuda.eventRecord(engineReady_->get(), engineStream_),
             "recording the engine stream's work (a stream of this device's primary context?)");
  cuda.check(cuda.streamWaitEvent(queue_->stream(), engineReady_->get(), 0),
             "waiting for the engine stream's work");
}

void CudaStepRunner::releaseEngine() {
  if (!engineStream_)
    return;
  const CudaDriver &cuda = driver();
  cuda.check(cuda.eventRecord(layerDone_->get(), queue_->stream()), "recording a layer's work");
  cuda.check(cuda.streamWaitEvent(engineStream_, layerDone_->get(), 0),
             "ordering the engine stream after a layer's work");
}

void CudaStepRunner::beginStep(std::uint32_t step) {
  queue_->makeCurrent();
  // (With graphs the device's part starts at the graph's launch.)
  stepStarted_ = !graphs_;
  if (stepStarted_)
    driver().check(driver().eventRecord(stepStart_->get(), queue_->stream()),
                   "recording a step's start");
  // The logs' stamps and the decisions' first work: in the step's graph
  // with graphs on (launchGraph), else now.
  if (storage_.placement() && resolveLaunches_)
    storage_.placement()->setStep(step);
  statesSaved_ = false;
  if (!graphs_) {
    enqueueStepStart();
    statesSaved_ = decisions_ && stepDecisions_;
  }
}

void CudaStepRunner::enqueueStepStart(bool exchanged) {
  const bool stamps = storage_.placement() && resolveLaunches_;
  if (!exchanged && (stamps || (decisions_ && stepDecisions_))) {
    queue_->makeCurrent();
    queue_->exchange().enqueueToDevice(queue_->stream());
  }
  if (stamps)
    storage_.placement()->enqueueStamps();
  if (decisions_ && stepDecisions_) {
    queue_->makeCurrent();
    decisions_->enqueueBegin(*storage_.placement());
    queue_->submitted();
  }
}

void CudaStepRunner::setDecisionStep(const Manifest &manifest, bool copyLists) {
  if (stepOpen_)
    throw StateError("a decision step can be loaded only between steps");
  if (!resolvesOnDevice())
    throw InputError("residency decisions on the device need steps that resolve their "
                     "selections there (dhs.resolve) and a placement step");
  // A decision step that carries write-back ring entries needs steps that
  // give them (each group's attention writing back).
  const bool takesEntries =
      std::any_of(manifest.arguments.begin(), manifest.arguments.end(),
                  [](const Argument &a) { return a.role == ArgumentRole::WriteBack; });
  const bool everyGroup = std::all_of(plan_.groups.begin(), plan_.groups.end(),
                                      [](const StepGroupPlan &g) { return g.writeBack >= 0; });
  if (takesEntries && !everyGroup)
    throw InputError(manifest.path + ": the decision step carries write-back ring entries "
                                     "(write_back), which the attention steps do not give "
                                     "(compile them with write_back too, or the decision step "
                                     "without)");
  const Argument &rowIds = manifest.argument(ArgumentRole::RowIds);
  const int selections = plan_.groups.front().rowIds;
  if (selections < 0 || rowIds.bytes() != bytesOf(selections))
    throw InputError(manifest.path + ": the decision step's row_ids hold " +
                     std::to_string(rowIds.bytes()) + " bytes, the attention steps' " +
                     std::to_string(bytesOf(selections)) +
                     " (compile it with the same --requests, --positions and --topk)");
  queue_->makeCurrent();
  decisions_ = std::make_unique<CudaDecisions>(manifest, layout_, queue_, *storage_.placement());
  decisionLists_ = copyLists;
  // Each group's slots and write-back ring entries of its own: the
  // decisions read them in place (the entries start as none: -1).
  const std::size_t groups = static_cast<std::size_t>(std::max(layout_.groups(), 1));
  auto perGroup = [&](int StepGroupPlan::*argument, std::size_t &stride, std::uint32_t fill,
                      const char *what) -> std::unique_ptr<DeviceBuffer> {
    std::size_t bytes = 0;
    for (const StepGroupPlan &group : plan_.groups)
      if (group.*argument >= 0)
        bytes = std::max(bytes, bytesOf(group.*argument));
    if (bytes == 0)
      return nullptr;
    stride = alignedStride(bytes);
    auto buffer = std::make_unique<DeviceBuffer>(groups * stride, what);
    driver().check(driver().memsetD32(buffer->get(), fill, groups * stride / 4), what);
    return buffer;
  };
  groupSlots_ = perGroup(&StepGroupPlan::slots, groupSlotsStride_, 0u, "the groups' slots");
  groupWriteBack_ = perGroup(&StepGroupPlan::writeBack, groupWriteBackStride_, ~0u,
                             "the groups' write-back ring entries");
  graphCache_.reset();
}

void CudaStepRunner::setStepDecisions(bool on) {
  if (stepOpen_)
    throw StateError("decisions are turned on or off between steps");
  if (on && !decisions_)
    throw StateError("no decision step is loaded");
  stepDecisions_ = on;
}

void CudaStepRunner::uploadDecisionState(std::int32_t group, const DeviceGroupState &state,
                                         std::int32_t budget) {
  if (!decisions_)
    throw StateError("no decision step is loaded");
  decisions_->upload(group, state, budget);
  storage_.placement()->uploadRecency(group, state.recency);
}

void CudaStepRunner::downloadDecisionState(std::int32_t group, DeviceGroupState &state) {
  if (!decisions_)
    throw StateError("no decision step is loaded");
  decisions_->download(group, state);
  storage_.placement()->downloadRecency(group, state.recency); // (no second copy)
}

void CudaStepRunner::setDecisionBudget(std::int32_t group, std::int32_t budget) {
  if (!decisions_)
    throw StateError("no decision step is loaded");
  decisions_->setBudget(group, budget);
}

DeviceDecisionCounts CudaStepRunner::decisionCounts(std::int32_t group) const {
  if (!decisions_)
    throw StateError("no decision step is loaded");
  using Control = dhs_abi::PromotionPlanLayout;
  const DecisionCounts words = decisions_->counts(group);
  DeviceDecisionCounts counts;
  counts.step.entries = static_cast<std::uint32_t>(words.log[StepLogLayout::kEntries]);
  counts.step.hits = static_cast<std::uint32_t>(words.log[StepLogLayout::kHits]);
  counts.step.listed = words.control[Control::kListed];
  counts.step.promoted = words.control[Control::kPromoted];
  counts.step.released = words.control[Control::kReleased];
  counts.hand = words.control[Control::kHand];
  counts.freeCount = words.control[Control::kFreeCount];
  counts.excess = words.control[Control::kExcess];
  counts.noVictimStep = static_cast<std::uint32_t>(words.control[Control::kNoVictimStep]);
  return counts;
}

void CudaStepRunner::decisionList(std::int32_t group, std::vector<std::int64_t> &rows,
                                  std::vector<std::int32_t> &slots) const {
  if (!decisions_ || !decisionLists_)
    throw StateError("no decision step copies its place lists");
  const auto [r, s] = decisions_->placeList(group);
  rows.assign(r, r + decisions_->listEntries());
  slots.assign(s, s + decisions_->listEntries());
}

void CudaStepRunner::rollBackDecisions() {
  // (A step that failed before its graph launched changed nothing.)
  if (decisions_ && statesSaved_)
    decisions_->rollBack(*storage_.placement());
}

void CudaStepRunner::setAgingStep(const Manifest &manifest) {
  if (!decisions_)
    throw StateError("load the decision step before the aging step");
  decisions_->setAgingStep(manifest);
}

void CudaStepRunner::enqueueAging(const std::vector<AgingReplay> &replays) {
  if (!decisions_ || !decisions_->aging())
    throw StateError("no aging step is loaded");
  if (stepOpen_)
    throw StateError("appends are replayed between steps");
  queue_->makeCurrent();
  // With graphs on the step's graph takes the replays ahead of its own
  // work (launchGraph): one launch a step.
  decisions_->enqueueAging(replays, *storage_.placement(), storage_.pools(), /*deferred=*/graphs_);
}

void CudaStepRunner::waitForAging() {
  if (!decisions_ || !decisions_->aging())
    return;
  // Replays no step's graph took (a step that failed before its launch, or
  // the state taken back between steps) run alone.
  queue_->makeCurrent();
  decisions_->flushAging(*storage_.placement(), storage_.pools());
  const std::uint32_t word = decisions_->takeAgingStatus();
  if (word != 0)
    throw Error("the aging kernel rejected the device residency state: status " +
                describeStatus(word));
}

void CudaStepRunner::enqueueDecisions() {
  // (With graphs on, the step's graph is being captured: it holds them.)
  decisions_->enqueueDecisions(*storage_.placement(), storage_.pools(), buffers_.status,
                               decisionLists_, /*whole=*/!graphs_);
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
  const StepLog &log = storage_.placement()->parseLog(group);
  // The share of the group's selections that missed, for the form of its
  // next step (formShareOf).
  const std::size_t g = static_cast<std::size_t>(group);
  loggedShares_[g] = missingShare(static_cast<std::int64_t>(log.misses.size() / 2), log.entries);
  decidedSinceLog_[g] = false;
  return log;
}

void CudaStepRunner::takeSelections(std::int32_t group, const std::int32_t *rowIds,
                                    std::int64_t count) {
  if (!resolvesOnDevice())
    throw Error(resolveLaunches_ ? "selections in device memory need the residency maps: load a "
                                   "placement step"
                                 : "selections in device memory need a step that resolves them on "
                                   "the device (dhs.resolve before the attention)");
  const std::size_t bytes = bytesOf(plan_.groups.front().rowIds);
  if (count < 0 || static_cast<std::size_t>(count) * sizeof(std::int32_t) > bytes)
    throw InputError(std::to_string(count) + " selections; the step takes " +
                     std::to_string(bytes / sizeof(std::int32_t)));
  // The group's first layer copies them into the step's row_ids (the
  // engine keeps its buffer until endStep); the host never reads them in a
  // step: the resolve kernel logs what the controller books.
  selections_.resize(static_cast<std::size_t>(layout_.groups()));
  selections_[static_cast<std::size_t>(group)] = {reinterpret_cast<CUdeviceptr>(rowIds),
                                                  static_cast<std::size_t>(count)};
}

const std::int32_t *CudaStepRunner::selectionsOnHost(std::int32_t group) {
  if (selections_.empty())
    throw StateError("no selections were taken on the device");
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce();
  const auto [from, count] = selections_.at(static_cast<std::size_t>(group));
  selectionsHost_.assign(bytesOf(plan_.groups.front().rowIds) / sizeof(std::int32_t), -1);
  if (count > 0)
    cuda.check(cuda.memcpyDtoH(selectionsHost_.data(), from, count * sizeof(std::int32_t)),
               "downloading selections");
  return selectionsHost_.data();
}

void CudaStepRunner::attend(std::int32_t layer, const LayerStep &step) {
  queue_->makeCurrent();
  if (!stepOpen_) {
    stepOpen_ = true;
    hostOutputs_.clear();
    pending_.clear();
    historyStaged_ = false;
    historyShared_ = false;
    residentFormLayers_ = 0;
    std::fill(formChosen_.begin(), formChosen_.end(), false);
    if (!graphs_)
      driver().check(driver().memsetD32Async(buffers_.status, 0, 1, queue_->stream()),
                     "clearing the status word");
  }
  LayerWork work = stage(layer, step);
  work.decisions = decisions_ && stepDecisions_;
  if (work.decisions)
    decidedSinceLog_[static_cast<std::size_t>(layer / layout_.layersPerGroup)] = true;
  layerShares_[static_cast<std::size_t>(layer)] = work.formShare;
  {
    const LayerBinding binding = bindingOf(layer);
    const std::vector<Launch> &launches = binding.step->manifest().launches;
    residentFormLayers_ +=
        std::any_of(launches.begin() + static_cast<std::ptrdiff_t>(binding.first),
                    launches.begin() + static_cast<std::ptrdiff_t>(binding.first + binding.count),
                    [&](const Launch &launch) { return runsResidentAt(launch, work.formShare); });
  }
  if (graphs_) {
    pending_.push_back(work); // launched as one graph by finishStep
    return;
  }
  // (The engine's inputs of the layer are ready on its stream; its later
  // work may read the layer's outputs.)
  waitForEngine();
  enqueue(work);
  releaseEngine();
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
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
  };
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  std::uint32_t word = 0;
  const Clock::time_point launchStart = Clock::now();
  Clock::time_point launchEnd = launchStart;
  double graphLaunch = -1.0;
  if (stepOpen_) {
    if (decisions_ && stepDecisions_)
      decisions_->injectCorruptState();
    if (graphs_ && !pending_.empty()) {
      try {
        // (Before the capture, if any: the graph launch waits in the stream.)
        waitForEngine();
        cuda.check(cuda.eventRecord(stepStart_->get(), queue_->stream()),
                   "recording a step's start");
        stepStarted_ = true;
        launchGraph();
        releaseEngine();
        graphLaunch = graphCache_.lastLaunchMs();
        statesSaved_ = decisions_ && stepDecisions_;
      } catch (...) {
        stepOpen_ = false;
        pending_.clear();
        hostOutputs_.clear();
        cuda.streamSynchronize(queue_->stream());
        throw;
      }
    } else if (decisions_ && stepDecisions_) {
      decisions_->flushAging(*storage_.placement(), storage_.pools());
      enqueueDecisions();
    }
    pending_.clear();
    launchEnd = Clock::now();
    cuda.check(cuda.memcpyDtoHAsync(&word, buffers_.status, sizeof(word), queue_->stream()),
               "reading the status word");
    if (stepStarted_)
      cuda.check(cuda.eventRecord(stepEnd_->get(), queue_->stream()), "recording a step's end");
  }
  queue_->synchronize("the step's kernels failed");
  if (stepOpen_ && stepStarted_) {
    float elapsed = 0.0f;
    lastTimes_.device =
        cuda.eventElapsedTime(&elapsed, stepStart_->get(), stepEnd_->get()) == CUDA_SUCCESS
            ? static_cast<double>(elapsed)
            : -1.0;
    // (The status word's copy into pageable memory waits for the device.)
    lastTimes_.launch = ms(launchStart, launchEnd);
    lastTimes_.graphLaunch = graphLaunch;
    lastTimes_.wait = ms(launchEnd, Clock::now());
  }
  stepStarted_ = false;
  const bool wasOpen = stepOpen_;
  stepOpen_ = false;
  if (!wasOpen)
    return;
  // (The decisions' launches report to their lanes' words, each of which
  // starts as the step's: with the step's own word clear, a bit there is a
  // decision kernel's, which rejected the device's residency state after
  // other groups' decisions had placed their rows.)
  const std::uint32_t lanes = decisions_ ? decisions_->takeStatus() : 0;
  if (word != 0 || lanes != 0)
    hostOutputs_.clear();
  if (word != 0)
    throw Error("the kernels rejected their input: status " + describeStatus(word | lanes));
  if (lanes != 0)
    throw InvariantError("the residency decisions rejected the device's state part-way: status " +
                         describeStatus(lanes));
  copyHostOutputs();
}

void CudaStepRunner::abandonStep() {
  // With graphs on nothing of the step was launched; without, the layers
  // enqueued so far run (their stamps are what rollBackDecisions undoes),
  // the decisions do not.
  stepOpen_ = false;
  stepStarted_ = false;
  pending_.clear();
  hostOutputs_.clear();
  try {
    queue_->makeCurrent();
    queue_->synchronize("an abandoned step's kernels");
  } catch (...) {
    // (The step failed already; the next one reports a device that did.)
  }
}

CudaStepRunner::LayerBinding CudaStepRunner::bindingOf(std::int32_t layer) const {
  LayerBinding binding;
  const bool wholeModel = plan_.wholeModel();
  const StepLayerPlan &planned = plan_.layers[wholeModel ? static_cast<std::size_t>(layer) : 0];
  const StepGroupPlan &group = plan_.groups[static_cast<std::size_t>(planned.group)];
  binding.step = wholeModel || steps_.size() == 1
                     ? steps_.front().get()
                     : steps_[static_cast<std::size_t>(layer % layout_.layersPerPool)].get();
  binding.first = planned.firstLaunch;
  binding.count = planned.endLaunch - planned.firstLaunch;
  binding.queries = planned.queries;
  binding.output = planned.output;
  binding.rowIds = group.rowIds;
  binding.slots = group.slots;
  binding.windowRing = group.windowRing;
  binding.writeBack = group.writeBack;
  binding.uploadSelections = !wholeModel || layer == layout_.firstLayer(planned.group);
  return binding;
}

std::size_t CudaStepRunner::stagingInBytes() const {
  const StepLayerPlan &first = plan_.layers.front();
  const StepGroupPlan &group = plan_.groups.front();
  return bytesOf(group.rowIds) + bytesOf(group.slots) + bytesOf(plan_.historyStart) +
         bytesOf(plan_.historyLen) + bytesOf(plan_.windowTokens) + bytesOf(first.queries);
}

std::uint8_t *CudaStepRunner::stagingIn(std::int32_t layer) const {
  return static_cast<std::uint8_t *>(stagingIn_->host()) +
         static_cast<std::size_t>(layer) * stagingInBytes();
}

std::uint8_t *CudaStepRunner::stagingOut(std::int32_t layer) const {
  return static_cast<std::uint8_t *>(stagingOut_->host()) +
         static_cast<std::size_t>(layer) * bytesOf(plan_.layers.front().output);
}

double CudaStepRunner::formShareOf(std::int32_t layer, const LayerStep &step) {
  // Only a layer with forms chooses (a graph keys on the choice).
  const std::vector<double> &lines = layerLines_[static_cast<std::size_t>(layer)];
  if (lines.empty())
    return 1.0;
  // A group's layers run in the form its first one took in the step (a
  // group's fetch is among its first layer's launches; by its later layers
  // the host copy of the group's log may be this step's, half written).
  const std::size_t group = static_cast<std::size_t>(layer / layout_.layersPerGroup);
  if (formChosen_[group])
    return groupShares_[group];
  // Selections resolved on the host were counted; those resolved on the
  // device go by the group's last step: the device's counts where it
  // decided that step, else the log the host booked it from.
  double share = 0.0;
  if (step.missingRows >= 0) {
    share = missingShare(step.missingRows, step.selectedRows);
  } else {
    double decided = -1.0;
    if (decisions_) {
      const DecisionCounts words = decisions_->counts(static_cast<std::int32_t>(group));
      decided = missingShare(words.log[StepLogLayout::kMisses], words.log[StepLogLayout::kEntries]);
    }
    share = lastStepShare(loggedShares_[group], decidedSinceLog_[group], decided);
  }
  groupShares_[group] = runtime::formShare(lines, share, groupShares_[group]);
  formChosen_[group] = true;
  return groupShares_[group];
}

CudaStepRunner::LayerWork CudaStepRunner::stage(std::int32_t layer, const LayerStep &step) {
  const ProblemShape &s = *step.shape;
  const LayerBinding binding = bindingOf(layer);
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
  if (step.selectionsOnDevice)
    std::tie(work.selections, work.selectionCount) =
        selections_.at(static_cast<std::size_t>(layer / layout_.layersPerGroup));
  work.formShare = formShareOf(layer, step);
  std::uint8_t *stage = stagingIn(layer);
  auto put = [&](int argument, const void *data) {
    // Selections taken on the device are not staged.
    if (data && argument >= 0)
      std::memcpy(stage, data, bytesOf(argument));
    stage += bytesOf(argument);
  };
  put(binding.rowIds, step.selectionsOnDevice ? nullptr : step.rowIds);
  put(binding.slots, step.selectionsOnDevice ? nullptr : step.slots);
  const std::uint8_t *history = stage;
  put(plan_.historyStart, step.historyStart);
  put(plan_.historyLen, step.historyLen);
  // The history bounds go up with the step's first layer, and again only
  // where a layer's differ from those uploaded last.
  const std::size_t historyBytes = static_cast<std::size_t>(stage - history);
  work.uploadHistory = !historyStaged_ || stepHistory_.size() != historyBytes ||
                       std::memcmp(stepHistory_.data(), history, historyBytes) != 0;
  if (work.uploadHistory) {
    stepHistory_.assign(history, history + historyBytes);
    historyStaged_ = true;
    // A step's graph copies them from the exchange's mirror.
    if (graphs_)
      std::memcpy(static_cast<std::uint8_t *>(queue_->exchange().host(historyPart_)) +
                      static_cast<std::size_t>(layer) * historyBytes_,
                  history, historyBytes);
  }
  if (plan_.windowTokens >= 0) {
    put(plan_.windowTokens, step.windowTokens);
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
  const LayerBinding binding = bindingOf(work.layer);
  std::uint8_t *stage = stagingIn(work.layer);
  const std::int32_t group = work.layer / layout_.layersPerGroup;
  // Where the layer's launches find their arguments: the runner's buffers,
  // except the group's own slots (with a decision step), and the engine's
  // selections, queries and output where they fill the argument (read and
  // written in place: no copies).
  const Direct direct = directOf(work, binding);
  CudaStepBuffers buffers = buffers_;
  buffers.formShare = work.formShare;
  if (binding.slots >= 0)
    buffers.arguments[static_cast<std::size_t>(binding.slots)] = slotsOf(work.layer, binding);
  if (binding.writeBack >= 0)
    buffers.arguments[static_cast<std::size_t>(binding.writeBack)] =
        writeBackOf(work.layer, binding);
  if (direct.selections)
    buffers.arguments[static_cast<std::size_t>(binding.rowIds)] = work.selections;
  if (direct.queries)
    buffers.arguments[static_cast<std::size_t>(binding.queries)] = work.queries;
  if (direct.output)
    buffers.arguments[static_cast<std::size_t>(binding.output)] = work.output;
  auto bound = [&](int index) { return buffers.arguments[static_cast<std::size_t>(index)]; };
  // Selections and slots (the group's: uploaded with its first layer in a
  // whole-model step), the history bounds (with the step's first layer,
  // and again only where a layer's differ), the window token counts.
  const std::pair<int, bool> uploads[] = {{binding.rowIds, binding.uploadSelections},
                                          {binding.slots, binding.uploadSelections},
                                          {plan_.historyStart, work.uploadHistory},
                                          {plan_.historyLen, work.uploadHistory},
                                          {plan_.windowTokens, true}};
  for (const auto &[index, wanted] : uploads) {
    if (index < 0)
      continue;
    const std::size_t bytes = bytesOf(index);
    if (!wanted) {
      stage += bytes;
      continue;
    }
    if (work.selectionsOnDevice && index == binding.rowIds) {
      // The engine's row ids, -1 past them (the lanes past the batch).
      const std::size_t taken = work.selectionCount * sizeof(std::int32_t);
      if (!direct.selections && taken < bytes)
        cuda.check(
            cuda.memsetD32Async(bound(index) + taken, 0xFFFFFFFFu, (bytes - taken) / 4, stream),
            "padding the selections");
      if (!direct.selections && taken > 0)
        cuda.check(cuda.memcpyDtoDAsync(bound(index), work.selections, taken, stream),
                   "copying the group's selections");
    } else if (graphs_ && (index == plan_.historyStart || index == plan_.historyLen)) {
      // From the exchange's mirror (stage wrote them into the exchange; the
      // graph copies it to the device first).
      const std::size_t offset = index == plan_.historyLen ? bytesOf(plan_.historyStart) : 0;
      cuda.check(cuda.memcpyDtoDAsync(bound(index),
                                      queue_->exchange().mirror(historyPart_) +
                                          static_cast<std::size_t>(work.layer) * historyBytes_ +
                                          offset,
                                      bytes, stream),
                 "copying the history bounds");
    } else if (!(work.selectionsOnDevice && index == binding.slots)) // resolve writes them
      cuda.check(
          cuda.memcpyHtoDAsync(bound(index), stage, bytes, stream),
          std::string("uploading ") +
              abi::name(binding.step->manifest().arguments[static_cast<std::size_t>(index)].role));
    stage += bytes;
  }
  // Queries: the engine's lanes, zeros for the padding lanes (none to clear
  // when the engine's fill the argument).
  if (!direct.queries) {
    if (work.queryBytes < bytesOf(binding.queries))
      cuda.check(
          cuda.memsetD16Async(bound(binding.queries), 0, bytesOf(binding.queries) / 2, stream),
          "clearing the queries");
    if (work.queryBytes > 0) {
      if (work.memory == MemorySpace::Host)
        cuda.check(cuda.memcpyHtoDAsync(bound(binding.queries), stage, work.queryBytes, stream),
                   "uploading queries");
      else
        cuda.check(
            cuda.memcpyDtoDAsync(bound(binding.queries), work.queries, work.queryBytes, stream),
            "copying queries");
    }
  }
  // The layer's launches over its pool.
  const std::size_t pool = layout_.poolOf(work.layer);
  // The lanes' window rings of this pool, side by side.
  const std::size_t ringBytes = layout_.windowRingBytes(pool);
  for (std::size_t b = 0; b < work.windowRequests.size(); ++b)
    if (work.windowRequests[b] >= 0 && binding.windowRing >= 0)
      cuda.check(cuda.memcpyDtoDAsync(bound(binding.windowRing) + b * ringBytes,
                                      rings_.windowRings(work.windowRequests[b]) +
                                          layout_.windowRingOffset(pool),
                                      ringBytes, stream),
                 "gathering window rings");
  buffers.hbm = storage_.pools().hbm[pool]->get();
  buffers.host = storage_.pools().host[pool]->device();
  storage_.pools().bindWriteBack(pool, layout_.writeBackRows, writesBack_, buffers);
  CudaPlacement *placement = storage_.placement();
  if (placement)
    // The group's first layer books its selections; the others resolve
    // the same selections again and log nothing.
    placement->bind(group, work.layer == layout_.firstLayer(group), buffers);
  else if (resolveLaunches_)
    throw Error("the step resolves selections through the residency maps (dhs.resolve): "
                "load a placement step first");
  // The output poisoned (a NaN the kernels never produce): elements left
  // unwritten show, in the engine's output too (poisoned with the other
  // layers' at the step's start where launchGraph did).
  if (!(direct.output && outputsPoisoned_))
    cuda.check(cuda.memsetD16Async(bound(binding.output), kBf16Poison, bytesOf(binding.output) / 2,
                                   stream),
               "poisoning the output");
  binding.step->launchAsync(buffers, stream, binding.first, binding.count);
  lastLayer_ = work.layer;
  // The row lists of the layer's fetches, before a later group's launches
  // reuse the arena.
  if (countFetches_ && fetchLists_) {
    auto *into = static_cast<std::uint8_t *>(fetchLists_->host()) +
                 static_cast<std::size_t>(work.layer) * fetchListBytes_;
    const Manifest &manifest = binding.step->manifest();
    for (std::size_t i = binding.first; i < binding.first + binding.count; ++i) {
      if (manifest.launches[i].kind != abi::LaunchKind::Fetch ||
          !runsAt(manifest.launches[i], work.formShare))
        continue;
      for (const LaunchParam &param : manifest.launches[i].params) {
        if (param.role != abi::ParamRole::RowIds && param.role != abi::ParamRole::Slots)
          continue;
        const std::size_t bytes = param.elements() * sizeof(std::int32_t);
        const CUdeviceptr from = param.source == ParamSource::Scratch
                                     ? buffers_.arena + static_cast<CUdeviceptr>(param.offset)
                                     : bound(param.argumentIndex);
        cuda.check(cuda.memcpyDtoHAsync(into, from, bytes, stream), "copying a fetch's row list");
        into += bytes;
      }
    }
  }
  // The group's step log, complete after its first layer's resolve: to
  // the host now, so that the controller books the group while the later
  // layers run (an event marks it, outside graphs). Host selections were
  // booked before the launch: their log stays on the device.
  // (A step the device decides books counts only, unless checked.)
  if (placement && resolveLaunches_ && buffers.logWords > 0 && work.selectionsOnDevice &&
      (!work.decisions || decisionLists_))
    placement->copyLogToHost(group, /*recordEvent=*/!graphs_);
  // The group's selections, slots and history starts for the decisions
  // after the step's last layer: saved where a later group's layers reuse
  // the argument, else read in place (the engine's selections, the group's
  // own slots, history bounds uploaded once in the step).
  if (work.decisions && work.layer == layout_.endLayer(group) - 1)
    decisions_->enqueueInputs(
        group, {bound(binding.rowIds), !direct.selections}, {bound(binding.slots), !groupSlots_},
        {plan_.historyStart >= 0 ? bound(plan_.historyStart) : 0, !historyShared_},
        {binding.writeBack >= 0 ? bound(binding.writeBack) : 0, false});
  // Outputs: the engine's lanes (written in place where they fill it).
  if (work.outputBytes > 0 && !direct.output) {
    if (work.memory == MemorySpace::Host)
      cuda.check(cuda.memcpyDtoHAsync(stagingOut(work.layer), bound(binding.output),
                                      work.outputBytes, stream),
                 "downloading the output");
    else
      cuda.check(cuda.memcpyDtoDAsync(work.output, bound(binding.output), work.outputBytes, stream),
                 "copying the output");
  }
}

CudaStepRunner::Direct CudaStepRunner::directOf(const LayerWork &work,
                                                const LayerBinding &binding) const {
  // (Allocations are 256-byte aligned: the kernels may assume as much.)
  auto fits = [](CUdeviceptr address, std::size_t bytes, std::size_t argumentBytes) {
    return address != 0 && address % 256 == 0 && bytes == argumentBytes && bytes > 0;
  };
  auto overlap = [](CUdeviceptr a, std::size_t aBytes, CUdeviceptr b, std::size_t bBytes) {
    return a < b + bBytes && b < a + aBytes;
  };
  Direct direct;
  // Selections: only where the step's engine buffers are known not to
  // overlap (launchGraph: the decisions read them after every layer) and
  // the steps allow it (selectionsInPlace_).
  direct.selections =
      engineInPlace_ && work.selectionsOnDevice && binding.rowIds >= 0 && selectionsInPlace_ &&
      fits(work.selections, work.selectionCount * sizeof(std::int32_t), bytesOf(binding.rowIds));
  direct.queries = work.memory == MemorySpace::Device && binding.queries >= 0 &&
                   fits(work.queries, work.queryBytes, bytesOf(binding.queries));
  // The output in place unless it overlaps what the layer reads from the
  // engine (a copy at the layer's end wrote it after those reads).
  direct.output =
      work.memory == MemorySpace::Device && binding.output >= 0 &&
      fits(work.output, work.outputBytes, bytesOf(binding.output)) &&
      !overlap(work.output, work.outputBytes, work.queries, work.queryBytes) &&
      !(work.selectionsOnDevice && overlap(work.output, work.outputBytes, work.selections,
                                           work.selectionCount * sizeof(std::int32_t)));
  return direct;
}

bool CudaStepRunner::engineBuffersApart(const std::vector<LayerWork> &works) {
  // Each buffer the engine handed the step, and whether the step writes it.
  struct Range {
    CUdeviceptr begin, end;
    bool written;
  };
  std::vector<Range> ranges;
  for (const LayerWork &work : works) {
    if (work.selectionsOnDevice && work.selectionCount > 0)
      ranges.push_back({work.selections, work.selections + work.selectionCount * 4, false});
    if (work.memory == MemorySpace::Device) {
      if (work.queryBytes > 0)
        ranges.push_back({work.queries, work.queries + work.queryBytes, false});
      if (work.outputBytes > 0)
        ranges.push_back({work.output, work.output + work.outputBytes, true});
    }
  }
  // Buffers read only may overlap (a group's layers share its selections).
  for (std::size_t i = 0; i < ranges.size(); ++i)
    for (std::size_t j = i + 1; j < ranges.size(); ++j)
      if ((ranges[i].written || ranges[j].written) && ranges[i].begin < ranges[j].end &&
          ranges[j].begin < ranges[i].end)
        return false;
  return true;
}

CUdeviceptr CudaStepRunner::writeBackOf(std::int32_t layer, const LayerBinding &binding) const {
  if (!groupWriteBack_)
    return argument(binding.writeBack);
  return groupWriteBack_->get() +
         static_cast<std::size_t>(layer / layout_.layersPerGroup) * groupWriteBackStride_;
}

CUdeviceptr CudaStepRunner::slotsOf(std::int32_t layer, const LayerBinding &binding) const {
  if (!groupSlots_)
    return argument(binding.slots);
  return groupSlots_->get() +
         static_cast<std::size_t>(layer / layout_.layersPerGroup) * groupSlotsStride_;
}

void CudaStepRunner::launchGraph() {
  CUstream stream = queue_->stream();
  GraphKey key;
  key.layers = pending_;
  const CudaDecisions::AgingShape *aging = decisions_ ? decisions_->queuedAging() : nullptr;
  if (aging) {
    key.aging = *aging;
    key.agingTables = decisions_->tablesGeneration();
  }
  key.exchange = queue_->exchange().generation();
  graphCache_.run(key, stream, [&] {
    // (What the capture decides from the pending layers, all in the key.)
    struct Reset {
      CudaStepRunner &runner;
      ~Reset() { runner.historyShared_ = runner.engineInPlace_ = runner.outputsPoisoned_ = false; }
    } reset{*this};
    // The history bounds uploaded with the first layer only: the decisions
    // read them in place.
    historyShared_ = true;
    for (std::size_t i = 1; i < pending_.size(); ++i)
      historyShared_ = historyShared_ && !pending_[i].uploadHistory;
    // With the engine's buffers apart, its selections are read in place
    // (by the decisions too), and the outputs written in place are
    // poisoned first, adjacent ones in one memset.
    engineInPlace_ = engineBuffersApart(pending_);
    // What the host wrote for the step (budgets, stamps, the appends'
    // lists) in one copy; the appends' replays first: the step's stamps
    // and decisions follow them (as a graph of their own would run before
    // the step's).
    queue_->exchange().enqueueToDevice(stream);
    if (aging)
      decisions_->submitAging(*storage_.placement(), storage_.pools());
    enqueueStepStart(/*exchanged=*/true);
    driver().check(driver().memsetD32Async(buffers_.status, 0, 1, stream),
                   "clearing the status word");
    if (engineInPlace_) {
      std::vector<std::pair<CUdeviceptr, std::size_t>> outputs;
      for (const LayerWork &work : pending_)
        if (directOf(work, bindingOf(work.layer)).output)
          outputs.emplace_back(work.output, work.outputBytes);
      std::sort(outputs.begin(), outputs.end());
      for (std::size_t i = 0; i < outputs.size();) {
        std::size_t end = i + 1, bytes = outputs[i].second;
        for (; end < outputs.size() && outputs[end].first == outputs[i].first + bytes; ++end)
          bytes += outputs[end].second;
        driver().check(driver().memsetD16Async(outputs[i].first, kBf16Poison, bytes / 2, stream),
                       "poisoning the outputs");
        i = end;
      }
      outputsPoisoned_ = true;
    }
    for (const LayerWork &work : pending_)
      enqueue(work);
    // (The decisions end with the exchange's copy back, which brings the
    // replays' slots and status words too.)
    if (!pending_.empty() && pending_.back().decisions)
      enqueueDecisions();
    else if (aging)
      queue_->exchange().enqueueToHost(stream);
  });
  // (A replay runs none of the capture's host code: enqueueDecisions did
  // not mark the lanes' words to be read.)
  if (!pending_.empty() && pending_.back().decisions)
    decisions_->noteGraphLaunched();
  if (aging)
    decisions_->agingSubmitted();
  queue_->submitted();
}

std::vector<KernelInfo> CudaStepRunner::kernels() const {
  std::vector<KernelInfo> all;
  for (const std::unique_ptr<CudaStep> &step : steps_)
    all.insert(all.end(), step->kernels().begin(), step->kernels().end());
  return all;
}

void CudaStepRunner::setCountFetches(bool on) {
  if (stepOpen_)
    throw StateError("counting fetches can be turned on or off only between steps");
  if (on != countFetches_) {
    // A graph captured without the copies (or with them) no longer fits.
    queue_->makeCurrent();
    graphCache_.reset();
  }
  countFetches_ = on;
  // The row lists' pinned buffer now, between steps: a step may be
  // captured into a CUDA graph, where allocations are not permitted.
  if (countFetches_ && fetchListBytes_ > 0 && !fetchLists_) {
    queue_->makeCurrent();
    fetchLists_ = std::make_unique<MappedHostBuffer>(
        fetchListBytes_ * static_cast<std::size_t>(layout_.layers), "fetch row lists");
  }
}

std::int64_t CudaStepRunner::groupFetchedRows(std::int32_t group) {
  if (!countFetches_ || stepOpen_)
    return -1;
  queue_->makeCurrent();
  queue_->quiesce();
  // A whole-model step fetches in a group's first layer, a replayed
  // one-layer step in each (the same rows): the largest count.
  std::int64_t rows = -1;
  for (std::int32_t l = layout_.firstLayer(group); l < layout_.endLayer(group); ++l) {
    if (!fetchLists_)
      break;
    const LayerBinding binding = bindingOf(l);
    const Manifest &manifest = binding.step->manifest();
    const auto *from = static_cast<const std::uint8_t *>(fetchLists_->host()) +
                       static_cast<std::size_t>(l) * fetchListBytes_;
    std::int64_t copied = -1;
    for (std::size_t i = binding.first; i < binding.first + binding.count; ++i) {
      const Launch &launch = manifest.launches[i];
      if (launch.kind != abi::LaunchKind::Fetch ||
          !runsAt(launch, layerShares_[static_cast<std::size_t>(l)]))
        continue;
      // The list, then its slots where the fetch takes them (in parameter
      // order, as enqueue copied them).
      std::size_t count = 0;
      const std::int32_t *list = nullptr, *slots = nullptr;
      for (const LaunchParam &param : launch.params) {
        if (param.role != abi::ParamRole::RowIds && param.role != abi::ParamRole::Slots)
          continue;
        const std::size_t elements = param.elements();
        (param.role == abi::ParamRole::RowIds ? list : slots) =
            reinterpret_cast<const std::int32_t *>(from);
        count = elements;
        from += elements * sizeof(std::int32_t);
      }
      copied = std::max<std::int64_t>(copied, 0);
      for (std::size_t e = 0; list && e < count; ++e)
        copied += list[e] != -1 && (!slots || slots[e] == -1);
    }
    rows = std::max(rows, copied);
  }
  return rows;
}

std::int64_t CudaStepRunner::fetchedRows() {
  if (countFetches_)
    return groupFetchedRows(lastLayer_ / layout_.layersPerGroup);
  if (plan_.wholeModel())
    return -1; // a later group's launches reused the arena: only counting knows
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce();
  auto download = [&](CUdeviceptr from, std::size_t count) {
    std::vector<std::int32_t> values(count);
    cuda.check(cuda.memcpyDtoH(values.data(), from, count * sizeof(std::int32_t)),
               "reading a fetch's rows");
    return values;
  };
  const LayerBinding binding = bindingOf(lastLayer_);
  return countFetchedRows(
      binding.step->manifest(), layerShares_[static_cast<std::size_t>(lastLayer_)],
      [&](const LaunchParam &list) {
        const std::size_t count = list.elements();
        return download(list.source == ParamSource::Scratch
                            ? buffers_.arena + static_cast<CUdeviceptr>(list.offset)
                            : buffers_.arguments.at(static_cast<std::size_t>(list.argumentIndex)),
                        count);
      },
      [&] {
        return download(slotsOf(lastLayer_, binding),
                        bytesOf(binding.slots) / sizeof(std::int32_t));
      });
}

} // namespace dhs::runtime::cuda_detail
