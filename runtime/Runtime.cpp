//===- Runtime.cpp - Requests, steps and the KV hierarchy -----------------===//

#include "runtime/Runtime.h"

#include "runtime/core/Checked.h"
#include "runtime/core/Error.h"
#include "runtime/core/Reserve.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>

namespace dhs::runtime {

namespace {

/// "request 7" for messages (engine ids).
std::string requestName(std::uint64_t id) { return "request " + std::to_string(id); }

/// The first position of `indices` that repeats an earlier one, or -1:
/// O(n log n) in the batch, whatever the runtime's request count.
std::int64_t firstRepeat(const std::vector<std::int32_t> &indices) {
  std::vector<std::pair<std::int32_t, std::int64_t>> sorted(indices.size());
  for (std::size_t i = 0; i < indices.size(); ++i)
    sorted[i] = {indices[i], static_cast<std::int64_t>(i)};
  std::sort(sorted.begin(), sorted.end());
  std::int64_t first = -1;
  for (std::size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i].first == sorted[i - 1].first && (first < 0 || sorted[i].second < first))
      first = sorted[i].second;
  return first;
}

/// What `error` says (an exception caught earlier).
std::string messageOf(const std::exception_ptr &error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception &e) {
    return e.what();
  } catch (...) {
    return "an unknown exception";
  }
}

} // namespace

Runtime::Runtime(const RuntimeConfig &config) : config_(config) {
  auto atLeast = [](const char *name, std::int64_t value, std::int64_t min) {
    if (value < min)
      throw Error(std::string("runtime config: ") + name + " is " + std::to_string(value) +
                  ", it must be at least " + std::to_string(min));
  };
  atLeast("layers", config.layers, 1);
  atLeast("layers_per_group", config.layersPerGroup, 1);
  atLeast("hbm_slots", config.hbmSlots, -1);
  atLeast("host_rows", config.hostRows, 1);
  atLeast("max_requests", config.maxRequests, 1);
  atLeast("newest_window", config.newestWindow, 0);
  atLeast("draft_window", config.draftWindow, 0);
  atLeast("hot_floor", config.hotFloor, 0);
  atLeast("max_promotions_per_step", config.maxPromotionsPerStep, -1);
  atLeast("full_check_interval", config.fullCheckInterval, 0);
  if (config.layersPerGroup > config.layers)
    throw Error("runtime config: layers_per_group " + std::to_string(config.layersPerGroup) +
                " exceeds the " + std::to_string(config.layers) + " layers");
  // Layer counts are products and sums in 32 bits (groups, layer indices);
  // no model comes near this.
  constexpr std::int32_t kMaxLayers = 1 << 16;
  if (config.layers > kMaxLayers)
    throw Error("runtime config: layers is " + std::to_string(config.layers) +
                ", it must be at most " + std::to_string(kMaxLayers));
}

Runtime::~Runtime() = default;

void Runtime::requireStep(const char *what) const {
  if (brokenIn_)
    throw StateError(std::string(what) + ": the runtime cannot vouch for its tables since " +
                     brokenIn_ + " failed part-way (" + messageOf(brokenBy_) +
                     "); destroy it and admit its requests again");
  if (!tiers_.storage)
    throw StateError(std::string(what) + ": no step is loaded (load a compiled step first)");
}

const ProblemShape &Runtime::shape() const {
  requireStep("shape");
  return shape_;
}

std::int64_t Runtime::rowBytes() const {
  requireStep("row size");
  return layout_.rowBytes;
}

std::int32_t Runtime::groups() const {
  return (config_.layers + config_.layersPerGroup - 1) / config_.layersPerGroup;
}

std::string Runtime::backendDescription() const {
  return tiers_.storage ? tiers_.storage->describe() : "none (no step loaded)";
}

const DeviceInfo *Runtime::device() const {
  requireStep("device");
  return tiers_.runner->device();
}

std::vector<KernelInfo> Runtime::kernels() const {
  requireStep("kernels");
  return tiers_.runner->kernels();
}

std::int64_t Runtime::arenaBytes() const {
  requireStep("arena bytes");
  return tiers_.runner->arenaBytes();
}

std::int64_t Runtime::fetchedRows() {
  requireStep("fetched rows");
  if (inStep_)
    throw StateError("fetched rows: a step is in progress");
  return tiers_.runner->fetchedRows();
}

double Runtime::formShare(std::int32_t layer) const {
  requireStep("form share");
  if (layer < 0 || layer >= layout_.layers)
    throw OutOfRangeError("form share: layer " + std::to_string(layer) + " does not exist (" +
                          std::to_string(layout_.layers) + " layers)");
  return tiers_.runner->formShare(layer);
}

const ResidencyController &Runtime::controller() const {
  requireStep("controller");
  return *controller_;
}

//===----------------------------------------------------------------------===//
// Requests
//===----------------------------------------------------------------------===//

std::int32_t Runtime::indexOf(std::uint64_t id, const char *what) const {
  auto it = index_.find(id);
  if (it == index_.end())
    throw UnknownRequestError(std::string(what) + ": " + requestName(id) + " is not admitted");
  return it->second;
}

bool Runtime::admitted(std::uint64_t id) const { return index_.count(id) != 0; }

std::int32_t Runtime::requestIndex(std::uint64_t id) const { return indexOf(id, "request index"); }

std::int64_t Runtime::historyLen(std::uint64_t id) const {
  return controller_->historyLen(indexOf(id, "history length"));
}

void Runtime::admit(std::uint64_t id, std::int64_t historyLen, std::int64_t maxContext,
                    const void *prefill) {
  requireStep("admit");
  if (inStep_)
    throw StateError("cannot admit " + requestName(id) + " during a step");
  if (index_.count(id))
    throw InputError(requestName(id) + " is already admitted");
  if (historyLen < 0)
    throw InputError("admit " + requestName(id) + ": negative history length " +
                     std::to_string(historyLen));
  if (maxContext < 1 || maxContext < historyLen ||
      maxContext > std::numeric_limits<std::int32_t>::max())
    throw InputError("admit " + requestName(id) + ": maximum context " +
                     std::to_string(maxContext) + " must lie in [max(1, history length " +
                     std::to_string(historyLen) + "), 2^31)");
  if (historyLen > 0 && !prefill)
    throw InputError("admit " + requestName(id) + ": null prefill rows for a history of " +
                     std::to_string(historyLen));
  takeStateFromDevice();
  // Work in flight may still read the host rows the admission writes (a
  // finished request's): it ends, or its error is reported, before any
  // change.
  tiers_.storage->waitForSubmittedWork();
  // Everything the admission needs, before its first change: the rings
  // (the controller's admission may release optional rows to fit the
  // request, which a refusal for want of ring memory must not have done),
  // the id's entry (a made node goes into a table with room without
  // allocating), room for its copies to wait for a retry.
  const std::int32_t index = controller_->nextIndex(); // the one admit takes
  std::unordered_map<std::uint64_t, std::int32_t> entry{{id, index}};
  index_.reserve(index_.size() + 1);
  reserveRoom(pendingCopies_, 1);
  rings_->allocate(index);
  try {
    controller_->admit(historyLen, maxContext, changes_);
  } catch (...) {
    rings_->free(index);
    throw;
  }
  const std::int64_t start = controller_->historyStart(index);
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  const auto *source = static_cast<const std::uint8_t *>(prefill);
  for (std::int32_t l = 0; l < layout_.layers; ++l)
    for (std::int64_t row = 0; row < historyLen; ++row) {
      std::memcpy(tiers_.storage->hostRow(l, start + row),
                  source + (static_cast<std::size_t>(l * historyLen + row)) * rowBytes, rowBytes);
      checker_->recordHash(l, start + row);
    }
  index_.insert(entry.extract(entry.begin()));
  applyCopies();
}

