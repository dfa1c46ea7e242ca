//===- ResidencyDevice.cpp - The controller while the device decides ------===//
//
// A group is device-owned when its step decisions (dhs.plan_promotions) and
// the appends between steps (dhs.age_rows) are made over the device state:
// the host then keeps counts (applyDeviceCounts, append) and the newest and
// ring slots, and rebuilds its per-slot tables from the device state when it
// needs them (adoptDeviceState). notes/device-residency-design.md, §2.
//
//===----------------------------------------------------------------------===//

#include "runtime/residency/Residency.h"
#include "runtime/residency/ResidencyState.h"

#include "runtime/core/Error.h"
#include "runtime/core/Parallel.h"

#include <algorithm>
#include <string>

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
  checkDeviceOwnable(gi);
  handOver(groups_[static_cast<std::size_t>(gi)]);
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

void ResidencyController::handOver(Group &g) {
  // (The hot rows of now are stale too: adoptDeviceState finds them by
  // the slots it still knows as hot.)
  g.staleRows.clear();
  g.appends.clear();
  g.appendRequest.clear();
  g.appendSlot.clear();
  g.candidatesValid = false;
  g.deviceOwned = true;
}

void ResidencyController::markDeviceOwned(const std::vector<std::int32_t> &groups) {
  for (std::int32_t gi : groups)
    checkDeviceOwnable(gi);
  for (std::int32_t gi : groups)
    handOver(groups_[static_cast<std::size_t>(gi)]);
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

void ResidencyController::appendOnDevice(Group &g, Request &r, std::int64_t newRow) {
  DeviceAppend entry;
  entry.fresh = r.start + newRow;
  entry.ownerBegin = r.start;
  entry.ownerEnd = r.start + r.maxContext;
  bool over = false;
  if (newRow >= config_.newestWindow) {
    // The aged row becomes hot; over the budget, one hot row (a victim, or
    // the aged row itself) leaves: the counts are known, the slots are not.
    entry.aged = r.start + newRow - config_.newestWindow;
    --g.newest;
    ++g.hot;
    ++g.excess;
    over = g.excess > optionalBudget();
    if (over) {
      --g.excess;
      --g.hot;
      ++evictions_;
      ++pendingEvictions_;
    }
  }
  // Over the budget the new row takes the released slot (pushed, then
  // popped), otherwise the free stack's top.
  const std::int32_t slot = over ? -1 : g.free.allocate();
  ++g.newest;
  g.appends.push_back(entry);
  g.appendRequest.push_back(static_cast<std::int32_t>(&r - requests_.data()));
  g.appendSlot.push_back(slot);
}

const std::vector<DeviceAppend> &ResidencyController::deviceAppends(std::int32_t gi) const {
  return groups_.at(static_cast<std::size_t>(gi)).appends;
}

void ResidencyController::applyDeviceAppends(std::int32_t gi,
                                             const std::vector<std::int32_t> &slots) {
  if (gi < 0 || gi >= config_.groups)
    throw OutOfRangeError("layer group " + std::to_string(gi) + " does not exist (" +
                          std::to_string(config_.groups) + " groups)");
  Group &g = groups_[static_cast<std::size_t>(gi)];
  const std::string where = "dhs.age_rows of layer group " + std::to_string(gi);
  if (slots.size() != g.appends.size())
    throw InputError(where + " placed " + std::to_string(slots.size()) + " rows for " +
                     std::to_string(g.appends.size()) + " appends");
  // The entries' slots and rows lie anywhere in the group's tables (misses
  // as a rule, after a step): their lines requested first, together, so
  // that the loops below wait for them side by side rather than one by one.
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const std::int32_t slot = slots[i];
    const DeviceAppend &entry = g.appends[i];
    if (slot >= 0 && slot < config_.hbmSlots) {
      g.free.prefetch(slot);
      __builtin_prefetch(&g.slots[static_cast<std::size_t>(slot)], 1);
      __builtin_prefetch(&g.uses[static_cast<std::size_t>(slot)], 1);
    }
    for (const std::int64_t row : {entry.aged, entry.fresh})
      if (row >= 0 && static_cast<std::size_t>(row) < g.slotOfHostRow.size())
        __builtin_prefetch(&g.slotOfHostRow[static_cast<std::size_t>(row)], 1);
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const std::int32_t slot = slots[i], popped = g.appendSlot[i];
    if (slot < -1 || slot >= config_.hbmSlots || (popped >= 0 && slot >= 0 && slot != popped) ||
        (slot >= 0 && (g.free.isFree(slot) || g.slots[static_cast<std::size_t>(slot)].kind ==
                                                  static_cast<std::uint8_t>(SlotKind::Ring))))
      throw InputError(where + " placed append " + std::to_string(i) + "'s row in slot " +
                       std::to_string(slot) +
                       (popped >= 0 ? ", the free stack handed out " + std::to_string(popped)
                                    : std::string(", which is free or a ring slot")));
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const DeviceAppend &entry = g.appends[i];
    if (entry.aged >= 0) {
      // The aged row's slot is hot or free now: stale until adopted.
      const std::int32_t aged = g.slotOfHostRow[static_cast<std::size_t>(entry.aged)];
      if (aged >= 0) {
        SlotRecord &record = g.slots[static_cast<std::size_t>(aged)];
        if (record.kind == static_cast<std::uint8_t>(SlotKind::Newest)) {
          record.kind = static_cast<std::uint8_t>(SlotKind::Hot);
          record.listPos = -1;
        }
      }
      g.staleRows.push_back(entry.aged);
    }
    // A new row that left HBM in the same list (-1) gave its slot to a
    // later one, which names it.
    const std::int32_t slot = slots[i];
    if (slot < 0)
      continue;
    SlotRecord &record = g.slots[static_cast<std::size_t>(slot)];
    if (record.kind == static_cast<std::uint8_t>(SlotKind::Hot)) // (its hot row left on the device)
      g.staleRows.push_back(requests_[static_cast<std::size_t>(record.owner)].start + record.row);
    record.owner = g.appendRequest[i];
    record.row = static_cast<std::int32_t>(entry.fresh - entry.ownerBegin);
    record.kind = static_cast<std::uint8_t>(SlotKind::Newest);
    record.listPos = -1;
    record.cleared = kNeverCleared;
    g.uses[static_cast<std::size_t>(slot)] = {step_, 0};
    g.slotOfHostRow[static_cast<std::size_t>(entry.fresh)] = slot;
  }
  g.appends.clear();
  g.appendRequest.clear();
  g.appendSlot.clear();
  g.candidatesValid = false; // (kinds and last uses changed)
}

