//===- CudaDecisions.cpp - A step's residency decisions on a device -------===//

#include "runtime/cuda/CudaDecisions.h"

#include "runtime/core/Checked.h"
#include "runtime/core/Error.h"

#include <algorithm>
#include <cstring>
#include <optional>

namespace dhs::runtime::cuda_detail {

using Control = dhs_abi::PromotionPlanLayout;

namespace {

/// Words of a group's counts in pinned memory: the control words, then the
/// step log's header.
constexpr std::size_t kCountWords = Control::kWords + StepLogLayout::kHeader;

} // namespace

CudaDecisions::TableArguments CudaDecisions::tableArguments(const Manifest &manifest,
                                                            const TierLayout &layout,
                                                            const std::string &what) {
  TableArguments t;
  t.hot = manifest.argument(ArgumentRole::HotRows).index;
  t.cleared = manifest.argument(ArgumentRole::ClockCleared).index;
  t.free = manifest.argument(ArgumentRole::FreeStack).index;
  t.control = manifest.argument(ArgumentRole::PromotionControl).index;
  t.rows = manifest.argument(ArgumentRole::PlaceRows).index;
  t.slots = manifest.argument(ArgumentRole::PlaceSlots).index;
  for (int index : {t.hot, t.cleared, t.free})
    if (manifest.arguments[static_cast<std::size_t>(index)].shape !=
        std::vector<std::int64_t>{layout.hbmSlots})
      throw InputError(manifest.path + ": the " + what + "'s " +
                       abi::name(manifest.arguments[static_cast<std::size_t>(index)].role) +
                       " table must have the pools' " + std::to_string(layout.hbmSlots) +
                       " slots (dhs-compile --hbm-slots)");
  if (manifest.arguments[static_cast<std::size_t>(t.control)].bytes() !=
      Control::kWords * sizeof(std::int32_t))
    throw InputError(manifest.path + ": the " + what + "'s promotion_control must hold " +
                     std::to_string(Control::kWords) + " words");
  // (The runtime copies both halves of the place list by the rows' count.)
  const Argument &rows = manifest.arguments[static_cast<std::size_t>(t.rows)];
  const Argument &slots = manifest.arguments[static_cast<std::size_t>(t.slots)];
  if (rows.bytes() / 8 != slots.bytes() / 4 || rows.bytes() % 8 != 0 || slots.bytes() % 4 != 0)
    throw InputError(manifest.path + ": the " + what + "'s place list must hold as many " +
                     abi::name(rows.role) + " (8 bytes each) as " + abi::name(slots.role) +
                     " (4 bytes each)");
  return t;
}

CudaDecisions::CudaDecisions(const Manifest &manifest, const TierLayout &layout,
                             std::shared_ptr<CudaQueue> queue, const CudaPlacement &placement)
    : queue_(std::move(queue)), layout_(layout) {
  const CudaDriver &cuda = driver();
  step_ = std::make_unique<CudaStep>(manifest, queue_->device().ordinal);
  step_->makeCurrent();
  // The launches: everything before place_rows runs once a group, place_rows
  // once per pool of the group, last.
  const auto place =
      std::find_if(manifest.launches.begin(), manifest.launches.end(),
                   [](const Launch &l) { return l.kind == abi::LaunchKind::PlaceRows; });
  const auto plan = std::find_if(manifest.launches.begin(), place, [](const Launch &l) {
    return l.kind == abi::LaunchKind::PlanPromotions;
  });
  if (place == manifest.launches.end() || place + 1 != manifest.launches.end() || plan == place ||
      std::count_if(manifest.launches.begin(), manifest.launches.end(),
                    [](const Launch &l) { return l.isGrouped(); }) != 1 ||
      !plan->isGrouped())
    throw InputError(manifest.path + ": a decision step plans promotions (dhs.plan_promotions, "
                                     "grouped: its only launch with a group_bindings table) and "
                                     "ends with their placement (dhs.place_rows)");
  placeLaunch_ = static_cast<std::size_t>(place - manifest.launches.begin());
  planLaunch_ = static_cast<std::size_t>(plan - manifest.launches.begin());
  rowIds_ = manifest.argument(ArgumentRole::RowIds).index;
  slots_ = manifest.argument(ArgumentRole::Slots).index;
  historyStart_ = manifest.argument(ArgumentRole::HistoryStart).index;
  for (const Argument &argument : manifest.arguments)
    if (argument.role == ArgumentRole::WriteBack)
      writeBack_ = argument.index;
  // (The grouped plan's tables hold each group's own buffers: it cannot
  // read selections in place; its history starts are always copied.)
  for (const LaunchParam &param : plan->params)
    if (param.source == ParamSource::Argument &&
        (param.argumentIndex == rowIds_ || param.argumentIndex == slots_))
      throw InputError(manifest.path + ": the decision step's plan_promotions reads the "
                                       "selections, which a grouped plan cannot read in place");
  tables_ = tableArguments(manifest, layout, "decision step");
  entries_ = manifest.arguments[static_cast<std::size_t>(tables_.rows)].bytes() / 8;

  CudaStepBuffers unbound;
  unbound.arguments.assign(manifest.arguments.size(), 0);
  unbound.hbmSlots = layout.hbmSlots;
  unbound.hostRows = layout.hostRows;
  auto isPerGroup = [&](int index) {
    return index == rowIds_ || index == slots_ || index == historyStart_ || index == tables_.hot ||
           index == tables_.cleared || index == tables_.free ||
           (writeBack_ >= 0 && index == writeBack_);
  };
  const std::size_t groups = static_cast<std::size_t>(layout.groups());
  // The lanes a round's groups decide on, each with its own copy of the
  // other arguments (the union, the sorted rows, the place list: ~9 MB at
  // B=128 x top-2048), arena and status word.
  lanes_.resize(std::clamp<std::size_t>(groups, 1, kDecisionLanes));
  laneStatus_ = std::make_unique<DeviceBuffer>(lanes_.size() * 4, "the decision lanes' "
                                                                  "status words");
  // (Parts of the exchange move its areas: the stream is idle.)
  queue_->quiesce();
  laneStatusCopy_ = exchange().add(HostExchange::Direction::ToHost, lanes_.size() * 4,
                                   "the decision lanes' status words");
  for (std::size_t k = 0; k < lanes_.size(); ++k) {
    Lane &lane = lanes_[k];
    lane.buffers = unbound;
    lane.buffers.status = laneStatus_->get() + k * 4;
    const std::string owner = "decision lane " + std::to_string(k) + "'s ";
    for (const Argument &argument : manifest.arguments)
      if (!argument.isPool && !isPerGroup(argument.index) && argument.index != tables_.control) {
        lane.shared.push_back(std::make_unique<DeviceBuffer>(
            std::max<std::size_t>(argument.bytes(), 4), owner + abi::name(argument.role)));
        lane.buffers.arguments[static_cast<std::size_t>(argument.index)] =
            lane.shared.back()->get();
      }
    if (manifest.arenaBytes > 0) {
      lane.arena = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(manifest.arenaBytes),
                                                  owner + "arena");
      lane.buffers.arena = lane.arena->get();
    }
  }
  // The control words of all groups in one buffer (one copy writes every
  // group's budget word, one reads every group's counts), cleared.
  controls_ = std::make_unique<DeviceBuffer>(std::max<std::size_t>(groups, 1) * kControlStride,
                                             "the groups' promotion control words");
  cuda.check(
      cuda.memsetD32(controls_->get(), 0, std::max<std::size_t>(groups, 1) * kControlStride / 4),
      "clearing the control words");
  // Each group's replacement state at the step's start, laid out as the
  // placement's (one copy saves all of them).
  const std::size_t recencyStride = CudaPlacement::recencyStride(layout);
  rollback_ = std::make_unique<DeviceBuffer>(std::max<std::size_t>(groups, 1) * recencyStride,
                                             "the replacement states at the step's start");
  inputs_.assign(groups, {});
  perGroup_.resize(groups);
  for (std::size_t g = 0; g < groups; ++g) {
    perGroup_[g].resize(manifest.arguments.size());
    for (const Argument &argument : manifest.arguments)
      if (!argument.isPool && isPerGroup(argument.index)) {
        perGroup_[g][static_cast<std::size_t>(argument.index)] = std::make_unique<DeviceBuffer>(
            std::max<std::size_t>(argument.bytes(), 4),
            std::string("group ") + std::to_string(g) + "'s " + abi::name(argument.role));
        // Until a step saves them: no selections, no history, no entries.
        cuda.check(
            cuda.memsetD32(groupArgument(static_cast<std::int32_t>(g), argument.index),
                           argument.index == rowIds_ || argument.index == writeBack_ ? ~0u : 0u,
                           std::max<std::size_t>(argument.bytes(), 4) / 4),
            "clearing a decision input");
      }
  }
  budgets_ = exchange().add(HostExchange::Direction::ToDevice, groups * 4, "the decision budgets");
  counts_ = exchange().add(HostExchange::Direction::ToHost, groups * kCountWords * 4,
                           "the decision counts");
  // The grouped plans' tables, a round's groups on their lanes.
  planColumns_ = manifest.launches[planLaunch_].params.size();
  const std::size_t rounds = (groups + lanes_.size() - 1) / lanes_.size();
  if (rounds > 0) {
    std::vector<std::int64_t> tables(rounds * lanes_.size() * planColumns_, 0);
    for (std::size_t r = 0; r < rounds; ++r) {
      std::vector<CudaStepBuffers> round;
      for (std::size_t g = r * lanes_.size(); g < std::min(groups, (r + 1) * lanes_.size()); ++g)
        round.push_back(laneBuffers(static_cast<std::int32_t>(g), {}, placement));
      const std::vector<std::int64_t> table = step_->groupBindings(planLaunch_, round);
      std::copy(table.begin(), table.end(), tables.begin() + r * lanes_.size() * planColumns_);
    }
    planBindings_ = std::make_unique<DeviceBuffer>(tables.size() * 8, "the grouped plans' tables");
    cuda.check(cuda.memcpyHtoD(planBindings_->get(), tables.data(), tables.size() * 8),
               "uploading the grouped plans' tables");
  }
  boundRecency_ = placement.recencyBase();
  queue_->makeCurrent();
}

