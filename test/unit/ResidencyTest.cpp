//===- ResidencyTest.cpp - The residency controller's rules ---------------===//

#include "ControllerState.h"
#include "FailingAllocation.h"
#include "TestUtil.h"

#include "runtime/core/Error.h"
#include "runtime/residency/Residency.h"
#include "runtime/residency/ResidencyState.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>

using namespace dhs::runtime;
using dhs::test::freshSeed;

namespace {

/// One step of one group: selections [batch, Q, K] in, slots out.
struct StepResult {
  std::vector<std::int32_t> slots;
  std::vector<RowCopy> copies;
  ResidencyStepStats stats;
};

/// Runs a whole step over group 0 only (or every group with the same
/// selections when `allGroups`).
StepResult runStep(ResidencyController &c, const std::vector<std::int32_t> &requests,
                   const std::vector<std::int32_t> &rowIds, std::int64_t Q, std::int64_t K,
                   bool allGroups = true) {
  StepResult result;
  result.slots.assign(rowIds.size(), -2);
  c.beginStep();
  for (std::int32_t g = 0; g < (allGroups ? c.config().groups : 1); ++g) {
    std::vector<std::int32_t> slots(rowIds.size());
    c.resolve(g, requests.data(), static_cast<std::int64_t>(requests.size()), rowIds.data(), Q, K,
              slots.data());
    if (g == 0)
      result.slots = slots;
  }
  c.endStep(result.copies);
  result.stats = c.lastStep();
  return result;
}

/// Selections of one request, one query: the given rows.
StepResult selectRows(ResidencyController &c, std::int32_t request,
                      const std::vector<std::int32_t> &rows) {
  return runStep(c, {request}, rows, 1, static_cast<std::int64_t>(rows.size()));
}

/// K distinct random rows of [0, len).
std::vector<std::int32_t> randomRows(std::mt19937_64 &rng, std::int64_t len, std::int64_t K) {
  std::set<std::int32_t> rows;
  while (static_cast<std::int64_t>(rows.size()) < std::min(K, len))
    rows.insert(static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(len)));
  std::vector<std::int32_t> out(rows.begin(), rows.end());
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

/// The lanes of a random step over `live` (request -> length): each request
/// with rows two times in three, then an empty lane (-1).
std::vector<std::int32_t> randomLanes(const std::map<std::int32_t, std::int64_t> &live,
                                      std::mt19937_64 &rng) {
  std::vector<std::int32_t> lanes;
  for (const auto &[r, len] : live)
    if (len > 0 && rng() % 3)
      lanes.push_back(r);
  lanes.push_back(-1);
  return lanes;
}

/// Selections [lanes][perLane] for randomLanes' lanes: one in `unusedOneIn`
/// is -1, every other a random row of the lane's first `firstRows` (-1: of
/// all its rows); the empty lane selects nothing.
std::vector<std::int32_t> randomSelections(const std::vector<std::int32_t> &lanes,
                                           const std::map<std::int32_t, std::int64_t> &live,
                                           std::int64_t perLane, unsigned unusedOneIn,
                                           std::int64_t firstRows, std::mt19937_64 &rng) {
  std::vector<std::int32_t> rows(lanes.size() * static_cast<std::size_t>(perLane), -1);
  for (std::size_t b = 0; b + 1 < lanes.size(); ++b) {
    const std::int64_t len = live.at(lanes[b]);
    const std::int64_t choices = firstRows < 0 ? len : std::min(len, firstRows);
    for (std::int64_t i = 0; i < perLane; ++i)
      if (rng() % unusedOneIn)
        rows[b * static_cast<std::size_t>(perLane) + static_cast<std::size_t>(i)] =
            static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(choices));
  }
  return rows;
}

} // namespace

TEST_CASE("config validation and admission refusals", "[residency]") {
  ResidencyConfig bad = ResidencyConfig::adaptive(0, 10, 100, 1, 0, 0);
  CHECK_THROWS_WITH(ResidencyController(bad), Catch::Contains("groups is 0"));
  bad = ResidencyConfig::adaptive(1, -1, 100, 1, 0, 0);
  CHECK_THROWS_WITH(ResidencyController(bad), Catch::Contains("hbm_slots is -1"));

  // 100 slots, 30 reserved per request (W 16 + ring 4 + floor 10): 3 fit.
  ResidencyController c(ResidencyConfig::adaptive(2, 100, 10000, 16, 4, 10));
  std::vector<RowCopy> copies;
  for (int i = 0; i < 3; ++i) {
    CHECK(c.nextIndex() == i);
    CHECK(c.admit(50, 1000, copies) == i);
  }
  // A finished request's index is the next one taken (the runtime
  // allocates its rings there before admitting).
  c.finish(1);
  CHECK(c.nextIndex() == 1);
  CHECK(c.admit(50, 1000, copies) == 1);
  CHECK(c.nextIndex() == 3);
  CHECK(c.optionalBudget() == 10);
  std::string refusal = c.admissionRefusal(1000);
  CHECK_THAT(refusal, Catch::Contains("4 requests x 30 slots (newest 16 + ring 4 + "
                                      "hot floor 10) = 120 slots per group, the pool has 100"));
  copies.clear();
  CHECK_THROWS_AS(c.admit(50, 1000, copies), CapacityError);
  CHECK_THROWS_WITH(c.admit(50, 1000, copies), Catch::StartsWith("admission refused: HBM"));
  // Nothing changed.
  CHECK(copies.empty());
  CHECK(c.liveCount() == 3);
  CHECK(c.hostAllocator().usedRows() == 3000);
  c.checkConsistency();
  // Finishing one makes room again.
  c.finish(1);
  CHECK(c.admissionRefusal(1000).empty());
  CHECK(c.admit(50, 1000, copies) == 1);
  c.checkConsistency();

  SECTION("host store exhausted") {
    ResidencyController small(ResidencyConfig::adaptive(1, 1000, 2500, 4, 0, 0));
    small.admit(10, 1000, copies);
    small.admit(10, 1000, copies);
    CHECK_THROWS_WITH(small.admit(10, 1000, copies),
                      Catch::Contains("host store has no free range of 1000 rows (500 of 2500"));
    CHECK(small.liveCount() == 2);
    CHECK(small.admit(10, 500, copies) == 2);
  }
  SECTION("request table full") {
    ResidencyConfig config = ResidencyConfig::adaptive(1, 1000, 100000, 1, 0, 0);
    config.maxRequests = 2;
    ResidencyController table(config);
    table.admit(1, 10, copies);
    table.admit(1, 10, copies);
    CHECK_THROWS_WITH(table.admit(1, 10, copies), Catch::Contains("request table is full"));
  }
  SECTION("bad arguments") {
    CHECK_THROWS_WITH(c.admit(-1, 10, copies), Catch::Contains("history of -1 rows"));
    CHECK_THROWS_WITH(c.admit(20, 10, copies), Catch::Contains("maximum context 10"));
    CHECK_THROWS_AS(c.finish(7), UnknownRequestError);
    CHECK_THROWS_AS(c.append(-1, copies), UnknownRequestError);
  }
}