void Runtime::append(std::uint64_t id, const void *rows) {
  requireStep("append");
  if (inStep_)
    throw StateError("cannot append to " + requestName(id) + " during a step");
  const std::int32_t index = indexOf(id, "append");
  if (!rows)
    throw InputError("append to " + requestName(id) + ": null rows");
  requireRoomToAppend(index, requestName(id));
  appendTokens({index}, static_cast<const std::uint8_t *>(rows));
}

void Runtime::appendBatch(const std::uint64_t *ids, std::int64_t count, const void *rows) {
  requireStep("append batch");
  if (inStep_)
    throw StateError("cannot append a batch during a step");
  if (count < 0)
    throw InputError("append batch: negative count " + std::to_string(count));
  if (count > 0 && (!ids || !rows))
    throw InputError("append batch: null ids or rows");
  std::vector<std::int32_t> indices;
  for (std::int64_t i = 0; i < count; ++i)
    indices.push_back(indexOf(ids[i], "append batch"));
  if (const std::int64_t repeat = firstRepeat(indices); repeat >= 0)
    throw InputError("append batch: " + requestName(ids[repeat]) + " is given twice");
  for (std::int64_t i = 0; i < count; ++i)
    requireRoomToAppend(indices[static_cast<std::size_t>(i)], requestName(ids[i]));
  if (count > 0)
    appendTokens(indices, static_cast<const std::uint8_t *>(rows));
}

void Runtime::requireRoomToAppend(std::int32_t index, const std::string &name) const {
  const std::int64_t maxContext = controller_->maxContext(index);
  if (controller_->historyLen(index) >= maxContext)
    throw CapacityError("append to " + name + ": it reached its maximum context of " +
                        std::to_string(maxContext) + " rows");
}

void Runtime::appendTokens(const std::vector<std::int32_t> &indices, const std::uint8_t *rows) {
  // (With an aging step the controller records the appends for the device.)
  if (!agingStepLoaded_)
    takeStateFromDevice();
  // Everything the appends need, before their first change: the controller
  // makes room for its own, so that all happen or none.
  std::vector<RowWrite> writes;
  writes.reserve(indices.size() * static_cast<std::size_t>(layout_.layers));
  reserveRoom(pendingCopies_, 1);
  tiers_.storage->waitForSubmittedWork(); // (before the change, see admit)
  controller_->append(indices.data(), indices.size(), changes_);
  // One token per request: the rows placed are distinct, and none is
  // released again in the batch (only an append to the same request could
  // age it), so the copies and releases make one placement.
  const std::size_t tokenBytes = static_cast<std::size_t>(layout_.layers * layout_.rowBytes);
  for (std::size_t i = 0; i < indices.size(); ++i)
    addNewestRowWrites(indices[i], rows + i * tokenBytes, writes);
  writeRows(writes, static_cast<std::size_t>(layout_.rowBytes));
  for (std::int32_t index : indices)
    recordNewestRowHashes(index);
  applyCopies();
}

void Runtime::addNewestRowWrites(std::int32_t index, const std::uint8_t *rows,
                                 std::vector<RowWrite> &writes) {
  const std::int64_t hostRow =
      controller_->historyStart(index) + controller_->historyLen(index) - 1;
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  for (std::int32_t l = 0; l < layout_.layers; ++l)
    writes.push_back(
        {tiers_.storage->hostRow(l, hostRow), rows + static_cast<std::size_t>(l) * rowBytes});
}

void Runtime::recordNewestRowHashes(std::int32_t index) {
  const std::int64_t hostRow =
      controller_->historyStart(index) + controller_->historyLen(index) - 1;
  for (std::int32_t l = 0; l < layout_.layers; ++l)
    checker_->recordHash(l, hostRow);
}

void Runtime::finish(std::uint64_t id) {
  requireStep("finish");
  if (inStep_)
    throw StateError("cannot finish " + requestName(id) + " during a step");
  const std::int32_t index = indexOf(id, "finish");
  if (config_.checkInvariants && repairHbm())
    checker_->checkRequestRows(index, "finishing");
  takeStateFromDevice();
  reserveRoom(pendingCopies_, 1);
  // Freeing the request's rings waits for the work that may use them: that
  // wait (where an asynchronous error surfaces) comes before any change.
  tiers_.storage->waitForSubmittedWork();
  controller_->finish(index); // (whole, or nothing changed)
  index_.erase(id);
  specByRequest_.erase(id);
  rings_->free(index);
  applyCopies(); // its rows leave the device residency maps
}

std::vector<std::uint8_t> Runtime::hostRow(std::uint64_t id, std::int32_t layer, std::int64_t row) {
  requireStep("host row");
  const std::int32_t index = indexOf(id, "host row");
  if (layer < 0 || layer >= layout_.layers || row < 0 || row >= controller_->historyLen(index))
    throw OutOfRangeError("host row: layer " + std::to_string(layer) + ", row " +
                          std::to_string(row) + " is outside " + requestName(id) + "'s history");
  const std::uint8_t *data = tiers_.storage->hostRow(layer, controller_->historyStart(index) + row);
  return std::vector<std::uint8_t>(data, data + layout_.rowBytes);
}

//===----------------------------------------------------------------------===//
// Draft rings
//===----------------------------------------------------------------------===//

