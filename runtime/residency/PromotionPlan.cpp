//===- PromotionPlan.cpp - A step's promotion decisions as one plan -------===//

#include "runtime/residency/PromotionPlan.h"

#include "runtime/core/Error.h"
#include "runtime/residency/Residency.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace dhs::runtime {

using Control = dhs_abi::PromotionPlanLayout;

std::uint32_t planPromotions(PromotionPlanState &state, PromotionPlanList &list) {
  const std::int64_t lanes = state.lanes, listed = state.listed, total = lanes * listed;
  const std::int64_t slots = static_cast<std::int64_t>(state.hotRows.size());
  list.rows.assign(static_cast<std::size_t>(Control::entries(static_cast<std::size_t>(total))), -1);
  list.slots.assign(list.rows.size(), -1);
  std::uint32_t status = 0;
  auto &control = state.control;
  const std::int32_t hand = control[Control::kHand], top = control[Control::kFreeCount];
  const bool bad = hand < 0 || hand >= std::max<std::int64_t>(slots, 1) || top < 0 ||
                   top > static_cast<std::int64_t>(state.freeStack.size()) ||
                   static_cast<std::int64_t>(state.cleared.size()) < slots ||
                   static_cast<std::int64_t>(state.recency.size()) < 2 * slots;
  control[Control::kPromoted] = control[Control::kReleased] = control[Control::kListed] = 0;
  // A failed step plans nothing.
  if (state.status != 0)
    return 0;

  // A lane's rows: as listed up to the first -1.
  auto countOf = [&](std::int64_t b) {
    std::int64_t count = 0;
    while (count < listed && state.fetched[static_cast<std::size_t>(b * listed + count)] >= 0)
      ++count;
    return count;
  };
  std::int64_t uncapped = 0;
  for (std::int64_t b = 0; b < lanes; ++b)
    uncapped += countOf(b);
  control[Control::kListed] = static_cast<std::int32_t>(uncapped);
  if (bad)
    return abi::kStatusBadSlot;

  // Ranks: lanes in order, rows as listed (up to the cap).
  std::int64_t planned = 0;
  for (std::int64_t b = 0; b < lanes; ++b) {
    std::int64_t count = countOf(b);
    if (state.perLane >= 0)
      count = std::min(count, state.perLane);
    for (std::int64_t j = 0; j < count; ++j)
      list.rows[static_cast<std::size_t>(planned + j)] =
          state.historyStart[static_cast<std::size_t>(b)] +
          state.fetched[static_cast<std::size_t>(b * listed + j)];
    planned += count;
  }
  const std::int64_t fromFree = std::min<std::int64_t>(
      std::min<std::int64_t>(std::max(control[Control::kFreeBudget], 0), top), planned);
  const std::int64_t wanted = planned - fromFree;
  // The memo: a non-forced search already failed in this step.
  const bool memo =
      state.step != 0 && static_cast<std::uint32_t>(control[Control::kNoVictimStep]) == state.step;
  const std::int64_t searched = memo ? 0 : wanted;
  for (std::int64_t i = 0; i < fromFree; ++i)
    list.slots[static_cast<std::size_t>(i)] =
        state.freeStack[static_cast<std::size_t>(top - 1 - i)];

  // Victims: candidates in hand order, unreferenced first, then referenced.
  auto slotAt = [&](std::int64_t offset) {
    return static_cast<std::size_t>((hand + offset) % slots);
  };
  auto lastUse = [&](std::size_t s) { return static_cast<std::uint32_t>(state.recency[2 * s]); };
  auto candidate = [&](std::size_t s) { return state.hotRows[s] >= 0 && lastUse(s) < state.step; };
  auto referenced = [&](std::size_t s) {
    return static_cast<std::int32_t>(lastUse(s)) != state.cleared[s];
  };
  std::int64_t victims = 0, last = -1;
  for (int lap = 0; lap < 2 && searched > 0; ++lap) {
    for (std::int64_t offset = 0; offset < slots && victims < searched; ++offset) {
      const std::size_t s = slotAt(offset);
      if (!candidate(s) || referenced(s) != (lap == 1))
        continue;
      list.slots[static_cast<std::size_t>(fromFree + victims)] = static_cast<std::int32_t>(s);
      list.rows[static_cast<std::size_t>(total + victims)] = state.hotRows[s];
      last = lap * slots + offset;
      ++victims;
    }
  }
  const std::int64_t decided = fromFree + victims;
  for (std::int64_t i = decided; i < total; ++i) {
    list.rows[static_cast<std::size_t>(i)] = -1;
    list.slots[static_cast<std::size_t>(i)] = -1;
  }
  // The references the hand took away: those of the referenced candidates
  // before the last victim (all of them once it is in the second lap).
  if (searched > 0) {
    for (std::int64_t offset = 0; offset < slots; ++offset) {
      const std::size_t s = slotAt(offset);
      if (candidate(s) && referenced(s) && offset < last)
        state.cleared[s] = static_cast<std::int32_t>(lastUse(s));
    }
  }
  for (std::int64_t i = 0; i < decided; ++i) {
    const std::int32_t slot = list.slots[static_cast<std::size_t>(i)];
    if (slot < 0 || slot >= slots) {
      status |= abi::kStatusBadSlot;
      list.rows[static_cast<std::size_t>(i)] = -1;
      list.slots[static_cast<std::size_t>(i)] = -1;
      continue;
    }
    state.hotRows[static_cast<std::size_t>(slot)] = list.rows[static_cast<std::size_t>(i)];
    state.cleared[static_cast<std::size_t>(slot)] = -1;
  }
  if (victims > 0)
    control[Control::kHand] = static_cast<std::int32_t>((hand + last % slots + 1) % slots);
  control[Control::kFreeCount] = static_cast<std::int32_t>(top - fromFree);
  control[Control::kPromoted] = static_cast<std::int32_t>(decided);
  control[Control::kReleased] = static_cast<std::int32_t>(victims);
  // (Floor 0: a promotion into a free slot adds an optional row, a victim
  // replaced gives one back.)
  control[Control::kExcess] += static_cast<std::int32_t>(fromFree);
  if (victims < wanted)
    control[Control::kNoVictimStep] = static_cast<std::int32_t>(state.step);
  return status;
}