CudaDecisions::~CudaDecisions() {
  queue_->drain();
  for (HostExchange::Part part : {laneStatusCopy_, budgets_, counts_})
    exchange().release(part);
  if (agingParts_)
    for (HostExchange::Part part : {agingIn_, agingOut_, agingBudgets_, agingStatusCopy_})
      exchange().release(part);
}

CudaStepBuffers CudaDecisions::laneBuffers(std::int32_t group, const DecisionInputs &inputs,
                                           const CudaPlacement &placement) const {
  CudaStepBuffers buffers = lanes_[static_cast<std::size_t>(group) % lanes_.size()].buffers;
  for (int index : {rowIds_, slots_, historyStart_, tables_.hot, tables_.cleared, tables_.free,
                    tables_.control, writeBack_})
    if (index >= 0)
      buffers.arguments[static_cast<std::size_t>(index)] = groupArgument(group, index);
  // The inputs read in place (enqueueInputs).
  const int inputIndex[] = {rowIds_, slots_, historyStart_, writeBack_};
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i] && inputIndex[i] >= 0)
      buffers.arguments[static_cast<std::size_t>(inputIndex[i])] = inputs[i];
  // The plan reads the group's replacement state and log (word 0: the step).
  placement.bind(group, true, buffers);
  return buffers;
}

