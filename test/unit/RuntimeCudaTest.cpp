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

#include "runtime/Runtime.h"
#include "runtime/core/Error.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaResources.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <tuple>

using namespace dhs::runtime;

namespace {

/// True when a GPU is usable. Otherwise checks that a CUDA runtime of
/// `config` refuses `steps` (loaded as one set), says that the test is
/// skipped and returns false.
bool gpuOrSkip(RuntimeConfig config, const std::vector<std::string> &steps) {
  if (dhs::test::gpuOrSkip())
    return true;
  config.backend = BackendKind::Cuda;
  CHECK_THROWS_AS(Runtime(config).loadSteps(steps), Error);
  return false;
}

} // namespace

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
  if (!gpuOrSkip(config, {step}))
    return;
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
                           : rng() % 2
                               ? n - 1 - static_cast<std::int64_t>(rng() % 400)
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
  WARN("CUDA executor vs CPU executor: 30 steps x 3 layers, worst relative error "
       << worst << ", same promotions");

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

namespace {

/// A lockstep session of several runtimes over layer groups of `G` MLA
/// layers (`layers` in all, rows of the step's format): admits 5 requests, then `steps` steps of 4
/// of them with random selections (recurring, some -1) and queries, appending a token after each.
/// `onStep(outputs)` gets every runtime's output of the step, [layers][4][Q][H][v_dim] each.
template <typename OnStep>
void lockstepSession(std::vector<Runtime *> runtimes, std::int32_t layers, std::int32_t G,
                     int steps, std::mt19937_64 &rng, OnStep onStep,
                     std::vector<bool> deviceSelections = {}) {
  deviceSelections.resize(runtimes.size(), false);
  const ProblemShape &s = runtimes.front()->shape();
  const std::int64_t rowBytes = runtimes.front()->rowBytes();
  const std::int32_t groups = (layers + G - 1) / G;
  auto randomRows = [&](std::int64_t count) {
    std::vector<std::uint8_t> data(static_cast<std::size_t>(count * rowBytes));
    for (std::int64_t i = 0; i < count; ++i)
      fillRandomRow(s.format, data.data() + i * rowBytes, rng);
    return data;
  };
  std::map<std::uint64_t, std::int64_t> len;
  for (std::uint64_t id : {21u, 22u, 23u, 24u, 25u}) {
    const std::int64_t n = 500 + static_cast<std::int64_t>(rng() % 700);
    std::vector<std::uint8_t> prefill = randomRows(layers * n);
    for (Runtime *rt : runtimes)
      rt->admit(id, n, 1400, prefill.data());
    len[id] = n;
  }
  const std::int64_t perLane = s.queries * s.topk;
  for (int step = 0; step < steps; ++step) {
    std::vector<std::uint64_t> batch = {21, 22, 23, 24, 25};
    std::shuffle(batch.begin(), batch.end(), rng);
    batch.resize(4);
    std::vector<std::int32_t> rows;
    for (std::int32_t g = 0; g < groups; ++g)
      for (std::uint64_t id : batch)
        for (std::int64_t i = 0; i < perLane; ++i) {
          const std::int64_t n = len[id];
          std::int64_t r = rng() % 10 == 0 ? -1
                           : rng() % 2
                               ? n - 1 - static_cast<std::int64_t>(rng() % 300)
                               : static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n));
          rows.push_back(static_cast<std::int32_t>(r));
        }
    std::vector<bf16_t> q(static_cast<std::size_t>(layers * 4 * s.queries * s.heads * s.qkDim));
    dhs::test::fillRandom(rng, q.data(), q.size());
    std::vector<std::vector<bf16_t>> outputs(
        runtimes.size(),
        std::vector<bf16_t>(static_cast<std::size_t>(layers * 4 * s.queries * s.heads * s.vDim)));
    // Device selections come from device memory, as an engine's indexer
    // would leave them.
    std::unique_ptr<cuda_detail::DeviceBuffer> deviceRows;
    if (std::find(deviceSelections.begin(), deviceSelections.end(), true) !=
        deviceSelections.end()) {
      deviceRows = std::make_unique<cuda_detail::DeviceBuffer>(rows.size() * 4, "selections");
      CudaDriver::instance().check(
          CudaDriver::instance().memcpyHtoD(deviceRows->get(), rows.data(), rows.size() * 4),
          "uploading selections");
    }
    for (std::size_t i = 0; i < runtimes.size(); ++i)
      runtimes[i]->step(batch.data(), 4,
                        deviceSelections[i]
                            ? reinterpret_cast<const std::int32_t *>(deviceRows->get())
                            : rows.data(),
                        q.data(), outputs[i].data(), MemorySpace::Host,
                        deviceSelections[i] ? MemorySpace::Device : MemorySpace::Host);
    onStep(outputs);
    for (std::uint64_t id : batch) {
      std::vector<std::uint8_t> token = randomRows(layers);
      for (Runtime *rt : runtimes)
        rt->append(id, token.data());
      ++len[id];
    }
  }
}

