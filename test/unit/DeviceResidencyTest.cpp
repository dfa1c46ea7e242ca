//===- DeviceResidencyTest.cpp - The controller while the device decides --===//
//
// The residency controller's device mode (runtime/residency/
// ResidencyDevice.cpp) and the host reference of dhs.age_rows (planAgeRows):
//
// - finish frees a request's hot slots in ascending slot order (the rule a
//   controller rebuilt from the device state follows too);
// - exportDeviceState -> adoptDeviceState gives back the same controller;
// - planAgeRows makes the appends' decisions of the controller's append;
// - a "device emulator": controller B, driven only by exported state, the
//   host references (planPromotions for a step's fetched rows, planAgeRows
//   for appends), applyDeviceCounts and adoptDeviceState before admissions
//   and finishes, stays identical to controller A, which runs normally, over
//   200 steps with appends, admissions and finishes.
//
//===----------------------------------------------------------------------===//

#include "FailingAllocation.h"
#include "PromotionScenario.h"
#include "TestUtil.h"

#include "runtime/core/Error.h"
#include "runtime/residency/PromotionPlan.h"
#include "runtime/residency/Residency.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

using namespace dhs::runtime;
using Control = dhs_abi::PromotionPlanLayout;

namespace {

/// The first difference between two controllers over every accessor that
/// does not need a step (slots, tables, free stack, hand, counts, requests),
/// or "".
std::string firstDifference(const ResidencyController &a, const ResidencyController &b) {
  std::ostringstream out;
  auto differ = [&](const std::string &what, auto x, auto y) {
    if (x == y)
      return false;
    out << what << ": " << x << " vs " << y;
    return true;
  };
  if (differ("steps", a.stepCount(), b.stepCount()) ||
      differ("live requests", a.liveCount(), b.liveCount()) ||
      differ("evictions", a.evictionCount(), b.evictionCount()))
    return out.str();
  const ResidencyStepStats *stats[2][2] = {{&a.lastStep(), &b.lastStep()},
                                           {&a.totals(), &b.totals()}};
  for (int t = 0; t < 2; ++t) {
    const ResidencyStepStats &x = *stats[t][0], &y = *stats[t][1];
    const std::string name = t ? "totals " : "last step ";
    if (differ(name + "entries", x.entries, y.entries) ||
        differ(name + "selected", x.selected, y.selected) ||
        differ(name + "resident", x.resident, y.resident) ||
        differ(name + "fetched", x.fetched, y.fetched) ||
        differ(name + "promoted", x.promoted, y.promoted) ||
        differ(name + "not promoted", x.notPromoted, y.notPromoted) ||
        differ(name + "evicted", x.evicted, y.evicted))
      return out.str();
  }
  for (std::int32_t g = 0; g < a.config().groups; ++g) {
    const std::string gname = "group " + std::to_string(g) + " ";
    const GroupOccupancy oa = a.occupancy(g), ob = b.occupancy(g);
    if (differ(gname + "used", oa.used, ob.used) ||
        differ(gname + "newest", oa.newest, ob.newest) ||
        differ(gname + "ring", oa.ring, ob.ring) || differ(gname + "hot", oa.hot, ob.hot) ||
        differ(gname + "optional used", oa.optionalUsed, ob.optionalUsed) ||
        differ(gname + "hand", a.clockHand(g), b.clockHand(g)))
      return out.str();
    if (a.freeSlots(g) != b.freeSlots(g))
      return gname + "free stacks differ";
    if (a.residencyTable(g) != b.residencyTable(g))
      return gname + "resolve tables differ";
    for (std::int32_t s = 0; s < a.config().hbmSlots; ++s) {
      const std::string sname = gname + "slot " + std::to_string(s) + " ";
      if (differ(sname + "kind", static_cast<int>(a.slotKind(g, s)),
                 static_cast<int>(b.slotKind(g, s))) ||
          differ(sname + "owner", a.slotOwner(g, s), b.slotOwner(g, s)) ||
          differ(sname + "row", a.slotRow(g, s), b.slotRow(g, s)) ||
          differ(sname + "last use", a.slotRecency(g, s).first, b.slotRecency(g, s).first) ||
          differ(sname + "previous use", a.slotRecency(g, s).second, b.slotRecency(g, s).second) ||
          differ(sname + "referenced", a.slotReferenced(g, s), b.slotReferenced(g, s)))
        return out.str();
    }
    for (std::int32_t r = 0; r < a.config().maxRequests; ++r) {
      if (differ("request " + std::to_string(r) + " live", a.live(r), b.live(r)))
        return out.str();
      if (!a.live(r))
        continue;
      const std::string rname = gname + "request " + std::to_string(r) + " ";
      if (differ(rname + "start", a.historyStart(r), b.historyStart(r)) ||
          differ(rname + "length", a.historyLen(r), b.historyLen(r)) ||
          differ(rname + "hot", a.hotCount(g, r), b.hotCount(g, r)))
        return out.str();
      if (a.ringSlots(g, r) != b.ringSlots(g, r))
        return rname + "ring slots differ";
    }
  }
  return "";
}

/// Whether two device states agree on everything a decision reads: hot
/// rows, references (-1 or a cleared use that differs from the last use),
/// recency, the free stack's valid part, hand, free count, excess and
/// whether the memo holds the step (its other values never match a step).
std::string deviceDifference(const DeviceGroupState &a, const DeviceGroupState &b) {
  if (a.hotRows != b.hotRows)
    return "hot rows";
  if (a.recency != b.recency)
    return "recency";
  for (std::size_t s = 0; s < a.cleared.size(); ++s) {
    auto referenced = [&](const DeviceGroupState &d) {
      return d.cleared[s] == -1 || d.cleared[s] != d.recency[2 * s];
    };
    if (referenced(a) != referenced(b))
      return "the reference of slot " + std::to_string(s);
  }
  if (a.hand != b.hand || a.freeCount != b.freeCount || a.excess != b.excess || a.step != b.step)
    return "words: hand " + std::to_string(a.hand) + "/" + std::to_string(b.hand) + ", free " +
           std::to_string(a.freeCount) + "/" + std::to_string(b.freeCount) + ", excess " +
           std::to_string(a.excess) + "/" + std::to_string(b.excess);
  if (!std::equal(a.freeStack.begin(), a.freeStack.begin() + a.freeCount, b.freeStack.begin()))
    return "free stack";
  if ((a.noVictimStep == a.step) != (b.noVictimStep == b.step))
    return "victim-search memo " + std::to_string(a.noVictimStep) + "/" +
           std::to_string(b.noVictimStep) + " at step " + std::to_string(a.step);
  return "";
}

/// A step's selections: `rows` [lanes x perLane] row ids (-1: none).
void selectRows(std::mt19937_64 &rng, const ResidencyController &c,
                const std::vector<std::int32_t> &lanes, std::int64_t perLane,
                std::vector<std::set<std::int32_t>> &recent, std::vector<std::int32_t> &rows) {
  rows.assign(lanes.size() * static_cast<std::size_t>(perLane), -1);
  for (std::size_t b = 0; b < lanes.size(); ++b) {
    const std::int32_t r = lanes[b];
    if (r < 0)
      continue;
    const std::int64_t len = c.historyLen(r);
    std::set<std::int32_t> &old = recent[static_cast<std::size_t>(r)];
    std::vector<std::int32_t> oldRows(old.begin(), old.end());
    for (std::int64_t k = 0; k < perLane; ++k) {
      std::int32_t id;
      if (!oldRows.empty() && rng() % 2)
        id = oldRows[rng() % oldRows.size()];
      else
        id = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(len));
      if (id >= len || rng() % 16 == 0)
        id = -1; // unused selections, and rows of a shorter past
      rows[b * static_cast<std::size_t>(perLane) + static_cast<std::size_t>(k)] = id;
      if (id >= 0)
        old.insert(id);
    }
  }
}

