//===- PromotionPlanTest.cpp - The plan_promotions rule on the host -------===//
//
// runtime/residency/PromotionPlan's planPromotions makes a step's promotion
// decisions as the generated plan_promotions kernel does (PromotionKernelTest
// compares the two on a GPU). Here it is held to the residency controller,
// which still makes the decisions in the executor: packed from the
// controller after a step's selections, the plan must promote the same rows
// into the same slots in the same order, release the same rows, and leave
// the same CLOCK hand, references, hot rows, free stack, excess and
// noVictimStep memo as the controller's endStep, and count the rows listed
// as the controller's promoted + notPromoted. A failed step (the status
// word set) plans nothing.
//
//===----------------------------------------------------------------------===//

#include "PromotionScenario.h"
#include "TestUtil.h"

#include "runtime/core/Error.h"

#include <catch2/catch.hpp>

#include <algorithm>

using namespace dhs::runtime;
using Control = dhs_abi::PromotionPlanLayout;

namespace {

/// Runs the scenario and compares every step's plan with the controller.
void checkAgainstController(std::int32_t maxPromotions) {
  DHS_SEEDED_RNG(rng, 1500);
  INFO("at most " << maxPromotions << " promotions per request and step");
  PromotionPlanState plan;
  PromotionPlanList list;
  std::vector<std::int32_t> tableBefore;
  std::int64_t evictionsBefore = 0, checkedPromotions = 0, checkedReleases = 0, capped = 0;
  std::int64_t planned = 0, exhausted = 0;
  std::int32_t memoBefore = 0;
  int step = 0;
  dhs::test::runPromotionScenario(
      rng, Replacement::Clock, maxPromotions, 60,
      [&](const ResidencyController &c, PromotionPlanState packed) {
        plan = std::move(packed);
        memoBefore = plan.control[Control::kNoVictimStep];
        // The rows the plan may promote: each lane's up to the first -1, capped.
        planned = 0;
        for (std::int64_t b = 0; b < plan.lanes; ++b) {
          std::int64_t count = 0;
          while (count < plan.listed &&
                 plan.fetched[static_cast<std::size_t>(b * plan.listed + count)] >= 0)
            ++count;
          planned += maxPromotions >= 0 ? std::min<std::int64_t>(count, maxPromotions) : count;
        }
        REQUIRE(planPromotions(plan, list) == 0);
        tableBefore = c.residencyTable(0);
        evictionsBefore = c.evictionCount();
        capped += c.lastStep().fetched - plan.control[Control::kPromoted];
      },
      [&](const ResidencyController &c, const std::vector<RowCopy> &promoted) {
        INFO("step " << step++);
        const std::size_t total = static_cast<std::size_t>(plan.lanes * plan.listed);
        // The same promotions, in order.
        REQUIRE(static_cast<std::size_t>(plan.control[Control::kPromoted]) == promoted.size());
        for (std::size_t i = 0; i < promoted.size(); ++i) {
          INFO("promotion " << i);
          CHECK(list.rows[i] == promoted[i].hostRow);
          CHECK(list.slots[i] == promoted[i].slot);
        }
        for (std::size_t i = promoted.size(); i < total; ++i)
          REQUIRE((list.rows[i] == -1 && list.slots[i] == -1));
        // The same releases: the list carried out on the map gives the
        // controller's table.
        const std::int64_t released = plan.control[Control::kReleased];
        CHECK(released == c.evictionCount() - evictionsBefore);
        std::vector<std::int32_t> table = tableBefore;
        for (std::size_t v = 0; v < total; ++v) {
          const std::int64_t row = list.rows[total + v];
          CHECK(list.slots[total + v] == -1);
          CHECK((v < static_cast<std::size_t>(released)) == (row >= 0));
          if (row >= 0) {
            CHECK(table[static_cast<std::size_t>(row)] >= 0);
            table[static_cast<std::size_t>(row)] = -1;
          }
        }
        for (std::size_t i = 0; i < promoted.size(); ++i)
          table[static_cast<std::size_t>(list.rows[i])] = list.slots[i];
        CHECK(table == c.residencyTable(0));
        // The same hand, free stack, hot rows and references.
        CHECK(plan.control[Control::kHand] == c.clockHand(0));
        const std::vector<std::int32_t> &freeAfter = c.freeSlots(0);
        REQUIRE(static_cast<std::size_t>(plan.control[Control::kFreeCount]) == freeAfter.size());
        CHECK(std::equal(freeAfter.begin(), freeAfter.end(), plan.freeStack.begin()));
        std::int64_t hotMismatches = 0, referenceMismatches = 0;
        for (std::int32_t s = 0; s < c.config().hbmSlots; ++s) {
          const std::size_t i = static_cast<std::size_t>(s);
          const bool hot = c.slotKind(0, s) == SlotKind::Hot;
          const std::int64_t row =
              hot ? c.historyStart(c.slotOwner(0, s)) + c.slotRow(0, s) : std::int64_t{-1};
          hotMismatches += plan.hotRows[i] != row;
          // (place_rows stamps a filled slot's last use with the step.)
          const std::uint32_t last = c.slotRecency(0, s).first;
          if (hot)
            referenceMismatches +=
                (static_cast<std::int32_t>(last) != plan.cleared[i]) != c.slotReferenced(0, s);
        }
        CHECK(hotMismatches == 0);
        CHECK(referenceMismatches == 0);
        // The counts the host reads back instead of the lists.
        CHECK(plan.control[Control::kListed] == c.lastStep().promoted + c.lastStep().notPromoted);
        CHECK(plan.control[Control::kExcess] == c.occupancy(0).optionalUsed);
        // The memo: the step when the candidates ran out (some row within
        // the cap got no slot), as the controller's; else as packed (the
        // controller may have reset its copy to 0 when a request got its
        // first hot row: either way it does not hold the step).
        const bool ranOut = static_cast<std::int64_t>(promoted.size()) < planned;
        exhausted += ranOut;
        const std::int32_t step = static_cast<std::int32_t>(c.stepCount());
        const std::int32_t memoAfter =
            static_cast<std::int32_t>(c.exportDeviceState(0).noVictimStep);
        if (ranOut) {
          CHECK(plan.control[Control::kNoVictimStep] == step);
          CHECK(memoAfter == step);
        } else {
          CHECK(plan.control[Control::kNoVictimStep] == memoBefore);
          CHECK((memoAfter == memoBefore || memoAfter == 0));
          CHECK(memoAfter != step);
        }
        checkedPromotions += static_cast<std::int64_t>(promoted.size());
        checkedReleases += released;
      });
  // The scenario took both kinds of slots, and both laps of the hand.
  CHECK(checkedPromotions > 1000);
  CHECK(checkedReleases > 500);
  if (maxPromotions >= 0)
    CHECK(capped > 0);
}

} // namespace