/// Checks one lockstep step of a CPU and a CUDA runtime: the same rows
/// selected, resident, fetched, promoted and evicted, and every layer's
/// output within bf16 tolerance. Returns the worst relative error.
double expectSameStep(const Runtime &cpu, const Runtime &gpu,
                      const std::vector<std::vector<bf16_t>> &outputs, std::int32_t layers) {
  const ResidencyStepStats a = cpu.stats().lastStep, b = gpu.stats().lastStep;
  REQUIRE(a.selected == b.selected);
  REQUIRE(a.resident == b.resident);
  REQUIRE(a.fetched == b.fetched);
  REQUIRE(a.promoted == b.promoted);
  REQUIRE(a.evicted == b.evicted);
  // Per layer: every layer reads its own rows of the group's pool.
  double worst = 0.0;
  const std::size_t perLayer = outputs[0].size() / static_cast<std::size_t>(layers);
  for (std::int32_t l = 0; l < layers; ++l) {
    std::vector<bf16_t> x(outputs[1].begin() + l * perLayer,
                          outputs[1].begin() + (l + 1) * perLayer),
        y(outputs[0].begin() + l * perLayer, outputs[0].begin() + (l + 1) * perLayer);
    Comparison c = compareOutputs(x, y);
    INFO("layer " << l);
    REQUIRE(c.nonFinite == 0);
    REQUIRE(c.relativeError < 1e-2);
    worst = std::max(worst, c.relativeError);
  }
  return worst;
}

/// Checks that two runtimes' controllers hold the same rows in every slot.
void expectSameResidency(const Runtime &cpu, const Runtime &gpu, std::int32_t slots) {
  for (std::int32_t g = 0; g < cpu.groups(); ++g)
    for (std::int32_t slot = 0; slot < slots; ++slot) {
      REQUIRE(cpu.controller().slotOwner(g, slot) == gpu.controller().slotOwner(g, slot));
      REQUIRE(cpu.controller().slotRow(g, slot) == gpu.controller().slotRow(g, slot));
    }
}

/// The config of the layer-group sessions.
RuntimeConfig groupConfig(std::int32_t layers, std::int32_t G) {
  RuntimeConfig config;
  config.layers = layers;
  config.layersPerGroup = G;
  config.hostRows = 8192;
  config.maxRequests = 8;
  config.newestWindow = 16;
  config.draftWindow = 4;
  config.hotFloor = 64;
  config.checkInvariants = true;
  config.fullCheckInterval = 8;
  return config;
}

/// Why the layer-group CUDA tests cannot run here ("" when they can).
/// The compiled placement step (examples/place_rows_step.mlir).
std::string placementStep() { return dhs::test::compiledStepsDir() + "/place_rows"; }

