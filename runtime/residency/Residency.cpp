//===- Residency.cpp - The residency controller of the KV hierarchy -------===//

#include "runtime/residency/Residency.h"
#include "runtime/residency/ResidencyState.h"

#include "runtime/core/Error.h"
#include "runtime/core/Reserve.h"

#include <algorithm>
#include <limits>
#include <string>

namespace dhs::runtime {

ResidencyStepStats &ResidencyStepStats::operator+=(const ResidencyStepStats &other) {
  entries += other.entries;
  selected += other.selected;
  resident += other.resident;
  fetched += other.fetched;
  promoted += other.promoted;
  notPromoted += other.notPromoted;
  evicted += other.evicted;
  return *this;
}

ResidencyConfig ResidencyConfig::adaptive(std::int32_t groups, std::int32_t hbmSlots,
                                          std::int64_t hostRows, std::int32_t newestWindow,
                                          std::int32_t draftWindow, std::int32_t hotFloor) {
  ResidencyConfig config;
  config.groups = groups;
  config.hbmSlots = hbmSlots;
  config.hostRows = hostRows;
  config.newestWindow = newestWindow;
  config.draftWindow = draftWindow;
  config.hotFloor = hotFloor;
  config.policy = ResidencyPolicy::Adaptive;
  config.replacement = Replacement::Clock;
  return config;
}

ResidencyConfig ResidencyConfig::fixedBudget(std::int32_t groups, std::int32_t hbmSlots,
                                             std::int64_t hostRows, std::int32_t newestWindow,
                                             std::int32_t draftWindow, std::int32_t bufferSlots) {
  ResidencyConfig config =
      adaptive(groups, hbmSlots, hostRows, newestWindow, draftWindow, bufferSlots);
  config.policy = ResidencyPolicy::Fixed;
  config.replacement = Replacement::Lru;
  return config;
}

void ResidencyConfig::validate() const {
  auto positive = [](const char *name, std::int64_t value, std::int64_t min) {
    if (value < min)
      throw Error(std::string("residency config: ") + name + " is " + std::to_string(value) +
                  ", it must be at least " + std::to_string(min));
  };
  positive("groups", groups, 1);
  positive("hbm_slots", hbmSlots, 0);
  positive("host_rows", hostRows, 0);
  positive("max_requests", maxRequests, 1);
  positive("newest_window", newestWindow, 0);
  positive("draft_window", draftWindow, 0);
  positive("hot_floor", hotFloor, 0);
  positive("max_promotions_per_step", maxPromotionsPerStep, -1);
  if (hostRows > std::numeric_limits<std::int32_t>::max() * 64ll)
    throw Error("residency config: host_rows " + std::to_string(hostRows) + " is too large");
}

std::int64_t ResidencyConfig::maxLiveRequests() const {
  std::int64_t live = std::min<std::int64_t>(maxRequests, std::max<std::int64_t>(hostRows, 1));
  if (reservedSlots() > 0)
    live = std::min<std::int64_t>(live, std::max<std::int64_t>(hbmSlots / reservedSlots(), 1));
  return std::max<std::int64_t>(live, 1);
}

ResidencyController::ResidencyController(const ResidencyConfig &config)
    : config_(config), host_((config.validate(), config.hostRows)) {
  const std::size_t slots = static_cast<std::size_t>(config_.hbmSlots);
  const std::size_t hostRows = static_cast<std::size_t>(config_.hostRows);
  groups_.resize(static_cast<std::size_t>(config_.groups));
  for (Group &g : groups_) {
    g.slots.assign(slots, SlotRecord{});
    g.uses.assign(slots, SlotUses{});
    g.usesBefore.reserve(slots);
    g.slotOfHostRow.assign(hostRows, -1);
    g.seen.assign(hostRows, 0);
    g.free = SlotAllocator(config_.hbmSlots);
    g.ringSlotBits.assign((slots + 63) / 64, 0);
    // CLOCK's candidate bits at their size: building them allocates nothing.
    g.candidates.assign((slots + 63) / 64, 0);
    g.candidateWords.assign((slots + 4095) / 4096, 0);
  }
  // The request table grows with admissions (see admit).
  resolved_.assign(groups_.size(), 0);
}

std::uint64_t ResidencyController::hostBytes(const ResidencyConfig &config) {
  // Per slot: its record and uses, the uses a step saves (usesBefore), the
  // LRU order's entry, and the free-slot allocator's stack and mark; per
  // host row: its slot and resolve serial; per request and group:
  // the lists' headers, hand, search stamp and LRU cursor (their contents
  // are slots, counted above, and a step's fetched rows), and while the
  // device decides its history length at the handover and the slots of its
  // newest W rows (and per request its ring base).
  const std::uint64_t perSlot =
      sizeof(SlotRecord) + sizeof(SlotUses) + sizeof(std::pair<std::int32_t, SlotUses>) + 4 + 4 + 1;
  const std::uint64_t perHostRow = 4 + 4;
  const std::uint64_t perRequestGroup =
      3 * sizeof(std::vector<std::int32_t>) + 4 + 4 + sizeof(LruCursor) + 8 +
      4 * static_cast<std::uint64_t>(std::max(config.newestWindow, 0));
  const std::uint64_t groups = static_cast<std::uint64_t>(std::max(config.groups, 1));
  std::uint64_t total = 0, term = 0;
  auto add = [&](std::initializer_list<std::uint64_t> factors) {
    term = 1;
    for (std::uint64_t f : factors)
      if (__builtin_mul_overflow(term, f, &term))
        term = UINT64_MAX;
    if (__builtin_add_overflow(total, term, &total))
      total = UINT64_MAX;
  };
  add({groups, static_cast<std::uint64_t>(std::max(config.hbmSlots, 0)), perSlot});
  // CLOCK's candidate bits: a word per 64 slots, and their summary; the
  // ring slots' bits.
  const std::uint64_t words = (static_cast<std::uint64_t>(std::max(config.hbmSlots, 0)) + 63) / 64;
  add({groups, 2 * words + (words + 63) / 64, 8});
  add({groups, static_cast<std::uint64_t>(std::max<std::int64_t>(config.hostRows, 0)), perHostRow});
  // The host allocator's free ranges (at most one per live request + 1).
  const std::uint64_t live = static_cast<std::uint64_t>(config.maxLiveRequests());
  add({live, sizeof(Request) + 8 + groups * perRequestGroup + 2 * sizeof(HostRange)});
  return total;
}

ResidencyController::~ResidencyController() = default;
ResidencyController::ResidencyController(const ResidencyController &) = default;
ResidencyController &ResidencyController::operator=(const ResidencyController &) = default;
ResidencyController::ResidencyController(ResidencyController &&) noexcept = default;
ResidencyController &ResidencyController::operator=(ResidencyController &&) noexcept = default;

ResidencyController::Request &ResidencyController::liveRequest(std::int32_t request,
                                                               const char *what) {
  return const_cast<Request &>(
      static_cast<const ResidencyController *>(this)->liveRequest(request, what));
}

const ResidencyController::Request &ResidencyController::liveRequest(std::int32_t request,
                                                                     const char *what) const {
  if (request < 0 || static_cast<std::size_t>(request) >= requests_.size() ||
      !requests_[static_cast<std::size_t>(request)].live)
    throw UnknownRequestError(std::string(what) + ": request " + std::to_string(request) +
                              " is not admitted");
  return requests_[static_cast<std::size_t>(request)];
}

bool ResidencyController::live(std::int32_t request) const {
  return request >= 0 && static_cast<std::size_t>(request) < requests_.size() &&
         requests_[static_cast<std::size_t>(request)].live;
}

std::int64_t ResidencyController::historyStart(std::int32_t request) const {
  return liveRequest(request, "history start").start;
}

std::int64_t ResidencyController::historyLen(std::int32_t request) const {
  return liveRequest(request, "history length").len;
}

std::int64_t ResidencyController::maxContext(std::int32_t request) const {
  return liveRequest(request, "maximum context").maxContext;
}

std::int64_t ResidencyController::optionalBudget() const {
  if (config_.policy == ResidencyPolicy::Fixed)
    return 0;
  return config_.hbmSlots - static_cast<std::int64_t>(liveCount_) * config_.reservedSlots();
}

//===----------------------------------------------------------------------===//
// Room made before an update (runtime/core/Reserve.h)
//===----------------------------------------------------------------------===//

void ResidencyController::reserveChanges(std::vector<RowCopy> &copies, std::size_t copyCount,
                                         std::size_t releaseCount) {
  // (The Runtime keeps its copies and its release log in one list.)
  if (releaseLog_ == &copies) {
    reserveRoom(copies, copyCount + releaseCount);
    return;
  }
  reserveRoom(copies, copyCount);
  if (releaseLog_)
    reserveRoom(*releaseLog_, releaseCount);
}

void ResidencyController::reserveVictimSearches() {
  // A group's LRU order holds at most every slot; a request's own (the
  // fixed policy) at most its hot rows, for which each update makes room.
  if (config_.replacement == Replacement::Clock)
    return;
  for (Group &g : groups_)
    g.lru.order.reserve(static_cast<std::size_t>(config_.hbmSlots));
}

std::size_t ResidencyController::promotionsDue(const Request &r, std::size_t gi) const {
  if (!inStep_ || !resolved_[gi])
    return 0;
  std::size_t rows = r.fetch[gi].size();
  if (config_.maxPromotionsPerStep >= 0)
    rows = std::min(rows, static_cast<std::size_t>(config_.maxPromotionsPerStep));
  return rows;
}

void ResidencyController::reserveHotRows(Request &r, std::size_t gi, std::size_t rows) {
  reserveRoom(r.hot[gi], rows);
  if (config_.policy == ResidencyPolicy::Fixed && config_.replacement != Replacement::Clock)
    r.lru[gi].order.reserve(r.hot[gi].capacity());
}

//===----------------------------------------------------------------------===//
// Slot bookkeeping
//===----------------------------------------------------------------------===//

void ResidencyController::place(Group &g, std::int32_t gi, std::int32_t slot, std::int32_t request,
                                std::int32_t row, SlotKind kind, std::vector<RowCopy> *copies) {
  Request &r = requests_[static_cast<std::size_t>(request)];
  const std::size_t s = static_cast<std::size_t>(slot);
  SlotRecord &record = g.slots[s];
  record.owner = request;
  record.row = row;
  record.kind = static_cast<std::uint8_t>(kind);
  record.cleared = kNeverCleared; // referenced
  record.listPos = -1;
  g.uses[s] = {step_, 0};
  if (kind == SlotKind::Ring) {
    r.ring[static_cast<std::size_t>(gi)].push_back(slot);
    g.ringSlotBits[s >> 6] |= 1ull << (s & 63);
    ++g.ring;
    return;
  }
  const std::int64_t hostRow = r.start + row;
  g.slotOfHostRow[static_cast<std::size_t>(hostRow)] = slot;
  if (copies)
    copies->push_back({gi, slot, hostRow});
  if (kind == SlotKind::Newest) {
    ++g.newest;
    return;
  }
  // Hot: a promoted row, stamped with this step, so no LRU order changes.
  record.kind = static_cast<std::uint8_t>(SlotKind::Newest); // makeHot converts
  ++g.newest;
  makeHot(g, slot, /*mayBeOld=*/false);
}

void ResidencyController::makeHot(Group &g, std::int32_t slot, bool mayBeOld) {
  const std::size_t s = static_cast<std::size_t>(slot);
  const std::int32_t gi = static_cast<std::int32_t>(&g - groups_.data());
  SlotRecord &record = g.slots[s];
  Request &r = requests_[static_cast<std::size_t>(record.owner)];
  std::vector<std::int32_t> &list = r.hot[static_cast<std::size_t>(gi)];
  record.kind = static_cast<std::uint8_t>(SlotKind::Hot);
  --g.newest;
  ++g.hot;
  if (g.uses[s].lastUse < step_)
    g.addCandidate(slot); // a victim for non-forced searches from now on
  record.listPos = static_cast<std::int32_t>(list.size());
  list.push_back(slot);
  if (static_cast<std::int64_t>(list.size()) > config_.hotFloor) {
    ++g.excess;
    // The owner went above its floor: its older rows may be victims now.
    if (static_cast<std::int64_t>(list.size()) == config_.hotFloor + 1)
      g.noVictimStep = 0;
  }
  if (mayBeOld) {
    // A row that may be old joined the candidates: recompute LRU orders.
    g.lru.invalidate();
    r.lru[static_cast<std::size_t>(gi)].invalidate();
    r.noVictimStep[static_cast<std::size_t>(gi)] = 0;
  }
}

void ResidencyController::evict(Group &g, std::int32_t slot) {
  const SlotRecord &record = g.slots[static_cast<std::size_t>(slot)];
  const std::int32_t gi = static_cast<std::int32_t>(&g - groups_.data());
  Request &r = requests_[static_cast<std::size_t>(record.owner)];
  std::vector<std::int32_t> &list = r.hot[static_cast<std::size_t>(gi)];
  if (static_cast<std::int64_t>(list.size()) > config_.hotFloor)
    --g.excess;
  // Swap-remove from the owner's hot list.
  const std::int32_t pos = record.listPos;
  const std::int32_t last = list.back();
  list[static_cast<std::size_t>(pos)] = last;
  g.slots[static_cast<std::size_t>(last)].listPos = pos;
  list.pop_back();
  --g.hot;
  const std::int64_t hostRow = r.start + record.row;
  g.slotOfHostRow[static_cast<std::size_t>(hostRow)] = -1;
  if (releaseLog_)
    releaseLog_->push_back({gi, -1, hostRow});
  g.freeSlot(slot);
  ++evictions_;
  if (inStep_)
    ++last_.evicted;
  else
    ++pendingEvictions_;
}

std::int32_t ResidencyController::hotSlotFor(Group &g, std::int32_t gi, std::int32_t request,
                                             bool force) {
  const Request &r = requests_[static_cast<std::size_t>(request)];
  const std::int64_t hot = static_cast<std::int64_t>(r.hot[static_cast<std::size_t>(gi)].size());
  if (hot < config_.hotFloor)
    return g.free.allocate(); // the floor is reserved: a free slot exists
  if (config_.policy == ResidencyPolicy::Adaptive) {
    if (g.excess < optionalBudget())
      return g.free.allocate(); // within the budget: a free slot exists
    std::int32_t victim = findVictim(g, gi, -1, force);
    if (victim < 0)
      return -1;
    evict(g, victim);
    return g.free.allocate();
  }
  std::int32_t victim = findVictim(g, gi, request, force);
  if (victim < 0)
    return -1;
  evict(g, victim);
  return g.free.allocate();
}

//===----------------------------------------------------------------------===//
// Requests
//===----------------------------------------------------------------------===//

std::string ResidencyController::admissionRefusal(std::int64_t maxContext) const {
  if (liveCount_ >= config_.maxRequests)
    return "the request table is full (" + std::to_string(config_.maxRequests) +
           " requests admitted)";
  const std::int64_t reserved = config_.reservedSlots();
  const std::int64_t needed = (static_cast<std::int64_t>(liveCount_) + 1) * reserved;
  if (needed > config_.hbmSlots)
    return "HBM cannot guarantee another protected working set: " + std::to_string(liveCount_ + 1) +
           " requests x " + std::to_string(reserved) + " slots (newest " +
           std::to_string(config_.newestWindow) + " + ring " + std::to_string(config_.draftWindow) +
           " + hot floor " + std::to_string(config_.hotFloor) + ") = " + std::to_string(needed) +
           " slots per group, the pool has " + std::to_string(config_.hbmSlots);
  if (maxContext > 0 && host_.largestFreeRange() < maxContext)
    return "the host store has no free range of " + std::to_string(maxContext) + " rows (" +
           std::to_string(host_.freeRows()) + " of " + std::to_string(host_.capacity()) +
           " rows free, the longest range " + std::to_string(host_.largestFreeRange()) + ")";
  return "";
}

std::int32_t ResidencyController::nextIndex() const {
  // The lowest free index; the table grows by one entry when all are live.
  std::int32_t index = 0;
  while (static_cast<std::size_t>(index) < requests_.size() &&
         requests_[static_cast<std::size_t>(index)].live)
    ++index;
  return index;
}

std::int32_t ResidencyController::admit(std::int64_t historyLen, std::int64_t maxContext,
                                        std::vector<RowCopy> &copies) {
  if (inStep_)
    throw StateError("cannot admit a request during a step");
  for (std::size_t gi = 0; gi < groups_.size(); ++gi)
    if (groups_[gi].deviceOwned)
      throw StateError("cannot admit a request while layer group " + std::to_string(gi) +
                       " is device-owned (adopt the device state first)");
  if (historyLen < 0)
    throw Error("cannot admit a request with a history of " + std::to_string(historyLen) + " rows");
  if (maxContext < std::max<std::int64_t>(1, historyLen) ||
      maxContext > std::numeric_limits<std::int32_t>::max())
    throw Error("maximum context " + std::to_string(maxContext) +
                " must lie in [max(1, history length " + std::to_string(historyLen) + "), 2^31)");
  std::string refusal = admissionRefusal(maxContext);
  if (!refusal.empty())
    throw CapacityError("admission refused: " + refusal);

  const std::int32_t index = nextIndex();
  if (static_cast<std::size_t>(index) == requests_.size()) {
    Request fresh;
    fresh.hot.resize(groups_.size());
    fresh.ring.resize(groups_.size());
    fresh.fetch.resize(groups_.size());
    fresh.hand.assign(groups_.size(), 0);
    fresh.noVictimStep.assign(groups_.size(), 0);
    fresh.lru.resize(groups_.size());
    requests_.push_back(std::move(fresh));
  }
  Request &r = requests_[static_cast<std::size_t>(index)];
  // Room for all the admission adds (ring slots, copies of the newest rows,
  // releases of the optional rows over the smaller budget), before its
  // first change: the host range, whose allocation changes nothing if it
  // fails.
  const std::int64_t budget =
      config_.policy == ResidencyPolicy::Fixed
          ? 0
          : config_.hbmSlots - static_cast<std::int64_t>(liveCount_ + 1) * config_.reservedSlots();
  std::size_t releases = 0;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    releases += static_cast<std::size_t>(std::max<std::int64_t>(0, groups_[gi].excess - budget));
    reserveRoom(r.ring[gi], static_cast<std::size_t>(config_.draftWindow));
  }
  reserveVictimSearches();
  reserveChanges(copies,
                 groups_.size() * static_cast<std::size_t>(
                                      std::min<std::int64_t>(historyLen, config_.newestWindow)),
                 releases);
  r.start = host_.allocate(maxContext);
  r.len = historyLen;
  r.maxContext = maxContext;
  r.live = true;
  ++liveCount_;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    Group &g = groups_[gi];
    r.hand[gi] = 0;
    r.noVictimStep[gi] = 0;
    r.lru[gi].invalidate();
    g.lru.invalidate();
    // Release optional rows (least valuable first) until they fit the
    // smaller budget: the new reservation is then backed by free slots.
    while (g.excess > budget) {
      std::int32_t victim = findVictim(g, static_cast<std::int32_t>(gi), -1, true);
      if (victim < 0)
        throw Error("internal error: no optional row to release although " +
                    std::to_string(g.excess) + " are in use");
      evict(g, victim);
    }
    g.lru.invalidate();
    for (std::int32_t i = 0; i < config_.draftWindow; ++i)
      place(g, static_cast<std::int32_t>(gi), g.free.allocate(), index, -1, SlotKind::Ring,
            nullptr);
    for (std::int64_t row = std::max<std::int64_t>(0, historyLen - config_.newestWindow);
         row < historyLen; ++row)
      place(g, static_cast<std::int32_t>(gi), g.free.allocate(), index,
            static_cast<std::int32_t>(row), SlotKind::Newest, &copies);
  }
  return index;
}

