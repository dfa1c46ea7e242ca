//===- Residency.cpp - The residency controller of the KV hierarchy -------===//

#include "runtime/residency/Residency.h"

#include "runtime/core/Error.h"

#include <algorithm>
#include <limits>
#include <string>

namespace dhs::runtime {

const char *policyName(ResidencyPolicy policy) {
  return policy == ResidencyPolicy::Adaptive ? "adaptive" : "fixed";
}

const char *replacementName(Replacement replacement) {
  switch (replacement) {
  case Replacement::Clock:
    return "clock";
  case Replacement::Lru:
    return "lru";
  case Replacement::Lru2:
    return "lru2";
  }
  return "?";
}

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

//===----------------------------------------------------------------------===//
// State
//===----------------------------------------------------------------------===//

namespace {

/// Victims in LRU order, sorted lazily in chunks (a selection, then a sort of
/// the chunk), so that taking a few victims out of many candidates costs
/// O(candidates), not a full sort.
struct LruCursor {
  std::vector<std::int32_t> order;
  std::size_t next = 0;
  std::size_t sorted = 0;
  bool valid = false;
  bool forced = false;
  std::uint32_t stamp = 0;

  void invalidate() { valid = false; }

  /// Sorts the next chunk of at least `chunk` entries into place.
  template <typename Less> bool extend(std::size_t chunk, Less less) {
    if (sorted >= order.size())
      return false;
    std::size_t end = std::min(order.size(), sorted + std::max<std::size_t>(chunk, 64));
    if (end < order.size())
      std::nth_element(order.begin() + static_cast<std::ptrdiff_t>(sorted),
                       order.begin() + static_cast<std::ptrdiff_t>(end), order.end(), less);
    std::sort(order.begin() + static_cast<std::ptrdiff_t>(sorted),
              order.begin() + static_cast<std::ptrdiff_t>(end), less);
    sorted = end;
    return true;
  }
};

} // namespace

struct ResidencyController::Group {
  std::vector<std::int32_t> owner;   // [slots] request or -1
  std::vector<std::int32_t> row;     // [slots] history row or -1
  std::vector<std::int32_t> listPos; // [slots] position in the owner's hot list
  std::vector<std::uint8_t> kind;    // [slots] SlotKind
  // [slots] the last use when the CLOCK hand (or an eviction) last took
  // the slot's reference away; a slot is referenced while its last use
  // differs, so every use (a kernel's stamp) sets the reference.
  std::vector<std::uint32_t> cleared;
  std::vector<std::uint32_t> lastUse;      // [slots] step of the last selection
  std::vector<std::uint32_t> prevUse;      // [slots] step of the one before (0: none)
  std::vector<std::int32_t> slotOfHostRow; // [host rows] slot or -1
  std::vector<std::uint32_t> seen;         // [host rows] resolve serial of last count
  SlotAllocator free;
  std::int32_t hand = 0;   // CLOCK hand (Adaptive)
  std::int64_t excess = 0; // hot rows beyond their request's floor
  std::int32_t newest = 0, ring = 0, hot = 0;
  std::uint32_t noVictimStep = 0;    // a non-forced search failed in this step
  LruCursor lru;                     // global LRU order (Adaptive + Lru)
  std::vector<std::int32_t> touched; // requests with rows to fetch this step
};

namespace {
/// A placed slot's reference, before any hand passed: no last use equals it.
constexpr std::uint32_t kNeverCleared = ~0u;
} // namespace

bool ResidencyController::referenced(const Group &g, std::int32_t slot) {
  const std::size_t s = static_cast<std::size_t>(slot);
  return g.lastUse[s] != g.cleared[s];
}

void ResidencyController::clearReference(Group &g, std::int32_t slot) {
  const std::size_t s = static_cast<std::size_t>(slot);
  g.cleared[s] = g.lastUse[s];
}

struct ResidencyController::Request {
  bool live = false;
  std::int64_t start = 0, len = 0, maxContext = 0;
  std::vector<std::vector<std::int32_t>> hot;   // [group] hot slots
  std::vector<std::vector<std::int32_t>> ring;  // [group] ring slots
  std::vector<std::vector<std::int32_t>> fetch; // [group] rows fetched this step
  std::vector<std::int32_t> hand;               // [group] CLOCK hand (Fixed)
  std::vector<std::uint32_t> noVictimStep;      // [group]
  std::vector<LruCursor> lru;                   // [group] own LRU order (Fixed)
  std::uint32_t batchMark = 0;                  // resolve serial (duplicates)
};

ResidencyController::ResidencyController(const ResidencyConfig &config)
    : config_(config), host_((config.validate(), config.hostRows)) {
  const std::size_t slots = static_cast<std::size_t>(config_.hbmSlots);
  const std::size_t hostRows = static_cast<std::size_t>(config_.hostRows);
  groups_.resize(static_cast<std::size_t>(config_.groups));
  for (Group &g : groups_) {
    g.owner.assign(slots, -1);
    g.row.assign(slots, -1);
    g.listPos.assign(slots, -1);
    g.kind.assign(slots, static_cast<std::uint8_t>(SlotKind::Free));
    g.cleared.assign(slots, 0);
    g.lastUse.assign(slots, 0);
    g.prevUse.assign(slots, 0);
    g.slotOfHostRow.assign(hostRows, -1);
    g.seen.assign(hostRows, 0);
    g.free = SlotAllocator(config_.hbmSlots);
  }
  // The request table grows with admissions (see admit).
  resolved_.assign(groups_.size(), 0);
}

std::uint64_t ResidencyController::hostBytes(const ResidencyConfig &config) {
  // Per slot: owner, row, list position, cleared, last and previous use
  // (4 bytes each), its kind, and the free-slot allocator's stack and mark;
  // per host row: its slot and resolve serial; per request and group: the
  // lists' headers, hand, search stamp and LRU cursor (their contents are
  // slots, counted above, and a step's fetched rows).
  const std::uint64_t perSlot = 6 * 4 + 1 + 4 + 1;
  const std::uint64_t perHostRow = 4 + 4;
  const std::uint64_t perRequestGroup =
      3 * sizeof(std::vector<std::int32_t>) + 4 + 4 + sizeof(LruCursor);
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
  add({groups, static_cast<std::uint64_t>(std::max<std::int64_t>(config.hostRows, 0)), perHostRow});
  // The host allocator's free ranges (at most one per live request + 1).
  const std::uint64_t live = static_cast<std::uint64_t>(config.maxLiveRequests());
  add({live, sizeof(Request) + groups * perRequestGroup + 2 * sizeof(HostRange)});
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
// Slot bookkeeping
//===----------------------------------------------------------------------===//

void ResidencyController::place(Group &g, std::int32_t gi, std::int32_t slot, std::int32_t request,
                                std::int32_t row, SlotKind kind, std::vector<RowCopy> *copies) {
  Request &r = requests_[static_cast<std::size_t>(request)];
  const std::size_t s = static_cast<std::size_t>(slot);
  g.owner[s] = request;
  g.row[s] = row;
  g.kind[s] = static_cast<std::uint8_t>(kind);
  g.lastUse[s] = step_;
  g.prevUse[s] = 0;
  g.cleared[s] = kNeverCleared; // referenced
  g.listPos[s] = -1;
  if (kind == SlotKind::Ring) {
    r.ring[static_cast<std::size_t>(gi)].push_back(slot);
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
  g.kind[s] = static_cast<std::uint8_t>(SlotKind::Newest); // makeHot converts
  ++g.newest;
  makeHot(g, slot, /*mayBeOld=*/false);
}

void ResidencyController::makeHot(Group &g, std::int32_t slot, bool mayBeOld) {
  const std::size_t s = static_cast<std::size_t>(slot);
  const std::int32_t gi = static_cast<std::int32_t>(&g - groups_.data());
  Request &r = requests_[static_cast<std::size_t>(g.owner[s])];
  std::vector<std::int32_t> &list = r.hot[static_cast<std::size_t>(gi)];
  g.kind[s] = static_cast<std::uint8_t>(SlotKind::Hot);
  --g.newest;
  ++g.hot;
  g.listPos[s] = static_cast<std::int32_t>(list.size());
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
  const std::size_t s = static_cast<std::size_t>(slot);
  const std::int32_t gi = static_cast<std::int32_t>(&g - groups_.data());
  Request &r = requests_[static_cast<std::size_t>(g.owner[s])];
  std::vector<std::int32_t> &list = r.hot[static_cast<std::size_t>(gi)];
  if (static_cast<std::int64_t>(list.size()) > config_.hotFloor)
    --g.excess;
  // Swap-remove from the owner's hot list.
  const std::int32_t pos = g.listPos[s];
  const std::int32_t last = list.back();
  list[static_cast<std::size_t>(pos)] = last;
  g.listPos[static_cast<std::size_t>(last)] = pos;
  list.pop_back();
  --g.hot;
  g.slotOfHostRow[static_cast<std::size_t>(r.start + g.row[s])] = -1;
  if (releaseLog_)
    releaseLog_->push_back({gi, -1, r.start + g.row[s]});
  g.owner[s] = -1;
  g.row[s] = -1;
  g.listPos[s] = -1;
  g.kind[s] = static_cast<std::uint8_t>(SlotKind::Free);
  g.cleared[s] = g.lastUse[s];
  g.free.release(slot);
  ++evictions_;
  if (inStep_)
    ++last_.evicted;
  else
    ++pendingEvictions_;
}

bool ResidencyController::isVictimCandidate(const Group &g, std::int32_t slot, std::int32_t owner,
                                            bool force) const {
  const std::size_t s = static_cast<std::size_t>(slot);
  if (g.kind[s] != static_cast<std::uint8_t>(SlotKind::Hot))
    return false;
  if (!force && g.lastUse[s] >= step_)
    return false; // selected in the current (or, between steps, the last) step
  if (owner >= 0)
    return g.owner[s] == owner;
  const std::int32_t gi = static_cast<std::int32_t>(&g - groups_.data());
  const Request &r = requests_[static_cast<std::size_t>(g.owner[s])];
  return static_cast<std::int64_t>(r.hot[static_cast<std::size_t>(gi)].size()) > config_.hotFloor;
}

std::int32_t ResidencyController::clockVictim(Group &g, std::int32_t owner, bool force) {
  const std::int32_t gi = static_cast<std::int32_t>(&g - groups_.data());
  if (owner < 0) {
    const std::int32_t n = config_.hbmSlots;
    for (std::int64_t i = 0; i < 2ll * n; ++i) {
      std::int32_t s = g.hand;
      g.hand = g.hand + 1 == n ? 0 : g.hand + 1;
      if (!isVictimCandidate(g, s, owner, force))
        continue;
      if (referenced(g, s)) {
        clearReference(g, s); // second chance
        continue;
      }
      return s;
    }
    return -1;
  }
  // Fixed: the hand runs over the owner's own hot list.
  Request &r = requests_[static_cast<std::size_t>(owner)];
  std::vector<std::int32_t> &list = r.hot[static_cast<std::size_t>(gi)];
  std::int32_t &hand = r.hand[static_cast<std::size_t>(gi)];
  const std::int64_t n = static_cast<std::int64_t>(list.size());
  for (std::int64_t i = 0; i < 2 * n; ++i) {
    if (hand >= n)
      hand = 0;
    std::int32_t s = list[static_cast<std::size_t>(hand++)];
    if (!isVictimCandidate(g, s, owner, force))
      continue;
    if (referenced(g, s)) {
      clearReference(g, s);
      continue;
    }
    return s;
  }
  return -1;
}

std::int32_t ResidencyController::lruVictim(Group &g, std::int32_t gi, std::int32_t owner,
                                            bool force) {
  LruCursor &cursor =
      owner < 0 ? g.lru
                : requests_[static_cast<std::size_t>(owner)].lru[static_cast<std::size_t>(gi)];
  // The order holds every hot row that may be a victim at this stamp (a
  // forced search, for admission, also this step's rows); the full test,
  // floors included, is made when a row is taken.
  if (!cursor.valid || cursor.stamp != step_ || cursor.forced != force) {
    cursor.order.clear();
    auto mayBeVictim = [&](std::int32_t s) {
      const std::size_t i = static_cast<std::size_t>(s);
      return g.kind[i] == static_cast<std::uint8_t>(SlotKind::Hot) &&
             (force || g.lastUse[i] < step_);
    };
    if (owner < 0) {
      for (std::int32_t s = 0; s < config_.hbmSlots; ++s)
        if (mayBeVictim(s))
          cursor.order.push_back(s);
    } else {
      for (std::int32_t s :
           requests_[static_cast<std::size_t>(owner)].hot[static_cast<std::size_t>(gi)])
        if (mayBeVictim(s))
          cursor.order.push_back(s);
    }
    cursor.next = cursor.sorted = 0;
    cursor.valid = true;
    cursor.forced = force;
    cursor.stamp = step_;
  }
  // LRU: oldest last use first. LRU-2: oldest use before the last first
  // (rows selected in a single step have none and go first), then LRU.
  const bool second = config_.replacement == Replacement::Lru2;
  auto less = [&g, second](std::int32_t a, std::int32_t b) {
    const std::size_t ia = static_cast<std::size_t>(a), ib = static_cast<std::size_t>(b);
    if (second && g.prevUse[ia] != g.prevUse[ib])
      return g.prevUse[ia] < g.prevUse[ib];
    std::uint32_t ua = g.lastUse[ia];
    std::uint32_t ub = g.lastUse[ib];
    return ua != ub ? ua < ub : a < b;
  };
  for (;;) {
    if (cursor.next == cursor.sorted && !cursor.extend(cursor.sorted, less))
      return -1;
    std::int32_t s = cursor.order[cursor.next++];
    if (isVictimCandidate(g, s, owner, force))
      return s;
  }
}

std::int32_t ResidencyController::findVictim(Group &g, std::int32_t gi, std::int32_t owner,
                                             bool force) {
  std::uint32_t &failed =
      owner < 0
          ? g.noVictimStep
          : requests_[static_cast<std::size_t>(owner)].noVictimStep[static_cast<std::size_t>(gi)];
  if (!force && failed == step_ && step_ != 0)
    return -1;
  std::int32_t victim = config_.replacement == Replacement::Clock ? clockVictim(g, owner, force)
                                                                  : lruVictim(g, gi, owner, force);
  if (victim < 0 && !force)
    failed = step_;
  return victim;
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
           std::to_string(config_.newestWindow) + " + draft ring " +
           std::to_string(config_.draftWindow) + " + hot floor " +
           std::to_string(config_.hotFloor) + ") = " + std::to_string(needed) +
           " slots per group, the pool has " + std::to_string(config_.hbmSlots);
  if (maxContext > 0 && host_.largestFreeRange() < maxContext)
    return "the host store has no free range of " + std::to_string(maxContext) + " rows (" +
           std::to_string(host_.freeRows()) + " of " + std::to_string(host_.capacity()) +
           " rows free, the longest range " + std::to_string(host_.largestFreeRange()) + ")";
  return "";
}

std::int32_t ResidencyController::admit(std::int64_t historyLen, std::int64_t maxContext,
                                        std::vector<RowCopy> &copies) {
  if (inStep_)
    throw StateError("cannot admit a request during a step");
  if (historyLen < 0)
    throw Error("cannot admit a request with a history of " + std::to_string(historyLen) + " rows");
  if (maxContext < std::max<std::int64_t>(1, historyLen) ||
      maxContext > std::numeric_limits<std::int32_t>::max())
    throw Error("maximum context " + std::to_string(maxContext) +
                " must lie in [max(1, history length " + std::to_string(historyLen) + "), 2^31)");
  std::string refusal = admissionRefusal(maxContext);
  if (!refusal.empty())
    throw CapacityError("admission refused: " + refusal);

  // The lowest free index; the table grows by one entry when all are live.
  std::int32_t index = 0;
  while (static_cast<std::size_t>(index) < requests_.size() &&
         requests_[static_cast<std::size_t>(index)].live)
    ++index;
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
  r.start = host_.allocate(maxContext);
  r.len = historyLen;
  r.maxContext = maxContext;
  r.live = true;
  ++liveCount_;
  const std::int64_t budget = optionalBudget();
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
  if (inStep_)
    throw StateError("cannot append to a request during a step");
  Request &r = liveRequest(request, "append");
  if (r.len >= r.maxContext)
    throw CapacityError("request " + std::to_string(request) + " reached its maximum context of " +
                        std::to_string(r.maxContext) + " rows");
  const std::int64_t newRow = r.len;
  const std::int64_t window = config_.newestWindow;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    Group &g = groups_[gi];
    if (window == 0)
      break;
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
  ++r.len;
}

void ResidencyController::finish(std::int32_t request) {
  if (inStep_)
    throw StateError("cannot finish a request during a step");
  Request &r = liveRequest(request, "finish");
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    Group &g = groups_[gi];
    auto clear = [&g](std::int32_t s) {
      const std::size_t i = static_cast<std::size_t>(s);
      g.owner[i] = -1;
      g.row[i] = -1;
      g.listPos[i] = -1;
      g.kind[i] = static_cast<std::uint8_t>(SlotKind::Free);
      g.cleared[i] = g.lastUse[i];
      g.free.release(s);
    };
    g.excess -=
        std::max<std::int64_t>(0, static_cast<std::int64_t>(r.hot[gi].size()) - config_.hotFloor);
    auto release = [&](std::int64_t hostRow) {
      g.slotOfHostRow[static_cast<std::size_t>(hostRow)] = -1;
      if (releaseLog_)
        releaseLog_->push_back({static_cast<std::int32_t>(gi), -1, hostRow});
    };
    for (std::int32_t s : r.hot[gi]) {
      release(r.start + g.row[static_cast<std::size_t>(s)]);
      clear(s);
    }
    g.hot -= static_cast<std::int32_t>(r.hot[gi].size());
    r.hot[gi].clear();
    for (std::int64_t row = std::max<std::int64_t>(0, r.len - config_.newestWindow); row < r.len;
         ++row) {
      clear(g.slotOfHostRow[static_cast<std::size_t>(r.start + row)]);
      release(r.start + row);
      --g.newest;
    }
    for (std::int32_t s : r.ring[gi])
      clear(s);
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
// Steps
//===----------------------------------------------------------------------===//

void ResidencyController::beginStep() {
  if (inStep_)
    throw StateError("a step is already in progress");
  ++step_;
  inStep_ = true;
  std::fill(resolved_.begin(), resolved_.end(), 0);
  last_ = {};
  last_.evicted = pendingEvictions_; // since the previous step ended
  pendingEvictions_ = 0;
}

namespace {

/// "[lane 1, query 0, k 17]"
std::string where(std::int64_t b, std::int64_t q, std::int64_t k) {
  return "[lane " + std::to_string(b) + ", query " + std::to_string(q) + ", k " +
         std::to_string(k) + "]";
}

} // namespace

void ResidencyController::beginResolve(std::int32_t gi, std::int64_t batch, std::int64_t queries,
                                       std::int64_t topk) {
  if (!inStep_)
    throw StateError("resolve outside a step (call beginStep first)");
  if (gi < 0 || gi >= config_.groups)
    throw OutOfRangeError("layer group " + std::to_string(gi) + " does not exist (" +
                          std::to_string(config_.groups) + " groups)");
  if (resolved_[static_cast<std::size_t>(gi)])
    throw StateError("layer group " + std::to_string(gi) + " was already resolved in this step");
  if (batch < 0 || queries <= 0 || topk <= 0)
    throw InputError("selection shape [" + std::to_string(batch) + ", " + std::to_string(queries) +
                     ", " + std::to_string(topk) + "] is invalid");
}

void ResidencyController::touchSlot(Group &g, std::int32_t slot) {
  // (A new last use also sets the CLOCK reference: see Group::cleared.)
  const std::size_t si = static_cast<std::size_t>(slot);
  if (g.lastUse[si] != step_) {
    g.prevUse[si] = g.lastUse[si];
    g.lastUse[si] = step_;
  }
}

void ResidencyController::resolve(std::int32_t gi, const std::int32_t *requests, std::int64_t batch,
                                  const std::int32_t *rowIds, std::int64_t queries,
                                  std::int64_t topk, std::int32_t *slots) {
  beginResolve(gi, batch, queries, topk);
  if (batch > 0 && (!requests || !rowIds || !slots))
    throw InputError("resolve: null request, row id or slot array");
  const std::int64_t perLane = queries * topk;

  // Pass 1: validate everything before changing anything.
  const std::uint32_t mark = ++markSerial_;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int32_t request = requests[b];
    const std::int32_t *ids = rowIds + b * perLane;
    if (request == -1) {
      for (std::int64_t i = 0; i < perLane; ++i)
        if (ids[i] != -1)
          throw InputError("row id " + std::to_string(ids[i]) + " at " +
                           where(b, i / topk, i % topk) + " selects a row for an empty batch lane");
      continue;
    }
    Request &r = liveRequest(request, "resolve");
    if (r.batchMark == mark)
      throw InputError("request " + std::to_string(request) + " appears twice in the batch (lane " +
                       std::to_string(b) + ")");
    r.batchMark = mark;
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::int32_t id = ids[i];
      if (id < -1)
        throw InputError("row id " + std::to_string(id) + " at " + where(b, i / topk, i % topk) +
                         " is invalid (only -1 marks an unused selection)");
      if (id >= r.len)
        throw OutOfRangeError("row id " + std::to_string(id) + " at " +
                              where(b, i / topk, i % topk) + " is outside request " +
                              std::to_string(request) + "'s history (length " +
                              std::to_string(r.len) + ")");
    }
  }

  // Pass 2: the slot map, hits, and the distinct rows to fetch.
  Group &g = groups_[static_cast<std::size_t>(gi)];
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int32_t request = requests[b];
    const std::int32_t *ids = rowIds + b * perLane;
    std::int32_t *out = slots + b * perLane;
    if (request == -1) {
      std::fill(out, out + perLane, -1);
      continue;
    }
    Request &r = requests_[static_cast<std::size_t>(request)];
    // A fresh serial per lane: a row counts once per request and group.
    if (++seenSerial_ == 0) {
      for (Group &each : groups_)
        std::fill(each.seen.begin(), each.seen.end(), 0);
      seenSerial_ = 1;
    }
    const std::uint32_t seenSerial = seenSerial_;
    std::vector<std::int32_t> &fetch = r.fetch[static_cast<std::size_t>(gi)];
    const bool hadFetch = !fetch.empty();
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::int32_t id = ids[i];
      if (id == -1) {
        out[i] = -1;
        continue;
      }
      ++last_.entries;
      const std::size_t hostRow = static_cast<std::size_t>(r.start + id);
      const std::int32_t s = g.slotOfHostRow[hostRow];
      out[i] = s;
      if (s >= 0)
        touchSlot(g, s);
      if (g.seen[hostRow] == seenSerial)
        continue;
      g.seen[hostRow] = seenSerial;
      ++last_.selected;
      if (s >= 0) {
        ++last_.resident;
      } else {
        ++last_.fetched;
        fetch.push_back(id);
      }
    }
    if (!hadFetch && !fetch.empty())
      g.touched.push_back(request);
  }
  resolved_[static_cast<std::size_t>(gi)] = 1;
}

