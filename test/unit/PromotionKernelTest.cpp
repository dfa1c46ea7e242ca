//===- PromotionKernelTest.cpp - The generated plan_promotions kernel -----===//
//
// examples/plan_promotions_step.mlir, compiled at build time (16 lanes x
// 512 fetched rows, CLOCK), and the same step with at most 8 promotions per
// lane (steps/plan_promotions_capped_step.mlir: the cap is the op's
// `promotions`, compiled into the kernel). On a GPU, every decision of the kernel (the
// list of promotions and releases, the hot rows, the cleared stamps and
// the control words) must equal planPromotions on the host, which
// PromotionPlanTest holds to the residency controller: over random device
// states (slot tables of several 1024-slot chunks, candidates used this
// step or not, referenced or not, free stacks, hands, budgets, capped
// lanes, noVictimStep memos that hold the step or not, excess counts), over
// states packed from a controller under load, with bad control words
// (status 2, nothing planned), and in a failed step (a non-zero status word
// at the launch: nothing planned, the state untouched), and with row ids and
// more -1s past a lane's first -1 (its rows end at the first).
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"
#include "PromotionScenario.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>

using namespace dhs::runtime;
using Control = dhs_abi::PromotionPlanLayout;

namespace {

/// The slots of the compiled steps' tables (examples/plan_promotions_step.mlir).
constexpr std::int32_t kSlots = 5000;
/// The capped step's `promotions` (steps/plan_promotions_capped_step.mlir).
constexpr std::int64_t kCap = 8;

/// `state` with its tables extended to `slots` slots that are neither hot
/// nor free: the same candidates in the same hand order (only a hand that
/// wraps after the last slot lands on the padding instead of slot 0).
PromotionPlanState padSlots(PromotionPlanState state, std::int32_t slots) {
  const std::size_t n = static_cast<std::size_t>(slots);
  state.hotRows.resize(n, -1);
  state.cleared.resize(n, 0);
  state.freeStack.resize(n, -1);
  state.recency.resize(2 * n, 0);
  return state;
}

/// A random device state of `slots` slots: about `hotShare` of them hot
/// (a quarter of those used this step, half of the rest referenced), the
/// others free (shuffled onto the stack) or holding newest rows.
PromotionPlanState randomState(std::mt19937_64 &rng, std::int32_t slots, double hotShare) {
  PromotionPlanState s;
  s.lanes = dhs::test::kPlanLanes;
  s.listed = dhs::test::kPlanListed;
  s.step = 1000;
  s.hotRows.assign(static_cast<std::size_t>(slots), -1);
  s.cleared.assign(static_cast<std::size_t>(slots), 0);
  s.recency.assign(2 * static_cast<std::size_t>(slots), 0);
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<std::int32_t> free;
  for (std::int32_t slot = 0; slot < slots; ++slot) {
    const std::size_t i = static_cast<std::size_t>(slot);
    const std::int32_t last = unit(rng) < 0.25 ? 1000 : static_cast<std::int32_t>(rng() % 1000);
    s.recency[2 * i] = last;
    s.recency[2 * i + 1] =
        last > 0 ? static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(last)) : 0;
    if (unit(rng) < hotShare) {
      s.hotRows[i] = static_cast<std::int64_t>(rng() % 1000000);
      s.cleared[i] = rng() % 2 ? last : (rng() % 2 ? -1 : last - 1);
    } else if (rng() % 2) {
      free.push_back(slot);
      s.cleared[i] = last;
    }
  }
  std::shuffle(free.begin(), free.end(), rng);
  const std::int32_t top = static_cast<std::int32_t>(free.size());
  s.freeStack = free;
  s.freeStack.resize(static_cast<std::size_t>(slots), -1);
  s.control = {static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(slots)), top,
               static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(top + 1)) - 5,
               -7, // stale counts: the launch writes them
               -7, -7,
               // The memo: this step's (no victims searched) a fifth of the time.
               rng() % 5 == 0 ? 1000 : static_cast<std::int32_t>(rng() % 1000),
               static_cast<std::int32_t>(rng() % 4096)};
  // Each lane lists 0 to 512 distinct rows, ascending; some lanes are empty.
  s.fetched.assign(static_cast<std::size_t>(s.lanes * s.listed), -1);
  s.historyStart.resize(static_cast<std::size_t>(s.lanes));
  for (std::int64_t b = 0; b < s.lanes; ++b) {
    s.historyStart[static_cast<std::size_t>(b)] = b * 100000;
    const std::int64_t count = rng() % 4 == 0 ? 0 : static_cast<std::int64_t>(rng() % 513);
    std::vector<std::int32_t> rows(static_cast<std::size_t>(count));
    std::int32_t row = 0;
    for (auto &r : rows)
      r = row += 1 + static_cast<std::int32_t>(rng() % 50);
    std::copy(rows.begin(), rows.end(), s.fetched.begin() + b * s.listed);
  }
  return s;
}