/// Why the layer-group steps for groups of G layers (`variant` "" or
/// "_resolved") and, with `placement`, the placement step cannot be loaded,
/// or "".
std::string groupStepsUnavailable(int G, const std::string &variant = "", bool placement = false) {
  if (dhs::test::groupStepsDir().empty())
    return "the layer-group steps were not compiled (DHS_BUILD_COMPILER is OFF; set "
           "DHS_TEST_GROUP_STEPS_DIR)";
  for (const std::string &dir : dhs::test::groupSteps(G, variant))
    if (!std::ifstream(dir + "/manifest.json"))
      return "no compiled step at " + dir;
  if (placement && !std::ifstream(placementStep() + "/manifest.json"))
    return "no compiled step at " + placementStep();
  return "";
}

} // namespace

TEST_CASE("layer-group pools: the CUDA executor matches the CPU executor", "[cuda][gpu][runtime]") {
  const std::uint64_t seed = dhs::test::freshSeed() + 510;
  INFO("DHS_TEST_SEED=" << seed - 510);
  for (std::int32_t G : {2, 4}) {
    INFO("layer groups of " << G);
    const std::string missing = groupStepsUnavailable(G);
    if (!missing.empty()) {
      WARN("SKIPPED: " << missing);
      return;
    }
    const std::int32_t layers = G == 2 ? 5 : 8; // G = 2: a last group of one layer
    RuntimeConfig config = groupConfig(layers, G);
    const std::vector<std::string> steps = dhs::test::groupSteps(G);
    if (!gpuOrSkip(config, steps))
      return;
    config.backend = BackendKind::Cpu;
    Runtime cpu(config);
    config.backend = BackendKind::Cuda;
    Runtime gpu(config);
    cpu.loadSteps(steps);
    // Any order of the set; one layer index short is refused.
    std::vector<std::string> reversed(steps.rbegin(), steps.rend());
    gpu.loadSteps(reversed);
    CHECK_THROWS_WITH(
        Runtime(config).loadSteps(std::vector<std::string>(steps.begin(), steps.end() - 1)),
        Catch::Contains("missing layer " + std::to_string(G - 1)));
    std::mt19937_64 rng(seed + static_cast<std::uint64_t>(G));
    double worst = 0.0;
    lockstepSession({&cpu, &gpu}, layers, G, 16, rng, [&](auto &outputs) {
      worst = std::max(worst, expectSameStep(cpu, gpu, outputs, layers));
    });
    expectSameResidency(cpu, gpu, 2048);
    cpu.checkInvariants();
    gpu.checkInvariants();
    WARN("CUDA vs CPU executor, FP8 layer groups of " << G << ": 16 steps x " << layers
                                                      << " layers, worst relative error " << worst
                                                      << ", same promotions");
  }
}

TEST_CASE("a staged verify step (shared retrieval): the CUDA executor matches the CPU",
          "[cuda][gpu][runtime]") {
  // examples/verify_step.mlir: 5 verify positions whose missing rows are
  // fetched once per request (union, fetch into the staging arena), then
  // attention over HBM and staging, for each of 3 layers.
  const std::uint64_t seed = dhs::test::freshSeed() + 520;
  INFO("DHS_TEST_SEED=" << seed - 520);
  const std::string step = dhs::test::compiledStepsDir() + "/verify";
  if (!std::ifstream(step + "/manifest.json")) {
    WARN("SKIPPED: no compiled verify step at " << step);
    return;
  }
  const std::int32_t layers = 3;
  RuntimeConfig config = groupConfig(layers, 1);
  if (!gpuOrSkip(config, {step}))
    return;
  config.backend = BackendKind::Cpu;
  Runtime cpu(config);
  config.backend = BackendKind::Cuda;
  Runtime gpu(config);
  cpu.loadStep(step);
  gpu.loadStep(step);
  REQUIRE(gpu.shape().queries == 5);
  std::mt19937_64 rng(seed);
  double worst = 0.0;
  std::uint64_t fetched = 0;
  lockstepSession({&cpu, &gpu}, layers, 1, 12, rng, [&](auto &outputs) {
    worst = std::max(worst, expectSameStep(cpu, gpu, outputs, layers));
    fetched += gpu.stats().lastStep.fetched;
  });
  CHECK(fetched > 0); // the staged path ran
  expectSameResidency(cpu, gpu, 4096);
  cpu.checkInvariants();
  gpu.checkInvariants();
  WARN("CUDA vs CPU executor, staged verify step (5 positions, shared fetch): 12 steps x "
       << layers << " layers, " << fetched << " rows fetched, worst relative error " << worst
       << ", same promotions");
}