void Runtime::writeWindow(std::uint64_t id, std::int64_t position, std::int64_t count,
                          const void *rows) {
  requireStep("write window");
  if (inStep_)
    throw StateError("cannot write the window of " + requestName(id) + " during a step");
  const std::int32_t index = indexOf(id, "write window");
  const std::int64_t R = layout_.windowRing;
  if (R <= 0)
    throw InputError("write window: the step has no sliding window");
  if (count < 1 || count > R)
    throw InputError("write window of " + requestName(id) + ": " + std::to_string(count) +
                     " tokens; a window ring holds 1 to " + std::to_string(R));
  if (!rows)
    throw InputError("write window of " + requestName(id) + ": null rows");
  if (position < 0 || position > std::numeric_limits<std::int32_t>::max() - count)
    throw InputError("write window of " + requestName(id) + ": position " +
                     std::to_string(position) + " is outside [0, 2^31 - count)");
  rings_->writeWindow(index, position, count, static_cast<const std::uint8_t *>(rows));
}

std::int32_t Runtime::requireDraft(std::uint64_t id, std::int64_t count, const void *rows,
                                   const char *what) {
  requireStep(what);
  if (inStep_)
    throw StateError(std::string(what) + " of " + requestName(id) + " during a step");
  const std::int32_t index = indexOf(id, what);
  if (layout_.draftWindow <= 0)
    throw InputError(std::string(what) + ": the runtime has no draft rings (draft_window is 0)");
  if (count < 1 || count > layout_.draftWindow)
    throw InputError(std::string(what) + " of " + requestName(id) + ": " + std::to_string(count) +
                     " tokens; a draft ring holds 1 to " + std::to_string(layout_.draftWindow) +
                     " (draft_window)");
  if (!rows)
    throw InputError(std::string(what) + " of " + requestName(id) +
                     (std::string(what) == "draft read" ? ": null output" : ": null rows"));
  if (tiers_.runner->acceptsDevicePointers() && !draftStepLoaded_)
    throw StateError(std::string(what) +
                     ": the CUDA tiers run the draft rings with the "
                     "compiler's ring kernels; load a compiled draft-ring step first "
                     "(loadDraftStep; e.g. dhs-compile examples/draft_ring_step.mlir)");
  return index;
}

void Runtime::appendDraft(std::uint64_t id, std::int64_t position, std::int64_t count,
                          const void *rows) {
  const std::int32_t index = requireDraft(id, count, rows, "draft append");
  if (position < 0)
    throw InputError("draft append of " + requestName(id) + ": negative position " +
                     std::to_string(position));
  // Positions position .. position+count-1 must exist: the last one, and
  // the request's next position after it, fit an int64.
  if (!tryAdd(position, count))
    throw InputError("draft append of " + requestName(id) + ": " + std::to_string(count) +
                     " tokens at position " + std::to_string(position) +
                     " run past the largest position (2^63 - 1)");
  rings_->appendDraft(index, position, count, static_cast<const std::uint8_t *>(rows));
}

void Runtime::readDraft(std::uint64_t id, std::int64_t end, std::int64_t count, void *out) {
  const std::int32_t index = requireDraft(id, count, out, "draft read");
  rings_->readDraft(index, requestName(id), end, count, static_cast<std::uint8_t *>(out));
}

//===----------------------------------------------------------------------===//
// Steps
//===----------------------------------------------------------------------===//

void Runtime::beginStep(const std::uint64_t *ids, std::int64_t batch) {
  requireStep("step");
  if (inStep_)
    throw StateError("a step is already in progress");
  if (batch < 0 || batch > shape_.batch)
    throw InputError("a batch of " + std::to_string(batch) + " requests: the step takes 0 to " +
                     std::to_string(shape_.batch));
  if (batch > 0 && !ids)
    throw InputError("null request ids for a batch of " + std::to_string(batch));
  // Every slot the step may read must hold what the controller says.
  requireHbmCoherent("step");
  std::vector<std::int32_t> lanes;
  lanes.reserve(static_cast<std::size_t>(shape_.batch));
  for (std::int64_t b = 0; b < batch; ++b)
    lanes.push_back(indexOf(ids[b], "step"));
  if (const std::int64_t b = firstRepeat(lanes); b >= 0)
    throw InputError(requestName(ids[b]) + " appears twice in the batch (lane " +
                     std::to_string(b) + ")");
  lanes.resize(static_cast<std::size_t>(shape_.batch), -1);
  // Every lane's window ring must hold the raw tokens its queries see.
  std::vector<std::int32_t> windowTokens(static_cast<std::size_t>(shape_.batch), 0);
  if (layout_.windowRing > 0)
    for (std::int64_t b = 0; b < batch; ++b)
      windowTokens[static_cast<std::size_t>(b)] =
          rings_->windowTokens(lanes[static_cast<std::size_t>(b)], requestName(ids[b]),
                               shape_.queries, shape_.windowSize);
  // Residency decisions on the device: every non-verify step (the device
  // owns the state, or holds a copy for the shadow check); a verify step
  // runs on the controller's tables.
  const bool decides = decisionStepLoaded_ && !verifyStarting_;
  if (decisionStepLoaded_ && !decides)
    takeStateFromDevice();
  else if (decides)
    giveStateToDevice(/*own=*/!config_.checkInvariants);
  if (decisionStepLoaded_)
    tiers_.runner->setStepDecisions(decides);
  if (decides && agingStepLoaded_)
    enqueueAppends(); // before the step stamps its logs (the kernel reads the last step)
  stepDecides_ = decides;
  shadowDecisions_ = decides && config_.checkInvariants;
  // What can fail (allocations, the backend's step) comes before or is
  // undone with the controller's step: a step that failed to begin leaves
  // none in progress (a failed allocation here had left the controller in a
  // step the runtime did not know of, refusing every later call).
  std::vector<std::uint64_t> batchIds(ids, ids + batch);
  controller_->beginStep();
  try {
    tiers_.runner->beginStep(controller_->stepCount());
  } catch (...) {
    controller_->abortStep();
    throw;
  }
  windowTokensLane_.swap(windowTokens);
  lanes_.swap(lanes);
  batchIds_.swap(batchIds);
  for (std::size_t b = 0; b < lanes_.size(); ++b) {
    historyStart_[b] = lanes_[b] >= 0 ? controller_->historyStart(lanes_[b]) : 0;
    historyLen_[b] =
        lanes_[b] >= 0 ? static_cast<std::int32_t>(controller_->historyLen(lanes_[b])) : 0;
  }
  batch_ = batch;
  std::fill(selected_.begin(), selected_.end(), 0);
  std::fill(deviceSelected_.begin(), deviceSelected_.end(), 0);
  std::fill(attended_.begin(), attended_.end(), 0);
  inStep_ = true;
}

void Runtime::selectGroup(std::int32_t group, const std::int32_t *rowIds, MemorySpace memory) {
  if (!verify_.active)
    return select(group, rowIds, memory);
  try {
    select(group, rowIds, memory);
  } catch (...) {
    // A verify step fails whole.
    if (inStep_)
      abortStep();
    throw;
  }
}