void ResidencyController::append(std::int32_t request, std::vector<RowCopy> &copies) {
  append(&request, 1, copies);
}

void ResidencyController::append(const std::int32_t *requests, std::size_t count,
                                 std::vector<RowCopy> &copies) {
  if (inStep_)
    throw StateError("cannot append to a request during a step");
  reserveAppends(requests, count, copies);
  for (std::size_t i = 0; i < count; ++i)
    appendReserved(requests[i], copies);
}

void ResidencyController::reserveAppends(const std::int32_t *requests, std::size_t count,
                                         std::vector<RowCopy> &copies) {
  // Each request once, with its tokens (the list in order of requests; one
  // request needs no copy of it).
  std::vector<std::int32_t> sortedCopy;
  const std::int32_t *sorted = requests;
  if (count > 1 && !std::is_sorted(requests, requests + count)) {
    sortedCopy.assign(requests, requests + count);
    std::sort(sortedCopy.begin(), sortedCopy.end());
    sorted = sortedCopy.data();
  }
  for (std::size_t i = 0, end = 0; i < count; i = end) {
    for (end = i; end < count && sorted[end] == sorted[i];)
      ++end;
    const std::size_t tokens = end - i;
    Request &r = liveRequest(sorted[i], "append");
    if (r.len >= r.maxContext)
      throw CapacityError("request " + std::to_string(sorted[i]) +
                          " reached its maximum context of " + std::to_string(r.maxContext) +
                          " rows");
    if (r.len + static_cast<std::int64_t>(tokens) > r.maxContext)
      throw CapacityError("request " + std::to_string(sorted[i]) + " has room for " +
                          std::to_string(r.maxContext - r.len) +
                          " more rows of its maximum context of " + std::to_string(r.maxContext) +
                          ", not " + std::to_string(tokens));
    // Each token's row leaving the newest window becomes a hot row (after
    // the promotions of a step in progress, which its end adds first).
    for (std::size_t gi = 0; gi < groups_.size(); ++gi)
      if (!groups_[gi].deviceOwned)
        reserveHotRows(r, gi, tokens + promotionsDue(r, gi));
  }
  bool anyDeviceOwned = false; // (recorded for dhs.age_rows)
  for (Group &g : groups_)
    if (g.deviceOwned) {
      reserveRoom(g.appendPopped, count);
      anyDeviceOwned = true;
    }
  if (anyDeviceOwned) {
    reserveRoom(appendLog_, count);
    reserveRoom(appendLogRingAt_, count);
  }
  reserveVictimSearches();
  // Per token and group a copy, and a release when an aged row has no room
  // (changesPerAppend).
  reserveChanges(copies, count * groups_.size(), count * groups_.size());
}

