//===- ResidencyDevice.cpp - The controller while the device decides ------===//
//
// A group is device-owned when its step decisions (dhs.plan_promotions) and
// the appends between steps (dhs.age_rows) are made over the device state:
// the host then keeps counts (applyDeviceCounts, append), the free stack,
// one record of the appends for all such groups (in dhs.age_rows's format)
// and each request's newest slots (applyDeviceAppends); its per-slot tables
// stay as at the handover, and it rebuilds them from the device state and
// the newest slots when it needs them (adoptDeviceState).
// notes/device-residency-design.md, §2.
//
//===----------------------------------------------------------------------===//

#include "runtime/residency/Residency.h"
#include "runtime/residency/ResidencyState.h"

#include "runtime/core/Error.h"
#include "runtime/core/Parallel.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

namespace dhs::runtime {

namespace {

/// Calls `body(group)` for each of `groups` (distinct), the groups on
/// parallel threads (parallelFor): for calls that touch only their group's
/// tables.
template <typename Body> void forEachGroup(const std::vector<std::int32_t> &groups, Body body) {
  parallelFor(static_cast<std::int64_t>(groups.size()), 1, 0,
              [&](std::int64_t begin, std::int64_t end) {
                for (std::int64_t i = begin; i < end; ++i)
                  body(groups[static_cast<std::size_t>(i)]);
              });
}

} // namespace

ResidencyController::Group &ResidencyController::hostGroup(std::int32_t gi, const char *what) {
  return const_cast<Group &>(static_cast<const ResidencyController *>(this)->hostGroup(gi, what));
}

const ResidencyController::Group &ResidencyController::hostGroup(std::int32_t gi,
                                                                 const char *what) const {
  if (gi < 0 || gi >= static_cast<std::int32_t>(groups_.size()))
    throw OutOfRangeError(std::string(what) + ": layer group " + std::to_string(gi) +
                          " does not exist (" + std::to_string(groups_.size()) + " groups)");
  const Group &g = groups_[static_cast<std::size_t>(gi)];
  if (g.deviceOwned)
    throw StateError(std::string(what) + ": layer group " + std::to_string(gi) +
                     " is device-owned, its host tables are stale (adopt the device state first)");
  return g;
}

DeviceGroupState ResidencyController::exportDeviceState(std::int32_t gi) const {
  DeviceGroupState state;
  exportDeviceState(gi, state);
  return state;
}

void ResidencyController::exportDeviceState(std::int32_t gi, DeviceGroupState &state) const {
  const Group &g = hostGroup(gi, "export device state");
  const std::size_t slots = static_cast<std::size_t>(config_.hbmSlots);
  // Every entry is written once (the vectors keep their capacity).
  state.hotRows.resize(slots);
  state.cleared.resize(slots);
  state.recency.resize(2 * slots);
  std::int64_t *hotRows = state.hotRows.data();
  std::int32_t *cleared = state.cleared.data(), *recency = state.recency.data();
  const SlotRecord *records = g.slots.data();
  const SlotUses *uses = g.uses.data();
  for (std::size_t s = 0; s < slots; ++s) {
    const std::uint32_t last = uses[s].lastUse;
    recency[2 * s] = static_cast<std::int32_t>(last);
    recency[2 * s + 1] = static_cast<std::int32_t>(uses[s].prevUse);
    // Referenced: -1 (no use equals it), else the use the hand cleared.
    cleared[s] = last != records[s].cleared ? -1 : static_cast<std::int32_t>(last);
  }
  for (std::size_t s = 0; s < slots; ++s)
    hotRows[s] = records[s].kind == static_cast<std::uint8_t>(SlotKind::Hot)
                     ? requests_[static_cast<std::size_t>(records[s].owner)].start + records[s].row
                     : -1;
  const std::vector<std::int32_t> &free = g.free.freeStack();
  state.freeStack.assign(free.begin(), free.end());
  state.freeCount = static_cast<std::int32_t>(state.freeStack.size());
  state.freeStack.resize(slots, -1);
  state.hand = g.hand;
  state.excess = g.excess;
  state.noVictimStep = g.noVictimStep;
  state.step = step_;
}

void ResidencyController::exportDeviceStates(const std::vector<std::int32_t> &groups,
                                             std::vector<DeviceGroupState> &states) const {
  for (std::int32_t gi : groups)
    hostGroup(gi, "export device state");
  if (states.size() < groups_.size())
    states.resize(groups_.size());
  forEachGroup(groups, [&](std::int32_t gi) {
    exportDeviceState(gi, states[static_cast<std::size_t>(gi)]);
  });
}

void ResidencyController::markDeviceOwned(std::int32_t gi) {
  markDeviceOwned(std::vector<std::int32_t>{gi});
}

void ResidencyController::checkDeviceOwnable(std::int32_t gi) const {
  if (config_.policy != ResidencyPolicy::Adaptive || config_.replacement != Replacement::Clock ||
      config_.hotFloor != 0)
    throw Error("device residency decisions need the adaptive policy, CLOCK replacement and hot "
                "floor 0");
  hostGroup(gi, "device ownership");
  if (inStep_ && resolved_[static_cast<std::size_t>(gi)])
    throw StateError("layer group " + std::to_string(gi) +
                     " was already resolved on the host in this step");
}

void ResidencyController::makeHandOverRoom(std::int32_t gi) {
  // (A group the host owns reads neither table.)
  Group &g = groups_[static_cast<std::size_t>(gi)];
  g.deviceFrom.resize(requests_.size());
  g.newestRing.resize(static_cast<std::size_t>(config_.newestWindow) * requests_.size());
  ringBase_.reserve(requests_.size());
}

void ResidencyController::handOver(std::int32_t gi) {
  // (Its room made: nothing here allocates.)
  Group &g = groups_[static_cast<std::size_t>(gi)];
  // The per-slot tables stay as they are: adoptDeviceState compares them
  // with the device's state. What the appends' slots need: where each
  // request's rows placed by the device begin and room for their slots (no
  // request is admitted or finished until adoption).
  trimAppendLog();
  g.appendsFrom = appendLog_.size();
  g.appendPopped.clear();
  g.deviceFrom.resize(requests_.size());
  for (std::size_t ri = 0; ri < requests_.size(); ++ri)
    g.deviceFrom[ri] = requests_[ri].live ? requests_[ri].len : 0;
  if (std::none_of(groups_.begin(), groups_.end(), [](const Group &h) { return h.deviceOwned; }))
    ringBase_ = g.deviceFrom;
  g.newestRing.resize(static_cast<std::size_t>(config_.newestWindow) * ringBase_.size());
  g.candidatesValid = false;
  g.deviceOwned = true;
}

void ResidencyController::markDeviceOwned(const std::vector<std::int32_t> &groups) {
  for (std::int32_t gi : groups)
    checkDeviceOwnable(gi);
  // The room every handover needs before the first: all of them or none.
  for (std::int32_t gi : groups)
    makeHandOverRoom(gi);
  for (std::int32_t gi : groups)
    handOver(gi);
}

bool ResidencyController::deviceOwned(std::int32_t gi) const {
  return groups_.at(static_cast<std::size_t>(gi)).deviceOwned;
}

void ResidencyController::applyDeviceCounts(std::int32_t gi, const DeviceStepCounts &counts) {
  if (!inStep_)
    throw StateError("device counts outside a step (call beginStep first)");
  if (gi < 0 || gi >= config_.groups)
    throw OutOfRangeError("layer group " + std::to_string(gi) + " does not exist (" +
                          std::to_string(config_.groups) + " groups)");
  Group &g = groups_[static_cast<std::size_t>(gi)];
  if (!g.deviceOwned)
    throw StateError("layer group " + std::to_string(gi) +
                     " is not device-owned: its step is resolved or booked on the host");
  if (resolved_[static_cast<std::size_t>(gi)])
    throw StateError("layer group " + std::to_string(gi) + " was already booked in this step");
  const std::int64_t taken = counts.promoted - counts.released;
  if (counts.entries < 0 || counts.hits < 0 || counts.listed < 0 || counts.promoted < 0 ||
      counts.released < 0 || taken < 0 || counts.promoted > counts.listed ||
      taken > g.free.freeCount() || counts.hits + counts.listed > counts.entries)
    throw InputError("device counts of layer group " + std::to_string(gi) +
                     " do not fit: " + std::to_string(counts.entries) + " entries, " +
                     std::to_string(counts.hits) + " hits, " + std::to_string(counts.listed) +
                     " fetched, " + std::to_string(counts.promoted) + " promoted, " +
                     std::to_string(counts.released) + " released, " +
                     std::to_string(g.free.freeCount()) + " free slots");
  last_.entries += counts.entries;
  last_.selected += counts.hits + counts.listed;
  last_.resident += counts.hits;
  last_.fetched += counts.listed;
  last_.promoted += counts.promoted;
  last_.notPromoted += counts.listed - counts.promoted;
  last_.evicted += counts.released;
  evictions_ += counts.released;
  // Every promoted row is hot and optional (floor 0); every release frees a
  // hot row's slot for one of them; the rest came off the free stack's top.
  g.hot += static_cast<std::int32_t>(taken);
  g.excess += taken;
  for (std::int64_t i = 0; i < taken; ++i)
    g.free.allocate();
  resolved_[static_cast<std::size_t>(gi)] = 1;
}

DeviceAppendList ResidencyController::deviceAppends(std::int32_t gi) const {
  const Group &g = groups_.at(static_cast<std::size_t>(gi));
  if (!g.deviceOwned)
    return {};
  return {appendLog_.data() + g.appendsFrom, appendLog_.size() - g.appendsFrom};
}

void ResidencyController::trimAppendLog() {
  for (const Group &g : groups_)
    if (g.deviceOwned && g.appendsFrom < appendLog_.size())
      return;
  appendLog_.clear();
  appendLogRingAt_.clear();
  for (Group &g : groups_)
    g.appendsFrom = 0;
}

void ResidencyController::takeAgedSlots(std::int32_t gi, const std::vector<std::int32_t> &slots) {
  Group &g = groups_[static_cast<std::size_t>(gi)];
  auto where = [&] { return "dhs.age_rows of layer group " + std::to_string(gi); };
  const std::size_t pending = g.deviceOwned ? appendLog_.size() - g.appendsFrom : 0;
  if (slots.size() != pending)
    throw InputError(where() + " placed " + std::to_string(slots.size()) + " rows for " +
                     std::to_string(pending) + " appends");
  // A slot the host took off the free stack is the one the device takes;
  // over the budget the device's victim (or the aged row's slot) is in use
  // and no ring slot. (Over the budget the free stack holds only the
  // unused newest slots of requests shorter than W, most often none: the
  // free flags are read only when it holds some, the ring bits only when
  // there are ring slots.)
  const std::uint64_t *ringBits = g.ringSlotBits.data();
  const bool someFree = g.free.freeCount() > 0, someRing = g.ring > 0;
  std::size_t next = 0; // appendPopped's next entry
  for (std::size_t i = 0; i < pending; ++i) {
    const std::int32_t slot = slots[i];
    std::int32_t popped = -1;
    if (next < g.appendPopped.size() && g.appendPopped[next].entry == g.appendsFrom + i)
      popped = g.appendPopped[next++].slot;
    bool bad = slot < -1 || slot >= config_.hbmSlots;
    if (!bad && slot >= 0)
      bad = popped >= 0 ? slot != popped
                        : (someFree && g.free.isFree(slot)) ||
                              (someRing && (ringBits[slot >> 6] >> (slot & 63)) & 1);
    if (bad)
      throw InputError(where() + " placed append " + std::to_string(i) + "'s row in slot " +
                       std::to_string(slot) +
                       (popped >= 0 ? ", the free stack handed out " + std::to_string(popped)
                                    : std::string(", which is free or a ring slot")));
  }
  // Each new row's slot into its request's ring (a row that left HBM again
  // in the list, -1, is overwritten by the later append that aged it).
  const std::size_t *ringAt = appendLogRingAt_.data() + g.appendsFrom;
  std::int32_t *ring = g.newestRing.data();
  for (std::size_t i = 0; i < pending; ++i)
    ring[ringAt[i]] = slots[i];
  g.appendsFrom = appendLog_.size();
  g.appendPopped.clear();
}

void ResidencyController::applyDeviceAppends(std::int32_t gi,
                                             const std::vector<std::int32_t> &slots) {
  if (gi < 0 || gi >= config_.groups)
    throw OutOfRangeError("layer group " + std::to_string(gi) + " does not exist (" +
                          std::to_string(config_.groups) + " groups)");
  takeAgedSlots(gi, slots);
  trimAppendLog();
}

void ResidencyController::applyDeviceAppends(const std::vector<std::int32_t> &groups,
                                             const std::vector<std::vector<std::int32_t>> &slots) {
  for (std::int32_t gi : groups)
    if (gi < 0 || gi >= config_.groups || static_cast<std::size_t>(gi) >= slots.size())
      throw OutOfRangeError("layer group " + std::to_string(gi) + " does not exist (" +
                            std::to_string(config_.groups) + " groups, slots for " +
                            std::to_string(slots.size()) + ")");
  // One group after another: a group's work is a few microseconds (threads
  // would cost more to start). The shared record is trimmed once all are
  // done, also after an error.
  try {
    for (std::int32_t gi : groups)
      takeAgedSlots(gi, slots[static_cast<std::size_t>(gi)]);
  } catch (...) {
    trimAppendLog();
    throw;
  }
  trimAppendLog();
}

void ResidencyController::adoptDeviceState(std::int32_t gi, const DeviceGroupState &state) {
  if (gi < 0 || gi >= config_.groups)
    throw OutOfRangeError("layer group " + std::to_string(gi) + " does not exist (" +
                          std::to_string(config_.groups) + " groups)");
  Group &g = groups_[static_cast<std::size_t>(gi)];
  const std::string where = "the device state of layer group " + std::to_string(gi);
  if (!g.deviceOwned)
    throw StateError("layer group " + std::to_string(gi) + " is not device-owned");
  if (g.appendsFrom != appendLog_.size())
    throw StateError(where + ": " + std::to_string(appendLog_.size() - g.appendsFrom) +
                     " appends were not applied (applyDeviceAppends)");
  const std::int32_t slots = config_.hbmSlots;
  const std::size_t n = static_cast<std::size_t>(slots);
  if (state.hotRows.size() != n || state.cleared.size() != n || state.freeStack.size() != n ||
      state.recency.size() != 2 * n || state.freeCount < 0 || state.freeCount > slots ||
      state.hand < 0 || state.hand >= std::max(slots, 1) || state.step != step_)
    throw InputError(where + " does not fit the pool of " + std::to_string(slots) +
                     " slots at step " + std::to_string(step_));

  // The live requests by host range, for the owners of hot rows.
  std::vector<std::int32_t> byStart;
  for (std::size_t ri = 0; ri < requests_.size(); ++ri)
    if (requests_[ri].live)
      byStart.push_back(static_cast<std::int32_t>(ri));
  std::sort(byStart.begin(), byStart.end(), [&](std::int32_t a, std::int32_t b) {
    return requests_[static_cast<std::size_t>(a)].start <
           requests_[static_cast<std::size_t>(b)].start;
  });
  // Each request's first host row and the end of its hot rows (before its
  // newest window; the first row for a request that is not live), side by
  // side: the loops below look them up for most slots.
  struct Span {
    std::int64_t start, hotEnd;
  };
  std::vector<Span> spans(requests_.size());
  for (std::size_t ri = 0; ri < requests_.size(); ++ri) {
    const Request &r = requests_[ri];
    spans[ri] = {r.start,
                 r.live ? std::max(r.start, r.start + r.len - config_.newestWindow) : r.start};
  }
  // holds: whether request r's hot rows hold `hostRow`; ownerOf: the live
  // request whose hot rows hold it, or -1.
  auto holds = [&](std::int32_t r, std::int64_t hostRow) {
    const Span &span = spans[static_cast<std::size_t>(r)];
    return hostRow >= span.start && hostRow < span.hotEnd;
  };
  auto ownerOf = [&](std::int64_t hostRow) -> std::int32_t {
    auto it = std::upper_bound(byStart.begin(), byStart.end(), hostRow,
                               [&](std::int64_t row, std::int32_t r) {
                                 return row < spans[static_cast<std::size_t>(r)].start;
                               });
    if (it == byStart.begin())
      return -1;
    const std::int32_t r = *(it - 1);
    return holds(r, hostRow) ? r : -1;
  };
  auto isRing = [&](std::size_t s) {
    return g.slots[s].kind == static_cast<std::uint8_t>(SlotKind::Ring);
  };

  // What each slot holds now, all of it validated before anything changes
  // (`held`): a hot row (the device's: its owner, >= 0), a newest row kept
  // from before the handover (kNewestKept) or placed by the device since
  // (kPlaced - k: entry k of `placed`, its request and row), free (listed
  // by the device: kListed), or, kUnknown, a ring slot (as at the handover).
  constexpr std::int32_t kUnknown = -1, kListed = -2, kNewestKept = -3, kPlaced = -4;
  std::vector<std::int32_t> held(n, kUnknown);
  std::vector<std::pair<std::int32_t, std::int32_t>> placed;
  for (std::int32_t i = 0; i < state.freeCount; ++i) {
    const std::int32_t s = state.freeStack[static_cast<std::size_t>(i)];
    if (s < 0 || s >= slots || held[static_cast<std::size_t>(s)] != kUnknown ||
        state.hotRows[static_cast<std::size_t>(s)] >= 0)
      throw InputError(where + " lists slot " + std::to_string(s) +
                       " as free: outside the pool, twice, or hot");
    if (isRing(static_cast<std::size_t>(s)))
      throw InputError(where + " lists slot " + std::to_string(s) +
                       " as free, but it is a ring slot");
    held[static_cast<std::size_t>(s)] = kListed;
  }
  // The newest rows placed by the device (from the request's handover on):
  // where the applied appends put them (newestRing).
  std::int64_t newest = 0;
  const std::int64_t window = config_.newestWindow;
  const std::size_t stride = ringBase_.size();
  for (std::size_t ri = 0; ri < requests_.size(); ++ri) {
    const Request &r = requests_[ri];
    if (!r.live)
      continue;
    const std::int64_t base = ringBase_[ri];
    for (std::int64_t row = std::max(r.len - window, g.deviceFrom[ri]); row < r.len; ++row) {
      const std::int32_t s =
          g.newestRing[static_cast<std::size_t>((row - base) % window) * stride + ri];
      if (s < 0 || s >= slots || held[static_cast<std::size_t>(s)] != kUnknown ||
          isRing(static_cast<std::size_t>(s)))
        throw InputError(where + ": request " + std::to_string(ri) + "'s newest row " +
                         std::to_string(row) + " is in slot " + std::to_string(s) +
                         ": outside the pool, listed as free, another newest row's or a ring "
                         "slot");
      held[static_cast<std::size_t>(s)] = kPlaced - static_cast<std::int32_t>(placed.size());
      placed.emplace_back(static_cast<std::int32_t>(ri), static_cast<std::int32_t>(row));
      ++newest;
    }
  }
  // The other newest rows (placed before the handover, still in their
  // window) are where the host had them; each hot slot's owner. Most hot
  // rows stay with the request that held the slot at the handover (as a
  // hot or a newest row): where that request's hot rows hold the row, it is
  // the owner (live requests' host ranges are disjoint: the one ownerOf
  // would find), and the search is skipped.
  std::int64_t hot = 0;
  for (std::size_t s = 0; s < n; ++s) {
    const SlotRecord &was = g.slots[s];
    const std::int64_t row = state.hotRows[s];
    if (was.kind == static_cast<std::uint8_t>(SlotKind::Newest) &&
        spans[static_cast<std::size_t>(was.owner)].start + was.row >=
            spans[static_cast<std::size_t>(was.owner)].hotEnd) {
      if (held[s] != kUnknown || row >= 0)
        throw InputError(where + ": slot " + std::to_string(s) + " holds request " +
                         std::to_string(was.owner) + "'s newest row " + std::to_string(was.row) +
                         ", but the device " +
                         (row >= 0 ? "holds host row " + std::to_string(row) + " there"
                                   : std::string("lists it as free or placed another row there")));
      held[s] = kNewestKept;
      ++newest;
      continue;
    }
    const bool ring = was.kind == static_cast<std::uint8_t>(SlotKind::Ring);
    if (row < 0) {
      if (held[s] == kUnknown && !ring)
        throw InputError(where + ": slot " + std::to_string(s) +
                         " is neither hot, free, a newest nor a ring slot");
      continue;
    }
    ++hot;
    std::int32_t owner = -1;
    const bool hostKnown = held[s] <= kPlaced || ring;
    if (!hostKnown && row < config_.hostRows) {
      const bool held = was.kind == static_cast<std::uint8_t>(SlotKind::Hot) ||
                        was.kind == static_cast<std::uint8_t>(SlotKind::Newest);
      owner = held && holds(was.owner, row) ? was.owner : ownerOf(row);
    }
    if (owner < 0)
      throw InputError(where + ": slot " + std::to_string(s) + " holds host row " +
                       std::to_string(row) +
                       (hostKnown ? ", but it is a newest or ring slot"
                                  : ", outside every live request's hot rows"));
    held[s] = owner;
  }
  if (hot != g.hot || newest != g.newest || state.excess != g.excess ||
      state.freeCount != g.free.freeCount())
    throw InputError(where + " counts " + std::to_string(hot) + " hot rows, " +
                     std::to_string(newest) + " newest, " + std::to_string(state.excess) +
                     " optional, " + std::to_string(state.freeCount) +
                     " free slots; the host counts " + std::to_string(g.hot) + ", " +
                     std::to_string(g.newest) + ", " + std::to_string(g.excess) + ", " +
                     std::to_string(g.free.freeCount()));

  // What the rebuild adds, before its first change, so that it allocates
  // nothing (it happens whole): the free slots' allocator as the device
  // has it, and room in each owner's hot list for its hot rows.
  SlotAllocator freeSlots(g.free);
  freeSlots.assign(std::vector<std::int32_t>(state.freeStack.begin(),
                                             state.freeStack.begin() + state.freeCount));
  {
    std::vector<std::int32_t> hotRowsOf(requests_.size(), 0);
    for (std::size_t s = 0; s < n; ++s)
      if (held[s] >= 0 && g.slots[s].kind != static_cast<std::uint8_t>(SlotKind::Ring))
        ++hotRowsOf[static_cast<std::size_t>(held[s])];
    for (std::size_t i = 0; i < requests_.size(); ++i)
      if (requests_[i].live)
        requests_[i].hot[static_cast<std::size_t>(gi)].reserve(
            static_cast<std::size_t>(hotRowsOf[i]));
  }

  // The rebuild: every slot's recency and reference from the device; each
  // slot whose row changed since the handover unmaps its old row (unless a
  // slot before it took that row: mapped there now) and maps its new one;
  // hot lists in slot order.
  for (Request &r : requests_)
    if (r.live)
      r.hot[static_cast<std::size_t>(gi)].clear();
  {
    const std::int32_t *recency = state.recency.data(), *cleared = state.cleared.data();
    SlotRecord *records = g.slots.data();
    SlotUses *uses = g.uses.data();
    for (std::size_t s = 0; s < n; ++s) {
      uses[s] = {static_cast<std::uint32_t>(recency[2 * s]),
                 static_cast<std::uint32_t>(recency[2 * s + 1])};
      records[s].cleared =
          cleared[s] == -1 ? kNeverCleared : static_cast<std::uint32_t>(cleared[s]);
    }
  }
  for (std::size_t s = 0; s < n; ++s) {
    SlotRecord &record = g.slots[s];
    const std::int32_t is = held[s];
    if (is == kNewestKept || record.kind == static_cast<std::uint8_t>(SlotKind::Ring))
      continue;
    std::int32_t owner = -1, row = -1;
    if (is <= kPlaced) {
      std::tie(owner, row) = placed[static_cast<std::size_t>(kPlaced - is)];
    } else if (is >= 0) {
      owner = is;
      row = static_cast<std::int32_t>(state.hotRows[s] -
                                      spans[static_cast<std::size_t>(owner)].start);
    }
    // Most slots hold the row they held at the handover (a free slot's
    // owner and row are -1): their mapping stays.
    if (owner != record.owner || row != record.row) {
      if (record.owner >= 0) {
        const std::int64_t wasRow =
            spans[static_cast<std::size_t>(record.owner)].start + record.row;
        std::int32_t &mapped = g.slotOfHostRow[static_cast<std::size_t>(wasRow)];
        if (mapped == static_cast<std::int32_t>(s))
          mapped = -1;
      }
      if (owner >= 0)
        g.slotOfHostRow[static_cast<std::size_t>(spans[static_cast<std::size_t>(owner)].start +
                                                 row)] = static_cast<std::int32_t>(s);
      record.owner = owner;
      record.row = row;
    }
    record.listPos = -1;
    if (is <= kPlaced) {
      record.kind = static_cast<std::uint8_t>(SlotKind::Newest);
    } else if (is >= 0) {
      std::vector<std::int32_t> &list =
          requests_[static_cast<std::size_t>(owner)].hot[static_cast<std::size_t>(gi)];
      record.kind = static_cast<std::uint8_t>(SlotKind::Hot);
      record.listPos = static_cast<std::int32_t>(list.size());
      list.push_back(static_cast<std::int32_t>(s));
    } else {
      record.kind = static_cast<std::uint8_t>(SlotKind::Free);
    }
  }
  g.free = std::move(freeSlots);
  g.hand = state.hand;
  g.noVictimStep = state.noVictimStep;
  g.lru.invalidate();
  g.candidatesValid = false;
  g.deviceOwned = false;
}

void ResidencyController::adoptDeviceStates(const std::vector<std::int32_t> &groups,
                                            const std::vector<DeviceGroupState> &states) {
  for (std::int32_t gi : groups)
    if (gi < 0 || gi >= config_.groups || static_cast<std::size_t>(gi) >= states.size())
      throw OutOfRangeError("layer group " + std::to_string(gi) + " does not exist (" +
                            std::to_string(config_.groups) + " groups, " +
                            std::to_string(states.size()) + " states)");
  // Each group's adoption writes its own tables and its own entry of every
  // request's hot lists, and reads what no other one writes.
  forEachGroup(
      groups, [&](std::int32_t gi) { adoptDeviceState(gi, states[static_cast<std::size_t>(gi)]); });
}

} // namespace dhs::runtime