/// One group's device: its state and residency map.
struct EmulatedGroup {
  DeviceGroupState state;
  std::vector<std::int32_t> map;

  /// The upload after host-side changes.
  void upload(const ResidencyController &c, std::int32_t g) {
    state = c.exportDeviceState(g);
    map = c.residencyTable(g);
  }

  /// A step on the device: resolve (map lookups, recency stamps), then
  /// plan_promotions over the fetched rows (ascending per lane) and
  /// place_rows. Returns the counts; sets `exhausted` when the plan's
  /// victims ran out.
  DeviceStepCounts step(const std::vector<std::int32_t> &lanes,
                        const std::vector<std::int64_t> &starts,
                        const std::vector<std::int32_t> &rowIds, std::int64_t perLane,
                        std::int32_t cap, std::int64_t budget, std::uint32_t stepNumber,
                        bool &exhausted) {
    state.step = stepNumber; // the step log's word 0
    DeviceStepCounts counts;
    const std::size_t B = lanes.size();
    std::vector<std::vector<std::int32_t>> fetched(B);
    std::size_t listed = 1;
    for (std::size_t b = 0; b < B; ++b) {
      std::set<std::int32_t> seen;
      for (std::int64_t k = 0; k < perLane; ++k) {
        const std::int32_t id = rowIds[b * static_cast<std::size_t>(perLane) + k];
        if (id < 0)
          continue;
        ++counts.entries;
        const std::int32_t s = map[static_cast<std::size_t>(starts[b] + id)];
        if (s >= 0 && state.recency[2 * static_cast<std::size_t>(s)] !=
                          static_cast<std::int32_t>(stepNumber)) {
          state.recency[2 * static_cast<std::size_t>(s) + 1] =
              state.recency[2 * static_cast<std::size_t>(s)];
          state.recency[2 * static_cast<std::size_t>(s)] = static_cast<std::int32_t>(stepNumber);
        }
        if (!seen.insert(id).second)
          continue;
        if (s >= 0)
          ++counts.hits;
        else
          fetched[b].push_back(id);
      }
      std::sort(fetched[b].begin(), fetched[b].end());
      counts.listed += static_cast<std::int64_t>(fetched[b].size());
      listed = std::max(listed, fetched[b].size());
    }
    PromotionPlanState plan;
    plan.lanes = static_cast<std::int64_t>(B);
    plan.listed = static_cast<std::int64_t>(listed);
    plan.perLane = cap;
    plan.fetched.assign(B * listed, -1);
    std::int64_t planned = 0;
    for (std::size_t b = 0; b < B; ++b) {
      std::copy(fetched[b].begin(), fetched[b].end(), plan.fetched.begin() + b * listed);
      planned += cap >= 0 ? std::min<std::int64_t>(cap, fetched[b].size())
                          : static_cast<std::int64_t>(fetched[b].size());
    }
    plan.historyStart = starts;
    plan.hotRows = state.hotRows;
    plan.cleared = state.cleared;
    plan.freeStack = state.freeStack;
    plan.recency = state.recency;
    plan.control[Control::kHand] = state.hand;
    plan.control[Control::kFreeCount] = state.freeCount;
    plan.control[Control::kFreeBudget] = static_cast<std::int32_t>(std::clamp<std::int64_t>(
        budget - state.excess, -1, static_cast<std::int64_t>(state.hotRows.size())));
    plan.control[Control::kExcess] = static_cast<std::int32_t>(state.excess);
    plan.control[Control::kNoVictimStep] = static_cast<std::int32_t>(state.noVictimStep);
    plan.step = stepNumber;
    PromotionPlanList list;
    REQUIRE(planPromotions(plan, list) == 0);
    CHECK(plan.control[Control::kListed] == counts.listed);
    // place_rows: releases, then the promoted rows (mapped, stamped).
    const std::size_t total = B * listed;
    for (std::size_t v = 0; v < total; ++v)
      if (list.rows[total + v] >= 0)
        map[static_cast<std::size_t>(list.rows[total + v])] = -1;
    for (std::size_t i = 0; i < total; ++i) {
      if (list.rows[i] < 0)
        continue;
      const std::size_t s = static_cast<std::size_t>(list.slots[i]);
      map[static_cast<std::size_t>(list.rows[i])] = list.slots[i];
      state.recency[2 * s] = static_cast<std::int32_t>(stepNumber);
      state.recency[2 * s + 1] = 0;
    }
    counts.promoted = plan.control[Control::kPromoted];
    counts.released = plan.control[Control::kReleased];
    state.hotRows = std::move(plan.hotRows);
    state.cleared = std::move(plan.cleared);
    state.hand = plan.control[Control::kHand];
    state.freeCount = plan.control[Control::kFreeCount];
    // The excess and the memo from the plan's control words: floor 0 makes
    // every promotion from the free stack optional; the victim search ran
    // out when fewer rows than planned got a slot.
    CHECK(plan.control[Control::kExcess] == state.excess + counts.promoted - counts.released);
    state.excess = plan.control[Control::kExcess];
    exhausted = counts.promoted < planned;
    CHECK((plan.control[Control::kNoVictimStep] == static_cast<std::int32_t>(stepNumber)) ==
          (exhausted || state.noVictimStep == stepNumber));
    state.noVictimStep = static_cast<std::uint32_t>(plan.control[Control::kNoVictimStep]);
    return counts;
  }

  /// dhs.age_rows over the recorded appends; returns each new row's slot.
  std::vector<std::int32_t> age(DeviceAppendList appends, std::int64_t budget,
                                PromotionPlanList &list) {
    AgeRowsState aging{state, map, budget};
    REQUIRE(planAgeRows(aging, appends, list) == 0);
    state = std::move(aging.group);
    map = std::move(aging.map);
    return std::vector<std::int32_t>(
        list.slots.begin(), list.slots.begin() + static_cast<std::ptrdiff_t>(appends.size()));
  }
};

/// One step of `c` with each live request in `lanes` selecting `rows`.
void hostStep(ResidencyController &c, const std::vector<std::int32_t> &lanes,
              const std::vector<std::vector<std::int32_t>> &rowsPerGroup, std::int64_t perLane,
              std::vector<RowCopy> &copies) {
  c.beginStep();
  std::vector<std::int32_t> slots(lanes.size() * static_cast<std::size_t>(perLane));
  for (std::int32_t g = 0; g < c.config().groups; ++g)
    c.resolve(g, lanes.data(), static_cast<std::int64_t>(lanes.size()),
              rowsPerGroup[static_cast<std::size_t>(g)].data(), 1, perLane, slots.data());
  c.endStep(copies);
}

} // namespace

TEST_CASE("finish frees a request's hot slots in ascending slot order", "[residency][device]") {
  ResidencyController c(ResidencyConfig::adaptive(1, 64, 1000, 4, 1, 0));
  std::vector<RowCopy> copies;
  const std::int32_t r = c.admit(20, 100, copies);
  // Slot 0 is the ring slot, 1-4 the newest rows 16-19; promotions take
  // 5, 6, 7; an append then ages row 16 into a hot row in slot 1: the hot
  // list is [5, 6, 7, 1].
  const std::vector<std::int32_t> lanes = {r};
  hostStep(c, lanes, {{2, 5, 9}}, 3, copies);
  c.append(r, copies);
  REQUIRE(c.slotKind(0, 1) == SlotKind::Hot);
  REQUIRE(c.hotCount(0, r) == 4);
  const std::size_t before = c.freeSlots(0).size();
  c.finish(r);
  const std::vector<std::int32_t> &free = c.freeSlots(0);
  REQUIRE(free.size() == before + 1 + 4 + 4);
  // Pushed: the hot slots ascending, then the newest rows' (17..20), then
  // the ring slot.
  CHECK(std::vector<std::int32_t>(free.begin() + static_cast<std::ptrdiff_t>(before), free.end()) ==
        std::vector<std::int32_t>{1, 5, 6, 7, 2, 3, 4, 8, 0});
  c.checkConsistency();
}