void Runtime::select(std::int32_t group, const std::int32_t *rowIds, MemorySpace memory) {
  if (!inStep_)
    throw StateError("selections outside a step (begin a step first)");
  if (group < 0 || group >= layout_.groups())
    throw OutOfRangeError("layer group " + std::to_string(group) + " does not exist (" +
                          std::to_string(layout_.groups()) + " groups)");
  const std::size_t g = static_cast<std::size_t>(group);
  if (selected_[g])
    throw StateError("layer group " + std::to_string(group) + " already has its selections");
  if (batch_ > 0 && !rowIds)
    throw InputError("null row ids for layer group " + std::to_string(group));
  const std::int64_t perLane = shape_.queries * shape_.topk;
  if (verify_.active) {
    if (memory == MemorySpace::Device)
      throw InputError("a verify step takes selections in host memory");
    selectVerifyGroup(group, rowIds);
    return;
  }
  if (stepDecides_ && memory != MemorySpace::Device)
    throw InputError("layer group " + std::to_string(group) +
                     ": with a decision step loaded, a step takes its selections in device "
                     "memory (the device decides residency from them); verify steps take them "
                     "in host memory");
  if (memory == MemorySpace::Device) {
    // The step's dhs.resolve maps them to slots on the device; they are
    // checked and booked by the controller after the step, from a copy.
    if (!tiers_.runner->acceptsDevicePointers())
      throw InputError("the " + tiers_.storage->describe() + " backend takes host pointers only");
    tiers_.runner->takeSelections(group, rowIds, batch_ * perLane);
    selected_[g] = 1;
    deviceSelected_[g] = 1;
    return;
  }
  checkSelections(group, rowIds);
  std::vector<std::int32_t> &padded = rowIds_[g];
  std::fill(padded.begin(), padded.end(), -1);
  if (batch_ > 0)
    std::copy(rowIds, rowIds + batch_ * perLane, padded.begin());
  controller_->resolve(group, lanes_.data(), shape_.batch, padded.data(), shape_.queries,
                       shape_.topk, slots_[g].data());
  countHostReads(group);
  selected_[g] = 1;
}

void Runtime::countHostReads(std::int32_t group) {
  const std::size_t g = static_cast<std::size_t>(group);
  const std::vector<std::int32_t> &rows = rowIds_[g], &slots = slots_[g];
  std::int64_t selected = 0, missing = 0;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i] != -1) {
      ++selected;
      missing += slots[i] == -1;
    }
  hostReads_[g] = {selected, missing};
}

void Runtime::checkSelections(std::int32_t group, const std::int32_t *rowIds) const {
  const std::int64_t perLane = shape_.queries * shape_.topk;
  // Checked here too (the controller checks again) so that messages name
  // the engine's request ids.
  for (std::int64_t b = 0; b < batch_; ++b)
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::int32_t id = rowIds[b * perLane + i];
      if (id == -1 || (id >= 0 && id < historyLen_[static_cast<std::size_t>(b)]))
        continue;
      // (The message is built only for a bad id.)
      std::string where = "row id " + std::to_string(id) + " at [lane " + std::to_string(b) +
                          ", query " + std::to_string(i / shape_.topk) + ", k " +
                          std::to_string(i % shape_.topk) + "] of layer group " +
                          std::to_string(group);
      if (id < -1)
        throw InputError(where + " is invalid (only -1 marks an unused selection)");
      if (id >= historyLen_[static_cast<std::size_t>(b)])
        throw OutOfRangeError(
            where + " is outside " + requestName(batchIds_[static_cast<std::size_t>(b)]) +
            "'s history (length " + std::to_string(historyLen_[static_cast<std::size_t>(b)]) + ")");
    }
}

void Runtime::attendLayer(std::int32_t layer, const bf16_t *queries, bf16_t *output,
                          MemorySpace memory) {
  if (!verify_.active)
    return attend(layer, queries, output, memory);
  try {
    attend(layer, queries, output, memory);
  } catch (...) {
    // A verify step fails whole.
    if (inStep_)
      abortStep();
    throw;
  }
}

void Runtime::attend(std::int32_t layer, const bf16_t *queries, bf16_t *output,
                     MemorySpace memory) {
  if (!inStep_)
    throw StateError("attention outside a step (begin a step first)");
  if (layer < 0 || layer >= layout_.layers)
    throw OutOfRangeError("layer " + std::to_string(layer) + " does not exist (" +
                          std::to_string(layout_.layers) + " layers)");
  const std::int32_t group = layer / layout_.layersPerGroup;
  if (!selected_[static_cast<std::size_t>(group)])
    throw StateError("layer " + std::to_string(layer) + ": its group " + std::to_string(group) +
                     " has no selections yet");
  if (attended_[static_cast<std::size_t>(layer)])
    throw StateError("layer " + std::to_string(layer) + " already ran in this step");
  if (verify_.active && !verify_.written[static_cast<std::size_t>(layer)])
    throw StateError("layer " + std::to_string(layer) +
                     " of a verify step begun without rows has no pending rows yet (verify "
                     "write rows first)");
  // A whole-model step's staging arena is planned for its layers in order:
  // a group's staged rows live until its last layer.
  if (plan_.wholeModel() && layer > 0 && !attended_[static_cast<std::size_t>(layer - 1)])
    throw StateError("layer " + std::to_string(layer) + " before layer " +
                     std::to_string(layer - 1) +
                     ": a whole-model step runs its layers in order (its staging arena is "
                     "planned for that order)");
  if (batch_ > 0 && (!queries || !output))
    throw InputError("null queries or output for layer " + std::to_string(layer));
  if (memory == MemorySpace::Device && !tiers_.runner->acceptsDevicePointers())
    throw InputError("the " + tiers_.storage->describe() + " backend takes host pointers only");
  LayerStep step;
  step.shape = &shape_;
  step.lanes = batch_;
  step.queries = queries;
  step.memory = memory;
  step.rowIds = rowIds_[static_cast<std::size_t>(group)].data();
  step.slots = slots_[static_cast<std::size_t>(group)].data();
  step.historyStart = historyStart_.data();
  step.historyLen = verify_.active ? verify_.historyLen.data() : historyLen_.data();
  step.output = output;
  step.selectionsOnDevice = deviceSelected_[static_cast<std::size_t>(group)] != 0;
  if (!step.selectionsOnDevice)
    std::tie(step.selectedRows, step.missingRows) = hostReads_[static_cast<std::size_t>(group)];
  step.windowTokens = windowTokensLane_.data();
  step.laneRequests = lanes_.data();
  step.outputNow = memory == MemorySpace::Host && !wholeStep_;
  try {
    tiers_.runner->attend(layer, step);
  } catch (...) {
    // The layer's work failed (a launch, the device, its memory): some of
    // its launches may be queued, so the layer cannot run again in this
    // step, which is abandoned. (A refused input above leaves it open.)
    if (inStep_)
      abortStep();
    throw;
  }
  attended_[static_cast<std::size_t>(layer)] = 1;
  if (verify_.active)
    countVerifyReads(layer);
  // (Reads of device selections are checked once they are booked.)
  if (config_.checkInvariants && !step.selectionsOnDevice)
    checkReads(layer);
}

