//===- ControllerState.h - What a residency controller shows -----*- C++ -*-===//
//
// Everything a residency controller shows through its accessors (slot
// tables, free stacks, hands and references, the order of the slots' uses,
// requests, host ranges, counts), entry by entry, so that a test can say
// that a controller is exactly as another one: e.g. one whose call failed
// for want of memory, against a twin that never made the call.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_TEST_UNIT_CONTROLLERSTATE_H
#define DHS_TEST_UNIT_CONTROLLERSTATE_H

#include "runtime/residency/Residency.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace dhs::test {

/// A controller's observable state (controllerState).
struct ControllerState {
  struct Entry {
    const char *what;
    std::int64_t group, item, value;
    bool operator==(const Entry &other) const {
      return std::string(what) == other.what && group == other.group && item == other.item &&
             value == other.value;
    }
  };
  std::vector<Entry> entries;

  void add(const char *what, std::int64_t group, std::int64_t item, std::int64_t value) {
    entries.push_back({what, group, item, value});
  }
};

/// The state of `c` (its requests: indices below maxRequests). Uses are kept as
/// their order (ranks among the group's uses), not as step numbers: a
/// controller that began and aborted a step counts one step more than its
/// twin, and decides the same.
inline ControllerState controllerState(const runtime::ResidencyController &c) {
  using runtime::SlotKind;
  ControllerState s;
  const runtime::ResidencyConfig &config = c.config();
  s.add("live requests", -1, -1, c.liveCount());
  s.add("in step", -1, -1, c.inStep());
  s.add("evictions", -1, -1, c.evictionCount());
  s.add("optional budget", -1, -1, c.optionalBudget());
  for (const runtime::ResidencyStepStats *stats : {&c.totals(), &c.lastStep()}) {
    const bool total = stats == &c.totals();
    s.add(total ? "total entries" : "last entries", -1, -1, stats->entries);
    s.add(total ? "total selected" : "last selected", -1, -1, stats->selected);
    s.add(total ? "total resident" : "last resident", -1, -1, stats->resident);
    s.add(total ? "total fetched" : "last fetched", -1, -1, stats->fetched);
    s.add(total ? "total promoted" : "last promoted", -1, -1, stats->promoted);
    s.add(total ? "total not promoted" : "last not promoted", -1, -1, stats->notPromoted);
    s.add(total ? "total evicted" : "last evicted", -1, -1, stats->evicted);
  }
  const runtime::HostRowAllocator &host = c.hostAllocator();
  s.add("free host rows", -1, -1, host.freeRows());
  for (const runtime::HostRange &range : host.freeRanges())
    s.add("free host range", -1, range.start, range.length);
  for (const runtime::HostRange &range : host.usedRanges())
    s.add("used host range", -1, range.start, range.length);
  for (std::int32_t r = 0; r < config.maxRequests; ++r) {
    s.add("request live", -1, r, c.live(r));
    if (!c.live(r))
      continue;
    s.add("history start", -1, r, c.historyStart(r));
    s.add("history length", -1, r, c.historyLen(r));
    s.add("maximum context", -1, r, c.maxContext(r));
    for (std::int32_t g = 0; g < config.groups; ++g) {
      s.add("hot rows", g, r, c.hotCount(g, r));
      for (std::int32_t slot : c.ringSlots(g, r))
        s.add("ring slot", g, r, slot);
    }
  }
  for (std::int32_t g = 0; g < config.groups; ++g) {
    const runtime::GroupOccupancy o = c.occupancy(g);
    s.add("used slots", g, -1, o.used);
    s.add("newest slots", g, -1, o.newest);
    s.add("ring slots", g, -1, o.ring);
    s.add("hot slots", g, -1, o.hot);
    s.add("optional rows", g, -1, o.optionalUsed);
    s.add("clock hand", g, -1, c.clockHand(g));
    for (std::int32_t slot : c.freeSlots(g))
      s.add("free stack", g, -1, slot);
    const std::vector<std::int32_t> &table = c.residencyTable(g);
    for (std::size_t row = 0; row < table.size(); ++row)
      if (table[row] >= 0)
        s.add("slot of host row", g, static_cast<std::int64_t>(row), table[row]);
    // The uses of the slots that hold something, as ranks.
    std::vector<std::uint32_t> uses{0};
    for (std::int32_t slot = 0; slot < config.hbmSlots; ++slot)
      if (c.slotKind(g, slot) != SlotKind::Free) {
        uses.push_back(c.slotRecency(g, slot).first);
        uses.push_back(c.slotRecency(g, slot).second);
      }
    std::sort(uses.begin(), uses.end());
    uses.erase(std::unique(uses.begin(), uses.end()), uses.end());
    const auto rank = [&](std::uint32_t use) {
      return std::lower_bound(uses.begin(), uses.end(), use) - uses.begin();
    };
    for (std::int32_t slot = 0; slot < config.hbmSlots; ++slot) {
      const SlotKind kind = c.slotKind(g, slot);
      s.add("slot kind", g, slot, static_cast<std::int64_t>(kind));
      if (kind == SlotKind::Free)
        continue;
      s.add("slot owner", g, slot, c.slotOwner(g, slot));
      s.add("slot row", g, slot, c.slotRow(g, slot));
      s.add("slot last use", g, slot, rank(c.slotRecency(g, slot).first));
      s.add("slot use before", g, slot, rank(c.slotRecency(g, slot).second));
      s.add("slot referenced", g, slot, c.slotReferenced(g, slot));
    }
  }
  return s;
}

/// "" when `a` and `b` are equal, else their first entry that differs.
inline std::string firstDifference(const ControllerState &a, const ControllerState &b) {
  const std::size_t n = std::min(a.entries.size(), b.entries.size());
  for (std::size_t i = 0; i < n; ++i)
    if (!(a.entries[i] == b.entries[i])) {
      const ControllerState::Entry &x = a.entries[i], &y = b.entries[i];
      return std::string(x.what) + " [group " + std::to_string(x.group) + ", " +
             std::to_string(x.item) + "] = " + std::to_string(x.value) + " vs " + y.what +
             " [group " + std::to_string(y.group) + ", " + std::to_string(y.item) +
             "] = " + std::to_string(y.value);
    }
  if (a.entries.size() != b.entries.size())
    return std::to_string(a.entries.size()) + " entries vs " + std::to_string(b.entries.size());
  return "";
}

/// "" when controllers `a` and `b` show the same state, else the first
/// difference.
inline std::string stateDifference(const runtime::ResidencyController &a,
                                   const runtime::ResidencyController &b) {
  return firstDifference(controllerState(a), controllerState(b));
}

} // namespace dhs::test

#endif // DHS_TEST_UNIT_CONTROLLERSTATE_H