void CudaDecisions::upload(std::int32_t group, const DeviceGroupState &state, std::int32_t budget) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce();
  const std::size_t slots = static_cast<std::size_t>(layout_.hbmSlots);
  if (state.hotRows.size() != slots || state.cleared.size() != slots ||
      state.freeStack.size() != slots)
    throw Error("group " + std::to_string(group) + "'s decision tables have " +
                std::to_string(state.hotRows.size()) + " slots, the pools " +
                std::to_string(slots));
  std::array<std::int32_t, Control::kWords> control{};
  control[Control::kHand] = state.hand;
  control[Control::kFreeCount] = state.freeCount;
  control[Control::kFreeBudget] = budget;
  control[Control::kNoVictimStep] = static_cast<std::int32_t>(state.noVictimStep);
  control[Control::kExcess] = static_cast<std::int32_t>(state.excess);
  cuda.check(cuda.memcpyHtoD(groupArgument(group, tables_.hot), state.hotRows.data(), slots * 8),
             "uploading hot rows");
  cuda.check(
      cuda.memcpyHtoD(groupArgument(group, tables_.cleared), state.cleared.data(), slots * 4),
      "uploading CLOCK stamps");
  cuda.check(cuda.memcpyHtoD(groupArgument(group, tables_.free), state.freeStack.data(), slots * 4),
             "uploading a free stack");
  cuda.check(
      cuda.memcpyHtoD(groupArgument(group, tables_.control), control.data(), Control::kWords * 4),
      "uploading control words");
  hostPart<std::int32_t>(budgets_)[group] = budget;
}

void CudaDecisions::download(std::int32_t group, DeviceGroupState &state) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce();
  const std::size_t slots = static_cast<std::size_t>(layout_.hbmSlots);
  state.hotRows.resize(slots);
  state.cleared.resize(slots);
  state.freeStack.resize(slots);
  std::array<std::int32_t, Control::kWords> control{};
  cuda.check(cuda.memcpyDtoH(state.hotRows.data(), groupArgument(group, tables_.hot), slots * 8),
             "downloading hot rows");
  cuda.check(
      cuda.memcpyDtoH(state.cleared.data(), groupArgument(group, tables_.cleared), slots * 4),
      "downloading CLOCK stamps");
  cuda.check(cuda.memcpyDtoH(state.freeStack.data(), groupArgument(group, tables_.free), slots * 4),
             "downloading a free stack");
  cuda.check(
      cuda.memcpyDtoH(control.data(), groupArgument(group, tables_.control), Control::kWords * 4),
      "downloading control words");
  state.hand = control[Control::kHand];
  state.freeCount = control[Control::kFreeCount];
  state.noVictimStep = static_cast<std::uint32_t>(control[Control::kNoVictimStep]);
  state.excess = control[Control::kExcess];
}

void CudaDecisions::setBudget(std::int32_t group, std::int32_t budget) {
  // Read by the next step's copy (the stream finished the last one).
  hostPart<std::int32_t>(budgets_)[group] = budget;
}

void CudaDecisions::enqueueBegin(const CudaPlacement &placement) {
  CUstream stream = queue_->stream();
  const std::size_t groups = static_cast<std::size_t>(layout_.groups());
  inputs_.assign(groups, {}); // (a group whose layers do not run reads its own buffers)
  // Every group's budget word in one copy, from the exchange's mirror.
  copyRowsAsync(controls_->get() + Control::kFreeBudget * 4, kControlStride,
                exchange().mirror(budgets_), 4, 4, groups, stream, "copying the decision budgets");
  // Every group's replacement state in one copy (the groups' states lie
  // side by side, as their copies do).
  if (layout_.hbmSlots > 0 && groups > 0)
    driver().check(driver().memcpyDtoDAsync(rollback_->get(), placement.recencyBase(),
                                            groups * CudaPlacement::recencyStride(layout_), stream),
                   "saving the replacement states");
}