TEST_CASE("a device-owned group's host tables are off limits until the device state is adopted",
          "[residency][device]") {
  ResidencyController c(ResidencyConfig::adaptive(2, 64, 1000, 4, 0, 0));
  std::vector<RowCopy> copies;
  const std::int32_t r = c.admit(20, 100, copies);
  const DeviceGroupState exported = c.exportDeviceState(1);
  ResidencyController original = c;
  original.beginStep();
  original.abortStep();
  c.markDeviceOwned(1);
  CHECK(c.deviceOwned(1));
  CHECK_FALSE(c.deviceOwned(0));
  CHECK_THROWS_AS(c.slotKind(1, 0), StateError);
  CHECK_THROWS_AS(c.residencyTable(1), StateError);
  CHECK_THROWS_AS(c.slotOf(1, r, 19), StateError);
  CHECK_THROWS_AS(c.clockHand(1), StateError);
  CHECK_THROWS_AS(c.hotCount(1, r), StateError);
  CHECK_THROWS_AS(c.exportDeviceState(1), StateError);
  CHECK_NOTHROW(c.slotKind(0, 0));
  CHECK(c.occupancy(1).newest == 4);
  CHECK_THROWS_AS(c.finish(r), StateError);
  CHECK_THROWS_AS(c.admit(10, 20, copies), StateError);
  c.checkConsistency(); // skips group 1
  c.beginStep();
  std::vector<std::int32_t> rows(4, -1), slots(4);
  CHECK_THROWS_AS(c.resolve(1, &r, 1, rows.data(), 1, 4, slots.data()), StateError);
  CHECK_THROWS_AS(c.applyDeviceCounts(0, {}), StateError);               // group 0 is the host's
  CHECK_THROWS_AS(c.applyDeviceCounts(1, {10, 2, 3, 4, 0}), InputError); // 4 promoted of 3
  c.applyDeviceCounts(1, {10, 2, 3, 0, 0});
  CHECK_THROWS_AS(c.applyDeviceCounts(1, {}), StateError); // booked twice
  c.abortStep();
  // A state that does not fit is refused, and the group stays device-owned.
  DeviceGroupState bad = exported;
  bad.hotRows[10] = c.historyStart(r) + 18; // a newest row
  CHECK_THROWS_AS(c.adoptDeviceState(1, bad), InputError);
  bad = exported;
  bad.step = 7;
  CHECK_THROWS_AS(c.adoptDeviceState(1, bad), InputError);
  CHECK(c.deviceOwned(1));
  bad = exported;
  bad.step = c.stepCount();
  c.adoptDeviceState(1, bad);
  CHECK_FALSE(c.deviceOwned(1));
  // (The aborted step's counts went with it.)
  CHECK(firstDifference(c, original) == "");
  c.checkConsistency();
}

TEST_CASE("exporting and adopting the device state gives back the same controller",
          "[residency][device]") {
  DHS_SEEDED_RNG(rng, 2600);
  int checked = 0;
  std::int64_t hotChecked = 0;
  dhs::test::runPromotionScenario(
      rng, Replacement::Clock, -1, 30,
      [](const ResidencyController &, const PromotionPlanState &) {},
      [&](const ResidencyController &c, const std::vector<RowCopy> &) {
        INFO("step " << c.stepCount());
        ResidencyController round = c;
        const DeviceGroupState exported = c.exportDeviceState(0);
        round.markDeviceOwned(0);
        round.adoptDeviceState(0, exported);
        REQUIRE(firstDifference(c, round) == "");
        round.checkConsistency();
        CHECK(round.exportDeviceState(0) == exported);
        ++checked;
        hotChecked += c.occupancy(0).hot;
      });
  CHECK(checked == 30);
  CHECK(hotChecked > 3000);
}

namespace {

/// Counts of checkAppends.
struct AppendCounts {
  std::int64_t appended = 0, released = 0, underMemo = 0, memoSteps = 0;
};

/// Appends a token to each of `requests` (in order) with `c`, and with
/// planAgeRows over c's exported state and the entries a device-owned copy
/// of c records; checks that both agree on the map, the state, the place
/// list and, adopted, every accessor.
void checkAppends(ResidencyController &c, const std::vector<std::int32_t> &requests,
                  AppendCounts &counts) {
  INFO("after step " << c.stepCount());
  ResidencyController device = c;
  device.markDeviceOwned(0);
  AgeRowsState aging{c.exportDeviceState(0), c.residencyTable(0), c.optionalBudget()};
  const bool memo = aging.group.noVictimStep == aging.group.step && aging.group.step != 0;
  std::vector<RowCopy> copies, releases, ignored;
  c.setReleaseLog(&releases);
  for (std::int32_t r : requests) {
    c.append(r, copies);
    device.append(r, ignored);
  }
  c.setReleaseLog(nullptr);
  CHECK(ignored.empty()); // the device places a device-owned group's rows
  const std::vector<DeviceAppend> entries = device.deviceAppends(0).toVector();
  REQUIRE(entries.size() == requests.size());
  PromotionPlanList list;
  REQUIRE(planAgeRows(aging, entries, list) == 0);
  CHECK(aging.map == c.residencyTable(0));
  CHECK(deviceDifference(aging.group, c.exportDeviceState(0)) == "");
  // The list: each new row's slot, each released row once.
  const std::size_t n = entries.size();
  std::multiset<std::int64_t> listedReleases, loggedReleases;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t slot = c.residencyTable(0)[static_cast<std::size_t>(entries[i].fresh)];
    CHECK(list.rows[i] == (slot >= 0 ? entries[i].fresh : -1));
    CHECK(list.slots[i] == slot);
    CHECK(list.slots[n + i] == -1);
    if (list.rows[n + i] >= 0)
      listedReleases.insert(list.rows[n + i]);
  }
  for (const RowCopy &release : releases)
    loggedReleases.insert(release.hostRow);
  CHECK(listedReleases == loggedReleases);
  device.applyDeviceAppends(
      0, std::vector<std::int32_t>(list.slots.begin(),
                                   list.slots.begin() + static_cast<std::ptrdiff_t>(n)));
  device.adoptDeviceState(0, aging.group);
  REQUIRE(firstDifference(c, device) == "");
  device.checkConsistency();
  counts.appended += static_cast<std::int64_t>(n);
  counts.released += static_cast<std::int64_t>(releases.size());
  counts.memoSteps += memo;
  if (memo)
    counts.underMemo += static_cast<std::int64_t>(n);
}

} // namespace

TEST_CASE("the age_rows rule makes the controller's append decisions", "[residency][device]") {
  DHS_SEEDED_RNG(rng, 2800);
  AppendCounts counts;
  dhs::test::runPromotionScenario(
      rng, Replacement::Clock, -1, 80,
      [](const ResidencyController &, const PromotionPlanState &) {},
      [](const ResidencyController &, const std::vector<RowCopy> &) {},
      [&](ResidencyController &c, const std::vector<std::int32_t> &requests) {
        checkAppends(c, requests, counts);
      });
  CHECK(counts.appended > 100);
  CHECK(counts.released > 50);
}

