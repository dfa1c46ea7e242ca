//===- PromotionPlanTest.cpp - The plan_promotions rule on the host -------===//
//
// runtime/residency/PromotionPlan's planPromotions makes a step's promotion
// decisions as the generated plan_promotions kernel does (PromotionKernelTest
// compares the two on a GPU). Here it is held to the residency controller,
// which still makes the decisions in the executor: packed from the
// controller after a step's selections, the plan must promote the same rows
// into the same slots in the same order, release the same rows, and leave
// the same CLOCK hand, references, hot rows and free stack as the
// controller's endStep.
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
  int step = 0;
  dhs::test::runPromotionScenario(
      rng, Replacement::Clock, maxPromotions, 60,
      [&](const ResidencyController &c, PromotionPlanState packed) {
        plan = std::move(packed);
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
    state.control = {3, 2, 1, 0, 0}; // hand 3, two free slots, budget 1
    CHECK(planPromotions(state, list) == 0);
    // Row 3 takes free slot 0 (the stack's top), row 5 the first victim
    // from the hand (slot 3, unreferenced); the first -1 ends the lane.
    CHECK(list.rows == std::vector<std::int64_t>{103, 105, -1, -1, 41, -1, -1, -1});
    CHECK(list.slots == std::vector<std::int32_t>{0, 3, -1, -1, -1, -1, -1, -1});
    CHECK(state.control == std::array<std::int32_t, 5>{0, 1, 1, 2, 1});
    CHECK(state.hotRows == std::vector<std::int64_t>{103, -1, 40, 105});
    CHECK(state.cleared == std::vector<std::int32_t>{-1, 0, 1, -1});
  }
  SECTION("a hand outside the table") {
    state.control = {4, 2, 1, 0, 0};
    CHECK(planPromotions(state, list) == dhs_abi::kStatusBadSlot);
    CHECK(std::all_of(list.rows.begin(), list.rows.end(), [](std::int64_t r) { return r == -1; }));
    CHECK(state.control == std::array<std::int32_t, 5>{4, 2, 1, 0, 0});
  }
  SECTION("a free count beyond the stack") {
    state.control = {0, 5, 1, 0, 0};
    CHECK(planPromotions(state, list) == dhs_abi::kStatusBadSlot);
    CHECK(state.control[Control::kPromoted] == 0);
  }
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