void CudaDecisions::enqueueInputs(std::int32_t group, DecisionInput rowIds, DecisionInput slots,
                                  DecisionInput historyStart, DecisionInput writeBack) {
  const CudaDriver &cuda = driver();
  CUstream stream = queue_->stream();
  const Manifest &manifest = step_->manifest();
  const std::pair<int, DecisionInput> inputs[] = {
      {rowIds_, rowIds}, {slots_, slots}, {historyStart_, historyStart}};
  DecisionInputs &bound = inputs_.at(static_cast<std::size_t>(group));
  // (The entries are read in place: the runner keeps a group's own.)
  bound[3] = writeBack_ >= 0 ? writeBack.address : 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const auto &[index, input] = inputs[i];
    // (The grouped plan reads the group's own history starts.)
    const bool copy = input.copy || index == historyStart_;
    bound[i] = copy ? 0 : input.address;
    if (copy)
      cuda.check(cuda.memcpyDtoDAsync(groupArgument(group, index), input.address,
                                      manifest.arguments[static_cast<std::size_t>(index)].bytes(),
                                      stream),
                 std::string("saving a group's ") +
                     abi::name(manifest.arguments[static_cast<std::size_t>(index)].role));
  }
}

void CudaDecisions::enqueueDecisions(const CudaPlacement &placement, const CudaPools &pools,
                                     CUdeviceptr status, bool lists, bool whole) {
  CUstream stream = queue_->stream();
  if (lists && !lists_)
    lists_ = std::make_unique<MappedHostBuffer>(
        std::max<std::size_t>(static_cast<std::size_t>(layout_.groups()), 1) * entries_ * 12,
        "the decisions' place lists");
  // The inputs read in place (enqueueInputs) count for this step only.
  std::vector<DecisionInputs> bound(inputs_.size());
  bound.swap(inputs_); // (inputs_ cleared, the same size)
  // (The lanes' words are read only after decisions that were enqueued:
  // their copy back brings the words this step writes.)
  statusPending_ = false;
  auto submit = [&] { submitDecisions(placement, pools, status, lists, bound); };
  if (whole && driver().graphsAvailable()) {
    std::vector<CUdeviceptr> key = {status, lists ? 1u : 0u, exchange().generation()};
    for (const DecisionInputs &inputs : bound)
      key.insert(key.end(), inputs.begin(), inputs.end());
    decisionGraph_.run(key, stream, submit);
  } else {
    submit();
  }
  statusPending_ = true;
  queue_->submitted();
}

void CudaDecisions::submitDecisions(const CudaPlacement &placement, const CudaPools &pools,
                                    CUdeviceptr status, bool lists,
                                    const std::vector<DecisionInputs> &inputs) {
  const CudaDriver &cuda = driver();
  CUstream stream = queue_->stream();
  if (placement.recencyBase() != boundRecency_)
    throw StateError("the placement changed after the decision step was loaded");
  // Rounds of up to one group a lane, after the step's layers. A lane's
  // status word starts as the step's: its launches skip a failed step, and
  // a failure among its groups' decisions skips its later groups only (the
  // other lanes' groups decide whole). finishStep reads the words
  // (takeStatus).
  for (std::size_t k = 0; k < lanes_.size(); ++k)
    cuda.check(cuda.memcpyDtoDAsync(laneStatus_->get() + k * 4, status, 4, stream),
               "copying the step's status word");
  const std::size_t groups = static_cast<std::size_t>(layout_.groups());
  auto launchGroup = [&](CudaStepBuffers buffers, std::int32_t g, std::size_t first,
                         std::size_t count) {
    const std::size_t pool = layout_.poolOf(layout_.firstLayer(g));
    buffers.hbm = pools.hbm[pool]->get();
    buffers.host = pools.host[pool]->device();
    pools.bindWriteBack(pool, layout_.writeBackRows, true, buffers);
    step_->launchAsync(buffers, stream, first, count);
  };
  for (std::size_t first = 0; first < groups; first += lanes_.size()) {
    const std::size_t end = std::min(groups, first + lanes_.size());
    std::vector<CudaStepBuffers> round;
    for (std::size_t g = first; g < end; ++g) {
      const std::int32_t group = static_cast<std::int32_t>(g);
      round.push_back(laneBuffers(group, inputs[g], placement));
      launchGroup(round.back(), group, 0, planLaunch_);
    }
    // The round's plans in one launch, a CTA a group.
    CudaStepBuffers plan = laneBuffers(static_cast<std::int32_t>(first), {}, placement);
    plan.groupBindings = planBindings_->get() + first * planColumns_ * 8;
    plan.groups = static_cast<std::int64_t>(end - first);
    launchGroup(plan, static_cast<std::int32_t>(first), planLaunch_, 1);
    for (std::size_t g = first; g < end; ++g) {
      const std::int32_t group = static_cast<std::int32_t>(g);
      CudaStepBuffers &buffers = round[g - first];
      launchGroup(buffers, group, planLaunch_ + 1, placeLaunch_ - planLaunch_ - 1);
      for (std::int32_t l = layout_.firstLayer(group); l < layout_.endLayer(group);
           l += layout_.layersPerPool) {
        const std::size_t pool = layout_.poolOf(l);
        buffers.hbm = pools.hbm[pool]->get();
        buffers.host = pools.host[pool]->device();
        // (Its promotions' entries index this pool's ring: a group's pools
        // share the entries, each ring holding its own layers.)
        pools.bindWriteBack(pool, layout_.writeBackRows, true, buffers);
        step_->launchAsync(buffers, stream, placeLaunch_, 1);
      }
      // (Before the lane's next group overwrites the list.)
      if (lists) {
        auto *list = static_cast<std::uint8_t *>(lists_->host()) + g * entries_ * 12;
        cuda.check(cuda.memcpyDtoHAsync(list,
                                        buffers.arguments[static_cast<std::size_t>(tables_.rows)],
                                        entries_ * 8, stream),
                   "copying a place list");
        cuda.check(cuda.memcpyDtoHAsync(list + entries_ * 8,
                                        buffers.arguments[static_cast<std::size_t>(tables_.slots)],
                                        entries_ * 4, stream),
                   "copying a place list");
      }
    }
  }
  // Every group's control words and log header, each kind in one copy
  // (the groups' decisions touch their own only), and the lanes' status
  // words, into the exchange's mirror; then the exchange to the host.
  const CUdeviceptr counts = exchange().mirror(counts_);
  copyRowsAsync(counts, kCountWords * 4, controls_->get(), kControlStride, Control::kWords * 4,
                groups, stream, "copying decision counts");
  copyRowsAsync(counts + Control::kWords * 4, kCountWords * 4, placement.logBase(),
                placement.logStride(), StepLogLayout::kHeader * 4, groups, stream,
                "copying the step logs' headers");
  cuda.check(cuda.memcpyDtoDAsync(exchange().mirror(laneStatusCopy_), laneStatus_->get(),
                                  lanes_.size() * 4, stream),
             "copying the decision lanes' status words");
  exchange().enqueueToHost(stream);
}