TEST_CASE("CUDA graphs: a replayed step gives the bits of the launched one",
          "[cuda][gpu][runtime]") {
  const CudaDriver &cuda = CudaDriver::instance();
  const std::uint64_t seed = dhs::test::freshSeed() + 520;
  INFO("DHS_TEST_SEED=" << seed - 520);
  const std::int32_t G = 2, layers = 4;
  const std::string missing = groupStepsUnavailable(G);
  if (!missing.empty()) {
    WARN("SKIPPED: " << missing);
    return;
  }
  if (!cuda.available()) {
    WARN("SKIPPED (no GPU): " << cuda.unavailableReason());
    return;
  }
  if (!cuda.graphsAvailable()) {
    WARN("SKIPPED: " << cuda.graphsUnavailableReason());
    return;
  }
  RuntimeConfig config = groupConfig(layers, G);
  config.backend = BackendKind::Cuda;
  Runtime plain(config);
  config.cudaGraphs = true;
  Runtime graphed(config);
  plain.loadSteps(dhs::test::groupSteps(G));
  graphed.loadSteps(dhs::test::groupSteps(G));
  REQUIRE(graphed.cudaGraphs());
  REQUIRE_FALSE(plain.cudaGraphs());
  std::mt19937_64 rng(seed);
  int steps = 0;
  lockstepSession({&plain, &graphed}, layers, G, 12, rng, [&](auto &outputs) {
    ++steps;
    REQUIRE(countBitDifferences(outputs[0], outputs[1]) == 0);
    REQUIRE(plain.stats().lastStep.promoted == graphed.stats().lastStep.promoted);
  });
  // One capture, then replays: the shapes never changed.
  CHECK(graphed.stats().graphCaptures == 1);
  CHECK(graphed.stats().graphReplays == static_cast<std::uint64_t>(steps - 1));
  CHECK(plain.stats().graphCaptures + plain.stats().graphReplays == 0);
  graphed.checkInvariants();

  // A smaller batch is captured again; turning graphs off and on works
  // between steps, not during one.
  const ProblemShape &s = graphed.shape();
  std::vector<std::uint64_t> batch = {23, 21};
  std::vector<std::int32_t> rows(static_cast<std::size_t>(2 * 2 * s.queries * s.topk));
  for (std::int32_t &r : rows)
    r = static_cast<std::int32_t>(rng() % 500);
  std::vector<bf16_t> q(static_cast<std::size_t>(layers * 2 * s.queries * s.heads * s.qkDim));
  dhs::test::fillRandom(rng, q.data(), q.size());
  std::vector<bf16_t> a(static_cast<std::size_t>(layers * 2 * s.queries * s.heads * s.vDim)),
      b(a.size()), c(a.size());
  plain.step(batch.data(), 2, rows.data(), q.data(), a.data());
  graphed.step(batch.data(), 2, rows.data(), q.data(), b.data());
  CHECK(graphed.stats().graphCaptures == 2);
  CHECK(countBitDifferences(a, b) == 0);
  graphed.beginStep(batch.data(), 2);
  CHECK_THROWS_AS(graphed.setCudaGraphs(false), StateError);
  graphed.abortStep();
  graphed.setCudaGraphs(false);
  graphed.step(batch.data(), 2, rows.data(), q.data(), c.data());
  CHECK(countBitDifferences(b, c) == 0);
  graphed.setCudaGraphs(true);
  graphed.step(batch.data(), 2, rows.data(), q.data(), c.data());
  CHECK(countBitDifferences(b, c) == 0);
  CHECK(graphed.stats().graphCaptures == 3);
  // A rejected step (a row outside its history, found by the host checks)
  // leaves the graph usable.
  std::vector<std::int32_t> bad = rows;
  bad[0] = 1 << 20;
  CHECK_THROWS_AS(graphed.step(batch.data(), 2, bad.data(), q.data(), c.data()), OutOfRangeError);
  graphed.step(batch.data(), 2, rows.data(), q.data(), c.data());
  CHECK(countBitDifferences(b, c) == 0);
  CHECK(graphed.stats().graphReplays >= static_cast<std::uint64_t>(steps));
  graphed.checkInvariants();
}