TEST_CASE("the plan_promotions rule makes the controller's CLOCK decisions (promotions, "
          "releases, hand, references, free stack)",
          "[residency][promotion]") {
  checkAgainstController(-1);
  checkAgainstController(5);
}

TEST_CASE("the plan_promotions rule reports bad control words and plans nothing",
          "[residency][promotion]") {
  PromotionPlanState state;
  state.lanes = 1;
  state.listed = 4;
  state.fetched = {3, 5, -1, 9};
  state.historyStart = {100};
  state.hotRows = {-1, -1, 40, 41};
  state.cleared = {0, 0, 1, 1};
  state.recency = {0, 0, 0, 0, 1, 0, 1, 0};
  state.freeStack = {1, 0, -1, -1};
  state.step = 2;
  PromotionPlanList list;
  SECTION("a plan within the table") {
    state.control = {3, 2, 1, 0, 0, 0, 0, 10}; // hand 3, two free slots, budget 1, excess 10
    CHECK(planPromotions(state, list) == 0);
    // Row 3 takes free slot 0 (the stack's top), row 5 the first victim
    // from the hand (slot 3, unreferenced); the first -1 ends the lane.
    CHECK(list.rows == std::vector<std::int64_t>{103, 105, -1, -1, 41, -1, -1, -1});
    CHECK(list.slots == std::vector<std::int32_t>{0, 3, -1, -1, -1, -1, -1, -1});
    CHECK(state.control == std::array<std::int32_t, 8>{0, 1, 1, 2, 1, 2, 0, 11});
    CHECK(state.hotRows == std::vector<std::int64_t>{103, -1, 40, 105});
    CHECK(state.cleared == std::vector<std::int32_t>{-1, 0, 1, -1});
  }
  SECTION("a hand outside the table") {
    state.control = {4, 2, 1, 0, 0, 0, 0, 10};
    CHECK(planPromotions(state, list) == dhs_abi::kStatusBadSlot);
    CHECK(std::all_of(list.rows.begin(), list.rows.end(), [](std::int64_t r) { return r == -1; }));
    // Only the rows listed are counted.
    CHECK(state.control == std::array<std::int32_t, 8>{4, 2, 1, 0, 0, 2, 0, 10});
  }
  SECTION("a free count beyond the stack") {
    state.control = {0, 5, 1, 0, 0, 0, 0, 0};
    CHECK(planPromotions(state, list) == dhs_abi::kStatusBadSlot);
    CHECK(state.control[Control::kPromoted] == 0);
  }
}