TEST_CASE("the protected set: newest window and draft ring are always resident", "[residency]") {
  DHS_SEEDED_RNG(rng, 10);
  const std::int32_t W = 8, ring = 3;
  ResidencyController c(ResidencyConfig::adaptive(2, 64, 4096, W, ring, 0));
  std::vector<RowCopy> copies;
  const std::int32_t r = c.admit(20, 200, copies);
  const std::int64_t start = c.historyStart(r);
  // One copy per group and newest row, from the right host rows.
  REQUIRE(copies.size() == 2u * W);
  for (std::int32_t g = 0; g < 2; ++g)
    for (std::int64_t row = 12; row < 20; ++row) {
      std::int32_t slot = c.slotOf(g, r, row);
      REQUIRE(slot >= 0);
      CHECK(c.slotKind(g, slot) == SlotKind::Newest);
      CHECK(std::count(copies.begin(), copies.end(), RowCopy{g, slot, start + row}) == 1);
    }
  CHECK(c.slotOf(0, r, 11) == -1);
  CHECK(c.occupancy(0).ring == ring);
  CHECK(c.occupancy(1).newest == W);

  // Appends: each new row lands in HBM and the window slides; random
  // selections in between. Neither the window nor the ring ever goes.
  for (int step = 0; step < 150; ++step) {
    copies.clear();
    c.append(r, copies);
    const std::int64_t len = c.historyLen(r);
    REQUIRE(copies.size() == 2);
    CHECK(copies[0].hostRow == start + len - 1);
    selectRows(c, r, randomRows(rng, len, 6));
    for (std::int32_t g = 0; g < 2; ++g) {
      for (std::int64_t row = len - W; row < len; ++row) {
        std::int32_t slot = c.slotOf(g, r, row);
        REQUIRE(slot >= 0);
        REQUIRE(c.slotKind(g, slot) == SlotKind::Newest);
      }
      REQUIRE(c.occupancy(g).ring == ring);
    }
    c.checkConsistency();
  }
  copies.clear();
  while (c.historyLen(r) < 200)
    c.append(r, copies);
  CHECK_THROWS_WITH(c.append(r, copies), Catch::Contains("reached its maximum context of 200"));
}

TEST_CASE("promotion: fetched rows become resident after the step, never during it",
          "[residency]") {
  ResidencyController c(ResidencyConfig::adaptive(1, 64, 4096, 4, 0, 0));
  std::vector<RowCopy> copies;
  const std::int32_t r = c.admit(100, 200, copies);
  const std::int64_t start = c.historyStart(r);
  // Two queries select rows 5 and 7; both also select row 5.
  std::vector<std::int32_t> rows = {5, 7, 99, -1, /*query 1*/ 5, 30, -1, -1};
  StepResult first = runStep(c, {r}, rows, 2, 4);
  // Resolved before promotion: 5, 7, 30 from the host; 99 is a newest row.
  CHECK(first.slots[0] == -1);
  CHECK(first.slots[1] == -1);
  CHECK(first.slots[2] == c.slotOf(0, r, 99));
  CHECK(first.slots[2] >= 0);
  CHECK(first.slots[3] == -1);
  CHECK(first.slots[4] == -1);
  CHECK(first.stats.entries == 5);
  CHECK(first.stats.selected == 4); // row 5 counted once (shared retrieval)
  CHECK(first.stats.resident == 1);
  CHECK(first.stats.fetched == 3);
  CHECK(first.stats.promoted == 3);
  // Promoted: one copy per fetched row.
  REQUIRE(first.copies.size() == 3);
  for (std::int32_t row : {5, 7, 30}) {
    std::int32_t slot = c.slotOf(0, r, row);
    REQUIRE(slot >= 0);
    CHECK(c.slotKind(0, slot) == SlotKind::Hot);
    CHECK(std::count(first.copies.begin(), first.copies.end(), RowCopy{0, slot, start + row}) == 1);
  }
  // The next step reads them from HBM.
  StepResult second = runStep(c, {r}, rows, 2, 4);
  CHECK(second.slots[0] == c.slotOf(0, r, 5));
  CHECK(second.slots[4] == c.slotOf(0, r, 5));
  CHECK(second.stats.fetched == 0);
  CHECK(second.stats.resident == 4);
  CHECK(second.copies.empty());
  c.checkConsistency();

  SECTION("a promotion limit per step") {
    ResidencyConfig config = ResidencyConfig::adaptive(1, 64, 4096, 4, 0, 0);
    config.maxPromotionsPerStep = 2;
    ResidencyController limited(config);
    const std::int32_t q = limited.admit(100, 200, copies);
    StepResult s = selectRows(limited, q, {1, 2, 3, 4, 5});
    CHECK(s.stats.promoted == 2);
    CHECK(s.stats.notPromoted == 3);
    limited.checkConsistency();
  }
}

TEST_CASE("resolve validates everything before changing anything", "[residency]") {
  ResidencyController c(ResidencyConfig::adaptive(2, 64, 4096, 4, 0, 0));
  std::vector<RowCopy> copies;
  const std::int32_t r = c.admit(100, 200, copies);
  const std::int32_t other = c.admit(50, 200, copies);
  std::vector<std::int32_t> slots(4, -7);
  std::vector<std::int32_t> requests = {r, other};
  CHECK_THROWS_AS(c.resolve(0, requests.data(), 2, nullptr, 1, 2, slots.data()), StateError);
  c.beginStep();
  CHECK_THROWS_AS(c.beginStep(), StateError);
  std::vector<std::int32_t> rows = {3, 4, 10, 50};
  CHECK_THROWS_WITH(c.resolve(0, requests.data(), 2, rows.data(), 1, 2, slots.data()),
                    Catch::Contains("row id 50 at [lane 1, query 0, k 1] is outside request "
                                    "1's history (length 50)"));
  CHECK(slots == std::vector<std::int32_t>(4, -7));
  CHECK(c.lastStep().entries == 0);
  rows[3] = -5;
  CHECK_THROWS_WITH(c.resolve(0, requests.data(), 2, rows.data(), 1, 2, slots.data()),
                    Catch::Contains("row id -5 at [lane 1, query 0, k 1] is invalid"));
  rows[3] = 49;
  std::vector<std::int32_t> twice = {r, r};
  CHECK_THROWS_WITH(c.resolve(0, twice.data(), 2, rows.data(), 1, 2, slots.data()),
                    Catch::Contains("request 0 appears twice"));
  std::vector<std::int32_t> unknown = {r, 9};
  CHECK_THROWS_AS(c.resolve(0, unknown.data(), 2, rows.data(), 1, 2, slots.data()),
                  UnknownRequestError);
  std::vector<std::int32_t> empty = {r, -1};
  CHECK_THROWS_WITH(c.resolve(0, empty.data(), 2, rows.data(), 1, 2, slots.data()),
                    Catch::Contains("selects a row for an empty batch lane"));
  CHECK_THROWS_WITH(c.resolve(2, requests.data(), 2, rows.data(), 1, 2, slots.data()),
                    Catch::Contains("layer group 2 does not exist"));
  CHECK_THROWS_AS(c.admit(10, 20, copies), StateError);
  CHECK_THROWS_AS(c.append(r, copies), StateError);
  CHECK_THROWS_AS(c.finish(r), StateError);
  // Now a valid one; then the same group again is refused.
  c.resolve(0, requests.data(), 2, rows.data(), 1, 2, slots.data());
  CHECK(slots[0] == -1);
  CHECK(slots[3] == c.slotOf(0, other, 49));
  CHECK_THROWS_AS(c.resolve(0, requests.data(), 2, rows.data(), 1, 2, slots.data()), StateError);
  c.endStep(copies);
  CHECK_THROWS_AS(c.endStep(copies), StateError);
  c.checkConsistency();
}