TEST_CASE("a placement step: promotions by kernel, the residency maps on the device",
          "[cuda][gpu][runtime]") {
  // FP8 layer groups of 4 (one pool per group, 2624-byte tokens) with
  // examples/place_rows_step.mlir: the CPU runtime, a CUDA runtime copying
  // with the driver and one placing with the kernel run in lockstep.
  const CudaDriver &cuda = CudaDriver::instance();
  const std::uint64_t seed = dhs::test::freshSeed() + 530;
  INFO("DHS_TEST_SEED=" << seed - 530);
  const std::string placement = placementStep();
  const std::string missing = groupStepsUnavailable(4, "", /*placement=*/true);
  if (!missing.empty()) {
    WARN("SKIPPED: " << missing);
    return;
  }
  const std::int32_t layers = 8;
  RuntimeConfig config = groupConfig(layers, 4);
  const std::vector<std::string> steps = dhs::test::groupSteps(4);
  config.backend = BackendKind::Cpu;
  Runtime cpu(config);
  cpu.loadSteps(steps);
  // The CPU tiers only check a placement step: a wrong one is refused.
  CHECK_THROWS_WITH(cpu.loadPlacementStep(dhs::test::compiledStepsDir() + "/resolve"),
                    Catch::Contains("is not a placement step"));
  cpu.loadPlacementStep(placement);
  CHECK(cpu.placementStepLoaded());
  CHECK_THROWS_AS(cpu.loadPlacementStep(placement), StateError);
  if (!cuda.available()) {
    WARN("SKIPPED (no GPU): " << cuda.unavailableReason());
    return;
  }
  config.backend = BackendKind::Cuda;
  Runtime gpu(config), placed(config);
  gpu.loadSteps(steps);
  placed.loadSteps(steps);
  placed.loadPlacementStep(placement);
  std::mt19937_64 rng(seed);
  double worst = 0.0;
  std::size_t differing = 0;
  lockstepSession({&cpu, &placed, &gpu}, layers, 4, 16, rng, [&](auto &outputs) {
    worst = std::max(worst, expectSameStep(cpu, placed, outputs, layers));
    differing += countBitDifferences(outputs[1], outputs[2]);
  });
  // The same rows in the same slots, whichever way they were copied.
  CHECK(differing == 0);
  expectSameResidency(cpu, placed, 2048);
  cpu.checkInvariants();
  placed.checkInvariants(); // includes the device residency maps
  // Finishing releases every row from the maps.
  for (std::uint64_t id : {21u, 22u, 23u, 24u, 25u})
    placed.finish(id);
  placed.checkInvariants();
  CHECK(placed.stats().hbmBytesUsed == 0);
  WARN("CUDA executor with the placement kernel vs the CPU executor, FP8 layer groups of 4: "
       "16 steps x 8 layers, worst relative error "
       << worst << ", same promotions, bits equal to driver copies, device maps match");
}

