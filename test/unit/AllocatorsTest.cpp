//===- AllocatorsTest.cpp - HBM slot and host-row allocators --------------===//

#include "FailingAllocation.h"
#include "TestUtil.h"

#include "runtime/core/Error.h"
#include "runtime/residency/Allocators.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>

using namespace dhs::runtime;

TEST_CASE("slot allocator: order, exhaustion, double release", "[alloc]") {
  SlotAllocator slots(4);
  CHECK(slots.capacity() == 4);
  CHECK(slots.allocate() == 0);
  CHECK(slots.allocate() == 1);
  CHECK(slots.usedCount() == 2);
  slots.release(0);
  CHECK(slots.isFree(0));
  CHECK_FALSE(slots.isFree(1));
  CHECK(slots.allocate() == 0); // last released comes back first
  CHECK(slots.allocate() == 2);
  CHECK(slots.allocate() == 3);
  CHECK(slots.freeCount() == 0);
  CHECK(slots.tryAllocate() == -1);
  CHECK_THROWS_AS(slots.allocate(), CapacityError);
  CHECK_THROWS_WITH(slots.allocate(), Catch::Contains("all 4 slots are in use"));
  slots.release(2);
  CHECK_THROWS_WITH(slots.release(2), Catch::Contains("slot 2 is released twice"));
  CHECK_THROWS_WITH(slots.release(4), Catch::Contains("outside the slot pool (4 slots)"));
  CHECK_THROWS_WITH(slots.release(-1), Catch::Contains("outside the slot pool"));
  CHECK_THROWS_AS(SlotAllocator(-1), Error);
  SlotAllocator empty(0);
  CHECK(empty.tryAllocate() == -1);
}

TEST_CASE("slot allocator agrees with a set model on random operations", "[alloc]") {
  DHS_SEEDED_RNG(rng, 1);
  SlotAllocator slots(257);
  std::set<std::int32_t> used;
  for (int op = 0; op < 20000; ++op) {
    if (used.empty() || (rng() % 3 != 0 && used.size() < 257)) {
      std::int32_t s = slots.allocate();
      REQUIRE(used.insert(s).second); // never handed out twice
    } else {
      auto it = used.begin();
      std::advance(it, static_cast<long>(rng() % used.size()));
      slots.release(*it);
      used.erase(it);
    }
    REQUIRE(slots.usedCount() == static_cast<std::int32_t>(used.size()));
  }
  for (std::int32_t s = 0; s < 257; ++s)
    REQUIRE(slots.isFree(s) == (used.count(s) == 0));
}

TEST_CASE("host allocator: first fit, coalescing, fragmentation", "[alloc]") {
  HostRowAllocator host(1000);
  CHECK(host.allocate(100) == 0);
  CHECK(host.allocate(200) == 100);
  CHECK(host.allocate(300) == 300);
  CHECK(host.freeRows() == 400);
  CHECK(host.allocatedLength(100) == 200);
  CHECK(host.allocatedLength(101) == 0);

  // Free the middle range: a hole of 200 before the tail of 400.
  host.release(100);
  CHECK(host.freeRanges() == std::vector<HostRange>{{100, 200}, {600, 400}});
  CHECK(host.allocate(150) == 100); // first fit: the hole
  CHECK(host.freeRanges() == std::vector<HostRange>{{250, 50}, {600, 400}});

  SECTION("fragmentation: enough rows, no range") {
    CHECK(host.allocate(400) == 600);
    CHECK(host.freeRows() == 50);
    host.release(0); // free: [0,100) [250,300)
    CHECK(host.freeRows() == 150);
    CHECK(host.largestFreeRange() == 100);
    CHECK_THROWS_AS(host.allocate(120), CapacityError);
    CHECK_THROWS_WITH(host.allocate(120),
                      Catch::Contains("no free range of 120 rows (150 of 1000 rows free in 2 "
                                      "ranges, the longest 100)"));
    CHECK_FALSE(host.tryAllocate(120).has_value());
    // Freeing the range between the two holes coalesces all three.
    host.release(100);
    CHECK(host.freeRanges() == std::vector<HostRange>{{0, 300}});
    CHECK(host.allocate(120) == 0);
  }
  SECTION("freeing everything gives one range") {
    host.release(0);
    host.release(300);
    host.release(100);
    CHECK(host.freeRanges() == std::vector<HostRange>{{0, 1000}});
    CHECK(host.usedRanges().empty());
    CHECK(host.allocate(1000) == 0);
    CHECK_THROWS_AS(host.allocate(1), CapacityError);
  }
  SECTION("errors") {
    CHECK_THROWS_WITH(host.release(5), Catch::Contains("no reserved host range starts at row 5"));
    CHECK_THROWS_WITH(host.allocate(0), Catch::Contains("cannot reserve 0 host rows"));
    CHECK_THROWS_AS(host.allocate(-3), Error);
    CHECK_THROWS_AS(HostRowAllocator(-1), Error);
  }
}