TEST_CASE("optional residency uses spare memory and is released under pressure", "[residency]") {
  DHS_SEEDED_RNG(rng, 20);
  // 400 slots; a request reserves 8 + 2 + 20 = 30.
  ResidencyController c(ResidencyConfig::adaptive(1, 400, 100000, 8, 2, 20));
  std::vector<RowCopy> copies;
  const std::int32_t a = c.admit(5000, 6000, copies);
  CHECK(c.optionalBudget() == 370);
  // One request alone fills the pool with optional rows.
  for (int step = 0; step < 30; ++step)
    selectRows(c, a, randomRows(rng, 4992, 64));
  GroupOccupancy alone = c.occupancy(0);
  CHECK(alone.hot == 20 + 370);
  CHECK(alone.optionalUsed == 370);
  CHECK(alone.used == 400);
  c.checkConsistency();

  // Admitting 10 more requests releases optional rows at once: every new
  // protected set is placed in the admitting call.
  std::vector<std::int32_t> others;
  for (int i = 0; i < 10; ++i) {
    copies.clear();
    std::int64_t evictedBefore = c.evictionCount();
    others.push_back(c.admit(3000, 4000, copies));
    CHECK(copies.size() == 8); // its newest rows, placed now
    CHECK(c.optionalBudget() == 400 - 30 * (i + 2));
    GroupOccupancy now = c.occupancy(0);
    CHECK(now.optionalUsed <= c.optionalBudget());
    // Exactly the optional rows over the new budget were released.
    CHECK(c.evictionCount() - evictedBefore ==
          std::max<std::int64_t>(0, alone.optionalUsed - c.optionalBudget()));
    alone = now;
    c.checkConsistency();
  }
  CHECK(c.optionalBudget() == 70);
  CHECK(c.occupancy(0).optionalUsed <= 70);
  // The 12th does not fit (12 x 30 = 360 <= 400 fits; 13 x 30 = 390 fits; 14 does not).
  others.push_back(c.admit(10, 100, copies));
  others.push_back(c.admit(10, 100, copies));
  CHECK(c.optionalBudget() == 10);
  CHECK_THROWS_AS(c.admit(10, 100, copies), CapacityError);
  c.checkConsistency();

  // Departures grow the budget again, and optional rows use it.
  for (std::int32_t r : others)
    c.finish(r);
  CHECK(c.optionalBudget() == 370);
  for (int step = 0; step < 30; ++step)
    selectRows(c, a, randomRows(rng, 4992, 64));
  CHECK(c.occupancy(0).optionalUsed == 370);
  c.checkConsistency();
}

TEST_CASE("an admitted request is never starved of its floor", "[residency]") {
  DHS_SEEDED_RNG(rng, 30);
  for (Replacement replacement : {Replacement::Clock, Replacement::Lru, Replacement::Lru2}) {
    INFO(abi::name(replacement));
    ResidencyConfig config = ResidencyConfig::adaptive(1, 200, 100000, 4, 0, 16);
    config.replacement = replacement;
    ResidencyController c(config);
    std::vector<RowCopy> copies;
    const std::int32_t greedy = c.admit(5000, 6000, copies);
    const std::int32_t quiet = c.admit(5000, 6000, copies);
    // The greedy request takes all optional memory...
    for (int step = 0; step < 20; ++step)
      selectRows(c, greedy, randomRows(rng, 4996, 100));
    CHECK(c.occupancy(0).optionalUsed == c.optionalBudget());
    // ...and the quiet one still gets every row up to its floor promoted.
    StepResult s = selectRows(c, quiet, randomRows(rng, 4996, 16));
    CHECK(s.stats.promoted == 16);
    CHECK(c.hotCount(0, quiet) == 16);
    // Beyond its floor it competes for optional slots by replacement: the
    // greedy request's unselected rows give way.
    s = selectRows(c, quiet, randomRows(rng, 4996, 30));
    CHECK(s.stats.notPromoted == 0);
    CHECK(c.hotCount(0, quiet) > 16);
    // Both at once, many steps: the quiet one never drops below its floor.
    for (int step = 0; step < 40; ++step) {
      std::vector<std::int32_t> rows = randomRows(rng, 4996, 100);
      std::vector<std::int32_t> quietRows = randomRows(rng, 4996, 100);
      rows.insert(rows.end(), quietRows.begin(), quietRows.end());
      runStep(c, {greedy, quiet}, rows, 1, 100);
      REQUIRE(c.hotCount(0, quiet) >= 16);
      REQUIRE(c.hotCount(0, greedy) >= 16);
    }
    c.checkConsistency();
  }
}

TEST_CASE("fixed budget: a private buffer per request, spare memory unused", "[residency]") {
  DHS_SEEDED_RNG(rng, 40);
  const std::int32_t N = 32;
  ResidencyController fixed(ResidencyConfig::fixedBudget(1, 1000, 100000, 4, 0, N));
  ResidencyController adaptive(ResidencyConfig::adaptive(1, 1000, 100000, 4, 0, N));
  std::vector<RowCopy> copies;
  const std::int32_t f = fixed.admit(2000, 3000, copies);
  const std::int32_t a = adaptive.admit(2000, 3000, copies);
  CHECK(fixed.optionalBudget() == 0);
  // The same trace: a working set of 200 rows, 40 selected per step.
  std::vector<std::int32_t> workingSet = randomRows(rng, 1996, 200); // none newest
  ResidencyStepStats fixedTotal, adaptiveTotal;
  for (int step = 0; step < 60; ++step) {
    std::vector<std::int32_t> rows;
    if (step < 5) // the whole working set once
      rows.assign(workingSet.begin() + step * 40, workingSet.begin() + step * 40 + 40);
    else
      for (std::int32_t i : randomRows(rng, 200, 40))
        rows.push_back(workingSet[static_cast<std::size_t>(i)]);
    StepResult sf = selectRows(fixed, f, rows);
    StepResult sa = selectRows(adaptive, a, rows);
    if (step >= 20) {
      fixedTotal += sf.stats;
      adaptiveTotal += sa.stats;
    }
    REQUIRE(fixed.hotCount(0, f) <= N);
    REQUIRE(fixed.occupancy(0).used <= 4 + N);
  }
  fixed.checkConsistency();
  adaptive.checkConsistency();
  // Adaptive holds the whole working set; fixed keeps missing.
  CHECK(adaptive.hotCount(0, a) == 200);
  CHECK(adaptiveTotal.fetched == 0);
  CHECK(fixedTotal.fetched > fixedTotal.selected / 2);
  // A fixed buffer replaces within itself: rows promoted this step evict the
  // least recently used of its own, never this step's hits, so with 40 rows
  // selected per step some misses find no victim.
  CHECK(fixedTotal.evicted > 0);
  CHECK(fixedTotal.promoted + fixedTotal.notPromoted == fixedTotal.fetched);
  CHECK(fixedTotal.notPromoted > 0);
  CHECK(adaptiveTotal.evicted == 0);
}

