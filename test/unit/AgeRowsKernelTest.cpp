//===- AgeRowsKernelTest.cpp - The generated age_rows kernel --------------===//
//
// examples/age_rows_step.mlir, compiled at build time (64 appends, 5000
// slots). On a GPU, everything the kernel writes (the place list, the map,
// hot rows, cleared stamps, free stack, recency, the control words and the
// status) must equal planAgeRows on the host, which DeviceResidencyTest
// holds to the residency controller's append: over states packed from a
// controller under load (its tables padded to 5000 slots), after a step
// whose promotions ran out of victims, with bad control words, and several
// groups in one grouped launch.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"
#include "PromotionScenario.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

using namespace dhs::runtime;
using Layout = dhs_abi::AgeRowsLayout;

namespace {

/// The compiled step's appends and slots (examples/age_rows_step.mlir).
constexpr std::size_t kAppends = 64;
constexpr std::int32_t kSlots = 5000;

/// `state` with its tables extended to `slots` slots that are neither hot
/// nor free (the same candidates in the same hand order).
AgeRowsState padSlots(AgeRowsState state, std::int32_t slots) {
  const std::size_t n = static_cast<std::size_t>(slots);
  state.group.hotRows.resize(n, -1);
  state.group.cleared.resize(n, 0);
  state.group.freeStack.resize(n, -1);
  state.group.recency.resize(2 * n, 0);
  return state;
}

/// The control words of `state` as the launch takes them.
std::vector<std::int32_t> controlWords(const AgeRowsState &state) {
  std::vector<std::int32_t> words(Layout::kWords, 0);
  words[Layout::kHand] = state.group.hand;
  words[Layout::kFreeCount] = state.group.freeCount;
  words[Layout::kFreeBudget] = static_cast<std::int32_t>(state.budget - state.group.excess);
  words[Layout::kNoVictimStep] = static_cast<std::int32_t>(state.group.noVictimStep);
  words[Layout::kExcess] = static_cast<std::int32_t>(state.group.excess);
  return words;
}

/// One group's launch: its buffers and what the kernel must leave in them.
struct AgeRowsGroup {
  dhs::runtime::CudaStepBuffers buffers;
  CUdeviceptr hot = 0, cleared = 0, free = 0, control = 0, rows = 0, slots = 0;
  AgeRowsState state, expected;
  std::vector<std::int32_t> controlIn;
  PromotionPlanList list;
  std::uint32_t expectedStatus = 0;
  bool bad = false;
};

/// Uploads a group's state with `appends` (padded to the step's list) into
/// buffers of `run` and computes planAgeRows' results (`control`: the
/// control words to pass, the state's by default).
AgeRowsGroup prepareGroup(dhs::test::KernelRun &run, const AgeRowsState &state,
                          const std::vector<DeviceAppend> &appends,
                          std::vector<std::int32_t> control = {}) {
  REQUIRE(appends.size() <= kAppends);
  AgeRowsGroup group;
  std::vector<DeviceAppend> padded = appends;
  padded.resize(kAppends, DeviceAppend{-1, -1, 0, 0});
  group.state = group.expected = state;
  group.controlIn = control.empty() ? controlWords(state) : control;
  group.bad = group.controlIn != controlWords(state);
  group.expectedStatus =
      group.bad ? dhs_abi::kStatusBadSlot : planAgeRows(group.expected, padded, group.list);
  if (group.bad)
    group.list.rows.assign(2 * kAppends, -1), group.list.slots.assign(2 * kAppends, -1);

  dhs::runtime::CudaStepBuffers &b = group.buffers;
  b.arguments.push_back(0); // the pool: its views are passed apart
  std::vector<std::int64_t> words;
  for (const DeviceAppend &a : padded)
    words.insert(words.end(), {a.aged, a.fresh, a.ownerBegin, a.ownerEnd});
  b.arguments.push_back(run.upload(words, "appends"));
  b.arguments.push_back(group.hot = run.upload(state.group.hotRows, "hot rows"));
  b.arguments.push_back(group.cleared = run.upload(state.group.cleared, "cleared"));
  b.arguments.push_back(group.free = run.upload(state.group.freeStack, "free stack"));
  b.arguments.push_back(group.control = run.upload(group.controlIn, "control"));
  b.arguments.push_back(group.rows =
                            run.upload(std::vector<std::int64_t>(2 * kAppends, 12345), "rows"));
  b.arguments.push_back(group.slots =
                            run.upload(std::vector<std::int32_t>(2 * kAppends, 777), "slots"));
  b.map = run.upload(state.map, "map");
  b.hostRows = static_cast<std::int64_t>(state.map.size());
  b.recency = run.upload(state.group.recency, "recency");
  b.log = run.upload(
      std::vector<std::int32_t>{static_cast<std::int32_t>(state.group.step), 0, 0, 0}, "log");
  b.logWords = 4;
  b.hbmSlots = static_cast<std::int64_t>(state.group.hotRows.size());
  b.status = run.upload(std::vector<std::uint32_t>{0}, "status");
  return group;
}

/// Compares everything the kernel wrote for `group` with planAgeRows';
/// returns the released rows.
std::int64_t checkGroup(const dhs::test::KernelRun &run, const AgeRowsGroup &group) {
  CHECK(run.download<std::uint32_t>(group.buffers.status, 1, "status").front() ==
        group.expectedStatus);
  CHECK(run.download<std::int64_t>(group.rows, 2 * kAppends, "rows") == group.list.rows);
  CHECK(run.download<std::int32_t>(group.slots, 2 * kAppends, "slots") == group.list.slots);
  const std::vector<std::int32_t> after =
      run.download<std::int32_t>(group.control, Layout::kWords, "control");
  CHECK(after == (group.bad ? group.controlIn : controlWords(group.expected)));
  const AgeRowsState &state = group.bad ? group.state : group.expected;
  const DeviceGroupState &g = state.group;
  CHECK(run.download<std::int64_t>(group.hot, g.hotRows.size(), "hot rows") == g.hotRows);
  CHECK(run.download<std::int32_t>(group.cleared, g.cleared.size(), "cleared") == g.cleared);
  CHECK(run.download<std::int32_t>(group.free, g.freeStack.size(), "free stack") == g.freeStack);
  CHECK(run.download<std::int32_t>(group.buffers.map, state.map.size(), "map") == state.map);
  CHECK(run.download<std::int32_t>(group.buffers.recency, g.recency.size(), "recency") ==
        g.recency);
  std::int64_t released = 0;
  for (std::size_t i = kAppends; i < 2 * kAppends; ++i)
    released += group.list.rows[i] >= 0;
  return released;
}

/// Runs the kernel on `state` with `appends` and compares everything it
/// writes with planAgeRows; returns the released rows.
std::int64_t checkKernel(const Manifest &manifest, const AgeRowsState &state,
                         const std::vector<DeviceAppend> &appends,
                         std::vector<std::int32_t> control = {}) {
  dhs::test::KernelRun run(manifest);
  const AgeRowsGroup group = prepareGroup(run, state, appends, std::move(control));
  run.buffers = group.buffers;
  run.launch("age_rows");
  return checkGroup(run, group);
}

/// The state and the appends of `requests` (each appending `times` tokens)
/// packed from `c`, as the runtime would record them.
std::pair<AgeRowsState, std::vector<DeviceAppend>>
pack(const ResidencyController &c, const std::vector<std::int32_t> &requests, int times) {
  AgeRowsState state{c.exportDeviceState(0), c.residencyTable(0), c.optionalBudget()};
  ResidencyController device = c;
  device.markDeviceOwned(0);
  std::vector<RowCopy> ignored;
  for (int t = 0; t < times; ++t)
    for (std::int32_t r : requests)
      if (device.historyLen(r) < device.maxContext(r))
        device.append(r, ignored);
  return {padSlots(state, kSlots), device.deviceAppends(0).toVector()};
}

} // namespace