std::size_t ResidencyController::changesPerAppend() const { return 2 * groups_.size(); }

void ResidencyController::appendReserved(std::int32_t request, std::vector<RowCopy> &copies) {
  Request &r = requests_[static_cast<std::size_t>(request)];
  const std::int64_t newRow = r.len;
  const std::int64_t window = config_.newestWindow;
  const std::int64_t budget = optionalBudget();
  bool recorded = false;
  std::int64_t released = 0; // by the device-owned groups
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    Group &g = groups_[gi];
    if (window == 0)
      break;
    if (g.deviceOwned) {
      // One entry for every device-owned group (the same for each), in
      // dhs.age_rows's format.
      if (!recorded) {
        DeviceAppend entry;
        entry.aged = newRow >= window ? r.start + newRow - window : -1;
        entry.fresh = r.start + newRow;
        entry.ownerBegin = r.start;
        entry.ownerEnd = r.start + r.maxContext;
        appendLog_.push_back(entry);
        const std::uint64_t k =
            static_cast<std::uint64_t>(newRow - ringBase_[static_cast<std::size_t>(request)]);
        appendLogRingAt_.push_back(
            static_cast<std::size_t>(k % static_cast<std::uint64_t>(window)) * ringBase_.size() +
            static_cast<std::size_t>(request));
        recorded = true;
      }
      released += appendOnDevice(g, newRow >= window, budget, appendLog_.size() - 1);
      continue;
    }
    if (newRow >= window) {
      // The token leaving the window keeps its slot as a hot row, unless no
      // budget is left and nothing older can make room.
      const std::int64_t old = newRow - window;
      const std::int32_t s = g.slotOfHostRow[static_cast<std::size_t>(r.start + old)];
      makeHot(g, s, /*mayBeOld=*/true);
      const std::int64_t hot = static_cast<std::int64_t>(r.hot[gi].size());
      bool over = config_.policy == ResidencyPolicy::Adaptive
                      ? hot > config_.hotFloor && g.excess > optionalBudget()
                      : hot > config_.hotFloor;
      if (over) {
        std::int32_t victim =
            findVictim(g, static_cast<std::int32_t>(gi),
                       config_.policy == ResidencyPolicy::Adaptive ? -1 : request, false);
        evict(g, victim >= 0 ? victim : s);
      }
    }
    place(g, static_cast<std::int32_t>(gi), g.free.allocate(), request,
          static_cast<std::int32_t>(newRow), SlotKind::Newest, &copies);
  }
  evictions_ += released;
  pendingEvictions_ += released;
  ++r.len;
}