TEST_CASE("selections in device memory: resolved on the GPU, booked after the step",
          "[cuda][gpu][runtime]") {
  // FP8 layer groups of 4 whose steps resolve on the device (dhs.resolve
  // through the residency maps kept by the placement kernel). The engine's
  // selections stay in device memory; the CPU executor gets them in host
  // memory. Same rows, same promotions, same outputs.
  const CudaDriver &cuda = CudaDriver::instance();
  const std::uint64_t seed = dhs::test::freshSeed() + 540;
  INFO("DHS_TEST_SEED=" << seed - 540);
  const std::string placement = placementStep();
  const std::string missing = groupStepsUnavailable(4, "_resolved", /*placement=*/true);
  if (!missing.empty()) {
    WARN("SKIPPED: " << missing);
    return;
  }
  const std::vector<std::string> resolved = dhs::test::groupSteps(4, "_resolved");
  const std::int32_t layers = 8;
  RuntimeConfig config = groupConfig(layers, 4);
  if (!gpuOrSkip(config, resolved))
    return;
  config.backend = BackendKind::Cpu;
  Runtime cpu(config);
  cpu.loadSteps(resolved); // the CPU runs the attention, the host resolves
  config.backend = BackendKind::Cuda;
  Runtime gpu(config), plain(config);
  gpu.loadSteps(resolved);
  plain.loadSteps(dhs::test::groupSteps(4));
  // Device selections need the maps (a placement step) and a resolving step.
  {
    std::vector<std::uint64_t> none;
    gpu.beginStep(none.data(), 0);
    CHECK_THROWS_WITH(gpu.selectGroup(0, nullptr, MemorySpace::Device),
                      Catch::Contains("load a placement step"));
    gpu.abortStep();
    plain.loadPlacementStep(placement);
    plain.beginStep(none.data(), 0);
    CHECK_THROWS_WITH(plain.selectGroup(0, nullptr, MemorySpace::Device),
                      Catch::Contains("need a step that resolves them on the device"));
    plain.abortStep();
  }
  gpu.loadPlacementStep(placement);
  // The same with every step replayed as a CUDA graph.
  config.cudaGraphs = true;
  Runtime graphed(config);
  graphed.loadSteps(resolved);
  graphed.loadPlacementStep(placement);
  // And without the per-step checks, which download the selections: each
  // group is booked from its log while the later layers run.
  config.cudaGraphs = false;
  config.checkInvariants = false;
  Runtime unchecked(config);
  unchecked.loadSteps(resolved);
  unchecked.loadPlacementStep(placement);
  std::mt19937_64 rng(seed);
  double worst = 0.0;
  std::size_t differing = 0;
  lockstepSession({&cpu, &gpu, &graphed, &unchecked}, layers, 4, 16, rng,
                  [&](auto &outputs) {
                    worst = std::max(worst, expectSameStep(cpu, gpu, outputs, layers));
                    differing += countBitDifferences(outputs[1], outputs[2]);
                    differing += countBitDifferences(outputs[1], outputs[3]);
                  },
                  {false, true, true, true});
  CHECK(differing == 0);
  CHECK(graphed.stats().graphReplays > 0);
  expectSameResidency(cpu, gpu, 2048);
  expectSameResidency(cpu, graphed, 2048);
  expectSameResidency(cpu, unchecked, 2048);
  cpu.checkInvariants();
  gpu.checkInvariants();
  graphed.checkInvariants();
  unchecked.checkInvariants(); // the device replacement state included

  // A bad row id among device selections: the step fails at its end with the
  // host path's message, nothing is promoted, the runtime goes on.
  const RuntimeStats before = gpu.stats();
  std::vector<std::uint64_t> batch = {21, 22};
  const std::int64_t perLane = gpu.shape().queries * gpu.shape().topk;
  std::vector<std::int32_t> rows(static_cast<std::size_t>(2 * 2 * perLane), 0);
  rows[static_cast<std::size_t>(2 * perLane + perLane + 3)] = 1 << 20; // group 1, lane 1
  cuda_detail::DeviceBuffer deviceRows(rows.size() * 4, "selections");
  cuda.check(cuda.memcpyHtoD(deviceRows.get(), rows.data(), rows.size() * 4), "selections");
  std::vector<bf16_t> q(
      static_cast<std::size_t>(layers * 2 * gpu.shape().queries * gpu.shape().heads * 576)),
      out(static_cast<std::size_t>(layers * 2 * gpu.shape().queries * gpu.shape().heads * 512));
  dhs::test::fillRandom(rng, q.data(), q.size());
  CHECK_THROWS_WITH(gpu.step(batch.data(), 2,
                             reinterpret_cast<const std::int32_t *>(deviceRows.get()), q.data(),
                             out.data(), MemorySpace::Host, MemorySpace::Device),
                    Catch::Contains("row id 1048576 at [lane 1, query 0, k 3] of layer group 1 "
                                    "is outside request 22's history"));
  CHECK_FALSE(gpu.inStep());
  CHECK(gpu.stats().steps == before.steps);
  CHECK(gpu.stats().totals.promoted == before.totals.promoted);
  gpu.checkInvariants();
  // The same without checks: the groups were booked before the kernels'
  // status showed the bad id; the step still fails whole, and the device
  // state goes back to the controller's.
  const RuntimeStats uncheckedBefore = unchecked.stats();
  CHECK_THROWS_WITH(unchecked.step(batch.data(), 2,
                                   reinterpret_cast<const std::int32_t *>(deviceRows.get()),
                                   q.data(), out.data(), MemorySpace::Host, MemorySpace::Device),
                    Catch::Contains("row id 1048576 at [lane 1, query 0, k 3] of layer group 1 "
                                    "is outside request 22's history"));
  CHECK(unchecked.stats().steps == uncheckedBefore.steps);
  CHECK(unchecked.stats().totals.promoted == uncheckedBefore.totals.promoted);
  unchecked.checkInvariants();
  rows[static_cast<std::size_t>(2 * perLane + perLane + 3)] = 0;
  cuda.check(cuda.memcpyHtoD(deviceRows.get(), rows.data(), rows.size() * 4), "selections");
  gpu.step(batch.data(), 2, reinterpret_cast<const std::int32_t *>(deviceRows.get()), q.data(),
           out.data(), MemorySpace::Host, MemorySpace::Device);
  CHECK(gpu.stats().steps == before.steps + 1);
  unchecked.step(batch.data(), 2, reinterpret_cast<const std::int32_t *>(deviceRows.get()),
                 q.data(), out.data(), MemorySpace::Host, MemorySpace::Device);
  CHECK(unchecked.stats().steps == uncheckedBefore.steps + 1);
  unchecked.checkInvariants();
  WARN("device selections, FP8 layer groups of 4: 16 steps x 8 layers in lockstep with the CPU "
       "executor, worst relative error "
       << worst
       << ", same promotions, device maps match, bits equal as CUDA graphs; a bad row "
          "id fails the step cleanly");
}