void CudaDecisions::injectCorruptState() {
  if (!DHS_FAULT(BadState) || layout_.groups() == 0)
    return;
  driver().check(driver().memsetD32Async(groupArgument(0, tables_.control) +
                                             Control::kHand * sizeof(std::int32_t),
                                         0xffffffffu, 1, queue_->stream()),
                 "corrupting a CLOCK hand (injected fault)");
}

std::uint32_t CudaDecisions::takeStatus() {
  if (!statusPending_)
    return 0;
  statusPending_ = false;
  auto *words = hostPart<std::uint32_t>(laneStatusCopy_);
  std::uint32_t word = 0;
  for (std::size_t k = 0; k < lanes_.size(); ++k)
    word |= words[k];
  if (word != 0) {
    // Cleared in the mirror too (the stream is idle after a step), which a
    // later copy of the exchange would otherwise bring back.
    std::memset(words, 0, lanes_.size() * 4);
    exchange().refreshMirror(laneStatusCopy_);
  }
  return word;
}

DecisionCounts CudaDecisions::counts(std::int32_t group) const {
  const auto *counts =
      hostPart<const std::int32_t>(counts_) + static_cast<std::size_t>(group) * kCountWords;
  return {counts, counts + Control::kWords};
}

std::pair<const std::int64_t *, const std::int32_t *>
CudaDecisions::placeList(std::int32_t group) const {
  if (!lists_)
    throw StateError("no step copied its place lists");
  const auto *list = static_cast<const std::uint8_t *>(lists_->host()) +
                     static_cast<std::size_t>(group) * entries_ * 12;
  return {reinterpret_cast<const std::int64_t *>(list),
          reinterpret_cast<const std::int32_t *>(list + entries_ * 8)};
}

void CudaDecisions::rollBack(const CudaPlacement &placement) {
  queue_->makeCurrent();
  const std::size_t groups = static_cast<std::size_t>(layout_.groups());
  if (layout_.hbmSlots > 0 && groups > 0)
    driver().check(driver().memcpyDtoDAsync(placement.recencyBase(), rollback_->get(),
                                            groups * CudaPlacement::recencyStride(layout_),
                                            queue_->stream()),
                   "rolling back the replacement states");
  queue_->synchronize("rolling back the replacement states");
}