void ResidencyController::finish(std::int32_t request) {
  if (inStep_)
    throw StateError("cannot finish a request during a step");
  Request &r = liveRequest(request, "finish");
  for (std::size_t gi = 0; gi < groups_.size(); ++gi)
    if (groups_[gi].deviceOwned)
      throw StateError("cannot finish a request while layer group " + std::to_string(gi) +
                       " is device-owned (adopt the device state first)");
  // Room for a release of each resident row, before the first change.
  if (releaseLog_) {
    std::size_t resident = 0;
    for (std::size_t gi = 0; gi < groups_.size(); ++gi)
      resident += r.hot[gi].size() +
                  static_cast<std::size_t>(std::min<std::int64_t>(r.len, config_.newestWindow));
    reserveRoom(*releaseLog_, resident);
  }
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    Group &g = groups_[gi];
    g.excess -=
        std::max<std::int64_t>(0, static_cast<std::int64_t>(r.hot[gi].size()) - config_.hotFloor);
    auto release = [&](std::int64_t hostRow) {
      g.slotOfHostRow[static_cast<std::size_t>(hostRow)] = -1;
      if (releaseLog_)
        releaseLog_->push_back({static_cast<std::int32_t>(gi), -1, hostRow});
    };
    // Hot slots in ascending order: the rule a controller rebuilt from the
    // device state (adoptDeviceState, hot lists in slot order) can follow.
    std::sort(r.hot[gi].begin(), r.hot[gi].end());
    for (std::int32_t s : r.hot[gi]) {
      release(r.start + g.slots[static_cast<std::size_t>(s)].row);
      g.freeSlot(s);
    }
    g.hot -= static_cast<std::int32_t>(r.hot[gi].size());
    r.hot[gi].clear();
    for (std::int64_t row = std::max<std::int64_t>(0, r.len - config_.newestWindow); row < r.len;
         ++row) {
      g.freeSlot(g.slotOfHostRow[static_cast<std::size_t>(r.start + row)]);
      release(r.start + row);
      --g.newest;
    }
    for (std::int32_t s : r.ring[gi]) {
      g.ringSlotBits[static_cast<std::size_t>(s) >> 6] &= ~(1ull << (s & 63));
      g.freeSlot(s);
    }
    g.ring -= static_cast<std::int32_t>(r.ring[gi].size());
    r.ring[gi].clear();
    r.fetch[gi].clear();
    g.lru.invalidate();
    g.noVictimStep = 0;
  }
  host_.release(r.start);
  r.live = false;
  r.len = r.start = r.maxContext = 0;
  --liveCount_;
}

