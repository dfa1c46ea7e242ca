//===- ResolveTest.cpp - The generated resolve kernel on a GPU ------------===//
//
// examples/resolve_step.mlir, compiled at build time: selections resolve to
// HBM slots through the pool's residency map (one entry per host row). On a
// GPU the slots must equal a CPU lookup on fresh random maps and selections,
// and a row id outside its history must be reported (status bit 1) and
// resolve to -1. The kernel also books the step: every slot hit is stamped
// with the step in the replacement state (the old last use moving to the
// previous use), and the step log lists each slot hit once, every miss as
// (lane, row id), and the count of valid selections; with an empty log (a
// group's other layers) nothing is booked.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include "runtime/core/Manifest.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

using namespace dhs::runtime;

TEST_CASE("the generated resolve kernel maps selections to slots", "[cuda][gpu][resolve]") {
  DHS_GPU_KERNEL_STEP(manifest, "resolve", abi::LaunchKind::Resolve);
  DHS_SEEDED_RNG(rng, 1300);

  // pool (map [H]), rows [4,2,256], history_start [4], history_len [4],
  // slots [4,2,256]: requests laid out one after another in the host store.
  const std::size_t B = 4, Q = 2, K = 256;
  std::vector<std::int32_t> rows(B * Q * K), length(B);
  std::vector<std::int64_t> start(B);
  std::size_t H = 0;
  for (std::size_t b = 0; b < B; ++b) {
    length[b] = 2000 + static_cast<std::int32_t>(rng() % 6000);
    start[b] = static_cast<std::int64_t>(H);
    H += static_cast<std::size_t>(length[b]) + rng() % 100; // gaps between ranges
  }
  std::vector<std::int32_t> map(H);
  for (auto &slot : map)
    slot = rng() % 3 ? -1 : static_cast<std::int32_t>(rng() % 65536);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < Q * K; ++i)
      rows[b * Q * K + i] = rng() % 10 == 0 ? -1 : static_cast<std::int32_t>(rng() % length[b]);

  for (bool bad : {false, true}) {
    INFO((bad ? "with" : "without") << " a row id outside its history");
    if (bad)
      rows[3] = length[0] + 5;
    dhs::test::KernelRun run(manifest);
    run.buffers.arguments.push_back(0); // the pool: its map is passed apart
    run.argument(rows, "rows");
    run.argument(start, "history_start");
    run.argument(length, "history_len");
    const CUdeviceptr slotsBuffer =
        run.argument(std::vector<std::int32_t>(B * Q * K, 12345), "slots");
    // The replacement state: earlier steps' stamps; the log: step 1000.
    const std::uint32_t step = 1000;
    std::vector<std::int32_t> recency(2 * 65536);
    for (auto &use : recency)
      use = static_cast<std::int32_t>(rng() % step);
    const std::size_t words = StepLogLayout::words(B * Q * K);
    std::vector<std::int32_t> log(words, 0);
    log[StepLogLayout::kStep] = static_cast<std::int32_t>(step);
    run.buffers.map = run.upload(map, "map");
    run.buffers.hostRows = static_cast<std::int64_t>(H);
    run.buffers.hbmSlots = 65536;
    run.buffers.recency = run.upload(recency, "recency");
    run.buffers.log = run.upload(log, "log");
    run.buffers.logWords = static_cast<std::int64_t>(words);
    run.enqueue();
    // A second layer of the group: the same selections, an empty log.
    run.buffers.logWords = 0;
    run.enqueue();
    run.wait("resolve");
    const std::vector<std::int32_t> slots =
        run.download<std::int32_t>(slotsBuffer, B * Q * K, "slots");
    const std::vector<std::int32_t> stamped =
        run.download<std::int32_t>(run.buffers.recency, recency.size(), "recency");
    const std::vector<std::int32_t> logged =
        run.download<std::int32_t>(run.buffers.log, words, "log");
    const std::uint32_t word = run.status();
    CHECK(word == (bad ? 1u : 0u));
    std::size_t mismatches = 0;
    std::vector<std::int32_t> hits;
    std::vector<std::int64_t> misses;
    std::int64_t entries = 0;
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < Q * K; ++i) {
        std::int32_t id = rows[b * Q * K + i];
        std::int32_t expected =
            id < 0 || id >= length[b]
                ? -1
                : map[static_cast<std::size_t>(start[b]) + static_cast<std::size_t>(id)];
        mismatches += slots[b * Q * K + i] != expected;
        if (id < 0 || id >= length[b])
          continue;
        ++entries;
        if (expected >= 0)
          hits.push_back(expected);
        else
          misses.push_back(static_cast<std::int64_t>(b) << 32 | id);
      }
    CHECK(mismatches == 0);
    std::sort(hits.begin(), hits.end());
    hits.erase(std::unique(hits.begin(), hits.end()), hits.end());
    std::sort(misses.begin(), misses.end());
    REQUIRE_FALSE(hits.empty());
    REQUIRE_FALSE(misses.empty());
    // The replacement state: hit slots stamped, the rest untouched.
    std::size_t stampErrors = 0;
    for (std::size_t slot = 0; slot < 65536; ++slot) {
      const bool hit =
          std::binary_search(hits.begin(), hits.end(), static_cast<std::int32_t>(slot));
      const std::int32_t last = hit ? static_cast<std::int32_t>(step) : recency[2 * slot];
      const std::int32_t previous = hit ? recency[2 * slot] : recency[2 * slot + 1];
      stampErrors += stamped[2 * slot] != last || stamped[2 * slot + 1] != previous;
    }
    CHECK(stampErrors == 0);
    // The log: each slot hit once, every miss, the valid count.
    const std::size_t N = B * Q * K;
    CHECK(static_cast<std::uint32_t>(logged[StepLogLayout::kStep]) == step);
    REQUIRE(static_cast<std::size_t>(logged[StepLogLayout::kHits]) == hits.size());
    REQUIRE(static_cast<std::size_t>(logged[StepLogLayout::kMisses]) == misses.size());
    CHECK(logged[StepLogLayout::kEntries] == entries);
    std::vector<std::int32_t> loggedHits(logged.begin() + StepLogLayout::kHeader,
                                         logged.begin() + StepLogLayout::kHeader +
                                             static_cast<std::ptrdiff_t>(hits.size()));
    std::sort(loggedHits.begin(), loggedHits.end());
    CHECK(loggedHits == hits);
    std::vector<std::int64_t> loggedMisses;
    for (std::size_t i = 0; i < misses.size(); ++i)
      loggedMisses.push_back(static_cast<std::int64_t>(logged[StepLogLayout::kHeader + N + 2 * i])
                                 << 32 |
                             logged[StepLogLayout::kHeader + N + 2 * i + 1]);
    std::sort(loggedMisses.begin(), loggedMisses.end());
    CHECK(loggedMisses == misses);
  }
}