void CudaDecisions::setAgingStep(const Manifest &manifest) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  if (manifest.launches.size() != 2 || manifest.launches[0].kind != abi::LaunchKind::AgeRows ||
      !manifest.launches[0].isGrouped() || manifest.launches[1].kind != abi::LaunchKind::PlaceRows)
    throw InputError(manifest.path + ": an aging step replays the appends (dhs.age_rows, grouped: "
                                     "with a group_bindings table) and places their rows "
                                     "(dhs.place_rows), nothing else");
  agingList_ = manifest.argument(ArgumentRole::AgeList).index;
  agingTables_ = tableArguments(manifest, layout_, "aging step");
  agingN_ = static_cast<std::size_t>(
      manifest.arguments[static_cast<std::size_t>(agingList_)].shape.at(0));
  aging_ = std::make_unique<CudaStep>(manifest, queue_->device().ordinal);
  const std::size_t groups = static_cast<std::size_t>(layout_.groups());
  CudaStepBuffers unbound;
  unbound.arguments.assign(manifest.arguments.size(), 0);
  unbound.hbmSlots = layout_.hbmSlots;
  unbound.hostRows = layout_.hostRows;
  agingBuffers_.assign(groups, unbound);
  for (std::size_t g = 0; g < groups; ++g) {
    const std::int32_t group = static_cast<std::int32_t>(g);
    CudaStepBuffers &buffers = agingBuffers_[g];
    buffers.arguments[static_cast<std::size_t>(agingTables_.hot)] =
        groupArgument(group, tables_.hot);
    buffers.arguments[static_cast<std::size_t>(agingTables_.cleared)] =
        groupArgument(group, tables_.cleared);
    buffers.arguments[static_cast<std::size_t>(agingTables_.free)] =
        groupArgument(group, tables_.free);
    buffers.arguments[static_cast<std::size_t>(agingTables_.control)] =
        groupArgument(group, tables_.control);
  }
  // Each group's list, place list and status word of its own: the groups'
  // replays run side by side.
  for (int index : {agingList_, agingTables_.rows, agingTables_.slots}) {
    const Argument &argument = manifest.arguments[static_cast<std::size_t>(index)];
    const std::size_t stride = alignedStride(argument.bytes());
    if (index == agingList_)
      agingListStride_ = stride;
    else if (index == agingTables_.slots)
      agingSlotsStride_ = stride;
    agingArguments_.push_back(std::make_unique<DeviceBuffer>(
        std::max<std::size_t>(groups, 1) * stride,
        std::string("the aging step's ") + abi::name(argument.role) + " of each group"));
    for (std::size_t g = 0; g < groups; ++g)
      agingBuffers_[g].arguments[static_cast<std::size_t>(index)] =
          agingArguments_.back()->get() + g * stride;
  }
  agingStatus_ = std::make_unique<DeviceBuffer>(std::max<std::size_t>(groups, 1) * 4,
                                                "the aging status words");
  cuda.check(cuda.memsetD32(agingStatus_->get(), 0, std::max<std::size_t>(groups, 1)),
             "clearing the aging status words");
  for (std::size_t g = 0; g < groups; ++g)
    agingBuffers_[g].status = agingStatus_->get() + g * 4;
  // The words go to the host after the replays (with the exchange), so
  // that the host reads them without a copy of its own (a synchronous copy
  // cost ~45 us a step). The lists and slots get room with the first
  // replays (enqueueAging).
  queue_->makeCurrent();
  queue_->quiesce();
  if (!agingParts_) {
    using Direction = HostExchange::Direction;
    agingStatusCopy_ = exchange().add(Direction::ToHost, groups * 4, "the aging status words");
    agingBudgets_ = exchange().add(Direction::ToDevice, groups * 4, "the aging budgets");
    agingIn_ = exchange().add(Direction::ToDevice, 0, "the appends for the aging step");
    agingOut_ = exchange().add(Direction::ToHost, 0, "the slots from the aging step");
    agingParts_ = true;
  } else {
    std::memset(exchange().host(agingStatusCopy_), 0, exchange().bytes(agingStatusCopy_));
    exchange().refreshMirror(agingStatusCopy_);
    exchange().resize(agingIn_, 0);
    exchange().resize(agingOut_, 0);
  }
  agingRoom_ = 0;
  agingGraph_.reset();
  agingBindings_.clear();
  ++agingTablesGeneration_;
}

void CudaDecisions::enqueueAging(const std::vector<AgingReplay> &replays,
                                 const CudaPlacement &placement, const CudaPools &pools,
                                 bool deferred) {
  using Age = dhs_abi::AgeRowsLayout;
  const std::size_t groups = static_cast<std::size_t>(layout_.groups());
  const std::size_t entryBytes = Age::kEntryWords * 8;
  // One set of replays at a time in the exchange.
  flushAging(placement, pools);
  // Room for every group's appends before anything is enqueued (between
  // steps: waiting for the queue's stream waits for the last replays too,
  // which it joined). Every group has the room of the largest replay.
  std::size_t room = agingRoom_;
  std::vector<bool> replayed(groups, false);
  for (const AgingReplay &replay : replays) {
    if (replay.group < 0 || static_cast<std::size_t>(replay.group) >= groups)
      throw OutOfRangeError("layer group " + std::to_string(replay.group) + " does not exist");
    if (replayed[static_cast<std::size_t>(replay.group)])
      throw InputError("layer group " + std::to_string(replay.group) +
                       " is replayed twice in one call");
    replayed[static_cast<std::size_t>(replay.group)] = true;
    room = std::max(room, (replay.appends.size() + agingN_ - 1) / agingN_ * agingN_);
  }
  if (room > agingRoom_ || agingRoom_ == 0) {
    queue_->quiesce();
    room = std::max(room, agingN_);
    // Slots not yet taken (agedSlots) move along, at the new pitch. (The
    // exchange's generation changes: graphs that copy the old parts no
    // longer fit.)
    const std::optional<std::size_t> slotBytes = tryMul<std::size_t>(groups * 4, room);
    const std::optional<std::size_t> listBytes =
        slotBytes ? tryMul<std::size_t>(*slotBytes, entryBytes / 4) : std::nullopt;
    if (!listBytes)
      throw CapacityError(std::to_string(room) + " appends a group do not fit the host exchange");
    std::vector<std::int32_t> slots(*slotBytes / 4, -1);
    for (std::size_t g = 0; agingRoom_ > 0 && g < groups; ++g)
      std::memcpy(slots.data() + g * room, hostPart<const std::int32_t>(agingOut_) + g * agingRoom_,
                  agingRoom_ * 4);
    exchange().resize(agingIn_, *listBytes);
    exchange().resize(agingOut_, *slotBytes);
    std::memcpy(exchange().host(agingOut_), slots.data(), slots.size() * 4);
    exchange().refreshMirror(agingOut_);
    agingRoom_ = room;
  }
  if (replays.empty())
    return;
  // The lists and budget words in pinned memory, read by the copies when
  // they run: group g's list at agingIn_ + g x room entries, its slots back
  // at agingOut_ + g x room. A recorded list is in the kernel's format
  // (DeviceAppend is an entry): copied as it is, padded to whole chunks.
  // Replays of the same recorded appends (the controller records one list
  // for all device-owned groups) share the first one's list: written and
  // copied once.
  const std::size_t inPitch = agingRoom_ * entryBytes;
  AgingShape shape;
  for (std::size_t k = 0; k < replays.size(); ++k) {
    const AgingReplay &replay = replays[k];
    const DeviceAppendList appends = replay.appends;
    const std::size_t g = static_cast<std::size_t>(replay.group);
    const std::size_t chunks = (appends.size() + agingN_ - 1) / agingN_;
    std::int32_t list = replay.group;
    for (std::size_t j = 0; j < k && list == replay.group; ++j)
      if (replays[j].appends.begin() == appends.begin() &&
          replays[j].appends.size() == appends.size())
        list = replays[j].group;
    if (list == replay.group) {
      auto *entries =
          reinterpret_cast<DeviceAppend *>(hostPart<std::uint8_t>(agingIn_) + g * inPitch);
      if (!appends.empty())
        std::memcpy(entries, appends.begin(), appends.size() * entryBytes);
      std::fill(entries + appends.size(), entries + chunks * agingN_,
                DeviceAppend{-1, -1, 0, 0}); // padding, skipped
    }
    // The budget word before the appends (the kernel keeps it from then on).
    hostPart<std::int32_t>(agingBudgets_)[g] = replay.budget;
    shape.push_back({replay.group, chunks, list});
  }
  agingShape_ = std::move(shape);
  // The grouped launches' tables, now (not while a graph is captured). A
  // graph may still launch the tables made so far: a few dozen are kept;
  // past that, all are dropped once the stream is idle, with the graphs
  // that launch them.
  std::size_t chunks = 0;
  for (const AgingReplayShape &replay : agingShape_)
    chunks = std::max(chunks, replay.chunks);
  constexpr std::size_t kMaxTables = 64;
  if (agingBindings_.size() + chunks > kMaxTables) {
    queue_->quiesce();
    agingBindings_.clear();
    agingGraph_.reset();
    ++agingTablesGeneration_; // (a step's graph with replays launches them too)
  }
  for (std::size_t c = 0; c < chunks; ++c)
    agingBindings(agingChunk(c), placement);
  agingQueued_ = true;
  if (deferred)
    return;
  try {
    flushAging(placement, pools);
  } catch (...) {
    // Not replayed (a graph is launched whole or not at all): the caller
    // gives them again.
    agingQueued_ = false;
    throw;
  }
}