TEST_CASE("the plan_promotions rule plans nothing in a failed step and honours the memo",
          "[residency][promotion]") {
  PromotionPlanState state;
  state.lanes = 1;
  state.listed = 4;
  state.fetched = {3, 5, 6, 9};
  state.historyStart = {100};
  state.hotRows = {-1, -1, 40, 41};
  state.cleared = {0, 0, 1, 1};
  state.recency = {0, 0, 0, 0, 1, 0, 1, 0};
  state.freeStack = {1, 0, -1, -1};
  state.step = 2;
  state.control = {3, 2, 1, 7, 7, 7, 0, 10}; // stale counts from an earlier launch
  const PromotionPlanState before = state;
  PromotionPlanList list;
  auto allEmpty = [&] {
    return std::all_of(list.rows.begin(), list.rows.end(),
                       [](std::int64_t r) { return r == -1; }) &&
           std::all_of(list.slots.begin(), list.slots.end(),
                       [](std::int32_t s) { return s == -1; });
  };
  SECTION("a failed step: nothing planned, the state untouched, the counts 0") {
    state.status = dhs_abi::kStatusBadRowId;
    CHECK(planPromotions(state, list) == 0);
    CHECK(list.rows.size() == 8);
    CHECK(allEmpty());
    CHECK(state.control == std::array<std::int32_t, 8>{3, 2, 1, 0, 0, 0, 0, 10});
    CHECK(state.hotRows == before.hotRows);
    CHECK(state.cleared == before.cleared);
    CHECK(state.freeStack == before.freeStack);
  }
  SECTION("without the memo: the candidates run out and the memo takes the step") {
    CHECK(planPromotions(state, list) == 0);
    // One from the free stack, both candidates in hand order (slots 3 and
    // 2, unreferenced), and row 9 gets nothing; the failed search's two
    // laps bring the hand back to 3.
    CHECK(list.slots == std::vector<std::int32_t>{0, 3, 2, -1, -1, -1, -1, -1});
    CHECK(list.rows == std::vector<std::int64_t>{103, 105, 106, -1, 41, 40, -1, -1});
    CHECK(state.control == std::array<std::int32_t, 8>{3, 1, 1, 3, 2, 4, 2, 11});
  }
  SECTION("the memo holds the step: the free stack only, no search") {
    state.control[Control::kNoVictimStep] = 2;
    CHECK(planPromotions(state, list) == 0);
    CHECK(list.slots == std::vector<std::int32_t>{0, -1, -1, -1, -1, -1, -1, -1});
    CHECK(list.rows == std::vector<std::int64_t>{103, -1, -1, -1, -1, -1, -1, -1});
    // The hand and the references as they were.
    CHECK(state.control == std::array<std::int32_t, 8>{3, 1, 1, 1, 0, 4, 2, 11});
    CHECK(state.cleared == std::vector<std::int32_t>{-1, 0, 1, 1});
  }
  SECTION("a memo of an earlier step does not hold") {
    state.control[Control::kNoVictimStep] = 1;
    CHECK(planPromotions(state, list) == 0);
    CHECK(state.control[Control::kReleased] == 2);
  }
}