void ResidencyController::book(std::int32_t gi, const std::int32_t *requests, std::int64_t batch,
                               const std::int32_t *hitSlots, std::int64_t hits,
                               const std::int32_t *misses, std::int64_t missCount,
                               std::int64_t entries) {
  beginResolve(gi, batch, 1, 1);
  if (hits < 0 || missCount < 0 || entries < hits + missCount)
    throw InputError("step log of layer group " + std::to_string(gi) + ": " + std::to_string(hits) +
                     " hits and " + std::to_string(missCount) + " misses do not fit " +
                     std::to_string(entries) + " valid selections");
  if ((batch > 0 && !requests) || (hits > 0 && !hitSlots) || (missCount > 0 && !misses))
    throw InputError("book: null request, hit or miss array");
  Group &g = groups_[static_cast<std::size_t>(gi)];
  const std::string where = "the step log of layer group " + std::to_string(gi);

  // Pass 1: validate everything before changing anything.
  const std::uint32_t mark = ++markSerial_;
  for (std::int64_t b = 0; b < batch; ++b) {
    if (requests[b] == -1)
      continue;
    Request &r = liveRequest(requests[b], "book");
    if (r.batchMark == mark)
      throw InputError("request " + std::to_string(requests[b]) +
                       " appears twice in the batch (lane " + std::to_string(b) + ")");
    r.batchMark = mark;
  }
  if (++seenSerial_ == 0) {
    for (Group &each : groups_)
      std::fill(each.seen.begin(), each.seen.end(), 0);
    seenSerial_ = 1;
  }
  const std::uint32_t serial = seenSerial_;
  for (std::int64_t i = 0; i < hits; ++i) {
    const std::int32_t s = hitSlots[i];
    if (s < 0 || s >= config_.hbmSlots)
      throw InputError(where + " lists slot " + std::to_string(s) + " of " +
                       std::to_string(config_.hbmSlots));
    const std::size_t si = static_cast<std::size_t>(s);
    const SlotKind kind = static_cast<SlotKind>(g.kind[si]);
    if (kind != SlotKind::Newest && kind != SlotKind::Hot)
      throw InputError(where + " lists slot " + std::to_string(s) + ", which holds no history row");
    const Request &r = requests_[static_cast<std::size_t>(g.owner[si])];
    if (r.batchMark != mark)
      throw InputError(where + " lists slot " + std::to_string(s) + " of request " +
                       std::to_string(g.owner[si]) + ", which is not in the batch");
    std::uint32_t &seen = g.seen[static_cast<std::size_t>(r.start + g.row[si])];
    if (seen == serial || g.lastUse[si] == step_)
      throw InputError(where + " lists slot " + std::to_string(s) + " twice");
    seen = serial;
  }
  // The distinct misses (the seen marks are scratch, not state).
  std::vector<std::int64_t> &distinct = bookScratch_;
  distinct.clear();
  for (std::int64_t i = 0; i < missCount; ++i) {
    const std::int32_t lane = misses[2 * i], id = misses[2 * i + 1];
    if (lane < 0 || lane >= batch || requests[lane] == -1)
      throw InputError(where + " lists a miss of lane " + std::to_string(lane) +
                       ", which holds no request");
    const Request &r = requests_[static_cast<std::size_t>(requests[lane])];
    if (id < 0 || id >= r.len)
      throw OutOfRangeError("row id " + std::to_string(id) + " in " + where +
                            " is outside request " + std::to_string(requests[lane]) +
                            "'s history (length " + std::to_string(r.len) + ")");
    const std::size_t hostRow = static_cast<std::size_t>(r.start + id);
    if (g.slotOfHostRow[hostRow] >= 0)
      throw InputError(where + " lists row " + std::to_string(id) + " of request " +
                       std::to_string(requests[lane]) + " as missing, but it is resident");
    if (g.seen[hostRow] == serial)
      continue; // selected by several queries
    g.seen[hostRow] = serial;
    distinct.push_back(static_cast<std::int64_t>(requests[lane]) << 32 |
                       static_cast<std::uint32_t>(id));
  }

  // Pass 2: hits, the distinct rows to fetch, the counts. (The log's order
  // does not matter: promote takes each request's rows in ascending order,
  // and the requests in lane order, as resolve finds them.)
  for (std::int64_t i = 0; i < hits; ++i)
    touchSlot(g, hitSlots[i]);
  last_.entries += entries;
  last_.selected += hits;
  last_.resident += hits;
  for (std::int64_t key : distinct) {
    const std::int32_t request = static_cast<std::int32_t>(key >> 32);
    std::vector<std::int32_t> &fetch =
        requests_[static_cast<std::size_t>(request)].fetch[static_cast<std::size_t>(gi)];
    if (fetch.empty())
      g.touched.push_back(request);
    fetch.push_back(static_cast<std::int32_t>(key & 0xffffffff));
  }
  last_.selected += static_cast<std::int64_t>(distinct.size());
  last_.fetched += static_cast<std::int64_t>(distinct.size());
  std::vector<std::int32_t> laneOf(requests_.size(), 0);
  for (std::int64_t b = 0; b < batch; ++b)
    if (requests[b] != -1)
      laneOf[static_cast<std::size_t>(requests[b])] = static_cast<std::int32_t>(b);
  std::sort(g.touched.begin(), g.touched.end(), [&](std::int32_t x, std::int32_t y) {
    return laneOf[static_cast<std::size_t>(x)] < laneOf[static_cast<std::size_t>(y)];
  });
  resolved_[static_cast<std::size_t>(gi)] = 1;
}

