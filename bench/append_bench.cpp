//===- append_bench.cpp - Times the residency controller's appends --------===//
//
// Usage: dhs-append-bench [--batch B] [--groups G] [--slots S] [--history N]
//            [--topk K] [--steps T] [--round-trip 1] [--device-appends 1]
// The residency of dhs-decision-bench's config on the host alone (no GPU):
// B requests of N rows, G groups of S slots, the adaptive policy with CLOCK
// and hot floor 0, newest window 64. Each step resolves fresh selections
// (a third from the newest 2048 rows, the rest anywhere; about a third
// resident), ends the step, then appends one token to every request. Prints
// the median time of a step (begin, resolve, end) and of the appends, and
// a hash of the final residency (slot owners, rows, references, hands).
// --linear 1: CLOCK sweeps every slot (the reference path, for comparison).
// --round-trip 1: before each step's appends, the host side of the decided
// runtime's round trip (Runtime::giveStateToDevice / takeStateFromDevice
// without the transfers): every group's state exported, the group marked
// device-owned, and the state adopted back (exportDeviceStates /
// adoptDeviceStates, the groups in parallel); prints their medians.
// --device-appends 1: the appends go to device-owned groups, as with an
// aging step (dhs-decision-bench --aging-step): timed are the appends'
// recording (ResidencyController::append), the host's taking of the
// replays' slots (applyDeviceAppends, as Runtime::applyAppends after a
// step) and the adoption of the groups' states after them
// (adoptDeviceStates, the groups in parallel: the round trip's, here every
// step; the runtime adopts before admissions, finishes, verify steps and
// checks); planAgeRows stands in for the device's replay (not timed).
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSetup.h"
#include "bench/BenchTiming.h"
#include "runtime/residency/PromotionPlan.h"
#include "runtime/residency/Residency.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

using namespace dhs::runtime;

namespace {

using Clock = dhs::bench::Clock;
using dhs::bench::median;
constexpr auto ms = dhs::bench::elapsedMs;

} // namespace