PromotionPlanState packPromotionPlan(const ResidencyController &controller, std::int32_t group,
                                     const std::vector<std::int32_t> &requests,
                                     const std::vector<std::vector<std::int32_t>> &fetched,
                                     std::int64_t listed) {
  if (requests.size() != fetched.size())
    throw InputError("packPromotionPlan: " + std::to_string(requests.size()) + " lanes but " +
                     std::to_string(fetched.size()) + " fetched lists");
  PromotionPlanState state;
  state.lanes = static_cast<std::int64_t>(requests.size());
  state.listed = listed;
  state.perLane = controller.config().maxPromotionsPerStep;
  state.fetched.assign(static_cast<std::size_t>(state.lanes * listed), -1);
  state.historyStart.assign(requests.size(), 0);
  for (std::size_t b = 0; b < requests.size(); ++b) {
    std::vector<std::int32_t> rows = fetched[b];
    if (static_cast<std::int64_t>(rows.size()) > listed)
      throw InputError("packPromotionPlan: lane " + std::to_string(b) + " fetched " +
                       std::to_string(rows.size()) + " rows, the plan lists " +
                       std::to_string(listed));
    std::sort(rows.begin(), rows.end());
    std::copy(rows.begin(), rows.end(),
              state.fetched.begin() + static_cast<std::ptrdiff_t>(b) * listed);
    if (requests[b] >= 0)
      state.historyStart[b] = controller.historyStart(requests[b]);
  }
  const std::int32_t slots = controller.config().hbmSlots;
  DeviceGroupState device = controller.exportDeviceState(group);
  state.hotRows = std::move(device.hotRows);
  state.cleared = std::move(device.cleared);
  state.recency = std::move(device.recency);
  state.freeStack = std::move(device.freeStack);
  const GroupOccupancy occupancy = controller.occupancy(group);
  state.control[Control::kHand] = device.hand;
  state.control[Control::kFreeCount] = device.freeCount;
  state.control[Control::kFreeBudget] = static_cast<std::int32_t>(
      std::clamp<std::int64_t>(occupancy.optionalBudget - occupancy.optionalUsed, -1, slots));
  state.control[Control::kExcess] = static_cast<std::int32_t>(device.excess);
  state.control[Control::kNoVictimStep] = static_cast<std::int32_t>(device.noVictimStep);
  state.step = device.step;
  return state;
}

//===----------------------------------------------------------------------===//
// Appends between steps (dhs.age_rows)
//===----------------------------------------------------------------------===//