void Runtime::endStep() {
  if (!inStep_)
    throw StateError("no step is in progress");
  if (verify_.active && !acceptingVerify_)
    throw StateError("a verify step ends with verify accept (or an abort), not end step");
  for (std::int32_t g = 0; g < layout_.groups(); ++g)
    if (!selected_[static_cast<std::size_t>(g)])
      throw StateError("cannot end the step: layer group " + std::to_string(g) +
                       " has no selections");
  for (std::int32_t l = 0; l < layout_.layers; ++l)
    if (!attended_[static_cast<std::size_t>(l)])
      throw StateError("cannot end the step: layer " + std::to_string(l) + " did not run");
  // Room for the step's batch of copies to wait for a retry, before
  // anything of the step is taken (a failure here changes nothing: the
  // step stays open).
  reserveRoom(pendingCopies_, 1);
  if (stepDecides_ && !shadowDecisions_) {
    bookDeviceDecisions();
    return;
  }
  // Device selections are booked from what the resolve kernels logged, as
  // host ones were at select time (nothing changes the residency in
  // between); the host never reads the selections themselves. Where the
  // tiers hand a group's log over early, the controller books the group
  // while the GPU still runs the later layers.
  std::vector<std::uint8_t> booked(static_cast<std::size_t>(layout_.groups()), 0);
  auto bookGroup = [&](std::int32_t g) {
    try {
      const StepLog &log = tiers_.runner->stepLog(g);
      if (config_.checkInvariants)
        checkStepLog(g, log);
      controller_->book(g, lanes_.data(), shape_.batch, log.hitSlots.data(),
                        static_cast<std::int64_t>(log.hitSlots.size()), log.misses.data(),
                        static_cast<std::int64_t>(log.misses.size() / 2), log.entries);
    } catch (...) {
      abortStep();
      throw;
    }
    booked[static_cast<std::size_t>(g)] = 1;
  };
  if (tiers_.runner->stepLogsEarly())
    for (std::int32_t g = 0; g < layout_.groups(); ++g)
      if (deviceSelected_[static_cast<std::size_t>(g)])
        bookGroup(g);
  try {
    tiers_.runner->finishStep();
  } catch (const InvariantError &) {
    // The decisions beside the host failed part-way: other groups' rows
    // are placed, and no copy of the state takes them back.
    markBroken("the device's residency decisions");
    throw;
  } catch (...) {
    // Device selections the kernels rejected: name the first bad one from
    // a download of them. The kernels stamped the hits of the valid ones,
    // which the controller booked only for groups whose log came early: the
    // abort takes the device replacement state back to the controller's.
    // (Whatever failed, std::bad_alloc included, the step is abandoned: the
    // tiers closed their side of it.)
    std::exception_ptr precise;
    for (std::int32_t g = 0; g < layout_.groups() && !precise; ++g)
      if (deviceSelected_[static_cast<std::size_t>(g)])
        precise = rejectedSelections(g);
    abortStep();
    if (precise)
      std::rethrow_exception(precise);
    throw;
  }
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    const std::size_t gi = static_cast<std::size_t>(g);
    if (!deviceSelected_[gi])
      continue;
    if (!booked[gi])
      bookGroup(g);
    if (config_.checkInvariants)
      for (std::int32_t l = layout_.firstLayer(g); l < layout_.endLayer(g); ++l)
        checkReads(l);
  }
  // A step given up once its kernels ran (the abort takes the resolve
  // kernels' stamps back to the controller's); where the device decided
  // too (the shadow check), it placed rows the host cannot take back.
  auto giveUp = [&] {
    if (stepDecides_)
      return markBroken("the end of a step the device decided beside the host");
    abortStep();
  };
  if (config_.checkInvariants)
    try {
      checkFetches();
    } catch (...) {
      giveUp();
      throw;
    }
  // The promotions: whole, or (no memory for them) none, and the step
  // abandoned.
  try {
    controller_->endStep(changes_);
  } catch (...) {
    giveUp();
    throw;
  }
  inStep_ = false;
  ++steps_;
  // (With the shadow check the device placed them already: applying them
  // again changes nothing. They are applied whatever the check finds. The
  // device's copies are checked first: a promoted row copied from the
  // write-back ring must hold the host row's bytes too.)
  if (shadowDecisions_)
    try {
      checkAfterUpdate([&] {
        compareDecisions(changes_);
        checker_->checkCopies(changes_);
      });
    } catch (...) {
      applyCopies();
      throw;
    }
  applyCopies();
  if (config_.checkInvariants) {
    checkAfterUpdate([&] { controller_->checkConsistency(); });
    // (Not while copies into HBM fail: the step itself succeeded, and the
    // next one reports them.)
    const bool due =
        checkOwed_ || (config_.fullCheckInterval > 0 &&
                       steps_ % static_cast<std::uint64_t>(config_.fullCheckInterval) == 0);
    if (due && repairHbm())
      checkAfterUpdate([&] { checkInvariants(); });
  }
}

void Runtime::markBroken(const char *update) {
  brokenIn_ = update;
  brokenBy_ = std::current_exception();
  // (The step ends with it: nothing of it can be undone or finished.)
  inStep_ = false;
  verify_.active = false;
}

void Runtime::abortStep() {
  if (!inStep_)
    throw StateError("no step is in progress");
  inStep_ = false;
  verify_.active = false;
  controller_->abortStep();
  // (Nothing more of the step is launched: its decisions would run on a
  // step that never happened.)
  tiers_.runner->abandonStep();
  // A step the device decided: whatever of it ran before the failure (the
  // resolve kernels' stamps) is undone from the copy the step saved, and
  // the appends replayed at its start are the controller's now.
  if (stepDecides_) {
    undoOnDevice([&] { tiers_.runner->rollBackDecisions(); });
    applyAppends();
  } else if (std::find(deviceSelected_.begin(), deviceSelected_.end(), 1) !=
             deviceSelected_.end()) {
    // The resolve kernels stamped the hits of the layers that ran (an
    // engine's abort, a failed layer, a failed end alike): the device's
    // replacement state goes back to the controller's.
    undoOnDevice([&] { tiers_.storage->restoreRecency(*controller_); });
  }
}

