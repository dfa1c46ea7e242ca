//===- SortRowsTest.cpp - The generated sort_rows kernel -------------------===//
//
// test/unit/steps/sort_rows_step.mlir compiled at build time for 16
// requests x 8192 rows (the decision step's union at dhs-step-bench's large
// shape) and for 5 requests x 2100 rows (a list padded to 4096 in shared
// memory). On a GPU, every request's sorted list must equal std::sort of its
// rows with -1 last, over random lists: row ids with repeats, -1 scattered
// anywhere or only at the tail (as union_missing writes them), all -1, all
// one id, already ascending and descending.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>

using namespace dhs::runtime;

namespace {

/// The host's order: ascending row ids, then every -1.
std::vector<std::int32_t> expectedOrder(std::vector<std::int32_t> list) {
  std::sort(list.begin(), list.end(), [](std::int32_t a, std::int32_t b) {
    return static_cast<std::uint32_t>(a) < static_cast<std::uint32_t>(b);
  });
  return list;
}

/// Random lists of `requests` x `listed` ids, each request of one kind:
/// the kinds in turn (counted in `kinds`), so that every kind is sorted
/// once 7 lists were.
std::vector<std::int32_t> randomLists(std::mt19937_64 &rng, std::int64_t requests,
                                      std::int64_t listed, int kinds[]) {
  std::vector<std::int32_t> rows(static_cast<std::size_t>(requests * listed));
  for (std::int64_t b = 0; b < requests; ++b) {
    auto lane = rows.begin() + b * listed;
    const int kind = std::accumulate(kinds, kinds + 7, 0) % 7;
    ++kinds[kind];
    const std::uint64_t range = 1 + rng() % 200000;
    const std::int64_t used =
        static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(listed + 1));
    for (std::int64_t i = 0; i < listed; ++i) {
      std::int32_t &id = lane[i];
      id = static_cast<std::int32_t>(rng() % range);
      switch (kind) {
      case 0: // -1 anywhere, about a third
        if (rng() % 3 == 0)
          id = -1;
        break;
      case 1: // a union: `used` ids, then -1
        if (i >= used)
          id = -1;
        break;
      case 2: // many repeats
        id = static_cast<std::int32_t>(rng() % 17);
        break;
      case 3:
        id = -1;
        break;
      case 4:
        id = 12345;
        break;
      case 5: // ascending already, -1 at the tail
        id = i < used ? static_cast<std::int32_t>(i * 3) : -1;
        break;
      default: // descending
        id = static_cast<std::int32_t>((listed - i) * 2);
        break;
      }
    }
  }
  return rows;
}

void checkSort(const char *name, std::int64_t requests, std::int64_t listed) {
  DHS_GPU_KERNEL_STEP(manifest, name, abi::LaunchKind::SortRows);
  REQUIRE(manifest.arguments.size() == 2);
  CHECK(manifest.arguments[0].role == ArgumentRole::Missing);
  CHECK(manifest.arguments[1].role == ArgumentRole::FetchedRows);
  REQUIRE(manifest.arguments[0].shape == std::vector<std::int64_t>{requests, listed});
  DHS_SEEDED_RNG(rng, 2000);
  int kinds[7] = {};
  for (int repeat = 0; repeat < 8; ++repeat) {
    INFO("repeat " << repeat);
    const std::vector<std::int32_t> rows = randomLists(rng, requests, listed, kinds);
    dhs::test::KernelRun run(manifest);
    run.argument(rows, "rows");
    const CUdeviceptr sorted = run.argument(std::vector<std::int32_t>(rows.size(), 777), "sorted");
    run.launch("sort_rows");
    CHECK(run.status() == 0);
    const auto after = run.download<std::int32_t>(sorted, rows.size(), "sorted");
    for (std::int64_t b = 0; b < requests; ++b) {
      INFO("request " << b);
      const std::vector<std::int32_t> lane(rows.begin() + b * listed,
                                           rows.begin() + (b + 1) * listed);
      const std::vector<std::int32_t> got(after.begin() + b * listed,
                                          after.begin() + (b + 1) * listed);
      CHECK(got == expectedOrder(lane));
    }
  }
  // Every kind of list was sorted.
  for (int kind = 0; kind < 7; ++kind)
    CHECK(kinds[kind] > 0);
}

} // namespace

TEST_CASE("the generated sort_rows kernel sorts each request's rows ascending, -1 last",
          "[cuda][gpu][sort]") {
  SECTION("16 requests x 8192 rows (the decision step's union)") {
    checkSort("sort_rows", 16, 8192);
  }
  SECTION("5 requests x 2100 rows (padded to 4096)") { checkSort("sort_rows_ragged", 5, 2100); }
}

TEST_CASE("the sort_rows steps compile to a CTA of 1024 threads per request", "[sort]") {
  for (auto [name, requests, listed] : {std::tuple{"sort_rows", 16u, std::int64_t{8192}},
                                        std::tuple{"sort_rows_ragged", 5u, std::int64_t{2100}}}) {
    INFO(name);
    const std::optional<Manifest> manifest =
        dhs::test::kernelStepOrSkip(name, {abi::LaunchKind::SortRows});
    if (!manifest)
      return;
    CHECK(manifest->launches[0].grid == std::array<unsigned, 3>{requests, 1, 1});
    CHECK(manifest->launches[0].block == std::array<unsigned, 3>{1024, 1, 1});
    CHECK(manifest->arguments[1].shape ==
          std::vector<std::int64_t>{static_cast<std::int64_t>(requests), listed});
  }
}