//===----------------------------------------------------------------------===//
// State
//===----------------------------------------------------------------------===//

std::int32_t ResidencyController::slotOf(std::int32_t gi, std::int32_t request,
                                         std::int64_t row) const {
  const Request &r = liveRequest(request, "slot lookup");
  if (gi < 0 || gi >= config_.groups || row < 0 || row >= r.len)
    return -1;
  return hostGroup(gi, "slot lookup").slotOfHostRow[static_cast<std::size_t>(r.start + row)];
}

const std::vector<std::int32_t> &ResidencyController::residencyTable(std::int32_t gi) const {
  if (gi < 0 || gi >= static_cast<std::int32_t>(groups_.size()))
    throw InputError("layer group " + std::to_string(gi) + " does not exist");
  return hostGroup(gi, "residency table").slotOfHostRow;
}

std::pair<std::uint32_t, std::uint32_t> ResidencyController::slotRecency(std::int32_t gi,
                                                                         std::int32_t slot) const {
  const Group &g = hostGroup(gi, "slot recency");
  const SlotUses &uses = g.uses.at(static_cast<std::size_t>(slot));
  return {uses.lastUse, uses.prevUse};
}

bool ResidencyController::slotReferenced(std::int32_t gi, std::int32_t slot) const {
  const Group &g = hostGroup(gi, "slot reference");
  static_cast<void>(g.slots.at(static_cast<std::size_t>(slot)));
  return referenced(g, slot);
}

