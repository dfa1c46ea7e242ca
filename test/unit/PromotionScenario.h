//===- PromotionScenario.h - A residency controller under load -*- C++ -*-===//
//
// What ParallelPromotionTest, PromotionPlanTest and PromotionKernelTest
// share: steps of an adaptive controller whose working sets do not fit (ParallelPromotionTest's
// load: 6 requests, top-96 a step, half of it recurring, 700 slots), each
// packed for a plan_promotions launch of 16 lanes x 512 rows after its
// selections were resolved.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_TEST_UNIT_PROMOTIONSCENARIO_H
#define DHS_TEST_UNIT_PROMOTIONSCENARIO_H

#include "runtime/residency/PromotionPlan.h"
#include "runtime/residency/Residency.h"

#include <random>
#include <set>
#include <vector>

namespace dhs::test {

/// The plan's shape: lanes (requests in lane order, the rest empty) and
/// fetched rows per lane, as examples/plan_promotions_step.mlir declares.
inline constexpr std::int64_t kPlanLanes = 16, kPlanListed = 512;

/// Runs `steps` steps with `replacement`; per step, after the selections
/// were resolved, `before(controller, packed)`, then endStep, then
/// `after(controller, promoted copies)`, then `appends(controller, requests)`
/// appends a token to each of `requests` (in order). `maxPromotions` caps
/// each request's promotions a step (-1: no cap).
template <typename Before, typename After, typename Appends>
void runPromotionScenario(std::mt19937_64 &rng, dhs::runtime::Replacement replacement,
                          std::int32_t maxPromotions, int steps, Before before, After after,
                          Appends appends) {
  using namespace dhs::runtime;
  ResidencyConfig config = ResidencyConfig::adaptive(1, 700, 40000, 8, 0, 0);
  config.replacement = replacement;
  config.maxPromotionsPerStep = maxPromotions;
  ResidencyController c(config);
  std::vector<RowCopy> copies;
  std::vector<std::int32_t> requests;
  std::vector<std::int64_t> lengths;
  for (int r = 0; r < 6; ++r) {
    const std::int64_t length = 2000 + static_cast<std::int64_t>(rng() % 2000);
    requests.push_back(c.admit(length, length + 100, copies));
    lengths.push_back(length);
  }
  const std::int64_t K = 96;
  std::vector<std::set<std::int32_t>> recent(requests.size());
  for (int step = 0; step < steps; ++step) {
    std::vector<std::int32_t> rows;
    for (std::size_t r = 0; r < requests.size(); ++r) {
      std::set<std::int32_t> chosen;
      std::vector<std::int32_t> old(recent[r].begin(), recent[r].end());
      while (static_cast<std::int64_t>(chosen.size()) < K) {
        if (!old.empty() && rng() % 2)
          chosen.insert(old[rng() % old.size()]);
        else
          chosen.insert(static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(lengths[r])));
      }
      recent[r].insert(chosen.begin(), chosen.end());
      rows.insert(rows.end(), chosen.begin(), chosen.end());
    }
    std::vector<std::int32_t> slots(rows.size());
    c.beginStep();
    c.resolve(0, requests.data(), static_cast<std::int64_t>(requests.size()), rows.data(), 1, K,
              slots.data());
    // The fetched rows of each lane: its selections that missed (distinct:
    // a request selects each row once here).
    std::vector<std::int32_t> lanes(kPlanLanes, -1);
    std::vector<std::vector<std::int32_t>> fetched(kPlanLanes);
    for (std::size_t r = 0; r < requests.size(); ++r) {
      lanes[r] = requests[r];
      for (std::int64_t k = 0; k < K; ++k)
        if (slots[r * K + static_cast<std::size_t>(k)] < 0)
          fetched[r].push_back(rows[r * K + static_cast<std::size_t>(k)]);
    }
    before(c, packPromotionPlan(c, 0, lanes, fetched, kPlanListed));
    std::vector<RowCopy> promoted;
    c.endStep(promoted);
    after(c, promoted);
    std::vector<std::int32_t> appended;
    for (std::size_t r = 0; r < requests.size(); ++r)
      if (rng() % 3 == 0) {
        appended.push_back(requests[r]);
        ++lengths[r];
      }
    appends(c, appended);
  }
}

/// The scenario with each append made by the controller itself.
template <typename Before, typename After>
void runPromotionScenario(std::mt19937_64 &rng, dhs::runtime::Replacement replacement,
                          std::int32_t maxPromotions, int steps, Before before, After after) {
  runPromotionScenario(
      rng, replacement, maxPromotions, steps, before, after,
      [](dhs::runtime::ResidencyController &c, const std::vector<std::int32_t> &requests) {
        std::vector<dhs::runtime::RowCopy> copies;
        for (std::int32_t request : requests)
          c.append(request, copies);
      });
}

} // namespace dhs::test

#endif // DHS_TEST_UNIT_PROMOTIONSCENARIO_H