TEST_CASE("LRU evicts the least recently selected row, LRU-2 the least frequently, CLOCK gives "
          "a second chance",
          "[residency]") {
  std::vector<RowCopy> copies;
  SECTION("lru") {
    ResidencyController c(ResidencyConfig::fixedBudget(1, 100, 10000, 0, 0, 3));
    const std::int32_t r = c.admit(100, 100, copies);
    selectRows(c, r, {10});
    selectRows(c, r, {11});
    selectRows(c, r, {12});
    selectRows(c, r, {10}); // 10 is now the most recent; 11 the least
    selectRows(c, r, {13});
    CHECK(c.slotOf(0, r, 11) == -1);
    CHECK(c.slotOf(0, r, 10) >= 0);
    CHECK(c.slotOf(0, r, 12) >= 0);
    CHECK(c.slotOf(0, r, 13) >= 0);
    // This step's hits are protected: selecting 12, 13 with two new rows
    // evicts only 10 and leaves one new row on the host.
    StepResult s = selectRows(c, r, {12, 13, 20, 21});
    CHECK(s.stats.promoted == 1);
    CHECK(s.stats.notPromoted == 1);
    CHECK(c.slotOf(0, r, 10) == -1);
    CHECK(c.slotOf(0, r, 12) >= 0);
    CHECK(c.slotOf(0, r, 13) >= 0);
    c.checkConsistency();
  }
  SECTION("lru with frequency (lru2)") {
    // 10 is selected in two steps, 11 and 12 once each, later: LRU would
    // take 10 (its last use is the oldest), LRU-2 takes 11 (used once, the
    // oldest of those), then 12, and keeps 10.
    ResidencyConfig config = ResidencyConfig::fixedBudget(1, 100, 10000, 0, 0, 3);
    config.replacement = Replacement::Lru2;
    ResidencyController c(config);
    const std::int32_t r = c.admit(100, 100, copies);
    selectRows(c, r, {10});
    selectRows(c, r, {10});
    selectRows(c, r, {11});
    selectRows(c, r, {12});
    selectRows(c, r, {13});
    CHECK(c.slotOf(0, r, 11) == -1);
    CHECK(c.slotOf(0, r, 10) >= 0);
    selectRows(c, r, {14});
    CHECK(c.slotOf(0, r, 12) == -1);
    CHECK(c.slotOf(0, r, 10) >= 0);
    CHECK(c.slotOf(0, r, 13) >= 0);
    CHECK(c.slotOf(0, r, 14) >= 0);
    // Among rows used twice, the older use before the last goes first.
    selectRows(c, r, {13});
    selectRows(c, r, {14});
    selectRows(c, r, {15});
    CHECK(c.slotOf(0, r, 10) == -1);
    c.checkConsistency();
    // The same sequence under LRU evicts 10 first.
    ResidencyController lru(ResidencyConfig::fixedBudget(1, 100, 10000, 0, 0, 3));
    const std::int32_t l = lru.admit(100, 100, copies);
    for (std::int32_t row : {10, 10, 11, 12, 13})
      selectRows(lru, l, {row});
    CHECK(lru.slotOf(0, l, 10) == -1);
    CHECK(lru.slotOf(0, l, 11) >= 0);
  }
  SECTION("clock") {
    ResidencyConfig config = ResidencyConfig::fixedBudget(1, 100, 10000, 0, 0, 3);
    config.replacement = Replacement::Clock;
    ResidencyController c(config);
    const std::int32_t r = c.admit(100, 100, copies);
    selectRows(c, r, {10, 11, 12}); // all referenced
    // A miss sweeps: all three lose their bit, then the first is taken.
    selectRows(c, r, {13});
    CHECK(c.slotOf(0, r, 10) == -1);
    // 11 is referenced again, 12 not: the next miss passes 11, takes 12.
    selectRows(c, r, {11});
    selectRows(c, r, {14});
    CHECK(c.slotOf(0, r, 11) >= 0);
    CHECK(c.slotOf(0, r, 12) == -1);
    c.checkConsistency();
  }
}

TEST_CASE("an aborted step leaves no trace: the replacement order and the eviction counts are "
          "those of a controller that never ran it",
          "[residency]") {
  const Replacement replacement = GENERATE(Replacement::Lru, Replacement::Lru2, Replacement::Clock);
  CAPTURE(static_cast<int>(replacement));
  ResidencyConfig config = ResidencyConfig::fixedBudget(1, 100, 10000, 0, 0, 3);
  config.replacement = replacement;
  ResidencyController a(config), b(config);
  std::vector<RowCopy> copies;
  const std::int32_t ra = a.admit(100, 100, copies), rb = b.admit(100, 100, copies);
  for (std::int32_t row : {10, 11, 12, 13}) {
    selectRows(a, ra, {row});
    selectRows(b, rb, {row}); // 13 evicts 10: an eviction reported at the next step
  }
  // b selects 11 (resident: touched) and 20 (missing) in a step it aborts.
  b.beginStep();
  std::vector<std::int32_t> rows{11, 20}, slots(2);
  b.resolve(0, &rb, 1, rows.data(), 1, 2, slots.data());
  b.abortStep();
  for (std::int32_t row : {21, 22}) {
    StepResult sa = selectRows(a, ra, {row}), sb = selectRows(b, rb, {row});
    CHECK(sa.stats.evicted == sb.stats.evicted);
  }
  for (std::int32_t row : {10, 11, 12, 13, 20, 21, 22})
    CHECK((a.slotOf(0, ra, row) >= 0) == (b.slotOf(0, rb, row) >= 0));
  CHECK(a.totals().evicted == b.totals().evicted);
  b.checkConsistency();
}

TEST_CASE("aged-out newest rows become hot rows within the budget", "[residency]") {
  std::vector<RowCopy> copies;
  // A request of 4 rows, then 30 steps without selections, each followed by
  // one appended token: 30 rows age out of the newest 4.
  auto ageOut = [&](ResidencyController &c) {
    const std::int32_t r = c.admit(4, 1000, copies);
    for (int i = 0; i < 30; ++i) {
      c.beginStep();
      c.endStep(copies);
      c.append(r, copies);
    }
    CHECK(c.occupancy(0).newest == 4);
    return r;
  };
  SECTION("adaptive keeps them while memory is spare") {
    ResidencyController c(ResidencyConfig::adaptive(1, 100, 10000, 4, 0, 0));
    ageOut(c);
    CHECK(c.occupancy(0).hot == 30);
    c.checkConsistency();
  }
  SECTION("fixed keeps at most its buffer") {
    ResidencyController c(ResidencyConfig::fixedBudget(1, 100, 10000, 4, 0, 5));
    const std::int32_t r = ageOut(c);
    CHECK(c.occupancy(0).hot == 5);
    // The newest aged-out rows are kept (LRU by placement step).
    for (std::int64_t row = 25; row < 30; ++row)
      CHECK(c.slotOf(0, r, row) >= 0);
    c.checkConsistency();
  }
}