TEST_CASE("the generated age_rows kernel makes the host's append decisions under load",
          "[cuda][gpu][residency][device]") {
  DHS_GPU_KERNEL_STEP(manifest, "age_rows", abi::LaunchKind::AgeRows);
  CHECK(manifest.arguments[1].role == ArgumentRole::AgeList);
  DHS_SEEDED_RNG(rng, 3000);
  std::int64_t released = 0, checked = 0;
  dhs::test::runPromotionScenario(
      rng, Replacement::Clock, -1, 40,
      [](const ResidencyController &, const PromotionPlanState &) {},
      [](const ResidencyController &, const std::vector<RowCopy> &) {},
      [&](ResidencyController &c, const std::vector<std::int32_t> &requests) {
        INFO("after step " << c.stepCount());
        // Up to 10 tokens per request: more than the newest window (8), so
        // rows appended in the list age in it too.
        const auto [state, appends] = pack(c, requests, 1 + static_cast<int>(rng() % 10));
        released += checkKernel(manifest, state, appends);
        checked += static_cast<std::int64_t>(appends.size());
        std::vector<RowCopy> copies;
        for (std::int32_t r : requests)
          c.append(r, copies);
      });
  CHECK(checked > 200);
  CHECK(released > 50);
}

TEST_CASE("the generated age_rows kernel after a step whose promotions ran out of victims",
          "[cuda][gpu][residency][device]") {
  DHS_GPU_KERNEL_STEP(manifest, "age_rows", abi::LaunchKind::AgeRows);
  // DeviceResidencyTest's state: the memo holds the step, request 2's first
  // hot row resets it.
  ResidencyController c(ResidencyConfig::adaptive(1, 40, 1000, 4, 0, 0));
  std::vector<RowCopy> copies;
  const std::int32_t r0 = c.admit(100, 200, copies), r1 = c.admit(100, 200, copies),
                     r2 = c.admit(4, 50, copies);
  std::vector<std::int32_t> rows(80), slots(80);
  for (std::int32_t k = 0; k < 40; ++k)
    rows[static_cast<std::size_t>(k)] = rows[static_cast<std::size_t>(40 + k)] = 2 * k;
  const std::vector<std::int32_t> lanes = {r0, r1};
  c.beginStep();
  c.resolve(0, lanes.data(), 2, rows.data(), 1, 40, slots.data());
  c.endStep(copies);
  REQUIRE(c.exportDeviceState(0).noVictimStep == 1);
  for (const auto &order :
       {std::vector<std::int32_t>{r0, r0, r0}, std::vector<std::int32_t>{r0, r2, r0, r1}}) {
    const auto [state, appends] = pack(c, order, 1);
    CHECK(checkKernel(manifest, state, appends) == static_cast<std::int64_t>(order.size()));
  }
}