CudaDecisions::AgingShape CudaDecisions::agingChunk(std::size_t c) const {
  AgingShape chunk;
  for (const AgingReplayShape &replay : agingShape_)
    if (replay.chunks > c)
      chunk.push_back(replay);
  return chunk;
}

CUdeviceptr CudaDecisions::agingBindings(const AgingShape &replays,
                                         const CudaPlacement &placement) {
  // (Keyed by groups and lists: the chunk counts do not change the table.)
  AgingShape key = replays;
  for (AgingReplayShape &replay : key)
    replay.chunks = 0;
  auto found = agingBindings_.find(key);
  if (found != agingBindings_.end())
    return found->second->get();
  std::vector<CudaStepBuffers> buffers;
  for (const AgingReplayShape &replay : replays) {
    buffers.push_back(agingBuffers_[static_cast<std::size_t>(replay.group)]);
    placement.bind(replay.group, true, buffers.back()); // the map, the stamps, the log
    buffers.back().arguments[static_cast<std::size_t>(agingList_)] =
        agingArguments_[0]->get() + static_cast<std::size_t>(replay.list) * agingListStride_;
  }
  const std::vector<std::int64_t> table = aging_->groupBindings(0, buffers);
  auto device = std::make_unique<DeviceBuffer>(table.size() * 8, "a grouped aging table");
  driver().check(driver().memcpyHtoD(device->get(), table.data(), table.size() * 8),
                 "uploading a grouped aging table");
  return agingBindings_.emplace(std::move(key), std::move(device)).first->second->get();
}