void ResidencyController::promote(std::int32_t gi, std::vector<RowCopy> &copies) {
  Group &g = groups_[static_cast<std::size_t>(gi)];
  for (std::int32_t request : g.touched) {
    Request &r = requests_[static_cast<std::size_t>(request)];
    std::vector<std::int32_t> &rows = r.fetch[static_cast<std::size_t>(gi)];
    std::size_t limit = rows.size();
    if (config_.maxPromotionsPerStep >= 0)
      limit = std::min(limit, static_cast<std::size_t>(config_.maxPromotionsPerStep));
    // Ascending rows, one order whichever way the step was booked (resolve,
    // book), sorted lazily in growing chunks: a step that can promote few of
    // many fetched rows does not sort them all.
    std::size_t done = 0, sorted = 0;
    for (; done < limit; ++done) {
      if (done == sorted) {
        const std::size_t end = std::min(rows.size(), sorted + std::max<std::size_t>(64, sorted));
        const auto first = rows.begin() + static_cast<std::ptrdiff_t>(sorted);
        const auto last = rows.begin() + static_cast<std::ptrdiff_t>(end);
        if (end < rows.size())
          std::nth_element(first, last, rows.end());
        std::sort(first, last);
        sorted = end;
      }
      const std::int32_t slot = hotSlotFor(g, gi, request, false);
      if (slot < 0)
        break;
      place(g, gi, slot, request, rows[done], SlotKind::Hot, &copies);
    }
    last_.promoted += static_cast<std::int64_t>(done);
    last_.notPromoted += static_cast<std::int64_t>(rows.size() - done);
    rows.clear();
  }
  g.touched.clear();
}