TEST_CASE("sliding window: the CUDA executor matches the CPU executor", "[cuda][gpu][runtime]") {
  // test/unit/steps/window_step.mlir: V4.1 rows, a 16-token window in rings
  // of 18, two layers. The same admissions, window writes, appends and
  // steps on the CPU, on CUDA and on CUDA as graphs.
  const std::uint64_t seed = dhs::test::freshSeed() + 550;
  INFO("DHS_TEST_SEED=" << seed - 550);
  const std::string step = dhs::test::compiledStepsDir() + "/window";
  if (!std::ifstream(step + "/manifest.json")) {
    WARN("SKIPPED: no compiled step at " << step);
    return;
  }
  RuntimeConfig config;
  config.layers = 2;
  config.layersPerGroup = 1;
  config.hostRows = 4096;
  config.maxRequests = 4;
  config.newestWindow = 8;
  config.hotFloor = 16;
  config.checkInvariants = true;
  if (!gpuOrSkip(config, {step}))
    return;
  config.backend = BackendKind::Cpu;
  Runtime cpu(config);
  config.backend = BackendKind::Cuda;
  Runtime gpu(config);
  config.cudaGraphs = true;
  Runtime graphed(config);
  std::vector<Runtime *> all = {&cpu, &gpu, &graphed};
  for (Runtime *rt : all)
    rt->loadStep(step);
  const ProblemShape &s = cpu.shape();
  const std::int64_t L = 2, rowBytes = 528;
  std::mt19937_64 rng(seed);
  auto randomRows = [&](std::int64_t count) {
    std::vector<std::uint8_t> data(static_cast<std::size_t>(count * rowBytes));
    for (std::int64_t i = 0; i < count; ++i)
      fillRandomRow(RowFormat::V41Fp8, data.data() + i * rowBytes, rng);
    return data;
  };
  std::map<std::uint64_t, std::int64_t> tokens;
  for (auto [id, n, raw] : {std::tuple<std::uint64_t, std::int64_t, std::int64_t>{1, 300, 1200},
                            {2, 120, 5},
                            {3, 200, 40}}) {
    std::vector<std::uint8_t> prefill = randomRows(L * n);
    for (Runtime *rt : all)
      rt->admit(id, n, 600, prefill.data());
    // The prefill's last raw tokens, at most a ring's worth at a time.
    for (std::int64_t p = std::max<std::int64_t>(0, raw - 36); p < raw; p += 18) {
      const std::int64_t count = std::min<std::int64_t>(18, raw - p);
      std::vector<std::uint8_t> window = randomRows(count * L);
      for (Runtime *rt : all)
        rt->writeWindow(id, p, count, window.data());
    }
    tokens[id] = raw;
  }
  const std::int64_t perLane = s.queries * s.topk;
  double worst = 0.0;
  std::size_t differing = 0;
  for (int stepIndex = 0; stepIndex < 12; ++stepIndex) {
    // The same batch for 6 steps (graphs replay), then shuffled ones.
    std::vector<std::uint64_t> batch = {1, 2, 3};
    if (stepIndex >= 6)
      std::shuffle(batch.begin(), batch.end(), rng);
    batch.resize(2);
    std::vector<std::int32_t> rows;
    for (std::int64_t g = 0; g < L; ++g)
      for (std::uint64_t id : batch)
        for (std::int64_t i = 0; i < perLane; ++i)
          rows.push_back(rng() % 10 == 0
                             ? -1
                             : static_cast<std::int32_t>(
                                   rng() % static_cast<std::uint64_t>(cpu.historyLen(id))));
    std::vector<bf16_t> q(static_cast<std::size_t>(L * 2 * s.queries * s.heads * s.qkDim));
    dhs::test::fillRandom(rng, q.data(), q.size());
    std::vector<std::vector<bf16_t>> out(
        3, std::vector<bf16_t>(static_cast<std::size_t>(L * 2 * s.queries * s.heads * s.vDim)));
    for (std::size_t i = 0; i < all.size(); ++i)
      all[i]->step(batch.data(), 2, rows.data(), q.data(), out[i].data());
    worst =
        std::max(worst, expectSameStep(cpu, gpu, {out[0], out[1]}, static_cast<std::int32_t>(L)));
    differing += countBitDifferences(out[1], out[2]);
    for (std::uint64_t id : batch) {
      std::vector<std::uint8_t> token = randomRows(L), raw = randomRows(L);
      for (Runtime *rt : all) {
        rt->append(id, token.data());
        rt->writeWindow(id, tokens[id], 1, raw.data());
      }
      ++tokens[id];
    }
  }
  CHECK(differing == 0);
  CHECK(graphed.stats().graphReplays > 0);
  expectSameResidency(cpu, gpu, 512);
  for (Runtime *rt : all)
    rt->checkInvariants();
  WARN("sliding window (16 tokens, rings of 18), CUDA vs CPU executor: 12 steps x 2 layers, "
       "worst relative error "
       << worst << ", same promotions, CUDA graphs bit-identical");
}