template <typename Undo> void Runtime::undoOnDevice(Undo &&undo) {
  try {
    undo();
  } catch (...) {
    markBroken("undoing a failed step on the device");
  }
}

void Runtime::step(const std::uint64_t *ids, std::int64_t batch, const std::int32_t *rowIds,
                   const bf16_t *queries, bf16_t *output, MemorySpace memory,
                   MemorySpace selectionMemory) {
  beginStep(ids, batch);
  try {
    const std::int64_t selections = batch * shape_.queries * shape_.topk;
    const std::int64_t queryElems = batch * shape_.queries * shape_.heads * shape_.qkDim;
    const std::int64_t outputElems = batch * shape_.queries * shape_.heads * shape_.vDim;
    if (batch > 0 && (!rowIds || !queries || !output))
      throw InputError("null row ids, queries or output for a step of " + std::to_string(batch) +
                       " requests");
    for (std::int32_t g = 0; g < layout_.groups(); ++g)
      selectGroup(g, batch > 0 ? rowIds + g * selections : nullptr, selectionMemory);
    // Every layer's queries are here: the outputs may wait for endStep.
    wholeStep_ = true;
    for (std::int32_t l = 0; l < layout_.layers; ++l)
      attendLayer(l, batch > 0 ? queries + l * queryElems : nullptr,
                  batch > 0 ? output + l * outputElems : nullptr, memory);
    wholeStep_ = false;
    endStep();
  } catch (...) {
    wholeStep_ = false;
    if (inStep_)
      abortStep();
    throw;
  }
}

//===----------------------------------------------------------------------===//
// Statistics and checks
//===----------------------------------------------------------------------===//

RuntimeStats Runtime::stats() const {
  RuntimeStats s;
  s.steps = steps_;
  if (!tiers_.storage)
    return s;
  s.lastStep = controller_->lastStep();
  s.totals = controller_->totals();
  s.admittedRequests = controller_->liveCount();
  // Bytes as stored: a slot of group g spans every pool of the group.
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    GroupOccupancy o = controller_->occupancy(g);
    std::int64_t groupTokenBytes = 0;
    for (std::size_t p = layout_.poolOf(layout_.firstLayer(g));
         p <= layout_.poolOf(layout_.endLayer(g) - 1); ++p)
      groupTokenBytes += layout_.tokenBytes(p);
    s.hbmBytesUsed += static_cast<std::int64_t>(o.used) * groupTokenBytes;
    s.optionalUsedSlots += o.optionalUsed;
  }
  const std::int64_t poolBytes = layout_.storedTokenBytes();
  s.hbmBytesCapacity = static_cast<std::int64_t>(layout_.hbmSlots) * poolBytes;
  s.hostBytesUsed = controller_->hostAllocator().usedRows() * poolBytes;
  s.hostBytesCapacity = layout_.hostRows * poolBytes;
  s.optionalBudgetSlots = controller_->optionalBudget();
  const TierGraphStats graphs = tiers_.runner->graphStats();
  s.graphCaptures = graphs.captures;
  s.graphReplays = graphs.replays;
  s.graphNodes = graphs.nodes;
  s.graphKernelNodes = graphs.kernelNodes;
  s.graphCopyNodes = graphs.copyNodes;
  s.graphMemsetNodes = graphs.memsetNodes;
  return s;
}

void Runtime::checkReads(std::int32_t layer) {
  const std::size_t g = static_cast<std::size_t>(layer / layout_.layersPerGroup);
  checker_->checkReads(layer, lanes_.data(), historyStart_.data(),
                       verify_.active ? checkPendingReads(layer) : rowIds_[g].data(),
                       slots_[g].data());
}

void Runtime::checkStepLog(std::int32_t group, const StepLog &log) {
  // The selections themselves, downloaded for the check (and for checkReads).
  const std::size_t g = static_cast<std::size_t>(group);
  const std::int32_t *taken = tiers_.runner->selectionsOnHost(group);
  checkSelections(group, taken);
  std::copy(taken, taken + rowIds_[g].size(), rowIds_[g].begin());
  checker_->checkStepLog(group, log, historyStart_.data(), rowIds_[g].data(), slots_[g].data());
}

std::int64_t Runtime::stepFetchedRows() {
  requireStep("fetched rows");
  if (inStep_)
    throw StateError("fetched rows: a step is in progress");
  std::int64_t total = -1;
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    const std::int64_t rows = tiers_.runner->groupFetchedRows(g);
    if (rows >= 0)
      total = std::max<std::int64_t>(total, 0) + rows;
  }
  return total;
}

void Runtime::countFetches(bool on) {
  requireStep("count fetches");
  if (inStep_)
    throw StateError("counting fetches can be turned on or off only between steps");
  tiers_.runner->setCountFetches(on || config_.checkInvariants);
}

void Runtime::checkFetches() {
  // A group whose layers fetch the union of their missing rows (shared
  // retrieval) copies each distinct missing (request, row) exactly once.
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    const std::size_t gi = static_cast<std::size_t>(g);
    if (!sharedRetrieval_[gi] || deviceSelected_[gi])
      continue;
    const std::int64_t copied = tiers_.runner->groupFetchedRows(g);
    if (copied < 0)
      continue;
    std::int64_t missing = 0;
    const std::int64_t perLane = shape_.queries * shape_.topk;
    std::vector<std::int32_t> rows;
    for (std::int64_t b = 0; b < shape_.batch; ++b) {
      rows.clear();
      for (std::int64_t i = b * perLane; i < (b + 1) * perLane; ++i)
        if (rowIds_[gi][static_cast<std::size_t>(i)] != -1 &&
            slots_[gi][static_cast<std::size_t>(i)] == -1)
          rows.push_back(rowIds_[gi][static_cast<std::size_t>(i)]);
      std::sort(rows.begin(), rows.end());
      missing += std::unique(rows.begin(), rows.end()) - rows.begin();
    }
    if (copied != missing)
      throw InvariantError(
          "layer group " + std::to_string(g) + "'s fetches copied " + std::to_string(copied) +
          " rows from the host store; its selections miss " + std::to_string(missing) +
          " distinct rows, which a shared retrieval reads once each");
  }
}

void Runtime::checkInvariants() {
  requireStep("check");
  takeStateFromDevice();
  requireHbmCoherent("check");
  controller_->checkConsistency();
  for (const auto &[id, index] : index_)
    checker_->checkRequestRows(index, "full check");
  checker_->checkDeviceState(tiers_.runner->resolvesOnDevice());
  checkOwed_ = false;
}