TEST_CASE("host allocator agrees with a row-map model on random operations", "[alloc]") {
  DHS_SEEDED_RNG(rng, 2);
  const std::int64_t capacity = 5000;
  HostRowAllocator host(capacity);
  std::vector<int> owner(capacity, -1); // model: range id per row
  std::map<std::int64_t, std::int64_t> ranges;
  int refused = 0;
  for (int op = 0; op < 4000; ++op) {
    if (ranges.empty() || rng() % 2) {
      std::int64_t length = 1 + static_cast<std::int64_t>(rng() % 400);
      // The model's first fit.
      std::int64_t expected = -1, run = 0;
      for (std::int64_t row = 0; row < capacity; ++row) {
        run = owner[row] == -1 ? run + 1 : 0;
        if (run == length) {
          expected = row - length + 1;
          break;
        }
      }
      std::optional<std::int64_t> start = host.tryAllocate(length);
      REQUIRE(start.value_or(-1) == expected);
      if (!start) {
        ++refused;
        continue;
      }
      for (std::int64_t row = *start; row < *start + length; ++row)
        owner[row] = op;
      ranges[*start] = length;
    } else {
      auto it = ranges.begin();
      std::advance(it, static_cast<long>(rng() % ranges.size()));
      host.release(it->first);
      for (std::int64_t row = it->first; row < it->first + it->second; ++row)
        owner[row] = -1;
      ranges.erase(it);
    }
    // Free ranges are exactly the model's maximal runs of free rows.
    std::vector<HostRange> runs;
    for (std::int64_t row = 0; row < capacity;) {
      if (owner[row] != -1) {
        ++row;
        continue;
      }
      std::int64_t end = row;
      while (end < capacity && owner[end] == -1)
        ++end;
      runs.push_back({row, end - row});
      row = end;
    }
    REQUIRE(host.freeRanges() == runs);
  }
  CHECK(refused > 0); // the sequence did reach fragmentation or exhaustion
}

TEST_CASE("host allocator: a reservation or release whose allocation fails changes nothing",
          "[alloc][alloc-failure]") {
  // Free [100, 200) and [250, 300) between used ranges, and the tail.
  HostRowAllocator host(1000);
  for (std::int64_t length : {100, 100, 50, 50, 300})
    host.allocate(length);
  host.release(100);
  host.release(250);
  const auto expectSame = [&](const HostRowAllocator &twin) {
    REQUIRE(host.freeRanges() == twin.freeRanges());
    REQUIRE(host.usedRanges() == twin.usedRanges());
    REQUIRE(host.freeRows() == twin.freeRows());
  };
  // Each operation under every failing allocation it makes, then done
  // whole on a twin: splitting a range, taking one whole, freeing one that
  // joins the next free range, none, both, and the one before.
  const auto operations = {
      std::function<void(HostRowAllocator &)>([](HostRowAllocator &h) { h.allocate(30); }),
      std::function<void(HostRowAllocator &)>([](HostRowAllocator &h) { h.allocate(70); }),
      std::function<void(HostRowAllocator &)>([](HostRowAllocator &h) { h.release(200); }),
      std::function<void(HostRowAllocator &)>([](HostRowAllocator &h) { h.release(0); }),
      std::function<void(HostRowAllocator &)>([](HostRowAllocator &h) { h.release(300); }),
      std::function<void(HostRowAllocator &)>([](HostRowAllocator &h) { h.allocate(600); }),
      std::function<void(HostRowAllocator &)>([](HostRowAllocator &h) { h.release(100); }),
  };
  std::uint64_t failures = 0;
  for (const auto &operation : operations) {
    HostRowAllocator twin = host;
    failures += dhs::test::failEachAllocation([&] { operation(host); }, [&] { expectSame(twin); });
    operation(twin);
    expectSame(twin);
  }
  // (Splitting a range needs the used range's node: at least that failed.)
  CHECK(failures >= 1);
}