TEST_CASE("random admit/append/step/finish keeps every invariant", "[residency]") {
  const std::uint64_t base = freshSeed() + 50;
  for (ResidencyPolicy policy : {ResidencyPolicy::Adaptive, ResidencyPolicy::Fixed})
    for (Replacement replacement : {Replacement::Clock, Replacement::Lru, Replacement::Lru2}) {
      INFO(abi::name(policy) << " " << abi::name(replacement) << " DHS_TEST_SEED=" << base - 50);
      std::mt19937_64 rng(base + static_cast<int>(policy) * 3 + static_cast<int>(replacement));
      ResidencyConfig config = ResidencyConfig::adaptive(3, 300, 20000, 6, 2, 10);
      config.policy = policy;
      config.replacement = replacement;
      config.maxRequests = 20; // 17 x 18 reserved slots > 300: HBM refuses first
      ResidencyController c(config);
      // A device residency map's view: copies and logged releases applied in
      // order must give the controller's table after every operation.
      std::vector<RowCopy> releases;
      c.setReleaseLog(&releases);
      std::vector<std::vector<std::int32_t>> mirror(3, std::vector<std::int32_t>(20000, -1));
      std::int64_t released = 0;
      std::map<std::int32_t, std::int64_t> live; // request -> length (model)
      std::int64_t refused = 0, steps = 0;
      for (int op = 0; op < 3000; ++op) {
        std::vector<RowCopy> copies;
        const int kind = static_cast<int>(rng() % 10);
        if (kind <= 1 || live.empty()) {
          const std::int64_t len = static_cast<std::int64_t>(rng() % 300);
          const std::int64_t max = len + 1 + static_cast<std::int64_t>(rng() % 900);
          if (!c.admissionRefusal(max).empty()) {
            REQUIRE_THROWS_AS(c.admit(len, max, copies), CapacityError);
            ++refused;
          } else {
            std::int32_t r = c.admit(len, max, copies);
            REQUIRE(live.count(r) == 0);
            live[r] = len;
            REQUIRE(static_cast<std::int64_t>(copies.size()) == 3 * std::min<std::int64_t>(len, 6));
          }
        } else if (kind == 2) {
          auto it = live.begin();
          std::advance(it, static_cast<long>(rng() % live.size()));
          c.finish(it->first);
          live.erase(it);
        } else if (kind <= 5) {
          auto it = live.begin();
          std::advance(it, static_cast<long>(rng() % live.size()));
          if (it->second < c.maxContext(it->first)) {
            c.append(it->first, copies);
            ++it->second;
            REQUIRE(copies.size() == 3);
          } else {
            REQUIRE_THROWS_AS(c.append(it->first, copies), CapacityError);
          }
        } else {
          // A step over a random batch (with an empty lane), Q = 2, K = 12.
          const std::vector<std::int32_t> batch = randomLanes(live, rng);
          const std::int64_t Q = 2, K = 12;
          c.beginStep();
          std::vector<std::vector<std::int32_t>> slotMaps;
          std::vector<std::vector<std::int32_t>> rowMaps;
          for (std::int32_t g = 0; g < 3; ++g) {
            const std::vector<std::int32_t> rows =
                randomSelections(batch, live, Q * K, /*unusedOneIn=*/8, /*firstRows=*/-1, rng);
            std::vector<std::int32_t> slots(rows.size());
            c.resolve(g, batch.data(), static_cast<std::int64_t>(batch.size()), rows.data(), Q, K,
                      slots.data());
            // Every slot given is the row's current slot.
            for (std::size_t b = 0; b < batch.size(); ++b)
              for (std::int64_t i = 0; i < Q * K; ++i) {
                std::int32_t row = rows[b * Q * K + i];
                std::int32_t slot = slots[b * Q * K + i];
                if (row < 0) {
                  REQUIRE(slot == -1);
                  continue;
                }
                REQUIRE(slot == c.slotOf(g, batch[b], row));
                if (slot >= 0) {
                  REQUIRE(c.slotOwner(g, slot) == batch[b]);
                  REQUIRE(c.slotRow(g, slot) == row);
                }
              }
          }
          c.endStep(copies);
          ++steps;
          // Every copy is into a slot that now holds that host row.
          for (const RowCopy &copy : copies) {
            REQUIRE(c.slotKind(copy.group, copy.slot) == SlotKind::Hot);
            std::int32_t owner = c.slotOwner(copy.group, copy.slot);
            REQUIRE(c.historyStart(owner) + c.slotRow(copy.group, copy.slot) == copy.hostRow);
          }
        }
        c.checkConsistency();
        if (policy == ResidencyPolicy::Fixed)
          for (auto &[r, len] : live)
            for (std::int32_t g = 0; g < 3; ++g)
              REQUIRE(c.hotCount(g, r) <= 10);
        for (const RowCopy &release : releases) {
          REQUIRE(release.slot == -1);
          mirror[static_cast<std::size_t>(release.group)]
                [static_cast<std::size_t>(release.hostRow)] = -1;
        }
        released += static_cast<std::int64_t>(releases.size());
        releases.clear();
        for (const RowCopy &copy : copies)
          mirror[static_cast<std::size_t>(copy.group)][static_cast<std::size_t>(copy.hostRow)] =
              copy.slot;
        for (std::int32_t g = 0; g < 3; ++g)
          REQUIRE(mirror[static_cast<std::size_t>(g)] == c.residencyTable(g));
      }
      CHECK(released > 0);
      CHECK(steps > 500);
      CHECK(refused > 0); // the load reached the admission limit
      CHECK(c.totals().promoted > 0);
      CHECK(c.totals().evicted > 0);
    }
}

namespace {

/// Every slot's owner, row, kind, reference and recency, each group's hand
/// and free stack: what a CLOCK search reads and changes.
std::vector<std::int64_t> clockState(const ResidencyController &c) {
  std::vector<std::int64_t> state;
  for (std::int32_t g = 0; g < c.config().groups; ++g) {
    state.push_back(c.clockHand(g));
    for (std::int32_t slot : c.freeSlots(g))
      state.push_back(slot);
    for (std::int32_t slot = 0; slot < c.config().hbmSlots; ++slot) {
      const auto [last, previous] = c.slotRecency(g, slot);
      for (std::int64_t value :
           {std::int64_t{c.slotOwner(g, slot)}, std::int64_t{c.slotRow(g, slot)},
            static_cast<std::int64_t>(c.slotKind(g, slot)), std::int64_t{c.slotReferenced(g, slot)},
            std::int64_t{last}, std::int64_t{previous}})
        state.push_back(value);
    }
  }
  return state;
}

} // namespace

TEST_CASE("the candidate bits' search finds the next set bit over empty runs of words",
          "[residency][clock]") {
  // Bit sets of up to 20,000 bits, dense to almost empty (whole summary
  // words of 4096 bits without a bit), against a bit-by-bit search.
  DHS_SEEDED_RNG(rng, 61);
  for (int round = 0; round < 300; ++round) {
    const std::int32_t n = 1 + static_cast<std::int32_t>(rng() % 20000);
    const std::uint64_t oneIn = 1ull << (rng() % 16);
    std::vector<std::uint64_t> words(static_cast<std::size_t>(n + 63) / 64, 0);
    std::vector<std::uint64_t> summary((words.size() + 63) / 64, 0);
    std::vector<bool> bits(static_cast<std::size_t>(n), false);
    for (std::int32_t i = 0; i < n; ++i)
      if (rng() % oneIn == 0) {
        bits[static_cast<std::size_t>(i)] = true;
        words[static_cast<std::size_t>(i) / 64] |= 1ull << (i % 64);
        summary[static_cast<std::size_t>(i) / 4096] |= 1ull << (i / 64 % 64);
      }
    for (int query = 0; query < 50; ++query) {
      const std::int32_t from =
          static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(n + 1));
      std::int32_t expected = from;
      while (expected < n && !bits[static_cast<std::size_t>(expected)])
        ++expected;
      INFO(n << " bits, one in " << oneIn << ", from " << from);
      REQUIRE(nextSetBit(words, summary, from, n) == expected);
    }
  }
}