int main(int argc, char **argv) {
  static const char *usage =
      "usage: dhs-append-bench [--batch B] [--groups G] [--slots S] [--history N] [--topk K]\n"
      "           [--steps T] [--round-trip 1] [--device-appends 1] [--linear 1]\n";
  if (dhs::bench::wantsHelp(argc, argv)) {
    std::fputs(usage, stdout);
    return 0;
  }
  if (argc % 2 == 0) { // every option takes a value
    std::fputs(usage, stderr);
    return 2;
  }
  std::int64_t batch = 128, history = 2304, topk = 2048;
  std::int32_t groups = 20, slots = 65536, steps = 10;
  bool linear = false, roundTrip = false, deviceAppends = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    const long long value = std::atoll(argv[i + 1]);
    if (arg == "--batch")
      batch = value;
    else if (arg == "--groups")
      groups = static_cast<std::int32_t>(value);
    else if (arg == "--slots")
      slots = static_cast<std::int32_t>(value);
    else if (arg == "--history")
      history = value;
    else if (arg == "--topk")
      topk = value;
    else if (arg == "--linear")
      linear = value != 0;
    else if (arg == "--round-trip")
      roundTrip = value != 0;
    else if (arg == "--device-appends")
      deviceAppends = value != 0;
    else if (arg == "--steps")
      steps = static_cast<std::int32_t>(value);
    else {
      std::fprintf(stderr, "dhs-append-bench: unknown option %s\n", arg.c_str());
      return 2;
    }
  }
  const std::int64_t maxContext = history + steps + 8;
  ResidencyConfig config =
      ResidencyConfig::adaptive(groups, slots, batch * maxContext, /*newestWindow=*/64,
                                /*draftWindow=*/0, /*hotFloor=*/0);
  config.maxRequests = static_cast<std::int32_t>(batch);
  ResidencyController controller(config);
  controller.setLinearClockForTesting(linear);
  std::vector<RowCopy> copies;
  std::vector<std::int32_t> requests;
  for (std::int64_t b = 0; b < batch; ++b)
    requests.push_back(controller.admit(history, maxContext, copies));
  std::mt19937_64 rng(5);
  std::vector<std::int32_t> rows(static_cast<std::size_t>(batch * topk)), out(rows.size());
  std::vector<double> stepTimes, appendTimes, exportTimes, adoptTimes, markTimes, applyTimes,
      agedAdoptTimes;
  std::vector<DeviceGroupState> states(static_cast<std::size_t>(groups));
  std::vector<std::int32_t> allGroups;
  for (std::int32_t g = 0; g < groups; ++g)
    allGroups.push_back(g);
  std::int64_t resident = 0, selected = 0, evicted = 0, appendCopies = 0;
  for (std::int32_t step = 0; step < steps; ++step) {
    const auto t0 = Clock::now();
    controller.beginStep();
    for (std::int32_t g = 0; g < groups; ++g) {
      for (std::int64_t b = 0; b < batch; ++b) {
        const std::int64_t len = controller.historyLen(requests[static_cast<std::size_t>(b)]);
        for (std::int64_t k = 0; k < topk; ++k) {
          const bool recent = rng() % 3 == 0;
          const std::int64_t span = recent ? std::min<std::int64_t>(2048, len) : len;
          rows[static_cast<std::size_t>(b * topk + k)] =
              static_cast<std::int32_t>(len - 1 - static_cast<std::int64_t>(rng() % span));
        }
      }
      controller.resolve(g, requests.data(), batch, rows.data(), 1, topk, out.data());
    }
    copies.clear();
    controller.endStep(copies);
    const auto t1 = Clock::now();
    resident += controller.lastStep().resident;
    selected += controller.lastStep().selected;
    if (roundTrip) {
      const auto r0 = Clock::now();
      controller.exportDeviceStates(allGroups, states);
      const auto r0m = Clock::now();
      controller.markDeviceOwned(allGroups);
      const auto r1 = Clock::now();
      markTimes.push_back(ms(r0m, r1));
      controller.adoptDeviceStates(allGroups, states);
      const auto r2 = Clock::now();
      exportTimes.push_back(ms(r0, r1));
      adoptTimes.push_back(ms(r1, r2));
      std::printf("step %d: export %.3f ms, adopt %.3f ms\n", step, ms(r0, r1), ms(r1, r2));
    }
    std::vector<AgeRowsState> aging;
    if (deviceAppends) {
      controller.exportDeviceStates(allGroups, states);
      for (std::int32_t g = 0; g < groups; ++g)
        aging.push_back({states[static_cast<std::size_t>(g)], controller.residencyTable(g),
                         controller.optionalBudget()});
      controller.markDeviceOwned(allGroups);
    }
    const auto t1a = Clock::now();
    const std::int64_t before = controller.evictionCount();
    copies.clear();
    for (std::int32_t request : requests)
      controller.append(request, copies);
    const auto t2 = Clock::now();
    if (deviceAppends) {
      // The device's replays (planAgeRows), then the host takes their slots.
      std::vector<std::vector<std::int32_t>> aged(static_cast<std::size_t>(groups));
      for (std::int32_t g = 0; g < groups; ++g) {
        const DeviceAppendList entries = controller.deviceAppends(g);
        PromotionPlanList list;
        if (planAgeRows(aging[static_cast<std::size_t>(g)], entries, list) != 0) {
          std::fprintf(stderr, "dhs-append-bench: planAgeRows failed\n");
          return 1;
        }
        aged[static_cast<std::size_t>(g)].assign(
            list.slots.begin(), list.slots.begin() + static_cast<std::ptrdiff_t>(entries.size()));
      }
      const auto a0 = Clock::now();
      controller.applyDeviceAppends(allGroups, aged);
      const auto a1 = Clock::now();
      applyTimes.push_back(ms(a0, a1));
      for (std::int32_t g = 0; g < groups; ++g) {
        states[static_cast<std::size_t>(g)] = aging[static_cast<std::size_t>(g)].group;
        states[static_cast<std::size_t>(g)].step =
            static_cast<std::uint32_t>(controller.stepCount());
      }
      const auto a2 = Clock::now();
      controller.adoptDeviceStates(allGroups, states);
      agedAdoptTimes.push_back(ms(a2, Clock::now()));
      std::printf("step %d: apply the device's appends %.3f ms\n", step, ms(a0, a1));
    }
    evicted += controller.evictionCount() - before;
    appendCopies += static_cast<std::int64_t>(copies.size());
    stepTimes.push_back(ms(t0, t1));
    appendTimes.push_back(ms(t1a, t2));
    std::printf("step %d: step %.3f ms, appends %.3f ms\n", step, ms(t0, t1), ms(t1a, t2));
  }
  controller.checkConsistency();
  std::uint64_t hash = 14695981039346656037ull;
  auto mix = [&hash](std::int64_t v) {
    hash = (hash ^ static_cast<std::uint64_t>(v)) * 1099511628211ull;
  };
  for (std::int32_t g = 0; g < groups; ++g) {
    mix(controller.clockHand(g));
    for (std::int32_t s = 0; s < slots; ++s) {
      mix(controller.slotOwner(g, s));
      mix(controller.slotRow(g, s));
      mix(controller.slotReferenced(g, s));
    }
    for (std::int32_t s : controller.freeSlots(g))
      mix(s);
  }
  std::printf("residency hash %016llx\n", static_cast<unsigned long long>(hash));
  std::printf("B=%lld, %d groups of %d slots, history %lld, top-%lld: %.1f%% of selected rows "
              "resident; per step %lld appends' copies, %lld evictions by appends\n",
              static_cast<long long>(batch), groups, slots, static_cast<long long>(history),
              static_cast<long long>(topk),
              100.0 * static_cast<double>(resident) /
                  static_cast<double>(std::max<std::int64_t>(selected, 1)),
              static_cast<long long>(appendCopies / steps),
              static_cast<long long>(evicted / steps));
  std::printf("medians of %d steps: step (resolve + end) %.3f ms, appends %.3f ms\n", steps,
              median(stepTimes), median(appendTimes));
  if (deviceAppends)
    std::printf("device appends: the host takes the replays' slots (applyDeviceAppends, %d "
                "groups) in %.3f ms; adopting the states after them (adoptDeviceStates) %.3f ms\n",
                groups, median(applyTimes), median(agedAdoptTimes));
  if (roundTrip)
    std::printf("round trip of %d groups: export %.3f ms (of which markDeviceOwned %.3f), adopt "
                "%.3f ms\n",
                groups, median(exportTimes), median(markTimes), median(adoptTimes));
  return 0;
}