void ResidencyController::applyDeviceAppends(const std::vector<std::int32_t> &groups,
                                             const std::vector<std::vector<std::int32_t>> &slots) {
  for (std::int32_t gi : groups)
    if (gi < 0 || gi >= config_.groups || static_cast<std::size_t>(gi) >= slots.size())
      throw OutOfRangeError("layer group " + std::to_string(gi) + " does not exist (" +
                            std::to_string(config_.groups) + " groups, slots for " +
                            std::to_string(slots.size()) + ")");
  // Each group's call writes its own tables and record, and reads the
  // requests' ranges, which no call writes. (The tables lie in different
  // places for each group: their cache misses overlap across threads.)
  forEachGroup(groups, [&](std::int32_t gi) {
    applyDeviceAppends(gi, slots[static_cast<std::size_t>(gi)]);
  });
}

void ResidencyController::adoptDeviceState(std::int32_t gi, const DeviceGroupState &state) {
  if (gi < 0 || gi >= config_.groups)
    throw OutOfRangeError("layer group " + std::to_string(gi) + " does not exist (" +
                          std::to_string(config_.groups) + " groups)");
  Group &g = groups_[static_cast<std::size_t>(gi)];
  const std::string where = "the device state of layer group " + std::to_string(gi);
  if (!g.deviceOwned)
    throw StateError("layer group " + std::to_string(gi) + " is not device-owned");
  if (!g.appends.empty())
    throw StateError(where + ": " + std::to_string(g.appends.size()) +
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
  // The live request whose hot rows (before its newest window) hold
  // `hostRow`, or -1.
  auto holds = [&](std::int32_t r, std::int64_t hostRow) {
    const Request &req = requests_[static_cast<std::size_t>(r)];
    const std::int64_t row = hostRow - req.start;
    return req.live && row >= 0 && row < req.len - config_.newestWindow;
  };
  auto ownerOf = [&](std::int64_t hostRow) -> std::int32_t {
    auto it = std::upper_bound(byStart.begin(), byStart.end(), hostRow,
                               [&](std::int64_t row, std::int32_t r) {
                                 return row < requests_[static_cast<std::size_t>(r)].start;
                               });
    if (it == byStart.begin())
      return -1;
    const std::int32_t r = *(it - 1);
    return holds(r, hostRow) ? r : -1;
  };
  // Validate before changing anything.
  std::vector<std::uint8_t> listed(n, 0);
  for (std::int32_t i = 0; i < state.freeCount; ++i) {
    const std::int32_t s = state.freeStack[static_cast<std::size_t>(i)];
    if (s < 0 || s >= slots || listed[static_cast<std::size_t>(s)] ||
        state.hotRows[static_cast<std::size_t>(s)] >= 0)
      throw InputError(where + " lists slot " + std::to_string(s) +
                       " as free: outside the pool, twice, or hot");
    listed[static_cast<std::size_t>(s)] = 1;
  }
  // Each hot slot's owner, for the rebuild below. Most hot rows stay with
  // the request that held the slot when the device took the group over:
  // where that request's hot rows hold the row, it is the owner (live
  // requests' host ranges are disjoint: the one ownerOf would find), and
  // the search is skipped.
  std::vector<std::int32_t> owners(n, -1);
  std::int64_t hot = 0;
  for (std::size_t s = 0; s < n; ++s) {
    const std::int64_t row = state.hotRows[s];
    const SlotKind kind = static_cast<SlotKind>(g.slots[s].kind);
    const bool hostKnown = kind == SlotKind::Newest || kind == SlotKind::Ring;
    if (hostKnown && listed[s])
      throw InputError(where + " lists slot " + std::to_string(s) +
                       " as free, but it is a newest or ring slot");
    if (row < 0) {
      if (!hostKnown && !listed[s])
        throw InputError(where + ": slot " + std::to_string(s) + " is neither hot nor free");
      continue;
    }
    ++hot;
    std::int32_t owner = -1;
    if (!hostKnown && row < config_.hostRows) {
      const std::int32_t was = g.slots[s].owner;
      owner = kind == SlotKind::Hot && was >= 0 && holds(was, row) ? was : ownerOf(row);
    }
    if (owner < 0)
      throw InputError(where + ": slot " + std::to_string(s) + " holds host row " +
                       std::to_string(row) +
                       (hostKnown ? ", but it is a newest or ring slot"
                                  : ", outside every live request's hot rows"));
    owners[s] = owner;
  }
  if (hot != g.hot || state.excess != g.excess || state.freeCount != g.free.freeCount())
    throw InputError(where + " counts " + std::to_string(hot) + " hot rows, " +
                     std::to_string(state.excess) + " optional, " +
                     std::to_string(state.freeCount) + " free slots; the host counts " +
                     std::to_string(g.hot) + ", " + std::to_string(g.excess) + ", " +
                     std::to_string(g.free.freeCount()));

  // Forget the stale hot rows (those listed, and those of the slots the
  // host knows as hot that the device moved), then rebuild them from the
  // device.
  auto forget = [&](std::int64_t row) {
    std::int32_t &slot = g.slotOfHostRow[static_cast<std::size_t>(row)];
    if (slot < 0)
      return;
    const SlotRecord &record = g.slots[static_cast<std::size_t>(slot)];
    if (record.kind != static_cast<std::uint8_t>(SlotKind::Newest))
      slot = -1;
    else if (requests_[static_cast<std::size_t>(record.owner)].start + record.row != row)
      slot = -1; // its slot holds a newer row now
  };
  // The hot rows of now: their slots' kinds, owners and rows are as when
  // the device took over (or as aging made them), and each maps to its
  // slot (only new rows were mapped since). The loop below keeps the
  // mapping of a slot that keeps its row and forgets the others' rows; a
  // listed row that such a slot holds is left to it.
  auto hotRowOf = [&](std::size_t s) {
    const SlotRecord &record = g.slots[s];
    return requests_[static_cast<std::size_t>(record.owner)].start + record.row;
  };
  for (std::int64_t row : g.staleRows) {
    const std::int32_t slot = g.slotOfHostRow[static_cast<std::size_t>(row)];
    if (slot < 0 ||
        g.slots[static_cast<std::size_t>(slot)].kind != static_cast<std::uint8_t>(SlotKind::Hot) ||
        hotRowOf(static_cast<std::size_t>(slot)) != row)
      forget(row);
  }
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
    const SlotKind kind = static_cast<SlotKind>(record.kind);
    const std::int64_t row = state.hotRows[s];
    if (kind == SlotKind::Hot) {
      const std::int64_t was = hotRowOf(s);
      if (was == row) {
        // The same row, owner and mapping (most slots): a place in the
        // rebuilt hot list.
        std::vector<std::int32_t> &list =
            requests_[static_cast<std::size_t>(owners[s])].hot[static_cast<std::size_t>(gi)];
        record.owner = owners[s];
        record.listPos = static_cast<std::int32_t>(list.size());
        list.push_back(static_cast<std::int32_t>(s));
        continue;
      }
      // Its old row leaves the table as forget would, unless a slot before
      // this one took it from the device (mapped there now).
      std::int32_t &mapped = g.slotOfHostRow[static_cast<std::size_t>(was)];
      if (mapped == static_cast<std::int32_t>(s))
        mapped = -1;
    }
    if (kind != SlotKind::Newest && kind != SlotKind::Ring) {
      record.owner = -1;
      record.row = -1;
      record.listPos = -1;
      record.kind = static_cast<std::uint8_t>(SlotKind::Free);
    }
    if (row < 0)
      continue;
    const std::int32_t owner = owners[s];
    Request &r = requests_[static_cast<std::size_t>(owner)];
    std::vector<std::int32_t> &list = r.hot[static_cast<std::size_t>(gi)];
    record.owner = owner;
    record.row = static_cast<std::int32_t>(row - r.start);
    record.kind = static_cast<std::uint8_t>(SlotKind::Hot);
    record.listPos = static_cast<std::int32_t>(list.size());
    list.push_back(static_cast<std::int32_t>(s));
    g.slotOfHostRow[static_cast<std::size_t>(row)] = static_cast<std::int32_t>(s);
  }
  g.free.assign(std::vector<std::int32_t>(state.freeStack.begin(),
                                          state.freeStack.begin() + state.freeCount));
  g.hand = state.hand;
  g.noVictimStep = state.noVictimStep;
  g.lru.invalidate();
  g.candidatesValid = false;
  g.staleRows.clear();
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