void Runtime::applyCopies() {
  // One placement launch needs distinct rows, which they are: every call
  // hands over what it changed, and the controller never releases and
  // places one row in one call. The checker verifies it.
  if (changes_.empty())
    return;
  // Copies that failed before go first, in their order (see repairHbm).
  bool copied = false;
  if (repairHbm())
    try {
      tiers_.storage->copyToHbm(changes_);
      copied = true;
    } catch (const std::exception &) {
      pendingError_ = std::current_exception();
    }
  if (!copied) {
    // (The caller made room for the batch before its update.)
    pendingCopies_.push_back(std::move(changes_));
    changes_.clear();
    if (!spareChanges_.empty()) {
      changes_ = std::move(spareChanges_.back());
      spareChanges_.pop_back();
    }
    if (config_.checkInvariants)
      checkAfterUpdate([&] { checker_->checkDistinctChanges(pendingCopies_.back()); });
    return;
  }
  // The list is emptied (its capacity kept) whatever the checks find: its
  // changes are applied.
  try {
    if (config_.checkInvariants)
      checkAfterUpdate([&] {
        checker_->checkDistinctChanges(changes_);
        checker_->checkCopies(changes_);
      });
  } catch (...) {
    changes_.clear();
    throw;
  }
  changes_.clear();
}

template <typename Check> void Runtime::checkAfterUpdate(Check &&check) {
  try {
    check();
  } catch (const std::bad_alloc &) {
    checkOwed_ = true;
  }
}

bool Runtime::repairHbm() {
  while (!pendingCopies_.empty()) {
    try {
      tiers_.storage->copyToHbm(pendingCopies_.front());
    } catch (const std::exception &) {
      pendingError_ = std::current_exception();
      return false;
    }
    pendingCopies_.erase(pendingCopies_.begin());
  }
  return true;
}

void Runtime::requireHbmCoherent(const char *what) {
  if (repairHbm())
    return;
  std::size_t rows = 0;
  for (const std::vector<RowCopy> &batch : pendingCopies_)
    rows += batch.size();
  throw DeviceError(std::string(what) + ": " + std::to_string(rows) +
                    " row copies into HBM failed and still fail when retried (" +
                    messageOf(pendingError_) +
                    "); the host store holds every row, and the copies are retried before every "
                    "step");
}

void Runtime::setCudaGraphs(bool on) {
  requireStep("CUDA graphs");
  if (inStep_)
    throw StateError("CUDA graphs can be turned on or off only between steps");
  tiers_.runner->setGraphs(on);
}

bool Runtime::cudaGraphs() const { return tiers_.runner && tiers_.runner->graphsOn(); }

void Runtime::setEngineStream(void *stream) {
  requireStep("an engine stream");
  if (inStep_)
    throw StateError("the engine's stream can be set only between steps");
  tiers_.runner->setEngineStream(stream);
}

TierStorage &Runtime::storageForTesting() {
  requireStep("tiers");
  return *tiers_.storage;
}

//===----------------------------------------------------------------------===//
// Residency decisions on the device
//===----------------------------------------------------------------------===//

std::int32_t Runtime::decisionBudget(std::int32_t group) const {
  const GroupOccupancy occupancy = controller_->occupancy(group);
  return static_cast<std::int32_t>(std::clamp<std::int64_t>(
      occupancy.optionalBudget - occupancy.optionalUsed, -1, layout_.hbmSlots));
}

void Runtime::giveStateToDevice(bool own) {
  std::vector<std::int32_t> given;
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    if (controller_->deviceOwned(g)) {
      // Appends since the last step move the budget.
      tiers_.runner->setDecisionBudget(g, decisionBudget(g));
      continue;
    }
    given.push_back(g);
  }
  if (given.empty())
    return;
  // The groups' tables are exported in parallel into buffers kept from
  // step to step, then uploaded one by one.
  controller_->exportDeviceStates(given, deviceStates_);
  for (std::int32_t g : given) {
    const DeviceGroupState &state = deviceStates_[static_cast<std::size_t>(g)];
    deviceExcess_[static_cast<std::size_t>(g)] = state.excess;
    tiers_.runner->uploadDecisionState(g, state, decisionBudget(g));
  }
  if (own)
    controller_->markDeviceOwned(given);
}

void Runtime::enqueueAppends() {
  // Every group's replay in one call: the groups' replays run side by side.
  std::vector<AgingReplay> replays;
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    const std::size_t gi = static_cast<std::size_t>(g);
    if (!controller_->deviceOwned(g) || agingPending_[gi] > 0)
      continue;
    const DeviceAppendList appends = controller_->deviceAppends(g);
    if (appends.empty())
      continue;
    const GroupOccupancy occupancy = controller_->occupancy(g);
    replays.push_back({g, appends,
                       static_cast<std::int32_t>(std::clamp<std::int64_t>(
                           occupancy.optionalBudget - deviceExcess_[gi], -1, layout_.hbmSlots))});
  }
  if (replays.empty())
    return;
  tiers_.runner->enqueueAging(replays);
  for (const AgingReplay &replay : replays)
    agingPending_[static_cast<std::size_t>(replay.group)] = replay.appends.size();
}

void Runtime::applyAppends() {
  if (std::none_of(agingPending_.begin(), agingPending_.end(), [](std::size_t n) { return n > 0; }))
    return;
  try {
    tiers_.runner->waitForAging();
  } catch (...) {
    // The replays failed, or the kernel rejected the device's state (its
    // status word is taken with the report): the slots they placed cannot
    // be booked, nor the replays run again over what they changed.
    markBroken("the device's replay of appends (dhs.age_rows)");
    throw;
  }
  std::vector<std::int32_t> groups;
  std::vector<std::vector<std::int32_t>> slots(static_cast<std::size_t>(layout_.groups()));
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    const std::size_t gi = static_cast<std::size_t>(g);
    if (agingPending_[gi] == 0)
      continue;
    groups.push_back(g);
    slots[gi] = tiers_.runner->agedSlots(g, agingPending_[gi]);
  }
  // A group whose record is gone was applied (on an error, it and the groups
  // after it keep theirs).
  auto bookApplied = [&] {
    for (std::int32_t g : groups) {
      const std::size_t gi = static_cast<std::size_t>(g);
      if (agingPending_[gi] == 0 || !controller_->deviceAppends(g).empty())
        continue;
      agingPending_[gi] = 0;
      deviceExcess_[gi] = controller_->occupancy(g).optionalUsed;
    }
  };
  try {
    controller_->applyDeviceAppends(groups, slots);
  } catch (...) {
    bookApplied();
    throw;
  }
  bookApplied();
}