void CudaDecisions::submitAging(const CudaPlacement &placement, const CudaPools &pools) {
  using Age = dhs_abi::AgeRowsLayout;
  const std::size_t groups = static_cast<std::size_t>(layout_.groups());
  const std::size_t entryBytes = Age::kEntryWords * 8;
  const std::size_t inPitch = agingRoom_ * entryBytes, outPitch = agingRoom_ * 4;
  CUstream stream = queue_->stream();
  const CUdeviceptr lists = agingArguments_[0]->get(), slots = agingArguments_[2]->get();
  // Runs of consecutive groups: one copy each instead of one a group.
  auto forRuns = [](const std::vector<std::int32_t> &groupList, const auto &copy) {
    for (std::size_t k = 0; k < groupList.size();) {
      std::size_t end = k + 1;
      while (end < groupList.size() && groupList[end] == groupList[end - 1] + 1)
        ++end;
      copy(static_cast<std::size_t>(groupList[k]), end - k);
      k = end;
    }
  };
  auto groupsOf = [](const AgingShape &replays) {
    std::vector<std::int32_t> groupList;
    for (const AgingReplayShape &replay : replays)
      groupList.push_back(replay.group);
    return groupList;
  };
  // The budget words first (the kernel keeps them from then on).
  forRuns(groupsOf(agingShape_), [&](std::size_t g, std::size_t count) {
    copyRowsAsync(groupArgument(static_cast<std::int32_t>(g), tables_.control) +
                      Control::kFreeBudget * 4,
                  kControlStride, exchange().mirror(agingBudgets_) + g * 4, 4, 4, count, stream,
                  "copying the aging budgets");
  });
  // Chunk c of every replay that has one: its lists, one grouped age_rows
  // launch (a CTA a group), the groups' placements, their slots back.
  for (std::size_t c = 0;; ++c) {
    AgingShape chunk = agingChunk(c);
    if (chunk.empty())
      break;
    const std::vector<std::int32_t> chunkGroups = groupsOf(chunk);
    // The lists of this chunk (each shared list once).
    std::vector<std::int32_t> owners;
    for (const AgingReplayShape &replay : chunk)
      if (replay.list == replay.group)
        owners.push_back(replay.group);
    for (AgingReplayShape &replay : chunk)
      replay.chunks = 0;
    const auto table = agingBindings_.find(chunk);
    if (table == agingBindings_.end())
      throw StateError("no grouped aging table for the queued replays (enqueueAging makes them)");
    forRuns(owners, [&](std::size_t g, std::size_t count) {
      copyRowsAsync(lists + g * agingListStride_, agingListStride_,
                    exchange().mirror(agingIn_) + g * inPitch + c * agingN_ * entryBytes, inPitch,
                    agingN_ * entryBytes, count, stream, "copying appends");
    });
    CudaStepBuffers buffers = agingBuffers_[static_cast<std::size_t>(chunkGroups[0])];
    placement.bind(chunkGroups[0], true, buffers);
    buffers.arguments[static_cast<std::size_t>(agingList_)] =
        agingArguments_[0]->get() + static_cast<std::size_t>(chunk[0].list) * agingListStride_;
    buffers.groupBindings = table->second->get();
    buffers.groups = static_cast<std::int64_t>(chunkGroups.size());
    aging_->launchAsync(buffers, stream, 0, 1);
    for (std::int32_t group : chunkGroups) {
      CudaStepBuffers place = agingBuffers_[static_cast<std::size_t>(group)];
      placement.bind(group, true, place); // the map, the stamps, word 0 of the log: the step
      for (std::int32_t l = layout_.firstLayer(group); l < layout_.endLayer(group);
           l += layout_.layersPerPool) {
        const std::size_t pool = layout_.poolOf(l);
        place.hbm = pools.hbm[pool]->get();
        place.host = pools.host[pool]->device();
        aging_->launchAsync(place, stream, 1, 1);
      }
    }
    // Entry i of a group's list: append i's row and its slot.
    forRuns(chunkGroups, [&](std::size_t g, std::size_t count) {
      copyRowsAsync(exchange().mirror(agingOut_) + g * outPitch + c * agingN_ * 4, outPitch,
                    slots + g * agingSlotsStride_, agingSlotsStride_, agingN_ * 4, count, stream,
                    "copying the aged rows' slots");
    });
  }
  // The status words into the exchange (takeAgingStatus reads them once
  // it went to the host).
  if (groups > 0)
    driver().check(driver().memcpyDtoDAsync(exchange().mirror(agingStatusCopy_),
                                            agingStatus_->get(), groups * 4, stream),
                   "copying the aging status words");
}

void CudaDecisions::flushAging(const CudaPlacement &placement, const CudaPools &pools) {
  if (!agingQueued_)
    return;
  queue_->makeCurrent();
  // Alone: the exchange to the device first, back to the host last.
  auto submit = [&] {
    exchange().enqueueToDevice(queue_->stream());
    submitAging(placement, pools);
    exchange().enqueueToHost(queue_->stream());
  };
  if (driver().graphsAvailable())
    agingGraph_.run({agingShape_, exchange().generation()}, queue_->stream(), submit);
  else
    submit();
  queue_->submitted();
  agingQueued_ = false;
}

std::vector<std::int32_t> CudaDecisions::agedSlots(std::int32_t group, std::size_t count) const {
  if (agingRoom_ == 0 || group < 0 || group >= layout_.groups() || count > agingRoom_)
    throw OutOfRangeError("no aged slots of layer group " + std::to_string(group) + " (" +
                          std::to_string(count) + " appends)");
  const auto *slots =
      hostPart<const std::int32_t>(agingOut_) + static_cast<std::size_t>(group) * agingRoom_;
  return std::vector<std::int32_t>(slots, slots + count);
}

std::uint32_t CudaDecisions::takeAgingStatus() {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->synchronize("the aging kernels failed");
  const std::size_t groups = agingBuffers_.size();
  auto *words = hostPart<std::uint32_t>(agingStatusCopy_);
  std::uint32_t word = 0;
  for (std::size_t g = 0; g < groups; ++g)
    word |= words[g];
  if (word != 0) {
    // The device's words, the host's and the mirror's (which a later copy
    // of the exchange would bring back).
    cuda.check(cuda.memsetD32(agingStatus_->get(), 0, groups), "clearing the aging status words");
    std::memset(words, 0, groups * 4);
    exchange().refreshMirror(agingStatusCopy_);
  }
  return word;
}

} // namespace dhs::runtime::cuda_detail
