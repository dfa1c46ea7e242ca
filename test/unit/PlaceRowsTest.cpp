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

#include "TestUtil.h"

#include "runtime/core/Manifest.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaResources.h"
#include "runtime/cuda/CudaStep.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
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
  const CudaDriver &cuda = CudaDriver::instance();
  DHS_SEEDED_RNG(rng, 1400);
  const std::size_t N = 4096, hostRows = 20000, slots = 8192, token = 4 * 656;

  for (bool bad : {false, true}) {
    INFO((bad ? "with" : "without") << " a bad slot and a bad host row");
    CudaStep cudaStep(manifest, 0);
    cudaStep.makeCurrent();
    MappedHostBuffer host(hostRows * token, "host store");
    auto *hostBytes = static_cast<std::uint8_t *>(host.host());
    for (std::size_t i = 0; i < hostRows * token; ++i)
      hostBytes[i] = static_cast<std::uint8_t>(rng());
    DeviceBuffer hbm(slots * token, "hbm");
    cuda.check(cuda.memsetD32(hbm.get(), 0xABABABABu, slots * token / 4), "hbm");
    // The map before: some rows resident somewhere.
    std::vector<std::int32_t> mapBefore(hostRows);
    for (auto &entry : mapBefore)
      entry = rng() % 4 ? -1 : static_cast<std::int32_t>(rng() % slots);
    DeviceBuffer map(hostRows * 4, "map");
    cuda.check(cuda.memcpyHtoD(map.get(), mapBefore.data(), hostRows * 4), "map");

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
    DeviceBuffer rowsBuffer(N * 8, "rows"), slotsBuffer(N * 4, "slots"), status(4, "status");
    cuda.check(cuda.memcpyHtoD(rowsBuffer.get(), rows.data(), N * 8), "rows");
    cuda.check(cuda.memcpyHtoD(slotsBuffer.get(), slotList.data(), N * 4), "slots");
    cuda.check(cuda.memsetD32(status.get(), 0, 1), "status");
    // The replacement state before (earlier stamps), the log's step 777.
    std::vector<std::int32_t> recencyBefore(2 * slots);
    for (auto &use : recencyBefore)
      use = static_cast<std::int32_t>(1 + rng() % 700);
    DeviceBuffer recency(2 * slots * 4, "recency"), log(4 * 4, "log");
    cuda.check(cuda.memcpyHtoD(recency.get(), recencyBefore.data(), 2 * slots * 4), "recency");
    const std::int32_t header[4] = {777, 0, 0, 0};
    cuda.check(cuda.memcpyHtoD(log.get(), header, sizeof(header)), "log");
    CudaStepBuffers buffers;
    buffers.arguments = {0, rowsBuffer.get(), slotsBuffer.get()};
    buffers.recency = recency.get();
    buffers.log = log.get();
    buffers.logWords = 4;
    buffers.hbm = hbm.get();
    buffers.hbmSlots = static_cast<std::int64_t>(slots);
    buffers.host = host.device();
    buffers.hostRows = static_cast<std::int64_t>(hostRows);
    buffers.map = map.get();
    buffers.status = status.get();
    Stream stream;
    cudaStep.launchAsync(buffers, stream.get());
    cuda.check(cuda.streamSynchronize(stream.get()), "place_rows");

    std::uint32_t word = 0;
    cuda.check(cuda.memcpyDtoH(&word, status.get(), 4), "status");
    CHECK(word == (bad ? 6u : 0u));
    std::vector<std::int32_t> mapAfter(hostRows);
    cuda.check(cuda.memcpyDtoH(mapAfter.data(), map.get(), hostRows * 4), "map");
    std::vector<std::int32_t> recencyAfter(2 * slots);
    cuda.check(cuda.memcpyDtoH(recencyAfter.data(), recency.get(), 2 * slots * 4), "recency");
    std::vector<std::uint8_t> pool(slots * token);
    cuda.check(cuda.memcpyDtoH(pool.data(), hbm.get(), pool.size()), "hbm");

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