void Runtime::takeStateFromDevice() {
  if (!decisionStepLoaded_)
    return;
  if (agingStepLoaded_) {
    enqueueAppends();
    applyAppends();
  }
  // Downloaded one by one into the buffers kept from step to step, then
  // adopted in parallel.
  std::vector<std::int32_t> taken;
  if (deviceStates_.size() < static_cast<std::size_t>(layout_.groups()))
    deviceStates_.resize(static_cast<std::size_t>(layout_.groups()));
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    if (!controller_->deviceOwned(g))
      continue;
    DeviceGroupState &state = deviceStates_[static_cast<std::size_t>(g)];
    tiers_.runner->downloadDecisionState(g, state);
    state.step = static_cast<std::uint32_t>(controller_->stepCount());
    taken.push_back(g);
  }
  controller_->adoptDeviceStates(taken, deviceStates_);
}

std::exception_ptr Runtime::rejectedSelections(std::int32_t group) {
  // (Called while a failure is handled: only the runtime's own errors say
  // the selections may be bad, and nothing here may escape.)
  try {
    throw;
  } catch (const Error &) {
  } catch (...) {
    return nullptr;
  }
  try {
    checkSelections(group, tiers_.runner->selectionsOnHost(group));
  } catch (const Error &) {
    return std::current_exception();
  } catch (...) {
  }
  return nullptr;
}

void Runtime::bookDeviceDecisions() {
  try {
    tiers_.runner->finishStep();
  } catch (const InvariantError &) {
    // A decision kernel rejected the device's state after other groups'
    // decisions placed their rows: no copy of the state takes them back.
    markBroken("the device's residency decisions");
    throw;
  } catch (...) {
    // The kernels rejected the step: its decisions did nothing (each reads
    // the status word first); abortStep rolls the resolve kernels' stamps
    // back and takes the appends replayed before the step. (Whatever
    // failed, the step is abandoned.)
    std::exception_ptr precise;
    for (std::int32_t g = 0; g < layout_.groups() && !precise; ++g)
      precise = rejectedSelections(g);
    abortStep();
    if (precise)
      std::rethrow_exception(precise);
    throw;
  }
  // The device decided and placed the step's rows: from here the host
  // takes its counts; a failure part-way leaves tables it cannot vouch for.
  const std::size_t before = changes_.size();
  try {
    applyAppends();
    for (std::int32_t g = 0; g < layout_.groups(); ++g) {
      const DeviceDecisionCounts counts = tiers_.runner->decisionCounts(g);
      controller_->applyDeviceCounts(g, counts.step);
      deviceExcess_[static_cast<std::size_t>(g)] = counts.excess;
    }
    // (Nothing to promote, nor room to make: the device placed the step's
    // rows.)
    controller_->endStep(changes_);
  } catch (...) {
    markBroken("booking a step the device decided");
    throw;
  }
  inStep_ = false;
  ++steps_;
  const std::size_t promoted = changes_.size() - before;
  applyCopies();
  if (promoted > 0)
    throw InvariantError("the controller promoted " + std::to_string(promoted) +
                         " rows in a step the device decided");
}

void Runtime::compareDecisions(const std::vector<RowCopy> &changes) {
  std::vector<std::int64_t> rows;
  std::vector<std::int32_t> slots;
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    const std::string group = "layer group " + std::to_string(g);
    // The promotions and releases, as sets (the host's copies come request
    // by request, the device's in rank order).
    std::vector<std::pair<std::int64_t, std::int32_t>> host, device;
    // (Evictions reach the release log, as (row, -1).)
    for (const RowCopy &change : changes)
      if (change.group == g)
        host.emplace_back(change.hostRow, change.slot);
    tiers_.runner->decisionList(g, rows, slots);
    const std::size_t total = rows.size() / 2;
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (rows[i] >= 0)
        device.emplace_back(rows[i], i < total ? slots[i] : -1);
    std::sort(host.begin(), host.end());
    std::sort(device.begin(), device.end());
    if (host != device) {
      std::size_t shown = 0;
      std::string diff;
      for (const auto &entry : host)
        if (!std::binary_search(device.begin(), device.end(), entry) && shown++ < 4)
          diff +=
              " host (" + std::to_string(entry.first) + ", " + std::to_string(entry.second) + ")";
      for (const auto &entry : device)
        if (!std::binary_search(host.begin(), host.end(), entry) && shown++ < 8)
          diff +=
              " device (" + std::to_string(entry.first) + ", " + std::to_string(entry.second) + ")";
      throw InvariantError(group + ": the device decided " + std::to_string(device.size()) +
                           " promotions and releases, the controller " +
                           std::to_string(host.size()) + ";" + diff);
    }
    // The state they leave.
    DeviceGroupState state;
    tiers_.runner->downloadDecisionState(g, state);
    DeviceGroupState expected = controller_->exportDeviceState(g);
    state.step = expected.step;
    // CLOCK references, not stamps: a slot is referenced while its last use
    // differs from the use the hand cleared (the controller exports -1 for
    // every referenced slot, the device keeps the stamp); the plan reads
    // them for hot slots only.
    for (DeviceGroupState *s : {&state, &expected})
      for (std::size_t slot = 0; slot < s->cleared.size(); ++slot)
        s->cleared[slot] = s->hotRows[slot] < 0                       ? 0
                           : s->cleared[slot] != s->recency[2 * slot] ? -1
                                                                      : 1;
    // The victim-search memo decides only while it holds the step (the
    // controller may clear one of an older step where the device keeps it).
    for (DeviceGroupState *s : {&state, &expected})
      s->noVictimStep = s->noVictimStep == expected.step && expected.step != 0 ? 1 : 0;
    // (The stack's entries past its count are whatever was popped last.)
    for (DeviceGroupState *s : {&state, &expected})
      std::fill(s->freeStack.begin() +
                    std::clamp<std::int64_t>(s->freeCount, 0,
                                             static_cast<std::int64_t>(s->freeStack.size())),
                s->freeStack.end(), -1);
    if (!(state == expected)) {
      std::string what;
      if (state.hotRows != expected.hotRows)
        what += " hot rows,";
      if (state.cleared != expected.cleared)
        what += " CLOCK references,";
      if (state.freeStack != expected.freeStack || state.freeCount != expected.freeCount)
        what += " free stack,";
      if (state.recency != expected.recency)
        what += " replacement state,";
      if (state.hand != expected.hand)
        what +=
            " hand " + std::to_string(state.hand) + " vs " + std::to_string(expected.hand) + ",";
      if (state.excess != expected.excess)
        what += " excess " + std::to_string(state.excess) + " vs " +
                std::to_string(expected.excess) + ",";
      if (state.noVictimStep != expected.noVictimStep)
        what += " victim memo,";
      what.pop_back();
      throw InvariantError(group +
                           ": after the device's decisions its state differs from the "
                           "controller's in" +
                           what);
    }
  }
}

} // namespace dhs::runtime