TEST_CASE("the age_rows rule after a step whose promotions ran out of victims",
          "[residency][device]") {
  // 40 slots, W = 4: requests 0 and 1 fetch 40 rows each, promotions fill
  // the budget (28, all request 0's) and the victim search fails (every hot
  // row is this step's): the memo holds the step, and the appends after it
  // do not search, until a request's first hot row resets it.
  ResidencyController c(ResidencyConfig::adaptive(1, 40, 1000, 4, 0, 0));
  std::vector<RowCopy> copies;
  const std::int32_t r0 = c.admit(100, 200, copies), r1 = c.admit(100, 200, copies),
                     r2 = c.admit(4, 50, copies);
  std::vector<std::int32_t> rows(80);
  for (std::int32_t k = 0; k < 40; ++k)
    rows[static_cast<std::size_t>(k)] = rows[static_cast<std::size_t>(40 + k)] = 2 * k;
  const std::vector<std::int32_t> lanes = {r0, r1};
  hostStep(c, lanes, {rows}, 40, copies);
  REQUIRE(c.lastStep().promoted == 28);
  REQUIRE(c.exportDeviceState(0).noVictimStep == 1);
  AppendCounts counts;
  const std::int32_t hand = c.clockHand(0);
  SECTION("the memo answers every search") {
    // Request 0 holds the 28 promoted rows: no reset, no search, the aged
    // rows themselves leave.
    checkAppends(c, {r0, r0, r0}, counts);
    CHECK(c.clockHand(0) == hand);
  }
  SECTION("a first hot row resets the memo") {
    // Request 2's aged row 0 (last used at admission) is a candidate: the
    // search takes it after a lap that clears its reference.
    checkAppends(c, {r0, r2, r0, r1}, counts);
    CHECK(c.clockHand(0) != hand);
  }
  CHECK(counts.underMemo > 0);
  CHECK(counts.released == counts.appended);
}

TEST_CASE("appends over many lists, more than W a request in some, leave the newest slots that "
          "adoption rebuilds",
          "[residency][device]") {
  // The host keeps only the newest slots of the applied lists (its per-slot
  // tables stay as at the handover): an adopted copy must equal a
  // controller that appended on the host, slot for slot, after every list.
  // Groups 0 and 1 are handed over before the first list, group 2 after it
  // (the first list's newest rows are the host's there); a request appends
  // up to W + 3 tokens a list, so that new rows age out and leave HBM again
  // within their own list (slot -1); the lists are applied one group at a
  // time or all together.
  DHS_SEEDED_RNG(rng, 3300);
  const std::int32_t groups = 3, window = 4;
  ResidencyConfig config = ResidencyConfig::adaptive(groups, 60, 4000, window, 1, 0);
  config.maxRequests = 6;
  ResidencyController host(config), device(config);
  std::vector<RowCopy> copies;
  std::vector<std::int32_t> live;
  for (int i = 0; i < 5; ++i) {
    const std::int64_t length = 1 + static_cast<std::int64_t>(rng() % 30);
    live.push_back(host.admit(length, length + 300, copies));
    REQUIRE(device.admit(length, length + 300, copies) == live.back());
  }
  // A step first: the rows placed before it are CLOCK candidates.
  std::vector<std::vector<std::int32_t>> selected(groups);
  for (std::vector<std::int32_t> &rows : selected)
    for (std::int32_t r : live)
      for (int k = 0; k < 3; ++k)
        rows.push_back(
            static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(host.historyLen(r))));
  hostStep(host, live, selected, 3, copies);
  hostStep(device, live, selected, 3, copies);
  REQUIRE(firstDifference(host, device) == "");
  std::vector<AgeRowsState> emulated(groups);
  auto handOver = [&](std::int32_t g) {
    emulated[static_cast<std::size_t>(g)] = {device.exportDeviceState(g), device.residencyTable(g),
                                             device.optionalBudget()};
    device.markDeviceOwned(g);
  };
  handOver(0);
  handOver(1);
  std::int64_t left = 0, longRuns = 0;
  for (int list = 0; list < 12; ++list) {
    INFO("list " << list);
    std::vector<std::int32_t> order;
    for (std::int32_t r : live) {
      const int times = static_cast<int>(rng() % (window + 4));
      longRuns += times > window;
      order.insert(order.end(), static_cast<std::size_t>(times), r);
    }
    std::shuffle(order.begin(), order.end(), rng);
    for (std::int32_t r : order) {
      host.append(r, copies);
      device.append(r, copies);
    }
    std::vector<std::int32_t> owned;
    std::vector<std::vector<std::int32_t>> slots(groups);
    for (std::int32_t g = 0; g < groups; ++g) {
      const std::size_t gi = static_cast<std::size_t>(g);
      if (!device.deviceOwned(g)) {
        CHECK(device.deviceAppends(g).empty());
        continue;
      }
      REQUIRE(device.deviceAppends(g).size() == order.size());
      PromotionPlanList planned;
      REQUIRE(planAgeRows(emulated[gi], device.deviceAppends(g), planned) == 0);
      CHECK(emulated[gi].map == host.residencyTable(g));
      slots[gi].assign(planned.slots.begin(),
                       planned.slots.begin() + static_cast<std::ptrdiff_t>(order.size()));
      left += std::count(slots[gi].begin(), slots[gi].end(), -1);
      owned.push_back(g);
    }
    if (list % 2 == 0)
      for (std::int32_t g : owned)
        device.applyDeviceAppends(g, slots[static_cast<std::size_t>(g)]);
    else
      device.applyDeviceAppends(owned, slots);
    for (std::int32_t g : owned)
      CHECK(device.deviceAppends(g).empty());
    if (list == 0)
      handOver(2);
    ResidencyController adopted = device;
    for (std::int32_t g = 0; g < groups; ++g)
      adopted.adoptDeviceState(g, emulated[static_cast<std::size_t>(g)].group);
    REQUIRE(firstDifference(host, adopted) == "");
    adopted.checkConsistency();
  }
  INFO(left << " new rows left in their own list, " << longRuns << " runs of more than W");
  CHECK(left > 0);
  CHECK(longRuns > 5);
}