/// Runs the kernel on `state` and compares everything it writes with the
/// host plan; returns the host plan's control words.
std::array<std::int32_t, Control::kWords> checkKernel(const Manifest &manifest,
                                                      const PromotionPlanState &state) {
  PromotionPlanState expected = state;
  PromotionPlanList list;
  const std::uint32_t expectedStatus = planPromotions(expected, list);

  dhs::test::KernelRun run(manifest);
  run.buffers.status = run.filled(1, state.status, "status");
  run.buffers.arguments.push_back(0); // the pool: its views are passed apart
  run.argument(state.fetched, "fetched rows");
  run.argument(state.historyStart, "history start");
  const CUdeviceptr hot = run.argument(state.hotRows, "hot rows");
  const CUdeviceptr cleared = run.argument(state.cleared, "cleared");
  run.argument(state.freeStack, "free stack");
  const CUdeviceptr control = run.argument(
      std::vector<std::int32_t>(state.control.begin(), state.control.end()), "control");
  const std::size_t entries = list.rows.size();
  const CUdeviceptr rows = run.argument(std::vector<std::int64_t>(entries, 12345), "rows");
  const CUdeviceptr slots = run.argument(std::vector<std::int32_t>(entries, 777), "slots");
  run.buffers.recency = run.upload(state.recency, "recency");
  run.buffers.log =
      run.upload(std::vector<std::int32_t>{static_cast<std::int32_t>(state.step), 0, 0, 0}, "log");
  run.buffers.logWords = 4;
  run.buffers.hbmSlots = static_cast<std::int64_t>(state.hotRows.size());
  run.launch("plan_promotions");

  CHECK(run.status() == (expectedStatus | state.status));
  const auto controlAfter = run.download<std::int32_t>(control, Control::kWords, "control");
  for (std::size_t w = 0; w < Control::kWords; ++w) {
    INFO("control word " << w);
    CHECK(controlAfter[w] == expected.control[w]);
  }
  const auto rowsAfter = run.download<std::int64_t>(rows, entries, "rows");
  const auto slotsAfter = run.download<std::int32_t>(slots, entries, "slots");
  std::size_t listMismatches = 0;
  for (std::size_t i = 0; i < entries; ++i)
    if (rowsAfter[i] != list.rows[i] || slotsAfter[i] != list.slots[i]) {
      if (listMismatches++ < 5)
        UNSCOPED_INFO("entry " << i << ": (" << rowsAfter[i] << ", " << slotsAfter[i]
                               << "), expected (" << list.rows[i] << ", " << list.slots[i] << ")");
    }
  CHECK(listMismatches == 0);
  CHECK(run.download<std::int64_t>(hot, state.hotRows.size(), "hot rows") == expected.hotRows);
  CHECK(run.download<std::int32_t>(cleared, state.cleared.size(), "cleared") == expected.cleared);
  return expected.control;
}

} // namespace

TEST_CASE("the generated plan_promotions kernel makes the host plan's decisions over random "
          "device states",
          "[cuda][gpu][promotion]") {
  DHS_GPU_KERNEL_STEP(manifest, "plan_promotions", abi::LaunchKind::PlanPromotions);
  DHS_GPU_KERNEL_STEP(capped, "plan_promotions_capped", abi::LaunchKind::PlanPromotions);
  CHECK(manifest.arguments[1].role == ArgumentRole::FetchedRows);
  CHECK(manifest.arguments[6].role == ArgumentRole::PromotionControl);
  DHS_SEEDED_RNG(rng, 1600);
  // The step's tables have 5000 slots: four chunks of 1024 and a ragged one.
  std::int64_t released = 0, secondLap = 0, fromFreeOnly = 0, memoHeld = 0, ranOut = 0;
  for (double hotShare : {0.02, 0.05, 0.5, 0.9})
    for (int repeat = 0; repeat < 6; ++repeat) {
      INFO(hotShare << " hot, repeat " << repeat);
      PromotionPlanState state = randomState(rng, kSlots, hotShare);
      if (repeat % 3 != 0)
        state.perLane = kCap;
      if (repeat % 3 == 1) // a plan the free stack serves alone
        state.control[Control::kFreeBudget] = state.control[Control::kFreeCount];
      const std::int32_t memoBefore = state.control[Control::kNoVictimStep];
      const auto control = checkKernel(state.perLane < 0 ? manifest : capped, state);
      released += control[Control::kReleased];
      memoHeld += memoBefore == 1000 && control[Control::kPromoted] > 0;
      ranOut += memoBefore != 1000 && control[Control::kNoVictimStep] == 1000;
      fromFreeOnly += control[Control::kReleased] == 0;
      std::int64_t unreferenced = 0;
      for (std::size_t s = 0; s < state.hotRows.size(); ++s)
        unreferenced += state.hotRows[s] >= 0 && state.recency[2 * s] < 1000 &&
                        state.recency[2 * s] == state.cleared[s];
      secondLap += control[Control::kReleased] > unreferenced;
    }
  // The states exercised free-only plans, first-lap and second-lap victims.
  CHECK(released > 1000);
  CHECK(fromFreeOnly > 0);
  CHECK(secondLap > 0);
  // ... plans under this step's memo, and plans that ran out of candidates.
  CHECK(memoHeld > 0);
  CHECK(ranOut > 0);
}