std::int32_t ResidencyController::clockHand(std::int32_t gi) const {
  return hostGroup(gi, "clock hand").hand;
}

const std::vector<std::int32_t> &ResidencyController::freeSlots(std::int32_t gi) const {
  return groups_.at(static_cast<std::size_t>(gi)).free.freeStack();
}

SlotKind ResidencyController::slotKind(std::int32_t gi, std::int32_t slot) const {
  return static_cast<SlotKind>(
      hostGroup(gi, "slot kind").slots.at(static_cast<std::size_t>(slot)).kind);
}

std::int32_t ResidencyController::slotOwner(std::int32_t gi, std::int32_t slot) const {
  return hostGroup(gi, "slot owner").slots.at(static_cast<std::size_t>(slot)).owner;
}

std::int32_t ResidencyController::slotRow(std::int32_t gi, std::int32_t slot) const {
  return hostGroup(gi, "slot row").slots.at(static_cast<std::size_t>(slot)).row;
}

const std::vector<std::int32_t> &ResidencyController::ringSlots(std::int32_t gi,
                                                                std::int32_t request) const {
  return liveRequest(request, "ring slots").ring.at(static_cast<std::size_t>(gi));
}

std::int32_t ResidencyController::hotCount(std::int32_t gi, std::int32_t request) const {
  const Request &r = liveRequest(request, "hot count");
  static_cast<void>(hostGroup(gi, "hot count"));
  return static_cast<std::int32_t>(r.hot.at(static_cast<std::size_t>(gi)).size());
}

GroupOccupancy ResidencyController::occupancy(std::int32_t gi) const {
  const Group &g = groups_.at(static_cast<std::size_t>(gi));
  GroupOccupancy o;
  o.slots = config_.hbmSlots;
  o.used = g.free.usedCount();
  o.newest = g.newest;
  o.ring = g.ring;
  o.hot = g.hot;
  o.optionalBudget = optionalBudget();
  o.optionalUsed = g.excess;
  return o;
}

} // namespace dhs::runtime
