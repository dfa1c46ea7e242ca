//===- ResidencyCheck.cpp - The residency controller checks itself --------===//

#include "runtime/residency/Residency.h"
#include "runtime/residency/ResidencyState.h"

#include "runtime/core/Error.h"

#include <algorithm>
#include <limits>
#include <string>

namespace dhs::runtime {

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
    if (g.deviceOwned)
      continue; // its per-slot tables are stale until adoptDeviceState
    const std::string gname = "group " + std::to_string(gi);
    std::int32_t freeSlots = 0, newest = 0, ring = 0, hot = 0;
    for (std::int32_t s = 0; s < config_.hbmSlots; ++s) {
      const SlotRecord &record = g.slots[static_cast<std::size_t>(s)];
      const SlotKind kind = static_cast<SlotKind>(record.kind);
      const std::string sname = gname + " slot " + std::to_string(s);
      const bool ringBit = (g.ringSlotBits[static_cast<std::size_t>(s) >> 6] >> (s & 63)) & 1;
      if (ringBit != (kind == SlotKind::Ring))
        fail(sname + (ringBit ? " has a ring-slot bit but is no ring slot"
                              : " is a ring slot without its ring-slot bit"));
      if (kind == SlotKind::Free) {
        ++freeSlots;
        if (!g.free.isFree(s) || record.owner != -1)
          fail(sname + " is marked free but allocated or owned");
        continue;
      }
      if (g.free.isFree(s))
        fail(sname + " is in use but in the free list");
      const std::int32_t owner = record.owner;
      if (owner < 0 || static_cast<std::size_t>(owner) >= requests_.size() ||
          !requests_[static_cast<std::size_t>(owner)].live)
        fail(sname + " belongs to request " + std::to_string(owner) + ", not admitted");
      const Request &r = requests_[static_cast<std::size_t>(owner)];
      const std::int32_t row = record.row;
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
        const std::int32_t pos = record.listPos;
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
        if (s < 0 ||
            static_cast<SlotKind>(g.slots[static_cast<std::size_t>(s)].kind) != SlotKind::Newest)
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
        const SlotRecord &record = g.slots[static_cast<std::size_t>(s)];
        if (record.owner != static_cast<std::int32_t>(ri) || record.row != row)
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