TEST_CASE("the plan's noVictimStep memo is the controller's when the candidates run out",
          "[residency][promotion]") {
  // 32 slots, newest 2 per request: an optional budget of 28. The first
  // step fetches 40 rows; 28 take free slots and the rest find no
  // candidate (every hot row was promoted in this step).
  ResidencyController c(ResidencyConfig::adaptive(1, 32, 10000, 2, 0, 0));
  std::vector<RowCopy> copies;
  const std::int32_t a = c.admit(200, 300, copies), b = c.admit(200, 300, copies);
  std::vector<std::int32_t> rows;
  for (std::int32_t r = 0; r < 20; ++r)
    rows.push_back(5 * r);
  rows.insert(rows.end(), rows.begin(), rows.end());
  std::vector<std::int32_t> slots(rows.size());
  const std::int32_t requests[] = {a, b};
  c.beginStep();
  c.resolve(0, requests, 2, rows.data(), 1, 20, slots.data());
  std::vector<std::vector<std::int32_t>> fetched(2);
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (slots[i] < 0)
      fetched[i / 20].push_back(rows[i]);
  REQUIRE(fetched[0].size() + fetched[1].size() == 40);
  PromotionPlanState plan = packPromotionPlan(c, 0, {a, b}, fetched, 32);
  REQUIRE(plan.control[Control::kNoVictimStep] == 0);
  PromotionPlanList list;
  REQUIRE(planPromotions(plan, list) == 0);
  std::vector<RowCopy> promoted;
  c.endStep(promoted);
  CHECK(promoted.size() == 28);
  CHECK(c.lastStep().notPromoted == 12);
  CHECK(plan.control[Control::kPromoted] == 28);
  CHECK(plan.control[Control::kReleased] == 0);
  CHECK(plan.control[Control::kListed] == 40);
  CHECK(plan.control[Control::kExcess] == c.occupancy(0).optionalUsed);
  CHECK(plan.control[Control::kExcess] == 28);
  REQUIRE(c.stepCount() == 1);
  CHECK(plan.control[Control::kNoVictimStep] == 1);
  // The controller holds the same memo: an append after the step, over the
  // budget, searches no further (the hand stays) and gives up the aged
  // row's own slot. (Without the memo the hand would pass the aged newest
  // row once, clearing its reference, and take it the second time round.)
  const std::int32_t hand = c.clockHand(0);
  REQUIRE(hand == plan.control[Control::kHand]);
  const std::int32_t aged = c.slotOf(0, a, 198);
  REQUIRE(aged >= 0);
  REQUIRE((aged + 1) % 32 != hand); // (a search would move the hand)
  c.append(a, copies);
  CHECK(c.clockHand(0) == hand);
  CHECK(c.slotOf(0, a, 198) == -1);
}

TEST_CASE("packing a plan refuses a lane with more fetched rows than it lists",
          "[residency][promotion]") {
  ResidencyController c(ResidencyConfig::adaptive(1, 64, 1000, 4, 0, 0));
  std::vector<RowCopy> copies;
  const std::int32_t request = c.admit(100, 200, copies);
  CHECK_THROWS_AS(packPromotionPlan(c, 0, {request}, {{1, 2, 3}}, 2), InputError);
  CHECK_THROWS_WITH(packPromotionPlan(c, 0, {request}, {{1, 2, 3}}, 2),
                    "packPromotionPlan: lane 0 fetched 3 rows, the plan lists 2");
  const PromotionPlanState state = packPromotionPlan(c, 0, {request, -1}, {{7, 2}, {}}, 3);
  CHECK(state.fetched == std::vector<std::int32_t>{2, 7, -1, -1, -1, -1});
  CHECK(state.historyStart == std::vector<std::int64_t>{c.historyStart(request), 0});
  CHECK(state.control[Control::kFreeCount] == static_cast<std::int32_t>(c.freeSlots(0).size()));
  CHECK(state.control[Control::kHand] == c.clockHand(0));
}