TEST_CASE("CLOCK's candidate bits make the full sweep's decisions", "[residency][clock]") {
  // Two controllers take the same random admissions, appends, finishes and
  // steps: one sweeps every slot (the reference), one skips the slots that
  // cannot be victims. Copies, releases and every slot's state stay equal.
  // Selections often favour the newest rows, so that searches between and
  // within steps find few or no candidates (the memo, and evicting the aged
  // row itself); 301 slots leave a partial last word, 9001 slots span three
  // words of the summary; hot floor 2 makes some hot rows under their floor
  // (set bits that are not victims).
  struct Case {
    std::int32_t slots, floor;
    std::int64_t history, K;
  };
  const std::uint64_t base = freshSeed() + 60;
  for (const Case &test :
       {Case{301, 0, 200, 24}, Case{301, 2, 200, 24}, Case{9001, 0, 2500, 160}}) {
    INFO(test.slots << " slots, hot floor " << test.floor << " DHS_TEST_SEED=" << base - 60);
    std::mt19937_64 rng(base + static_cast<std::uint64_t>(test.slots + test.floor));
    ResidencyConfig config =
        ResidencyConfig::adaptive(3, test.slots, 16 * (test.history + 700), 6, 1, test.floor);
    config.maxRequests = 16;
    ResidencyController fast(config), linear(config);
    linear.setLinearClockForTesting(true);
    std::vector<RowCopy> fastReleases, linearReleases;
    fast.setReleaseLog(&fastReleases);
    linear.setReleaseLog(&linearReleases);
    std::map<std::int32_t, std::int64_t> live;
    std::int64_t steps = 0, roundTrips = 0;
    // Until the controllers evicted enough rows to exercise the searches
    // (at least `ops` operations, at most ten times as many).
    const int ops = test.slots > 1000 ? 800 : 2500;
    const std::int64_t evictions = test.slots > 1000 ? 200 : 1000;
    for (int op = 0; op < 10 * ops && (op < ops || fast.evictionCount() < evictions); ++op) {
      std::vector<RowCopy> fastCopies, linearCopies;
      const int kind = static_cast<int>(rng() % 12);
      if (kind == 0 || live.empty()) {
        const std::int64_t len = static_cast<std::int64_t>(rng() % test.history);
        const std::int64_t max = len + 1 + static_cast<std::int64_t>(rng() % 600);
        if (!fast.admissionRefusal(max).empty())
          continue;
        const std::int32_t r = fast.admit(len, max, fastCopies);
        REQUIRE(linear.admit(len, max, linearCopies) == r);
        live[r] = len;
      } else if (kind == 1 && live.size() > 4) {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        fast.finish(it->first);
        linear.finish(it->first);
        live.erase(it);
      } else if (kind <= 6) {
        // A burst of appends (a decode step's), each request once.
        for (auto &[r, len] : live)
          if (len < fast.maxContext(r) && rng() % 4) {
            fast.append(r, fastCopies);
            linear.append(r, linearCopies);
            ++len;
          }
      } else if (kind == 7 && test.floor == 0) {
        // Device ownership and back: the controller rebuilds its tables.
        for (std::int32_t g = 0; g < 3; ++g)
          for (ResidencyController *c : {&fast, &linear}) {
            const DeviceGroupState state = c->exportDeviceState(g);
            c->markDeviceOwned(g);
            c->adoptDeviceState(g, state);
          }
        ++roundTrips;
      } else {
        const std::vector<std::int32_t> batch = randomLanes(live, rng);
        const std::int64_t Q = 1, K = test.K;
        fast.beginStep();
        linear.beginStep();
        for (std::int32_t g = 0; g < 3; ++g) {
          // Half the steps select mostly among each request's newest rows.
          std::vector<std::int32_t> rows =
              randomSelections(batch, live, Q * K, /*unusedOneIn=*/8, /*firstRows=*/-1, rng);
          if (steps % 2)
            for (std::size_t b = 0; b + 1 < batch.size(); ++b)
              for (std::int64_t i = 0; i < K; ++i) {
                std::int32_t &row =
                    rows[b * static_cast<std::size_t>(K) + static_cast<std::size_t>(i)];
                const std::int64_t len = live.at(batch[b]);
                if (row >= 0 && rng() % 4)
                  row = static_cast<std::int32_t>(
                      len - 1 - static_cast<std::int64_t>(rng() % std::min<std::int64_t>(len, 40)));
              }
          std::vector<std::int32_t> fastSlots(rows.size()), linearSlots(rows.size());
          fast.resolve(g, batch.data(), static_cast<std::int64_t>(batch.size()), rows.data(), Q, K,
                       fastSlots.data());
          linear.resolve(g, batch.data(), static_cast<std::int64_t>(batch.size()), rows.data(), Q,
                         K, linearSlots.data());
          REQUIRE(fastSlots == linearSlots);
        }
        fast.endStep(fastCopies);
        linear.endStep(linearCopies);
        ++steps;
      }
      REQUIRE(fastCopies == linearCopies);
      REQUIRE(fastReleases == linearReleases);
      fastReleases.clear();
      linearReleases.clear();
      REQUIRE(clockState(fast) == clockState(linear));
    }
    fast.checkConsistency();
    CHECK(steps > (test.slots > 1000 ? 100 : 300));
    CHECK(fast.evictionCount() == linear.evictionCount());
    CHECK(fast.evictionCount() >= evictions);
    CHECK((test.floor != 0 || roundTrips > 20));
  }
}

namespace {

/// What the generated resolve kernel does with a step log and the device
/// replacement state (dhs.pool_recency), modelled on the host: selections in
/// a random order (the kernel's threads race), an exchange per hit, first
/// hits and every miss listed.
struct DeviceModel {
  std::vector<std::vector<std::uint32_t>> last, previous; // [group][slot]
  struct Log {
    std::vector<std::int32_t> hits, misses;
    std::int64_t entries = 0;
  };

  DeviceModel(std::int32_t groups, std::int32_t slots)
      : last(static_cast<std::size_t>(groups),
             std::vector<std::uint32_t>(static_cast<std::size_t>(slots))),
        previous(last) {}