void ResidencyController::endStep(std::vector<RowCopy> &copies) {
  if (!inStep_)
    throw StateError("endStep without a step in progress");
  for (std::int32_t gi = 0; gi < config_.groups; ++gi)
    if (resolved_[static_cast<std::size_t>(gi)])
      promote(gi, copies);
  inStep_ = false;
  totals_ += last_;
}

void ResidencyController::abortStep() {
  if (!inStep_)
    throw StateError("abortStep without a step in progress");
  for (Group &g : groups_) {
    for (std::int32_t request : g.touched)
      requests_[static_cast<std::size_t>(request)]
          .fetch[static_cast<std::size_t>(&g - groups_.data())]
          .clear();
    g.touched.clear();
  }
  inStep_ = false;
}

//===----------------------------------------------------------------------===//
// State
//===----------------------------------------------------------------------===//

std::int32_t ResidencyController::slotOf(std::int32_t gi, std::int32_t request,
                                         std::int64_t row) const {
  const Request &r = liveRequest(request, "slot lookup");
  if (gi < 0 || gi >= config_.groups || row < 0 || row >= r.len)
    return -1;
  return groups_[static_cast<std::size_t>(gi)]
      .slotOfHostRow[static_cast<std::size_t>(r.start + row)];
}

const std::vector<std::int32_t> &ResidencyController::residencyTable(std::int32_t gi) const {
  if (gi < 0 || gi >= static_cast<std::int32_t>(groups_.size()))
    throw InputError("layer group " + std::to_string(gi) + " does not exist");
  return groups_[static_cast<std::size_t>(gi)].slotOfHostRow;
}