TEST_CASE("the generated plan_promotions kernel makes the controller's decisions under load",
          "[cuda][gpu][promotion]") {
  DHS_GPU_KERNEL_STEP(manifest, "plan_promotions", abi::LaunchKind::PlanPromotions);
  DHS_GPU_KERNEL_STEP(capped, "plan_promotions_capped", abi::LaunchKind::PlanPromotions);
  DHS_SEEDED_RNG(rng, 1700);
  std::int64_t checked = 0;
  for (std::int32_t cap : {-1, static_cast<std::int32_t>(kCap)})
    dhs::test::runPromotionScenario(
        rng, Replacement::Clock, cap, 30,
        [&](const ResidencyController &, const PromotionPlanState &packed) {
          checked += checkKernel(cap < 0 ? manifest : capped,
                                 padSlots(packed, kSlots))[Control::kPromoted];
        },
        [](const ResidencyController &, const std::vector<RowCopy> &) {});
  CHECK(checked > 500);
}

TEST_CASE("the generated plan_promotions kernel reports bad control words and plans nothing",
          "[cuda][gpu][promotion]") {
  DHS_GPU_KERNEL_STEP(manifest, "plan_promotions", abi::LaunchKind::PlanPromotions);
  DHS_SEEDED_RNG(rng, 1800);
  PromotionPlanState state = randomState(rng, kSlots, 0.5);
  SECTION("a hand outside the table") { state.control[Control::kHand] = kSlots; }
  SECTION("a negative hand") { state.control[Control::kHand] = -1; }
  SECTION("a free count beyond the stack") { state.control[Control::kFreeCount] = kSlots + 1; }
  const auto control = checkKernel(manifest, state);
  CHECK(control[Control::kPromoted] == 0);
}

TEST_CASE("the generated plan_promotions kernel plans nothing in a failed step",
          "[cuda][gpu][promotion]") {
  DHS_GPU_KERNEL_STEP(manifest, "plan_promotions", abi::LaunchKind::PlanPromotions);
  DHS_SEEDED_RNG(rng, 1900);
  PromotionPlanState state = randomState(rng, kSlots, 0.5);
  SECTION("a bad row id") { state.status = dhs_abi::kStatusBadRowId; }
  SECTION("bad control words as well (no BadSlot added)") {
    state.status = dhs_abi::kStatusBadHostRow;
    state.control[Control::kHand] = -1;
  }
  // checkKernel compares the untouched tables, the all -1 list and the
  // words with the host plan's.
  const auto control = checkKernel(manifest, state);
  CHECK(control[Control::kPromoted] == 0);
  CHECK(control[Control::kReleased] == 0);
  CHECK(control[Control::kListed] == 0);
  CHECK(control[Control::kHand] == state.control[Control::kHand]);
  CHECK(control[Control::kExcess] == state.control[Control::kExcess]);
}

TEST_CASE("the generated plan_promotions kernel counts a lane's rows up to its first -1, whatever "
          "follows it",
          "[cuda][gpu][promotion]") {
  DHS_GPU_KERNEL_STEP(manifest, "plan_promotions", abi::LaunchKind::PlanPromotions);
  DHS_GPU_KERNEL_STEP(capped, "plan_promotions_capped", abi::LaunchKind::PlanPromotions);
  DHS_SEEDED_RNG(rng, 2000);
  const std::int64_t listed = dhs::test::kPlanListed;
  for (int repeat = 0; repeat < 4; ++repeat) {
    INFO("repeat " << repeat);
    PromotionPlanState state = randomState(rng, kSlots, 0.5);
    if (repeat % 2)
      state.perLane = kCap;
    // Past each lane's first -1: row ids and more -1s (runs of them, other
    // negative ids), so a lane has several -1s that open a run; lane 0
    // opens with one, lane 1 has its only -1 last, lane 2 none at all.
    std::int64_t listedBefore = 0;
    for (std::int64_t b = 0; b < state.lanes; ++b) {
      auto *lane = state.fetched.data() + b * listed;
      std::int64_t first = 0;
      while (first < listed && lane[first] >= 0)
        ++first;
      if (b == 0)
        first = 0;
      else if (b == 1)
        first = listed - 1;
      else if (b == 2)
        first = listed;
      for (std::int64_t j = 0; j < listed; ++j) {
        if (j < first)
          lane[j] = static_cast<std::int32_t>(j * 3 + 1);
        else if (j == first)
          lane[j] = -1;
        else
          lane[j] = rng() % 3 == 0 ? static_cast<std::int32_t>(rng() % 4) - 3
                                   : static_cast<std::int32_t>(rng() % 100000);
      }
      listedBefore += first;
    }
    const auto control = checkKernel(state.perLane < 0 ? manifest : capped, state);
    CHECK(control[Control::kListed] == listedBefore);
  }
}