TEST_CASE("the generated age_rows kernel reports bad control words and replays nothing",
          "[cuda][gpu][residency][device]") {
  DHS_GPU_KERNEL_STEP(manifest, "age_rows", abi::LaunchKind::AgeRows);
  ResidencyController c(ResidencyConfig::adaptive(1, 64, 1000, 4, 0, 0));
  std::vector<RowCopy> copies;
  const std::int32_t r = c.admit(20, 100, copies);
  const auto [state, appends] = pack(c, {r, r}, 1);
  std::vector<std::int32_t> control = controlWords(state);
  SECTION("a hand outside the table") { control[Layout::kHand] = kSlots; }
  SECTION("a free count beyond the stack") { control[Layout::kFreeCount] = kSlots + 1; }
  checkKernel(manifest, state, appends, control);
}

TEST_CASE("one grouped age_rows launch replays several groups as their own launches would",
          "[cuda][gpu][residency][device]") {
  DHS_GPU_KERNEL_STEP(manifest, "age_rows", abi::LaunchKind::AgeRows);
  REQUIRE(manifest.launches[0].isGrouped());
  DHS_SEEDED_RNG(rng, 3100);
  // Five groups' states from controllers under different loads, each in
  // buffers of its own (apart, in any order in memory), one with bad
  // control words: a CTA each, and the bad group's failure is its own.
  dhs::test::KernelRun run(manifest);
  std::vector<AgeRowsGroup> groups;
  for (int g = 0; g < 5; ++g) {
    ResidencyController c(ResidencyConfig::adaptive(1, 40 + 8 * g, 1000, 4, 0, 0));
    std::vector<RowCopy> copies;
    std::vector<std::int32_t> requests;
    for (int r = 0; r < 3 + g; ++r)
      requests.push_back(c.admit(20 + static_cast<std::int32_t>(rng() % 60), 100, copies));
    const auto [state, appends] = pack(c, requests, 1 + static_cast<int>(rng() % 4));
    std::vector<std::int32_t> control;
    if (g == 3) {
      control = controlWords(state);
      control[Layout::kHand] = kSlots; // outside the table
    }
    groups.push_back(prepareGroup(run, state, appends, control));
  }
  std::vector<dhs::runtime::CudaStepBuffers> buffers;
  for (const AgeRowsGroup &group : groups)
    buffers.push_back(group.buffers);
  const std::vector<std::int64_t> table = run.step.groupBindings(0, buffers);
  REQUIRE(table.size() == groups.size() * manifest.launches[0].params.size());
  CHECK(std::all_of(table.begin(),
                    table.begin() + static_cast<std::ptrdiff_t>(manifest.launches[0].params.size()),
                    [](std::int64_t d) { return d == 0; }));
  run.buffers = groups[0].buffers;
  run.buffers.groupBindings = run.upload(table, "the table");
  run.buffers.groups = static_cast<std::int64_t>(groups.size());
  run.launch("grouped age_rows");
  for (std::size_t g = 0; g < groups.size(); ++g) {
    INFO("group " << g);
    checkGroup(run, groups[g]);
  }
  CHECK(groups[3].expectedStatus == dhs_abi::kStatusBadSlot);
  // (Groups that placed rows.)
  for (std::size_t g : {0, 4})
    CHECK(std::any_of(groups[g].list.rows.begin(), groups[g].list.rows.end(),
                      [](std::int64_t row) { return row >= 0; }));
  // Groups whose buffers differ in more than their addresses cannot share
  // a launch.
  buffers[2].hbmSlots += 1;
  CHECK_THROWS_WITH(run.step.groupBindings(0, buffers),
                    Catch::Contains("group 2's replacement_state"));
}