  Log resolve(const ResidencyController &c, std::int32_t g, const std::vector<std::int32_t> &lanes,
              const std::vector<std::int32_t> &rows, std::int64_t perLane, std::uint32_t step,
              std::mt19937_64 &rng) {
    std::vector<std::size_t> order(rows.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    Log log;
    const std::vector<std::int32_t> &table = c.residencyTable(g);
    for (std::size_t e : order) {
      const std::int32_t id = rows[e];
      if (id < 0)
        continue;
      const std::size_t lane = e / static_cast<std::size_t>(perLane);
      ++log.entries;
      const std::int32_t slot = table[static_cast<std::size_t>(c.historyStart(lanes[lane]) + id)];
      if (slot < 0) {
        log.misses.push_back(static_cast<std::int32_t>(lane));
        log.misses.push_back(id);
        continue;
      }
      std::uint32_t &l = last[static_cast<std::size_t>(g)][static_cast<std::size_t>(slot)];
      const std::uint32_t old = l;
      l = step;
      if (old != step) {
        previous[static_cast<std::size_t>(g)][static_cast<std::size_t>(slot)] = old;
        log.hits.push_back(slot);
      }
    }
    return log;
  }

  /// The placement kernel: a filled slot starts at [step, 0].
  void place(const std::vector<RowCopy> &copies, std::uint32_t step) {
    for (const RowCopy &copy : copies)
      if (copy.slot >= 0) {
        last[static_cast<std::size_t>(copy.group)][static_cast<std::size_t>(copy.slot)] = step;
        previous[static_cast<std::size_t>(copy.group)][static_cast<std::size_t>(copy.slot)] = 0;
      }
  }
};

} // namespace

TEST_CASE("booking a step from the device log equals resolving its selections; the device "
          "replacement state mirrors the controller's",
          "[residency]") {
  const std::uint64_t base = freshSeed() + 70;
  for (ResidencyPolicy policy : {ResidencyPolicy::Adaptive, ResidencyPolicy::Fixed})
    for (Replacement replacement : {Replacement::Clock, Replacement::Lru, Replacement::Lru2}) {
      INFO(abi::name(policy) << " " << abi::name(replacement) << " DHS_TEST_SEED=" << base - 70);
      std::mt19937_64 rng(base + static_cast<int>(policy) * 3 + static_cast<int>(replacement));
      ResidencyConfig config = ResidencyConfig::adaptive(2, 240, 12000, 6, 2, 8);
      config.policy = policy;
      config.replacement = replacement;
      config.maxRequests = 16;
      ResidencyController host(config), device(config);
      DeviceModel model(2, 240);
      std::map<std::int32_t, std::int64_t> live;
      std::int64_t steps = 0, hits = 0, fetched = 0;
      for (int op = 0; op < 1500; ++op) {
        std::vector<RowCopy> hostCopies, deviceCopies;
        const int kind = static_cast<int>(rng() % 10);
        if (kind <= 1 || live.empty()) {
          const std::int64_t len = static_cast<std::int64_t>(rng() % 200);
          const std::int64_t max = len + 1 + static_cast<std::int64_t>(rng() % 400);
          if (!host.admissionRefusal(max).empty())
            continue;
          const std::int32_t r = host.admit(len, max, hostCopies);
          REQUIRE(device.admit(len, max, deviceCopies) == r);
          live[r] = len;
        } else if (kind == 2) {
          auto it = live.begin();
          std::advance(it, static_cast<long>(rng() % live.size()));
          host.finish(it->first);
          device.finish(it->first);
          live.erase(it);
        } else if (kind <= 4) {
          auto it = live.begin();
          std::advance(it, static_cast<long>(rng() % live.size()));
          if (it->second >= host.maxContext(it->first))
            continue;
          host.append(it->first, hostCopies);
          device.append(it->first, deviceCopies);
          ++it->second;
        } else {
          const std::vector<std::int32_t> lanes = randomLanes(live, rng);
          const std::int64_t Q = 3, K = 10;
          host.beginStep();
          device.beginStep();
          for (std::int32_t g = 0; g < 2; ++g) {
            // Queries overlap: few distinct rows per lane.
            const std::vector<std::int32_t> rows =
                randomSelections(lanes, live, Q * K, /*unusedOneIn=*/6, /*firstRows=*/40, rng);
            std::vector<std::int32_t> slots(rows.size());
            host.resolve(g, lanes.data(), static_cast<std::int64_t>(lanes.size()), rows.data(), Q,
                         K, slots.data());
            DeviceModel::Log log =
                model.resolve(device, g, lanes, rows, Q * K, device.stepCount(), rng);
            device.book(g, lanes.data(), static_cast<std::int64_t>(lanes.size()), log.hits.data(),
                        static_cast<std::int64_t>(log.hits.size()), log.misses.data(),
                        static_cast<std::int64_t>(log.misses.size() / 2), log.entries);
          }
          host.endStep(hostCopies);
          device.endStep(deviceCopies);
          REQUIRE(host.lastStep().entries == device.lastStep().entries);
          REQUIRE(host.lastStep().selected == device.lastStep().selected);
          REQUIRE(host.lastStep().resident == device.lastStep().resident);
          REQUIRE(host.lastStep().fetched == device.lastStep().fetched);
          REQUIRE(host.lastStep().promoted == device.lastStep().promoted);
          REQUIRE(host.lastStep().evicted == device.lastStep().evicted);
          hits += device.lastStep().resident;
          fetched += device.lastStep().fetched;
          ++steps;
        }
        // Same promotions, same placements; the device state the kernels
        // keep equals the controller's for every slot holding a row.
        REQUIRE(hostCopies == deviceCopies);
        model.place(deviceCopies, device.stepCount());
        for (std::int32_t g = 0; g < 2; ++g) {
          REQUIRE(host.residencyTable(g) == device.residencyTable(g));
          for (std::int32_t s = 0; s < 240; ++s) {
            REQUIRE(host.slotRecency(g, s) == device.slotRecency(g, s));
            const SlotKind k = device.slotKind(g, s);
            if (k == SlotKind::Newest || k == SlotKind::Hot) {
              INFO("group " << g << " slot " << s);
              REQUIRE(device.slotRecency(g, s).first == model.last[g][s]);
              REQUIRE(device.slotRecency(g, s).second == model.previous[g][s]);
            }
          }
        }
        device.checkConsistency();
      }
      CHECK(steps > 300);
      CHECK(hits > 0);
      CHECK(fetched > 0);
      CHECK(device.totals().promoted > 0);
    }
}

TEST_CASE("a step log that contradicts the state is refused before anything changes",
          "[residency]") {
  ResidencyController c(ResidencyConfig::adaptive(1, 64, 1000, 4, 0, 4));
  std::vector<RowCopy> copies;
  const std::int32_t r = c.admit(50, 100, copies);
  const std::int32_t newest = c.slotOf(0, r, 49); // resident
  REQUIRE(newest >= 0);
  const std::vector<std::int32_t> lanes{r};
  auto refuse = [&](std::vector<std::int32_t> hits, std::vector<std::int32_t> misses,
                    std::int64_t entries, const char *message) {
    INFO(message);
    const auto before = c.slotRecency(0, newest);
    c.beginStep();
    CHECK_THROWS_WITH(c.book(0, lanes.data(), 1, hits.data(),
                             static_cast<std::int64_t>(hits.size()), misses.data(),
                             static_cast<std::int64_t>(misses.size() / 2), entries),
                      Catch::Contains(message));
    c.abortStep();
    CHECK(c.slotRecency(0, newest) == before);
    CHECK(c.lastStep().selected == 0);
    c.checkConsistency();
  };
  refuse({newest, newest}, {}, 2, "twice");
  refuse({newest}, {0, 49}, 2, "but it is resident");
  refuse({newest}, {0, 50}, 2, "outside request");
  refuse({newest}, {1, 3}, 2, "holds no request");
  refuse({63}, {}, 1, "holds no history row");
  refuse({newest}, {0, 3}, 1, "do not fit");
  // A valid log books.
  c.beginStep();
  const std::vector<std::int32_t> hits{newest}, misses{0, 3, 0, 3, 0, 7};
  c.book(0, lanes.data(), 1, hits.data(), 1, misses.data(), 3, 5);
  c.endStep(copies);
  CHECK(c.lastStep().entries == 5);
  CHECK(c.lastStep().selected == 3);
  CHECK(c.lastStep().resident == 1);
  CHECK(c.lastStep().fetched == 2);
  CHECK(c.slotRecency(0, newest).first == c.stepCount());
  CHECK(c.slotOf(0, r, 3) >= 0); // promoted
}

namespace {

/// Two controllers of one config that make the same calls, except that the
/// first makes each call of interest under every failing allocation first
/// (whole). Each one's copies and release log are one list, as the
/// Runtime keeps them.
struct TwinControllers {
  ResidencyController a, b;
  std::vector<RowCopy> aChanges, bChanges;
  std::mt19937_64 rng{dhs::test::freshSeed() + 17};

  explicit TwinControllers(const ResidencyConfig &config) : a(config), b(config) {
    a.setReleaseLog(&aChanges);
    b.setReleaseLog(&bChanges);
  }

  void expectSame() {
    REQUIRE(dhs::test::stateDifference(a, b) == "");
    REQUIRE(aChanges == bChanges);
  }