std::uint32_t planAgeRows(AgeRowsState &state, DeviceAppendList appends, PromotionPlanList &list) {
  DeviceGroupState &g = state.group;
  const std::int64_t n = static_cast<std::int64_t>(appends.size());
  const std::int64_t slots = static_cast<std::int64_t>(g.hotRows.size());
  const std::int64_t hostRows = static_cast<std::int64_t>(state.map.size());
  list.rows.assign(2 * static_cast<std::size_t>(n), -1);
  list.slots.assign(list.rows.size(), -1);
  if (g.hand < 0 || g.hand >= std::max<std::int64_t>(slots, 1) || g.freeCount < 0 ||
      g.freeCount > static_cast<std::int64_t>(g.freeStack.size()) ||
      static_cast<std::int64_t>(g.cleared.size()) < slots ||
      static_cast<std::int64_t>(g.recency.size()) < 2 * slots)
    return abi::kStatusBadSlot;
  std::uint32_t status = 0;
  const std::uint32_t step = g.step;
  auto lastUse = [&](std::int64_t s) {
    return static_cast<std::uint32_t>(g.recency[2 * static_cast<std::size_t>(s)]);
  };
  auto referenced = [&](std::int64_t s) {
    return static_cast<std::int32_t>(lastUse(s)) != g.cleared[static_cast<std::size_t>(s)];
  };
  // The controller's clockVictim, non-forced, over the whole pool.
  auto clockVictim = [&]() -> std::int64_t {
    for (std::int64_t i = 0; i < 2 * slots; ++i) {
      const std::int64_t s = g.hand;
      g.hand = static_cast<std::int32_t>(s + 1 == slots ? 0 : s + 1);
      if (g.hotRows[static_cast<std::size_t>(s)] < 0 || lastUse(s) >= step)
        continue;
      if (referenced(s)) {
        g.cleared[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(lastUse(s));
        continue;
      }
      return s;
    }
    return -1;
  };
  // Whether a request holds a hot row, as the kernel decides it: a count per
  // append of the hot rows in its range, built at the first check that
  // needs one and kept current from then on. The build: the 2N bounds
  // sorted; each hot entry (-1 too: the rule compares every entry) counted
  // in its class, the number of bounds at most it; prefix sums over the
  // classes. A row r lies in [begin, end) exactly when
  // #bounds <= begin <= class(r) <= #bounds < end, so append i's count is a
  // difference of two prefix sums, whatever the ranges.
  std::vector<std::int64_t> owned;
  auto countOwners = [&] {
    std::vector<std::int64_t> bounds;
    bounds.reserve(2 * static_cast<std::size_t>(n));
    for (const DeviceAppend &a : appends)
      bounds.push_back(a.ownerBegin);
    for (const DeviceAppend &a : appends)
      bounds.push_back(a.ownerEnd);
    std::sort(bounds.begin(), bounds.end());
    auto atMost = [&](std::int64_t x) {
      return std::upper_bound(bounds.begin(), bounds.end(), x) - bounds.begin();
    };
    auto below = [&](std::int64_t x) {
      return std::lower_bound(bounds.begin(), bounds.end(), x) - bounds.begin();
    };
    std::vector<std::int64_t> before(bounds.size() + 2, 0); // rows in the classes before c
    for (const std::int64_t row : g.hotRows)
      ++before[static_cast<std::size_t>(atMost(row) + 1)];
    std::partial_sum(before.begin(), before.end(), before.begin());
    owned.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      const DeviceAppend &a = appends[static_cast<std::size_t>(i)];
      const std::ptrdiff_t lo = atMost(a.ownerBegin), hi = below(a.ownerEnd) + 1;
      owned[static_cast<std::size_t>(i)] =
          hi > lo ? before[static_cast<std::size_t>(hi)] - before[static_cast<std::size_t>(lo)] : 0;
    }
  };
  // `row` became hot (+1) or left (-1): the counts of the ranges holding it.
  auto countRow = [&](std::int64_t row, std::int64_t delta) {
    for (std::int64_t j = 0; j < static_cast<std::int64_t>(owned.size()); ++j) {
      const DeviceAppend &a = appends[static_cast<std::size_t>(j)];
      if (row >= a.ownerBegin && row < a.ownerEnd)
        owned[static_cast<std::size_t>(j)] += delta;
    }
  };
  // The CLOCK search's candidates (hot, last use < the step), as the kernel
  // counts them: at the launch's first search, kept current from then on
  // (-1: not counted yet). With none the search would walk its two laps,
  // clear nothing (a candidate it passes is taken, or cleared on the first
  // lap and taken on the second) and fail: it is not walked.
  std::int64_t candidates = -1;
  auto candidate = [&](std::int64_t s) {
    return g.hotRows[static_cast<std::size_t>(s)] >= 0 && lastUse(s) < step;
  };
  std::vector<std::int64_t> released(static_cast<std::size_t>(n), -1);
  for (std::int64_t i = 0; i < n; ++i) {
    const DeviceAppend &entry = appends[static_cast<std::size_t>(i)];
    if (entry.fresh < 0)
      continue; // padding
    if (entry.fresh >= hostRows || entry.aged >= hostRows) {
      status |= abi::kStatusBadHostRow;
      continue;
    }
    if (entry.aged >= 0) {
      const std::int64_t s = state.map[static_cast<std::size_t>(entry.aged)];
      if (s < 0 || s >= slots || g.hotRows[static_cast<std::size_t>(s)] >= 0) {
        status |= abi::kStatusBadSlot;
        continue;
      }
      // makeHot: a request's first hot row resets the memo. Only a memo that
      // holds the step decides anything, so the check for the request's hot
      // rows runs only then (a memo of another step may stay as it is).
      if (g.noVictimStep == step && step != 0) {
        if (owned.empty())
          countOwners();
        if (owned[static_cast<std::size_t>(i)] == 0)
          g.noVictimStep = 0;
      }
      g.hotRows[static_cast<std::size_t>(s)] = entry.aged;
      countRow(entry.aged, 1);
      if (candidates >= 0 && candidate(s))
        ++candidates;
      ++g.excess;
      if (g.excess > state.budget) {
        // findVictim, non-forced: the memo answers first, then the count.
        std::int64_t victim = -1;
        if (!(g.noVictimStep == step && step != 0)) {
          if (candidates < 0) {
            candidates = 0;
            for (std::int64_t t = 0; t < slots; ++t)
              candidates += candidate(t);
          }
          if (candidates > 0)
            victim = clockVictim();
          if (victim < 0)
            g.noVictimStep = step;
        }
        const std::size_t e = static_cast<std::size_t>(victim >= 0 ? victim : s);
        if (candidates >= 0 && candidate(static_cast<std::int64_t>(e)))
          --candidates;
        released[static_cast<std::size_t>(i)] = g.hotRows[e];
        countRow(g.hotRows[e], -1);
        state.map[static_cast<std::size_t>(g.hotRows[e])] = -1;
        g.hotRows[e] = -1;
        g.cleared[e] = static_cast<std::int32_t>(lastUse(static_cast<std::int64_t>(e)));
        --g.excess;
        if (g.freeCount >= static_cast<std::int32_t>(g.freeStack.size())) {
          status |= abi::kStatusBadSlot;
          continue;
        }
        g.freeStack[static_cast<std::size_t>(g.freeCount++)] = static_cast<std::int32_t>(e);
      }
    }
    if (g.freeCount == 0) {
      status |= abi::kStatusBadSlot;
      continue;
    }
    const std::int32_t slot = g.freeStack[static_cast<std::size_t>(--g.freeCount)];
    if (slot < 0 || slot >= slots) {
      status |= abi::kStatusBadSlot;
      continue;
    }
    if (candidates >= 0 && candidate(slot))
      --candidates; // (a hot slot on the free stack: a bad state; its last use becomes the step)
    const std::size_t s = static_cast<std::size_t>(slot);
    state.map[static_cast<std::size_t>(entry.fresh)] = slot;
    g.recency[2 * s] = static_cast<std::int32_t>(step);
    g.recency[2 * s + 1] = 0;
    g.cleared[s] = -1;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const std::size_t at = static_cast<std::size_t>(i);
    const std::int64_t fresh = appends[at].fresh;
    if (fresh >= 0 && fresh < hostRows && state.map[static_cast<std::size_t>(fresh)] >= 0) {
      list.rows[at] = fresh;
      list.slots[at] = state.map[static_cast<std::size_t>(fresh)];
    }
    list.rows[static_cast<std::size_t>(n) + at] = released[at];
  }
  return status;
}

} // namespace dhs::runtime
