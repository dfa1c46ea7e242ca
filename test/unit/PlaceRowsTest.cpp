//===- PlaceRowsTest.cpp - The generated place_rows kernel on a GPU -------===//
//
// examples/place_rows_step.mlir, compiled at build time: a GLM-5-like layer
// group's rows (4 x 656 bytes a token) copied from the mapped host store into
// HBM slots and released, each recorded in the residency map. On a GPU every
// placed slot must hold its host row byte for byte, the map must record
// exactly the listed changes, nothing else may change, and bad entries must
// be reported (status bits 2 and 4) without being written.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include "runtime/core/Manifest.h"
#include "runtime/cuda/CudaResources.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

using namespace dhs::runtime;
using namespace dhs::runtime::cuda_detail;

TEST_CASE("the generated place_rows kernel copies rows, keeps the map and stamps the slots",
          "[cuda][gpu][place]") {
  std::optional<Manifest> compiled =
      dhs::test::kernelStepOrSkip("place_rows", {abi::LaunchKind::PlaceRows});
  if (!compiled)
    return;
  const Manifest &manifest = *compiled;
  CHECK(manifest.arguments[1].role == ArgumentRole::PlaceRows);
  CHECK(manifest.arguments[2].role == ArgumentRole::PlaceSlots);
  if (!dhs::test::gpuOrSkip())
    return;
  DHS_SEEDED_RNG(rng, 1400);
  const std::size_t N = 4096, hostRows = 20000, slots = 8192, token = 4 * 656;

  for (bool bad : {false, true}) {
    INFO((bad ? "with" : "without") << " a bad slot and a bad host row");
    dhs::test::KernelRun run(manifest);
    MappedHostBuffer host(hostRows * token, "host store");
    auto *hostBytes = static_cast<std::uint8_t *>(host.host());
    for (std::size_t i = 0; i < hostRows * token; ++i)
      hostBytes[i] = static_cast<std::uint8_t>(rng());
    run.buffers.host = host.device();
    run.buffers.hostRows = static_cast<std::int64_t>(hostRows);
    run.buffers.hbm = run.filled(slots * token / 4, 0xABABABABu, "hbm");
    run.buffers.hbmSlots = static_cast<std::int64_t>(slots);
    // The map before: some rows resident somewhere.
    std::vector<std::int32_t> mapBefore(hostRows);
    for (auto &entry : mapBefore)
      entry = rng() % 4 ? -1 : static_cast<std::int32_t>(rng() % slots);
    run.buffers.map = run.upload(mapBefore, "map");

    // 3000 rows placed in distinct slots, 500 released, the rest padding.
    std::vector<std::int64_t> rows(N, -1);
    std::vector<std::int32_t> slotList(N, 77); // padding slots are ignored
    std::vector<std::size_t> rowOrder(hostRows), slotOrder(slots);
    std::iota(rowOrder.begin(), rowOrder.end(), 0);
    std::iota(slotOrder.begin(), slotOrder.end(), 0);
    std::shuffle(rowOrder.begin(), rowOrder.end(), rng);
    std::shuffle(slotOrder.begin(), slotOrder.end(), rng);
    for (std::size_t i = 0; i < 3500; ++i) {
      rows[i] = static_cast<std::int64_t>(rowOrder[i]);
      slotList[i] = i < 3000 ? static_cast<std::int32_t>(slotOrder[i]) : -1;
    }
    if (bad) {
      slotList[5] = static_cast<std::int32_t>(slots);       // outside HBM
      rows[3200] = static_cast<std::int64_t>(hostRows) + 3; // outside the store
    }
    run.buffers.arguments.push_back(0); // the pool: its tiers and map are passed apart
    run.argument(rows, "rows");
    run.argument(slotList, "slots");
    // The replacement state before (earlier stamps), the log's step 777.
    std::vector<std::int32_t> recencyBefore(2 * slots);
    for (auto &use : recencyBefore)
      use = static_cast<std::int32_t>(1 + rng() % 700);
    run.buffers.recency = run.upload(recencyBefore, "recency");
    run.buffers.log = run.upload(std::vector<std::int32_t>{777, 0, 0, 0}, "log");
    run.buffers.logWords = 4;
    run.launch("place_rows");

    CHECK(run.status() == (bad ? 6u : 0u));
    const std::vector<std::int32_t> mapAfter =
        run.download<std::int32_t>(run.buffers.map, hostRows, "map");
    const std::vector<std::int32_t> recencyAfter =
        run.download<std::int32_t>(run.buffers.recency, 2 * slots, "recency");
    const std::vector<std::uint8_t> pool =
        run.download<std::uint8_t>(run.buffers.hbm, slots * token, "hbm");

    // Expected: the listed good entries applied, nothing else.
    std::vector<std::int32_t> mapExpected = mapBefore;
    std::vector<char> written(slots, 0);
    for (std::size_t i = 0; i < N; ++i) {
      const bool good = rows[i] >= 0 && rows[i] < static_cast<std::int64_t>(hostRows) &&
                        slotList[i] >= -1 && slotList[i] < static_cast<std::int32_t>(slots);
      if (!good)
        continue;
      mapExpected[static_cast<std::size_t>(rows[i])] = slotList[i];
      if (slotList[i] >= 0)
        written[static_cast<std::size_t>(slotList[i])] = 1;
    }
    std::size_t mapMismatches = 0, rowMismatches = 0, touched = 0;
    for (std::size_t r = 0; r < hostRows; ++r)
      mapMismatches += mapAfter[r] != mapExpected[r];
    for (std::size_t i = 0; i < N; ++i)
      if (rows[i] >= 0 && rows[i] < static_cast<std::int64_t>(hostRows) && slotList[i] >= 0 &&
          slotList[i] < static_cast<std::int32_t>(slots))
        rowMismatches +=
            std::memcmp(pool.data() + static_cast<std::size_t>(slotList[i]) * token,
                        hostBytes + static_cast<std::size_t>(rows[i]) * token, token) != 0;
    for (std::size_t s = 0; s < slots; ++s)
      if (!written[s])
        for (std::size_t b = 0; b < token; ++b)
          touched += pool[s * token + b] != 0xAB;
    // Filled slots start at [step, 0]; the others keep their stamps.
    std::size_t stampErrors = 0;
    for (std::size_t s = 0; s < slots; ++s) {
      const std::int32_t last = written[s] ? 777 : recencyBefore[2 * s];
      const std::int32_t previous = written[s] ? 0 : recencyBefore[2 * s + 1];
      stampErrors += recencyAfter[2 * s] != last || recencyAfter[2 * s + 1] != previous;
    }
    CHECK(mapMismatches == 0);
    CHECK(rowMismatches == 0);
    CHECK(touched == 0);
    CHECK(stampErrors == 0);
  }
}