  /// `call` on both, plainly.
  void both(const std::function<void(ResidencyController &, std::vector<RowCopy> &)> &call) {
    call(a, aChanges);
    call(b, bChanges);
    expectSame();
  }

  /// `call` on `a` with each of its allocations failing in turn (each
  /// failed call must leave `a` as `b`), then whole on both; the lists
  /// start without capacity, so that growing them allocates. Returns the
  /// failed calls.
  std::uint64_t
  whole(const std::function<void(ResidencyController &, std::vector<RowCopy> &)> &call) {
    std::vector<RowCopy>().swap(aChanges);
    std::vector<RowCopy>().swap(bChanges);
    const std::uint64_t failures =
        dhs::test::failEachAllocation([&] { call(a, aChanges); }, [&] { expectSame(); });
    call(b, bChanges);
    expectSame();
    a.checkConsistency();
    return failures;
  }

  /// Selections [live requests][K] (-1 one time in five) of rows of each
  /// live request.
  std::vector<std::int32_t> selections(const std::vector<std::int32_t> &requests, std::int64_t K) {
    std::vector<std::int32_t> rows;
    for (std::int32_t r : requests)
      for (std::int64_t k = 0; k < K; ++k)
        rows.push_back(rng() % 5 == 0 ? -1
                                      : static_cast<std::int32_t>(
                                            rng() % static_cast<std::uint64_t>(a.historyLen(r))));
    return rows;
  }

  /// A plain step of both over `requests` (K selections each, every group).
  void step(const std::vector<std::int32_t> &requests, std::int64_t K) {
    const std::vector<std::int32_t> rows = selections(requests, K);
    both([&](ResidencyController &c, std::vector<RowCopy> &changes) {
      c.beginStep();
      std::vector<std::int32_t> slots(rows.size());
      for (std::int32_t g = 0; g < c.config().groups; ++g)
        c.resolve(g, requests.data(), static_cast<std::int64_t>(requests.size()), rows.data(), 1, K,
                  slots.data());
      c.endStep(changes);
    });
  }
};

} // namespace

TEST_CASE("a controller update whose allocation fails changes nothing: admit, append, resolve, "
          "book, step end, finish",
          "[residency][alloc-failure]") {
  const auto [policy, replacement] =
      GENERATE(table<ResidencyPolicy, Replacement>({{ResidencyPolicy::Adaptive, Replacement::Clock},
                                                    {ResidencyPolicy::Adaptive, Replacement::Lru},
                                                    {ResidencyPolicy::Adaptive, Replacement::Lru2},
                                                    {ResidencyPolicy::Fixed, Replacement::Lru},
                                                    {ResidencyPolicy::Fixed, Replacement::Clock}}));
  INFO(abi::name(policy) << " " << abi::name(replacement));
  // 2 groups of 48 slots; a request reserves 4 newest + 2 ring + 2 floor.
  ResidencyConfig config = ResidencyConfig::adaptive(2, 48, 4000, 4, 2, 2);
  config.policy = policy;
  config.replacement = replacement;
  config.maxRequests = 6;
  INFO("DHS_TEST_SEED=" << dhs::test::freshSeed());
  TwinControllers t(config);
  std::vector<std::int32_t> live;
  for (std::int64_t length : {40, 25, 9})
    t.both([&](ResidencyController &c, std::vector<RowCopy> &changes) {
      const std::int32_t r = c.admit(length, 300, changes);
      if (&c == &t.a)
        live.push_back(r);
    });
  // Steps and appends until the optional rows fill the pool.
  for (int i = 0; i < 12; ++i) {
    t.step(live, 12);
    t.both([&](ResidencyController &c, std::vector<RowCopy> &changes) {
      c.append(live[static_cast<std::size_t>(i) % live.size()], changes);
    });
  }
  std::uint64_t failures = 0;
  // Appends: the oldest newest row ages into a hot one, maybe evicting.
  for (std::int32_t r : live)
    failures += t.whole(
        [&](ResidencyController &c, std::vector<RowCopy> &changes) { c.append(r, changes); });
  // A step: each group's resolve, then its end (promotions and evictions),
  // each under every failing allocation.
  const std::vector<std::int32_t> rows = t.selections(live, 12);
  t.both([](ResidencyController &c, std::vector<RowCopy> &) { c.beginStep(); });
  std::vector<std::int32_t> slots(rows.size());
  for (std::int32_t g = 0; g < config.groups; ++g)
    failures += t.whole([&](ResidencyController &c, std::vector<RowCopy> &) {
      c.resolve(g, live.data(), static_cast<std::int64_t>(live.size()), rows.data(), 1, 12,
                slots.data());
    });
  failures +=
      t.whole([](ResidencyController &c, std::vector<RowCopy> &changes) { c.endStep(changes); });
  // A step booked from a step log (as from the device): the hits and the
  // misses of the same kind of selections.
  {
    const std::vector<std::int32_t> booked = t.selections(live, 12);
    std::vector<std::int32_t> hits, misses;
    std::set<std::int32_t> hitSet;
    std::int64_t entries = 0;
    for (std::size_t b = 0; b < live.size(); ++b)
      for (std::size_t k = 0; k < 12; ++k) {
        const std::int32_t row = booked[b * 12 + k];
        if (row < 0)
          continue;
        ++entries;
        const std::int32_t slot = t.a.slotOf(0, live[b], row);
        if (slot < 0) {
          misses.push_back(static_cast<std::int32_t>(b));
          misses.push_back(row);
        } else if (hitSet.insert(slot).second) {
          hits.push_back(slot);
        }
      }
    t.both([](ResidencyController &c, std::vector<RowCopy> &) { c.beginStep(); });
    failures += t.whole([&](ResidencyController &c, std::vector<RowCopy> &) {
      c.book(0, live.data(), static_cast<std::int64_t>(live.size()), hits.data(),
             static_cast<std::int64_t>(hits.size()), misses.data(),
             static_cast<std::int64_t>(misses.size() / 2), entries);
    });
    t.both([&](ResidencyController &c, std::vector<RowCopy> &) {
      c.resolve(1, live.data(), static_cast<std::int64_t>(live.size()), booked.data(), 1, 12,
                slots.data());
    });
    failures +=
        t.whole([](ResidencyController &c, std::vector<RowCopy> &changes) { c.endStep(changes); });
  }
  // An admission that releases optional rows to fit the new request.
  const std::int64_t optionalBefore = t.a.occupancy(0).optionalUsed;
  std::int32_t admitted = -1;
  failures += t.whole([&](ResidencyController &c, std::vector<RowCopy> &changes) {
    const std::int32_t r = c.admit(6, 50, changes);
    if (&c == &t.a)
      admitted = r;
  });
  if (policy == ResidencyPolicy::Adaptive)
    CHECK(t.a.occupancy(0).optionalUsed < optionalBefore);
  live.push_back(admitted);
  // A request finished: its slots and host range go.
  failures += t.whole([&](ResidencyController &c, std::vector<RowCopy> &) { c.finish(live[1]); });
  live.erase(live.begin() + 1);
  CHECK(failures > 0);
  // What the failed calls left behind (lists, cursors) shows in later steps.
  for (int i = 0; i < 10; ++i) {
    t.step(live, 12);
    t.both([&](ResidencyController &c, std::vector<RowCopy> &changes) {
      c.append(live[static_cast<std::size_t>(i) % live.size()], changes);
    });
  }
  t.a.checkConsistency();
}