TEST_CASE("the appends' slots the host does not expect are refused, and adoption refuses "
          "newest slots that disagree with the device state",
          "[residency][device]") {
  // 12 slots, W = 4, a ring slot a request: request 0 (10 rows) and
  // request 1 (1 row: three of its newest slots unused, on the free stack)
  // reserve 10 slots, the budget is 2. Request 0 appends rows 10-12: rows 6
  // and 7 age within the budget (the new rows take the free stack's top),
  // row 8 over it (step 0: no victim, row 8 leaves, row 12 takes its slot).
  ResidencyController host(ResidencyConfig::adaptive(1, 12, 1000, 4, 1, 0));
  std::vector<RowCopy> copies;
  const std::int32_t r0 = host.admit(10, 100, copies), r1 = host.admit(1, 100, copies);
  ResidencyController device = host;
  AgeRowsState emulated{device.exportDeviceState(0), device.residencyTable(0),
                        device.optionalBudget()};
  device.markDeviceOwned(0);
  for (int t = 0; t < 3; ++t) {
    host.append(r0, copies);
    device.append(r0, copies);
  }
  PromotionPlanList planned;
  REQUIRE(planAgeRows(emulated, device.deviceAppends(0), planned) == 0);
  const std::vector<std::int32_t> slots(planned.slots.begin(), planned.slots.begin() + 3);
  const std::vector<std::int32_t> free = device.freeSlots(0);
  REQUIRE(free.size() == 3);
  REQUIRE(slots[2] == host.slotOf(0, r0, 12));
  REQUIRE(host.slotOf(0, r0, 8) == -1);
  const std::int32_t ring = host.ringSlots(0, r1)[0], hot = host.slotOf(0, r0, 6);
  REQUIRE(host.slotKind(0, hot) == SlotKind::Hot);
  CHECK_THROWS_AS(device.adoptDeviceState(0, emulated.group), StateError); // not applied yet
  auto refused = [&](const std::vector<std::int32_t> &bad) {
    CHECK_THROWS_AS(device.applyDeviceAppends(0, bad), InputError);
    CHECK(device.deviceAppends(0).size() == 3);
  };
  refused({slots[0], slots[1]});              // a count that differs
  refused({slots[1], slots[1], slots[2]});    // not the free slot the host took
  refused({slots[0], slots[1], 12});          // outside the pool
  refused({slots[0], slots[1], free.back()}); // over the budget: a slot the stack holds
  refused({slots[0], slots[1], ring});        // over the budget: a ring slot
  CHECK_THROWS_AS(
      device.applyDeviceAppends(std::vector<std::int32_t>{0}, {{slots[0], slots[1], ring}}),
      InputError);
  CHECK(device.deviceAppends(0).size() == 3);
  // A hot slot for row 12 passes (the host does not know the hot slots),
  // but adoption finds it hot in the device state, and row 8's slot
  // neither hot, free nor newest: refused, the group stays device-owned.
  ResidencyController wrong = device;
  wrong.applyDeviceAppends(0, {slots[0], slots[1], hot});
  CHECK_THROWS_AS(wrong.adoptDeviceState(0, emulated.group), InputError);
  CHECK(wrong.deviceOwned(0));
  device.applyDeviceAppends(0, slots);
  CHECK(device.deviceAppends(0).empty());
  device.adoptDeviceState(0, emulated.group);
  CHECK(firstDifference(host, device) == "");
  device.checkConsistency();
}

