//===- RowWritesTest.cpp - Rows written into the host store ---------------===//

#include "TestUtil.h"

#include "runtime/core/RowWrites.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

using namespace dhs::runtime;

TEST_CASE("writeRows writes each row where memcpy would, and nothing else", "[append]") {
  DHS_SEEDED_RNG(rng, 0);
  // Row sizes of the formats (656, 1152, GQA rows) and odd ones; targets
  // 16-byte aligned (non-temporal stores) or not (memcpy), in random order.
  for (std::size_t bytes : {656, 1152, 256, 48, 100, 7}) {
    for (std::size_t misalign : {0, 16, 3}) {
      INFO("row bytes " << bytes << ", targets offset by " << misalign);
      const std::size_t rows = 300, pitch = bytes + 64;
      std::vector<std::uint8_t> store(rows * pitch + 64), expected;
      std::vector<std::uint8_t> sources(rows * bytes);
      for (std::uint8_t &byte : store)
        byte = static_cast<std::uint8_t>(rng());
      for (std::uint8_t &byte : sources)
        byte = static_cast<std::uint8_t>(rng());
      expected = store;
      // Aligned to 16 from the buffer's first 16-byte boundary.
      const std::size_t base =
          (16 - reinterpret_cast<std::uintptr_t>(store.data()) % 16) % 16 + misalign;
      std::vector<std::size_t> order(rows / 2); // half the rows, shuffled
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<RowWrite> writes;
      for (std::size_t i = 0; i < order.size(); ++i) {
        const std::size_t at = base + order[i] * 2 * pitch % (rows * pitch - pitch);
        writes.push_back({store.data() + at, sources.data() + i * bytes});
        std::memcpy(expected.data() + at, sources.data() + i * bytes, bytes);
      }
      writeRows(writes, bytes);
      CHECK(store == expected);
    }
  }
  // No rows: nothing happens.
  writeRows({}, 656);
}