std::pair<std::uint32_t, std::uint32_t> ResidencyController::slotRecency(std::int32_t gi,
                                                                         std::int32_t slot) const {
  const Group &g = groups_.at(static_cast<std::size_t>(gi));
  return {g.lastUse.at(static_cast<std::size_t>(slot)),
          g.prevUse.at(static_cast<std::size_t>(slot))};
}

SlotKind ResidencyController::slotKind(std::int32_t gi, std::int32_t slot) const {
  return static_cast<SlotKind>(
      groups_.at(static_cast<std::size_t>(gi)).kind.at(static_cast<std::size_t>(slot)));
}

std::int32_t ResidencyController::slotOwner(std::int32_t gi, std::int32_t slot) const {
  return groups_.at(static_cast<std::size_t>(gi)).owner.at(static_cast<std::size_t>(slot));
}

std::int32_t ResidencyController::slotRow(std::int32_t gi, std::int32_t slot) const {
  return groups_.at(static_cast<std::size_t>(gi)).row.at(static_cast<std::size_t>(slot));
}

std::int32_t ResidencyController::hotCount(std::int32_t gi, std::int32_t request) const {
  const Request &r = liveRequest(request, "hot count");
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

void ResidencyController::checkConsistency() const {
  auto fail = [](const std::string &what) {
    throw InvariantError("residency invariant violated: " + what);
  };
  const std::int64_t W = config_.newestWindow, F = config_.hotFloor;
  // Host ranges: exactly the live requests'.
  std::vector<HostRange> ranges;
  for (const Request &r : requests_)
    if (r.live)
      ranges.push_back({r.start, r.maxContext});
  std::sort(ranges.begin(), ranges.end(),
            [](const HostRange &a, const HostRange &b) { return a.start < b.start; });
  if (ranges != host_.usedRanges())
    fail("the host allocator's ranges differ from the live requests'");
  std::int32_t live = 0;
  for (const Request &r : requests_)
    live += r.live;
  if (live != liveCount_)
    fail("live request count " + std::to_string(liveCount_) + " but " + std::to_string(live) +
         " requests are live");

  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group &g = groups_[gi];
    const std::string gname = "group " + std::to_string(gi);
    std::int32_t freeSlots = 0, newest = 0, ring = 0, hot = 0;
    for (std::int32_t s = 0; s < config_.hbmSlots; ++s) {
      const std::size_t i = static_cast<std::size_t>(s);
      const SlotKind kind = static_cast<SlotKind>(g.kind[i]);
      const std::string sname = gname + " slot " + std::to_string(s);
      if (kind == SlotKind::Free) {
        ++freeSlots;
        if (!g.free.isFree(s) || g.owner[i] != -1)
          fail(sname + " is marked free but allocated or owned");
        continue;
      }
      if (g.free.isFree(s))
        fail(sname + " is in use but in the free list");
      const std::int32_t owner = g.owner[i];
      if (owner < 0 || static_cast<std::size_t>(owner) >= requests_.size() ||
          !requests_[static_cast<std::size_t>(owner)].live)
        fail(sname + " belongs to request " + std::to_string(owner) + ", not admitted");
      const Request &r = requests_[static_cast<std::size_t>(owner)];
      const std::int32_t row = g.row[i];
      if (kind == SlotKind::Ring) {
        ++ring;
        if (row != -1 || std::find(r.ring[gi].begin(), r.ring[gi].end(), s) == r.ring[gi].end())
          fail(sname + " is a ring slot missing from its request's ring");
        continue;
      }
      if (row < 0 || row >= r.len)
        fail(sname + " holds row " + std::to_string(row) + " outside request " +
             std::to_string(owner) + "'s history (length " + std::to_string(r.len) + ")");
      if (g.slotOfHostRow[static_cast<std::size_t>(r.start + row)] != s)
        fail(sname + " holds row " + std::to_string(row) + " of request " + std::to_string(owner) +
             " but the resolve table says slot " +
             std::to_string(g.slotOfHostRow[static_cast<std::size_t>(r.start + row)]));
      if (kind == SlotKind::Newest) {
        ++newest;
        if (row < r.len - W)
          fail(sname + " is a newest slot for row " + std::to_string(row) +
               ", outside the newest window of request " + std::to_string(owner));
      } else {
        ++hot;
        const std::int32_t pos = g.listPos[i];
        if (pos < 0 || pos >= static_cast<std::int32_t>(r.hot[gi].size()) ||
            r.hot[gi][static_cast<std::size_t>(pos)] != s)
          fail(sname + " is hot but not in its request's hot list");
        if (row >= r.len - W)
          fail(sname + " is hot for row " + std::to_string(row) +
               ", inside the newest window (it should be a newest slot)");
      }
    }
    if (freeSlots != g.free.freeCount())
      fail(gname + ": " + std::to_string(freeSlots) + " free slots but the allocator has " +
           std::to_string(g.free.freeCount()));
    if (newest != g.newest || ring != g.ring || hot != g.hot)
      fail(gname + ": slot kind counts disagree with the counters");
    std::int64_t excess = 0, resident = 0;
    for (std::size_t ri = 0; ri < requests_.size(); ++ri) {
      const Request &r = requests_[ri];
      if (!r.live)
        continue;
      const std::string rname = gname + " request " + std::to_string(ri);
      const std::int64_t h = static_cast<std::int64_t>(r.hot[gi].size());
      excess += std::max<std::int64_t>(0, h - F);
      if (config_.policy == ResidencyPolicy::Fixed && h > F)
        fail(rname + " holds " + std::to_string(h) + " hot rows, its fixed buffer is " +
             std::to_string(F));
      if (static_cast<std::int64_t>(r.ring[gi].size()) != config_.draftWindow)
        fail(rname + " has " + std::to_string(r.ring[gi].size()) + " ring slots, not " +
             std::to_string(config_.draftWindow));
      for (std::int64_t row = std::max<std::int64_t>(0, r.len - W); row < r.len; ++row) {
        std::int32_t s = g.slotOfHostRow[static_cast<std::size_t>(r.start + row)];
        if (s < 0 || static_cast<SlotKind>(g.kind[static_cast<std::size_t>(s)]) != SlotKind::Newest)
          fail(rname + ": newest row " + std::to_string(row) + " is not resident");
      }
      for (std::int64_t row = 0; row < r.maxContext; ++row) {
        std::int32_t s = g.slotOfHostRow[static_cast<std::size_t>(r.start + row)];
        if (s < 0)
          continue;
        ++resident;
        if (row >= r.len)
          fail(rname + ": row " + std::to_string(row) + " past the history has slot " +
               std::to_string(s));
        if (g.owner[static_cast<std::size_t>(s)] != static_cast<std::int32_t>(ri) ||
            g.row[static_cast<std::size_t>(s)] != row)
          fail(rname + ": the resolve table maps row " + std::to_string(row) + " to slot " +
               std::to_string(s) + ", which holds another row");
      }
    }
    if (resident != newest + hot)
      fail(gname + ": the resolve table has " + std::to_string(resident) + " entries for " +
           std::to_string(newest + hot) + " resident rows");
    if (excess != g.excess)
      fail(gname + ": optional rows counted " + std::to_string(g.excess) + ", actually " +
           std::to_string(excess));
    if (g.excess > std::max<std::int64_t>(0, optionalBudget()))
      fail(gname + ": " + std::to_string(g.excess) + " optional rows exceed the budget of " +
           std::to_string(optionalBudget()));
    // Free slots cover every request's unmet reservation.
    std::int64_t deficit = 0;
    for (const Request &r : requests_)
      if (r.live)
        deficit += (W - std::min(W, r.len)) +
                   std::max<std::int64_t>(0, F - static_cast<std::int64_t>(r.hot[gi].size()));
    if (g.free.freeCount() < deficit)
      fail(gname + ": " + std::to_string(g.free.freeCount()) +
           " free slots cannot cover the unmet reservations of " + std::to_string(deficit));
  }
}

} // namespace dhs::runtime
