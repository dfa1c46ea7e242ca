//===- ParallelPromotionTest.cpp - A step's promotions as a parallel rule -===//
//
// The residency controller promotes a step's fetched rows one at a time
// (ResidencySteps.cpp: requests in lane order, rows ascending; each takes a
// free slot within the optional budget, else a victim). Device-side
// decisions (issue 10) need the same decisions from a data-parallel rule
// over the slot table, which these tests pin down for the adaptive policy
// with no floor (the default configuration): promotion i takes
//   - while i < budget - excess: the i-th slot handed out by the free stack;
//   - then victim i - (budget - excess), where the victims are, for CLOCK,
//     the candidates (hot slots not used this step) in hand order, the
//     unreferenced ones first and then the referenced ones (the hand's
//     second lap), and for LRU / LRU-2 the candidates by (last use, slot) /
//     (use before the last, last use, slot);
//   - beyond the candidates, nothing (the row stays on the host).
// Each is a prefix sum or a sort over the slot table, so a kernel can make
// all of a step's decisions at once; the controller must keep agreeing.
//
//===----------------------------------------------------------------------===//

#include "PromotionScenario.h"
#include "TestUtil.h"

#include "runtime/residency/Residency.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

using namespace dhs::runtime;
using dhs::test::freshSeed;

namespace {

/// What the parallel rule reads: group 0's slot table after the step's
/// selections were resolved.
struct Snapshot {
  std::vector<std::int32_t> freeStack;
  std::vector<char> candidate, referenced;
  std::vector<std::uint32_t> lastUse, prevUse;
  std::int32_t hand = 0;
  std::int64_t freeBudget = 0; // budget - excess
};

Snapshot snapshot(const ResidencyController &c) {
  Snapshot s;
  const std::int32_t slots = c.config().hbmSlots;
  s.freeStack = c.freeSlots(0);
  s.hand = c.clockHand(0);
  const GroupOccupancy occupancy = c.occupancy(0);
  s.freeBudget = std::max<std::int64_t>(0, occupancy.optionalBudget - occupancy.optionalUsed);
  for (std::int32_t slot = 0; slot < slots; ++slot) {
    auto [last, previous] = c.slotRecency(0, slot);
    s.lastUse.push_back(last);
    s.prevUse.push_back(previous);
    s.candidate.push_back(c.slotKind(0, slot) == SlotKind::Hot && last < c.stepCount());
    s.referenced.push_back(c.slotReferenced(0, slot));
  }
  return s;
}

/// The slots the parallel rule gives `promotions` promotions, in order (as
/// many as it can place).
std::vector<std::int32_t> parallelSlots(const Snapshot &s, Replacement replacement,
                                        std::int64_t promotions) {
  std::vector<std::int32_t> victims;
  const std::int32_t n = static_cast<std::int32_t>(s.candidate.size());
  if (replacement == Replacement::Clock) {
    for (int lap = 0; lap < 2; ++lap)
      for (std::int32_t j = 0; j < n; ++j) {
        const std::int32_t slot = (s.hand + j) % n;
        if (s.candidate[slot] && bool(s.referenced[slot]) == (lap == 1))
          victims.push_back(slot);
      }
  } else {
    for (std::int32_t slot = 0; slot < n; ++slot)
      if (s.candidate[slot])
        victims.push_back(slot);
    const bool second = replacement == Replacement::Lru2;
    std::sort(victims.begin(), victims.end(), [&](std::int32_t a, std::int32_t b) {
      if (second && s.prevUse[a] != s.prevUse[b])
        return s.prevUse[a] < s.prevUse[b];
      return s.lastUse[a] != s.lastUse[b] ? s.lastUse[a] < s.lastUse[b] : a < b;
    });
  }
  std::vector<std::int32_t> out;
  for (std::int64_t i = 0; i < promotions; ++i) {
    if (i < s.freeBudget)
      out.push_back(s.freeStack[s.freeStack.size() - 1 - static_cast<std::size_t>(i)]);
    else if (i - s.freeBudget < static_cast<std::int64_t>(victims.size()))
      out.push_back(victims[static_cast<std::size_t>(i - s.freeBudget)]);
    else
      break;
  }
  return out;
}

void checkAgainstController(Replacement replacement) {
  const std::uint64_t seed = freshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  // 6 requests of 2000-4000 rows, top-96 a step, 700 slots: the working sets
  // do not fit, so most steps evict (PromotionScenario.h).
  Snapshot before;
  std::int64_t fetched = 0, checkedPromotions = 0, checkedEvictions = 0;
  int step = 0;
  dhs::test::runPromotionScenario(
      rng, replacement, -1, 60,
      [&](const ResidencyController &c, const PromotionPlanState &) {
        before = snapshot(c);
        fetched = c.lastStep().fetched;
      },
      [&](const ResidencyController &c, const std::vector<RowCopy> &promoted) {
        const std::vector<std::int32_t> expected = parallelSlots(before, replacement, fetched);
        INFO("step " << step++ << ": " << fetched << " rows fetched");
        REQUIRE(promoted.size() == expected.size());
        for (std::size_t i = 0; i < promoted.size(); ++i) {
          INFO("promotion " << i);
          REQUIRE(promoted[i].slot == expected[i]);
        }
        checkedPromotions += static_cast<std::int64_t>(promoted.size());
        checkedEvictions += c.lastStep().evicted;
        c.checkConsistency();
      });
  // The scenario exercised both halves of the rule.
  CHECK(checkedPromotions > 1000);
  CHECK(checkedEvictions > 500);
}

} // namespace

TEST_CASE("CLOCK promotions equal the parallel rule (free stack, then unreferenced, then "
          "referenced candidates in hand order)",
          "[residency]") {
  checkAgainstController(Replacement::Clock);
}

TEST_CASE("LRU and LRU-2 promotions equal the parallel rule (free stack, then candidates by "
          "use stamps)",
          "[residency]") {
  checkAgainstController(Replacement::Lru);
  checkAgainstController(Replacement::Lru2);
}