namespace {

/// planAgeRows as it was before the owner and candidate counts: the owner
/// check a scan of the hot rows (the one-warp kernel's rule), every search a
/// walk of the CLOCK laps.
std::uint32_t planAgeRowsByScan(AgeRowsState &state, const std::vector<DeviceAppend> &appends,
                                PromotionPlanList &list) {
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
    return dhs_abi::kStatusBadSlot;
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
  std::vector<std::int64_t> released(static_cast<std::size_t>(n), -1);
  for (std::int64_t i = 0; i < n; ++i) {
    const DeviceAppend &entry = appends[static_cast<std::size_t>(i)];
    if (entry.fresh < 0)
      continue; // padding
    if (entry.fresh >= hostRows || entry.aged >= hostRows) {
      status |= dhs_abi::kStatusBadHostRow;
      continue;
    }
    if (entry.aged >= 0) {
      const std::int64_t s = state.map[static_cast<std::size_t>(entry.aged)];
      if (s < 0 || s >= slots || g.hotRows[static_cast<std::size_t>(s)] >= 0) {
        status |= dhs_abi::kStatusBadSlot;
        continue;
      }
      // makeHot: a request's first hot row resets the memo. Only a memo that
      // holds the step decides anything, so the scan for the request's hot
      // rows runs only then (a memo of another step may stay as it is).
      bool ownerHot = !(g.noVictimStep == step && step != 0);
      for (std::int64_t t = 0; t < slots && !ownerHot; ++t) {
        const std::int64_t row = g.hotRows[static_cast<std::size_t>(t)];
        ownerHot = row >= entry.ownerBegin && row < entry.ownerEnd;
      }
      if (!ownerHot)
        g.noVictimStep = 0;
      g.hotRows[static_cast<std::size_t>(s)] = entry.aged;
      ++g.excess;
      if (g.excess > state.budget) {
        // findVictim, non-forced: the memo answers first.
        std::int64_t victim = -1;
        if (!(g.noVictimStep == step && step != 0)) {
          victim = clockVictim();
          if (victim < 0)
            g.noVictimStep = step;
        }
        const std::size_t e = static_cast<std::size_t>(victim >= 0 ? victim : s);
        released[static_cast<std::size_t>(i)] = g.hotRows[e];
        state.map[static_cast<std::size_t>(g.hotRows[e])] = -1;
        g.hotRows[e] = -1;
        g.cleared[e] = static_cast<std::int32_t>(lastUse(static_cast<std::int64_t>(e)));
        --g.excess;
        if (g.freeCount >= static_cast<std::int32_t>(g.freeStack.size())) {
          status |= dhs_abi::kStatusBadSlot;
          continue;
        }
        g.freeStack[static_cast<std::size_t>(g.freeCount++)] = static_cast<std::int32_t>(e);
      }
    }
    if (g.freeCount == 0) {
      status |= dhs_abi::kStatusBadSlot;
      continue;
    }
    const std::int32_t slot = g.freeStack[static_cast<std::size_t>(--g.freeCount)];
    if (slot < 0 || slot >= slots) {
      status |= dhs_abi::kStatusBadSlot;
      continue;
    }
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

/// A random group state with `slots` slots and `hostRows` host rows, each
/// slot hot, holding a newest row (mapped, not hot) or free, and `n` appends:
/// aged rows among the newest (sometimes -1, unmapped or hot), new rows
/// unmapped (sometimes padding or outside the map), ranges of any kind
/// (requests' disjoint ranges, repeated, overlapping, empty, negative, and
/// narrow ones around the aged row that appends and releases fill and
/// empty).
std::pair<AgeRowsState, std::vector<DeviceAppend>>
randomAging(std::mt19937_64 &rng, std::int32_t slots, std::int64_t hostRows, int n) {
  auto pick = [&](std::int64_t count) { return static_cast<std::int64_t>(rng() % count); };
  AgeRowsState state;
  DeviceGroupState &g = state.group;
  const std::size_t s = static_cast<std::size_t>(slots);
  g.hotRows.assign(s, -1);
  g.cleared.assign(s, -1);
  g.freeStack.assign(s, -1);
  g.recency.assign(2 * s, 0);
  g.step = 1 + static_cast<std::uint32_t>(pick(6));
  g.noVictimStep = pick(4) == 0 ? 0 : g.step; // mostly holding the step
  state.map.assign(static_cast<std::size_t>(hostRows), -1);
  std::vector<std::int64_t> rows(static_cast<std::size_t>(hostRows));
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  std::size_t nextRow = 0;
  std::vector<std::int64_t> newest;
  for (std::size_t t = 0; t < s; ++t) {
    const std::int64_t kind = pick(10);
    g.recency[2 * t] = static_cast<std::int32_t>(pick(g.step + 1));
    g.cleared[t] = pick(2) == 0 ? g.recency[2 * t] : -1;
    if (kind < 2) {
      g.freeStack[static_cast<std::size_t>(g.freeCount++)] = static_cast<std::int32_t>(t);
      continue;
    }
    const std::int64_t row = rows[nextRow++];
    state.map[static_cast<std::size_t>(row)] = static_cast<std::int32_t>(t);
    if (kind < 4)
      newest.push_back(row);
    else
      g.hotRows[t] = row, ++g.excess;
  }
  g.hand = static_cast<std::int32_t>(pick(slots));
  state.budget = g.excess + pick(3) - 1;
  std::vector<DeviceAppend> appends;
  for (int i = 0; i < n; ++i) {
    DeviceAppend a;
    a.aged = newest.empty() || pick(8) == 0
                 ? -1
                 : newest[static_cast<std::size_t>(pick(static_cast<std::int64_t>(newest.size())))];
    if (pick(20) == 0)
      a.aged = rows[static_cast<std::size_t>(pick(hostRows))]; // maybe hot or unmapped
    a.fresh = nextRow < rows.size() ? rows[nextRow++] : -1;
    if (pick(25) == 0)
      a.fresh = -1; // padding
    else if (pick(50) == 0)
      a.fresh = hostRows + 3; // outside the map
    switch (pick(7)) {
    case 6: // narrow, around the aged row: few hot rows, emptied by releases
      a.ownerBegin = (a.aged >= 0 ? a.aged : pick(hostRows)) - pick(2);
      a.ownerEnd = a.ownerBegin + 1 + pick(3);
      break;
    case 0: // a request's range: [b x 100, (b + 1) x 100)
    case 1:
    case 2: {
      const std::int64_t b = pick(hostRows / 100);
      a.ownerBegin = b * 100, a.ownerEnd = (b + 1) * 100;
      break;
    }
    case 3: // anything, maybe empty or reversed
      a.ownerBegin = pick(hostRows), a.ownerEnd = pick(hostRows);
      break;
    case 4: // the same as an earlier append's
      if (!appends.empty()) {
        const DeviceAppend &e =
            appends[static_cast<std::size_t>(pick(static_cast<std::int64_t>(appends.size())))];
        a.ownerBegin = e.ownerBegin, a.ownerEnd = e.ownerEnd;
      }
      break;
    case 5: // from below 0: the -1 entries of free slots lie in it
      a.ownerBegin = -1 - pick(3), a.ownerEnd = pick(hostRows);
      break;
    }
    appends.push_back(a);
  }
  return {state, appends};
}

} // namespace

TEST_CASE("planAgeRows's owner and candidate counts decide as scans of the hot rows and "
          "the CLOCK laps do",
          "[residency][device][aging]") {
  DHS_SEEDED_RNG(rng, 2900);
  std::int64_t resets = 0, checks = 0, releases = 0, statuses = 0, emptyFailed = 0, fewSearched = 0;
  for (int round = 0; round < 1000; ++round) {
    INFO("round " << round);
    const std::int32_t slots = 1 + static_cast<std::int32_t>(rng() % 300);
    const int n = 1 + static_cast<int>(rng() % 40);
    auto [state, appends] = randomAging(rng, slots, 4 * slots + 100, n);
    // Half the rounds: the step used every hot row (no CLOCK candidate, as
    // after promotions that ran out of victims) but a few (0 to 2), so that
    // the searches fail, or find the few, or the aged rows (their last use
    // earlier, some of them) bring candidates back.
    DeviceGroupState &g = state.group;
    const std::int64_t few = round % 2 == 0 ? static_cast<std::int64_t>(rng() % 3) : -1;
    if (few >= 0) {
      if (rng() % 2 == 0)
        g.noVictimStep = 0; // more searches
      std::vector<std::size_t> hot;
      for (std::size_t t = 0; t < g.hotRows.size(); ++t)
        if (g.hotRows[t] >= 0)
          g.recency[2 * t] = static_cast<std::int32_t>(g.step), hot.push_back(t);
      std::shuffle(hot.begin(), hot.end(), rng);
      for (std::size_t k = 0; k < hot.size() && static_cast<std::int64_t>(k) < few; ++k)
        g.recency[2 * hot[k]] = static_cast<std::int32_t>(rng() % g.step);
    }
    std::int64_t candidatesBefore = 0;
    for (std::size_t t = 0; t < g.hotRows.size(); ++t)
      candidatesBefore +=
          g.hotRows[t] >= 0 && static_cast<std::uint32_t>(g.recency[2 * t]) < g.step;
    AgeRowsState counted = state, scanned = state;
    PromotionPlanList countedList, scannedList;
    const std::uint32_t status = planAgeRows(counted, appends, countedList);
    CHECK(status == planAgeRowsByScan(scanned, appends, scannedList));
    CHECK(countedList.rows == scannedList.rows);
    CHECK(countedList.slots == scannedList.slots);
    CHECK(counted.map == scanned.map);
    CHECK(counted.group == scanned.group);
    const bool memo = state.group.noVictimStep == state.group.step;
    checks += memo;
    resets += memo && counted.group.noVictimStep == 0;
    // A search that failed (the memo set from another value) in a state
    // without candidates, or one with a few.
    const bool failed = !memo && counted.group.noVictimStep == counted.group.step;
    emptyFailed += failed && candidatesBefore == 0;
    fewSearched += few > 0 && candidatesBefore > 0 && counted.group.hand != state.group.hand;
    for (std::size_t i = static_cast<std::size_t>(n); i < countedList.rows.size(); ++i)
      releases += countedList.rows[i] >= 0;
    statuses += status != 0;
  }
  // The cases reach what the counts decide: memos that hold and reset,
  // releases, bad appends.
  CHECK(checks > 100);
  CHECK(resets > 20);
  CHECK(releases > 100);
  CHECK(statuses > 20);
  // ... and the CLOCK candidates' count: searches in states without
  // candidates (not walked), searches that find one of a few.
  CHECK(emptyFailed > 20);
  CHECK(fewSearched > 20);
}

namespace {

/// The device emulator's lockstep, `steps` steps (see the file comment).
void runEmulator(std::mt19937_64 &rng, std::int32_t cap, int steps) {
  ResidencyConfig config = ResidencyConfig::adaptive(2, 240, 40000, 8, 2, 0);
  config.maxRequests = 8;
  config.maxPromotionsPerStep = cap;
  ResidencyController a(config), b(config);
  const std::int32_t groups = config.groups;
  std::vector<EmulatedGroup> device(static_cast<std::size_t>(groups));
  std::vector<RowCopy> copies;
  std::vector<std::set<std::int32_t>> recent(static_cast<std::size_t>(config.maxRequests));
  const std::int64_t perLane = 40;
  std::int64_t exhausted = 0, admitted = 0, finished = 0, appended = 0, agingReleases = 0,
               released = 0;
  auto admit = [&](std::int64_t shortest = 20) {
    const std::int64_t len = shortest + static_cast<std::int64_t>(rng() % 1500);
    const std::int64_t maxContext = len + 200;
    if (!a.admissionRefusal(maxContext).empty())
      return;
    const std::int32_t ra = a.admit(len, maxContext, copies);
    const std::int32_t rb = b.admit(len, maxContext, copies);
    REQUIRE(ra == rb);
    recent[static_cast<std::size_t>(ra)].clear();
    ++admitted;
  };
  auto live = [&]() {
    std::vector<std::int32_t> out;
    for (std::int32_t r = 0; r < config.maxRequests; ++r)
      if (a.live(r))
        out.push_back(r);
    return out;
  };
  // Host-side changes happen with B adopted; then the state is uploaded
  // and the device owns the groups again.
  auto hostSide = [&](auto change) {
    for (std::int32_t g = 0; g < groups; ++g)
      if (b.deviceOwned(g))
        b.adoptDeviceState(g, device[static_cast<std::size_t>(g)].state);
    change();
    for (std::int32_t g = 0; g < groups; ++g) {
      device[static_cast<std::size_t>(g)].upload(b, g);
      b.markDeviceOwned(g);
    }
  };
  auto compare = [&](const char *when) {
    INFO(when);
    ResidencyController adopted = b;
    for (std::int32_t g = 0; g < groups; ++g) {
      CHECK(device[static_cast<std::size_t>(g)].map == a.residencyTable(g));
      CHECK(deviceDifference(device[static_cast<std::size_t>(g)].state, a.exportDeviceState(g)) ==
            "");
      adopted.adoptDeviceState(g, device[static_cast<std::size_t>(g)].state);
    }
    REQUIRE(firstDifference(a, adopted) == "");
    adopted.checkConsistency();
  };
  hostSide([&] {
    for (int i = 0; i < 5; ++i)
      admit();
  });
  for (int step = 1; step <= steps; ++step) {
    INFO("step " << step);
    // The batch: the live requests in a random lane order, one empty lane.
    std::vector<std::int32_t> lanes = live();
    std::shuffle(lanes.begin(), lanes.end(), rng);
    lanes.insert(lanes.begin() + static_cast<std::ptrdiff_t>(rng() % (lanes.size() + 1)), -1);
    std::vector<std::vector<std::int32_t>> rows(static_cast<std::size_t>(groups));
    for (std::int32_t g = 0; g < groups; ++g)
      selectRows(rng, a, lanes, perLane, recent, rows[static_cast<std::size_t>(g)]);
    std::vector<std::int64_t> starts(lanes.size(), 0);
    for (std::size_t l = 0; l < lanes.size(); ++l)
      if (lanes[l] >= 0)
        starts[l] = a.historyStart(lanes[l]);
    hostStep(a, lanes, rows, perLane, copies);
    b.beginStep();
    for (std::int32_t g = 0; g < groups; ++g) {
      bool ranOut = false;
      const DeviceStepCounts counts = device[static_cast<std::size_t>(g)].step(
          lanes, starts, rows[static_cast<std::size_t>(g)], perLane, cap, b.optionalBudget(),
          b.stepCount(), ranOut);
      exhausted += ranOut;
      released += counts.released;
      b.applyDeviceCounts(g, counts);
    }
    std::vector<RowCopy> none;
    b.endStep(none);
    CHECK(none.empty());
    compare("after the step");
    // Appends between steps, recorded by B and replayed by age_rows.
    std::vector<RowCopy> releases;
    a.setReleaseLog(&releases);
    for (std::int32_t r : live())
      for (int t = static_cast<int>(rng() % 3); t > 0; --t) // two appends now and then
        if (a.historyLen(r) < a.maxContext(r)) {
          a.append(r, copies);
          b.append(r, copies);
          ++appended;
        }
    a.setReleaseLog(nullptr);
    agingReleases += static_cast<std::int64_t>(releases.size());
    for (std::int32_t g = 0; g < groups; ++g) {
      PromotionPlanList list;
      EmulatedGroup &d = device[static_cast<std::size_t>(g)];
      b.applyDeviceAppends(g, d.age(b.deviceAppends(g), b.optionalBudget(), list));
    }
    compare("after the appends");
    // Midway, every request slot filled with long histories for 10 steps
    // (no finishes): 8 lanes x 40 selections > 240 slots, the selections
    // alone exhaust the victims, whatever the random walk did before.
    const int pressureStart = steps / 2, pressureEnd = steps / 2 + 10;
    if (step == pressureStart) {
      hostSide([&] {
        for (int tries = 0;
             tries < 64 && static_cast<std::int32_t>(live().size()) < config.maxRequests; ++tries)
          admit(/*shortest=*/200);
      });
      REQUIRE(static_cast<std::int32_t>(live().size()) == config.maxRequests);
      compare("after filling every request slot");
    }
    // Now and then a request finishes, or one is admitted.
    if (rng() % 4 == 0 && !(step >= pressureStart && step < pressureEnd)) {
      hostSide([&] {
        std::vector<std::int32_t> all = live();
        if (all.size() > 2 && rng() % 2) {
          const std::int32_t r = all[rng() % all.size()];
          a.finish(r);
          b.finish(r);
          ++finished;
        } else {
          admit();
        }
      });
      compare("after an admission or finish");
    }
  }
  INFO("exhausted " << exhausted << ", admitted " << admitted << ", finished " << finished
                    << ", appended " << appended << ", released by appends " << agingReleases
                    << ", by promotions " << released);
  if (cap < 0)
    CHECK(exhausted > 5);
  else
    CHECK(a.totals().notPromoted > a.totals().promoted / 4);
  CHECK(finished > 5);
  CHECK(admitted > 10);
  CHECK(agingReleases > 50);
  CHECK(released > 200);
}

} // namespace

TEST_CASE("a controller driven by the device's decisions stays identical to the host's "
          "(200 steps, appends, admissions, finishes)",
          "[residency][device]") {
  DHS_SEEDED_RNG(rng, 2900);
  SECTION("no cap") { runEmulator(rng, -1, 200); }
  SECTION("at most 6 promotions per request and step") { runEmulator(rng, 6, 200); }
}

namespace {

/// A step on each controller in `controllers`: each of the `live` requests
/// selects `K` random rows of its history in every one of `groups` groups.
void randomStep(const std::vector<ResidencyController *> &controllers,
                const std::vector<std::int32_t> &live, std::int32_t groups, std::int64_t K,
                std::mt19937_64 &rng) {
  std::vector<std::int32_t> rows, out;
  for (std::int32_t r : live)
    for (std::int64_t k = 0; k < K; ++k)
      rows.push_back(static_cast<std::int32_t>(
          rng() % static_cast<std::uint64_t>(controllers.front()->historyLen(r))));
  out.resize(rows.size());
  std::vector<RowCopy> copies;
  for (ResidencyController *c : controllers) {
    c->beginStep();
    for (std::int32_t g = 0; g < groups; ++g)
      c->resolve(g, live.data(), static_cast<std::int64_t>(live.size()), rows.data(), 1, K,
                 out.data());
    c->endStep(copies);
  }
}

/// Moves hot rows of a device state as its decisions would: up to `swaps`
/// swaps between hot slots, then up to `toFree` moves into free slots (the
/// free stack takes the slot left). Returns the moves made.
std::int64_t moveHotRows(DeviceGroupState &s, std::int32_t slots, int swaps, int toFree,
                         std::mt19937_64 &rng) {
  std::vector<std::int32_t> hot;
  for (std::int32_t slot = 0; slot < slots; ++slot)
    if (s.hotRows[static_cast<std::size_t>(slot)] >= 0)
      hot.push_back(slot);
  auto swapSlots = [&](std::int32_t a, std::int32_t b) {
    std::swap(s.hotRows[static_cast<std::size_t>(a)], s.hotRows[static_cast<std::size_t>(b)]);
    std::swap(s.cleared[static_cast<std::size_t>(a)], s.cleared[static_cast<std::size_t>(b)]);
    for (int w = 0; w < 2; ++w)
      std::swap(s.recency[2 * static_cast<std::size_t>(a) + static_cast<std::size_t>(w)],
                s.recency[2 * static_cast<std::size_t>(b) + static_cast<std::size_t>(w)]);
  };
  std::int64_t moved = 0;
  for (int k = 0; k < swaps && hot.size() >= 2; ++k) {
    swapSlots(hot[rng() % hot.size()], hot[rng() % hot.size()]);
    ++moved;
  }
  for (int k = 0; k < toFree && !hot.empty() && s.freeCount > 0; ++k) {
    const std::size_t h = rng() % hot.size();
    const std::size_t f = rng() % static_cast<std::size_t>(s.freeCount);
    const std::int32_t freeSlot = s.freeStack[f];
    swapSlots(hot[h], freeSlot);
    s.freeStack[f] = hot[h];
    hot[h] = freeSlot;
    ++moved;
  }
  return moved;
}

/// Two controllers (2 groups of 200 slots; adaptive, CLOCK, hot floor 0)
/// that admitted the same 4 requests of 200-700 rows, `live`.
struct TwinControllers {
  static constexpr std::int32_t groups = 2, slots = 200;
  static ResidencyConfig config() {
    ResidencyConfig c = ResidencyConfig::adaptive(groups, slots, 20000, 8, 0, 0);
    c.maxRequests = 6;
    return c;
  }
  ResidencyController a{config()}, b{config()};
  std::vector<std::int32_t> live;

  explicit TwinControllers(std::mt19937_64 &rng) {
    std::vector<RowCopy> copies;
    for (int r = 0; r < 4; ++r) {
      const std::int64_t length = 200 + static_cast<std::int64_t>(rng() % 500);
      live.push_back(a.admit(length, length + 100, copies));
      REQUIRE(b.admit(length, length + 100, copies) == live.back());
    }
  }
};

} // namespace

TEST_CASE("groups exported, handed over and adopted together (in parallel) make the decisions of "
          "one group at a time, with hot rows moved to other slots and requests",
          "[residency][device]") {
  DHS_SEEDED_RNG(rng, 3100);
  const std::int32_t groups = 5, slots = 300;
  ResidencyConfig config = ResidencyConfig::adaptive(groups, slots, 40000, 8, 0, 0);
  config.maxRequests = 8;
  // `together` takes the list calls, `alone` the per-group ones; both get
  // the same admissions, finishes, steps and appends.
  ResidencyController together(config), alone(config);
  std::vector<RowCopy> copies;
  std::vector<std::int32_t> live;
  auto admit = [&] {
    const std::int64_t length = 300 + static_cast<std::int64_t>(rng() % 700);
    const std::int32_t r = together.admit(length, length + 200, copies);
    REQUIRE(alone.admit(length, length + 200, copies) == r);
    live.push_back(r);
  };
  for (int r = 0; r < 6; ++r)
    admit();
  std::vector<std::int32_t> all;
  for (std::int32_t g = 0; g < groups; ++g)
    all.push_back(g);
  std::vector<DeviceGroupState> states; // kept from round trip to round trip
  std::int64_t moved = 0, adopted = 0;
  for (int step = 0; step < 40; ++step) {
    INFO("step " << step);
    // A step on both.
    randomStep({&together, &alone}, live, groups, 24, rng);
    REQUIRE(firstDifference(together, alone) == "");

    // The round trip: the same states, then hot rows moved as a device's
    // decisions would (swapped between hot slots, moved to free slots).
    together.exportDeviceStates(all, states);
    REQUIRE(states.size() == static_cast<std::size_t>(groups));
    for (std::int32_t g = 0; g < groups; ++g) {
      DeviceGroupState &s = states[static_cast<std::size_t>(g)];
      REQUIRE(s == alone.exportDeviceState(g)); // (into a buffer of the last step)
      moved += moveHotRows(s, slots, 8, 4, rng);
    }
    together.markDeviceOwned(all);
    for (std::int32_t g = 0; g < groups; ++g) {
      CHECK(together.deviceOwned(g));
      alone.markDeviceOwned(g);
    }
    together.adoptDeviceStates(all, states);
    for (std::int32_t g = 0; g < groups; ++g)
      alone.adoptDeviceState(g, states[static_cast<std::size_t>(g)]);
    REQUIRE(firstDifference(together, alone) == "");
    together.checkConsistency();
    // Each hot slot's owner and row, found from the request ranges here.
    for (std::int32_t g = 0; g < groups; ++g) {
      const DeviceGroupState &s = states[static_cast<std::size_t>(g)];
      CHECK_FALSE(together.deviceOwned(g));
      for (std::int32_t slot = 0; slot < slots; ++slot) {
        const std::int64_t row = s.hotRows[static_cast<std::size_t>(slot)];
        if (row < 0)
          continue;
        std::int32_t owner = -1;
        for (std::int32_t r : live)
          if (row >= together.historyStart(r) &&
              row < together.historyStart(r) + together.historyLen(r))
            owner = r;
        REQUIRE(together.slotOwner(g, slot) == owner);
        REQUIRE(together.slotRow(g, slot) == row - together.historyStart(owner));
        REQUIRE(together.residencyTable(g)[static_cast<std::size_t>(row)] == slot);
        ++adopted;
      }
      CHECK(deviceDifference(together.exportDeviceState(g), s) == "");
    }

    // Appends (the adopted tables decide them), a finish and an admission.
    for (std::int32_t r : live)
      if (together.historyLen(r) < together.maxContext(r))
        for (ResidencyController *c : {&together, &alone})
          c->append(r, copies);
    if (step % 7 == 6) {
      const std::size_t i = rng() % live.size();
      together.finish(live[i]);
      alone.finish(live[i]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      admit();
    }
    REQUIRE(firstDifference(together, alone) == "");
  }
  together.checkConsistency();
  CHECK(moved > 1000);
  CHECK(adopted > 10000);
}

TEST_CASE("an adoption of a device's state whose allocation fails changes nothing",
          "[residency][device][alloc-failure]") {
  // Two controllers make the same calls; `a` adopts each group's state with
  // each of its allocations failing in turn first. A failed adoption must
  // leave the group the device's, to be adopted again, and the adoption
  // that succeeds must give `b`'s state. The device's state moves hot rows
  // into free slots (a new free stack), as its decisions would.
  DHS_SEEDED_RNG(rng, 3200);
  TwinControllers twins(rng);
  ResidencyController &a = twins.a, &b = twins.b;
  const std::int32_t groups = TwinControllers::groups, slots = TwinControllers::slots;
  std::uint64_t failures = 0;
  for (int step = 0; step < 6; ++step) {
    INFO("step " << step);
    randomStep({&a, &b}, twins.live, groups, 24, rng);
    for (std::int32_t g = 0; g < groups; ++g) {
      DeviceGroupState s = a.exportDeviceState(g);
      moveHotRows(s, slots, 0, 4, rng);
      a.markDeviceOwned(g);
      b.markDeviceOwned(g);
      // (A device-owned group's host tables cannot be read.)
      failures += dhs::test::failEachAllocation([&] { a.adoptDeviceState(g, s); },
                                                [&] { REQUIRE(a.deviceOwned(g)); });
      b.adoptDeviceState(g, s);
      REQUIRE_FALSE(a.deviceOwned(g));
      REQUIRE(firstDifference(a, b) == "");
      a.checkConsistency();
    }
  }
  CHECK(failures > 0);
}

TEST_CASE("a handover of groups to the device whose allocation fails hands over none",
          "[residency][device][alloc-failure]") {
  // `a` hands both groups over with each of its allocations failing in
  // turn first: a failed handover leaves every group the host's (its
  // tables readable and `b`'s), and the one that succeeds gives both, as
  // `b`'s, which adopt the same device state as `b`'s.
  DHS_SEEDED_RNG(rng, 3300);
  TwinControllers twins(rng);
  ResidencyController &a = twins.a, &b = twins.b;
  const std::int32_t groups = TwinControllers::groups, slots = TwinControllers::slots;
  std::uint64_t failures = 0;
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    randomStep({&a, &b}, twins.live, groups, 24, rng);
    std::vector<DeviceGroupState> states;
    for (std::int32_t g = 0; g < groups; ++g) {
      states.push_back(a.exportDeviceState(g));
      moveHotRows(states.back(), slots, 0, 4, rng);
    }
    failures += dhs::test::failEachAllocation([&] { a.markDeviceOwned({0, 1}); },
                                              [&] {
                                                REQUIRE_FALSE(a.deviceOwned(0));
                                                REQUIRE_FALSE(a.deviceOwned(1));
                                                REQUIRE(firstDifference(a, b) == "");
                                              });
    b.markDeviceOwned({0, 1});
    for (std::int32_t g = 0; g < groups; ++g) {
      REQUIRE(a.deviceOwned(g));
      a.adoptDeviceState(g, states[static_cast<std::size_t>(g)]);
      b.adoptDeviceState(g, states[static_cast<std::size_t>(g)]);
    }
    REQUIRE(firstDifference(a, b) == "");
    a.checkConsistency();
  }
  CHECK(failures > 0);
}
