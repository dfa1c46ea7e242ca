//===- RuntimeCudaTest.cpp - The step executor on a GPU vs the CPU --------===//
//
// Runs the same multi-request, multi-layer session on a CPU runtime and a
// CUDA runtime (the naive test step's PTX): every step must select and
// promote exactly the same rows (the controllers are deterministic) and the
// outputs must agree within bf16 tolerance; device-pointer steps must give
// the same bits as host-pointer steps. Without a GPU it says so and passes.
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtil.h"

#include "runtime/CpuBackend.h"
#include "runtime/CudaDriver.h"
#include "runtime/Error.h"
#include "runtime/Runtime.h"

#include <catch2/catch.hpp>

using namespace dhs::runtime;

TEST_CASE("the executor on CUDA matches the CPU executor", "[cuda][gpu][runtime]") {
  const CudaDriver &cuda = CudaDriver::instance();
  const std::uint64_t seed = dhs::test::freshSeed() + 500;
  INFO("DHS_TEST_SEED=" << seed - 500);
  RuntimeConfig config;
  config.layers = 3;
  config.layersPerGroup = 2; // groups {0,1}, {2}
  config.hostRows = 8192;
  config.maxRequests = 8;
  config.newestWindow = 16;
  config.draftWindow = 4;
  config.hotFloor = 64;
  config.checkInvariants = true;
  config.fullCheckInterval = 10;
  const std::string step = dhs::test::stepsDir() + "/naive";
  if (!cuda.available()) {
    config.backend = BackendKind::Cuda;
    CHECK_THROWS_AS(Runtime(config).loadStep(step), Error);
    WARN("SKIPPED (no GPU): " << cuda.unavailableReason());
    return;
  }
  config.backend = BackendKind::Cpu;
  Runtime cpu(config);
  config.backend = BackendKind::Cuda;
  Runtime gpu(config);
  cpu.loadStep(step);
  gpu.loadStep(step);
  INFO(gpu.backendDescription());
  CHECK(gpu.backendDescription().rfind("cuda on ", 0) == 0);
  const ProblemShape &s = cpu.shape(); // B=4 Q=1 H=16 K=256, 2048 slots
  std::mt19937_64 rng(seed);
  std::map<std::uint64_t, std::int64_t> len;
  auto both = [&](auto &&f) {
    f(cpu);
    f(gpu);
  };
  for (std::uint64_t id : {11u, 12u, 13u, 14u, 15u}) {
    const std::int64_t n = 600 + static_cast<std::int64_t>(rng() % 900);
    std::vector<bf16_t> prefill(static_cast<std::size_t>(3 * n * 576));
    dhs::test::fillRandom(rng, prefill.data(), prefill.size());
    both([&](Runtime &rt) { rt.admit(id, n, 1600, prefill.data()); });
    len[id] = n;
  }
  const std::int64_t perLane = s.queries * s.topk;
  double worst = 0.0;
  for (int step = 0; step < 30; ++step) {
    // A batch of 4 of the 5 requests; selections with recurrence.
    std::vector<std::uint64_t> batch = {11, 12, 13, 14, 15};
    std::shuffle(batch.begin(), batch.end(), rng);
    batch.resize(4);
    std::vector<std::int32_t> rows;
    for (int g = 0; g < 2; ++g)
      for (std::uint64_t id : batch)
        for (std::int64_t i = 0; i < perLane; ++i) {
          const std::int64_t n = len[id];
          std::int64_t r = rng() % 10 == 0 ? -1
                           : rng() % 2    ? n - 1 - static_cast<std::int64_t>(rng() % 400)
                                          : static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n));
          rows.push_back(static_cast<std::int32_t>(r));
        }
    std::vector<bf16_t> q(static_cast<std::size_t>(3 * 4 * s.queries * s.heads * 576));
    dhs::test::fillRandom(rng, q.data(), q.size());
    std::vector<bf16_t> outCpu(static_cast<std::size_t>(3 * 4 * s.queries * s.heads * 512)),
        outGpu(outCpu.size());
    cpu.step(batch.data(), 4, rows.data(), q.data(), outCpu.data());
    gpu.step(batch.data(), 4, rows.data(), q.data(), outGpu.data());
    const ResidencyStepStats a = cpu.stats().lastStep, b = gpu.stats().lastStep;
    REQUIRE(a.selected == b.selected);
    REQUIRE(a.resident == b.resident);
    REQUIRE(a.fetched == b.fetched);
    REQUIRE(a.promoted == b.promoted);
    REQUIRE(a.evicted == b.evicted);
    Comparison c = compareOutputs(outGpu, outCpu);
    REQUIRE(c.nonFinite == 0);
    REQUIRE(c.relativeError < 1e-2);
    worst = std::max(worst, c.relativeError);
    for (std::uint64_t id : batch) {
      std::vector<bf16_t> token(3 * 576);
      dhs::test::fillRandom(rng, token.data(), token.size());
      both([&](Runtime &rt) { rt.append(id, token.data()); });
      ++len[id];
    }
  }
  // Same residency everywhere: every slot of every group.
  for (std::int32_t g = 0; g < 2; ++g)
    for (std::int32_t slot = 0; slot < 2048; ++slot) {
      REQUIRE(cpu.controller().slotOwner(g, slot) == gpu.controller().slotOwner(g, slot));
      REQUIRE(cpu.controller().slotRow(g, slot) == gpu.controller().slotRow(g, slot));
    }
  cpu.checkInvariants();
  gpu.checkInvariants();
  WARN("CUDA executor vs CPU executor: 30 steps x 3 layers, worst relative error " << worst
                                                                                   << ", same promotions");

  // Device pointers: the same step twice (no appends between), host then
  // device memory, gives the same bits.
  CUdevice device;
  CUcontext context;
  REQUIRE(cuda.deviceGet(&device, 0) == CUDA_SUCCESS);
  REQUIRE(cuda.devicePrimaryCtxRetain(&context, device) == CUDA_SUCCESS);
  REQUIRE(cuda.ctxSetCurrent(context) == CUDA_SUCCESS);
  std::vector<std::uint64_t> batch = {15, 11};
  std::vector<std::int32_t> rows(static_cast<std::size_t>(2 * 2 * perLane));
  for (std::size_t i = 0; i < rows.size(); ++i)
    rows[i] = static_cast<std::int32_t>(rng() % 600);
  std::vector<bf16_t> q(static_cast<std::size_t>(3 * 2 * s.heads * 576)), hostOut(3 * 2 * 16 * 512),
      deviceOut(hostOut.size());
  dhs::test::fillRandom(rng, q.data(), q.size());
  gpu.step(batch.data(), 2, rows.data(), q.data(), hostOut.data());
  CUdeviceptr dq = 0, dout = 0;
  REQUIRE(cuda.memAlloc(&dq, q.size() * 2) == CUDA_SUCCESS);
  REQUIRE(cuda.memAlloc(&dout, deviceOut.size() * 2) == CUDA_SUCCESS);
  REQUIRE(cuda.memcpyHtoD(dq, q.data(), q.size() * 2) == CUDA_SUCCESS);
  gpu.step(batch.data(), 2, rows.data(), reinterpret_cast<const bf16_t *>(dq),
           reinterpret_cast<bf16_t *>(dout), MemorySpace::Device);
  REQUIRE(cuda.memcpyDtoH(deviceOut.data(), dout, deviceOut.size() * 2) == CUDA_SUCCESS);
  CHECK(countBitDifferences(hostOut, deviceOut) == 0);
  cuda.memFree(dq);
  cuda.memFree(dout);
  cuda.devicePrimaryCtxRelease(device);
  for (std::uint64_t id : {11u, 12u, 13u, 14u, 15u})
    gpu.finish(id);
  CHECK(gpu.stats().hbmBytesUsed == 0);
}
