//===- RuntimeBackendTest.cpp - Runtime sessions on every backend ---------===//
//
// One suite for the CPU and the CUDA backend: each case runs its session on
// the backend GENERATE gives and checks every layer's output against the
// oracle over the rows the engine wrote (bit for bit on the CPU, within bf16
// tolerance on CUDA). On CUDA a CPU runtime runs in lockstep: the residency
// controllers must make the same decisions. CUDA cases without a usable GPU
// say so and skip; cases that need steps compiled at build time skip without
// the compiler. CUDA-only features (graphs, selections in device memory)
// follow at the end.
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtil.h"

#include "runtime/Runtime.h"
#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"
#include "runtime/core/LaunchForms.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaResources.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>

using namespace dhs::runtime;
using dhs::test::Shadow;

namespace {

/// The runtime under test on `backend` and, off the CPU, a CPU runtime of
/// the same config to run in lockstep; each loaded by `load`.
template <typename Load>
std::vector<std::unique_ptr<Runtime>> underTest(RuntimeConfig config, BackendKind backend,
                                                Load load) {
  std::vector<std::unique_ptr<Runtime>> runtimes;
  config.backend = backend;
  runtimes.push_back(std::make_unique<Runtime>(config));
  if (backend != BackendKind::Cpu) {
    config.backend = BackendKind::Cpu;
    runtimes.push_back(std::make_unique<Runtime>(config));
  }
  for (const std::unique_ptr<Runtime> &rt : runtimes)
    load(*rt);
  return runtimes;
}

std::vector<Runtime *> pointers(const std::vector<std::unique_ptr<Runtime>> &runtimes) {
  std::vector<Runtime *> all;
  for (const std::unique_ptr<Runtime> &rt : runtimes)
    all.push_back(rt.get());
  return all;
}

/// A session: admits 5 requests (prefills of [`prefill.first`,
/// `prefill.second`) rows, by default 500..1199), then `steps` steps of a random batch of at most 4
/// of them, each checked against the oracle (stepAndCompare), appending a token to each request of
/// the batch. Returns the worst relative error; `onStep` sees each step's outputs (one per
/// runtime).
template <typename OnStep>
double session(const std::vector<Runtime *> &runtimes, Shadow &shadow, std::mt19937_64 &rng,
               int steps, OnStep onStep, const std::vector<bool> &deviceSelections = {},
               std::pair<std::int64_t, std::int64_t> prefill = {500, 1200}) {
  const std::vector<std::uint64_t> ids = {21, 22, 23, 24, 25};
  for (std::uint64_t id : ids)
    dhs::test::admitRandom(
        runtimes, shadow, rng, id,
        prefill.first + static_cast<std::int64_t>(
                            rng() % static_cast<std::uint64_t>(prefill.second - prefill.first)),
        1400);
  const std::size_t lanes =
      std::min<std::size_t>(4, static_cast<std::size_t>(runtimes.front()->shape().batch));
  double worst = 0.0;
  for (int step = 0; step < steps; ++step) {
    std::vector<std::uint64_t> batch = ids;
    std::shuffle(batch.begin(), batch.end(), rng);
    batch.resize(lanes);
    onStep(dhs::test::stepAndCompare(runtimes, shadow, rng, batch, &worst, deviceSelections));
    for (std::uint64_t id : batch)
      dhs::test::appendRandom(runtimes, shadow, rng, id);
  }
  return worst;
}
double session(const std::vector<Runtime *> &runtimes, Shadow &shadow, std::mt19937_64 &rng,
               int steps) {
  return session(runtimes, shadow, rng, steps, [](const auto &) {});
}

/// Steps of a session: fewer on the CPU, which the CI runs, than on a GPU.
int sessionSteps(BackendKind backend, int gpuSteps) {
  return backend == BackendKind::Cuda ? gpuSteps : std::max(4, gpuSteps / 3);
}

/// The config of the sessions (CPU; underTest sets the backend).
RuntimeConfig sessionConfig(std::int32_t layers, std::int32_t G) {
  return dhs::test::testConfig(layers, G, BackendKind::Cpu);
}

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

/// The compiled decision and aging steps for FP8 layer groups of 4
/// (examples/decision_step.mlir, examples/aging_step.mlir).
std::string decisionStep() { return dhs::test::compiledStepsDir() + "/decisions_g4"; }
std::string agingStep() { return dhs::test::compiledStepsDir() + "/aging_g4"; }

/// Whether the device-decision cases can run: the resolving group steps of
/// 4, the placement, decision and aging steps, and a GPU; otherwise says why
/// the case skips.
bool decisionStepsOrSkip() {
  std::string missing = groupStepsUnavailable(4, "_resolved", /*placement=*/true);
  for (const std::string &step : {decisionStep(), agingStep()})
    if (missing.empty() && !std::ifstream(step + "/manifest.json"))
      missing = "no compiled step at " + step;
  if (!missing.empty()) {
    WARN("SKIPPED: " << missing);
    return false;
  }
  return dhs::test::gpuOrSkip();
}

/// Loads the steps of residency decisions on the device with aging into
/// each runtime: the resolving group steps of 4, placement, decisions, aging.
void loadDecidingSteps(const std::vector<Runtime *> &runtimes) {
  const std::vector<std::string> resolved = dhs::test::groupSteps(4, "_resolved");
  for (Runtime *rt : runtimes) {
    rt->loadSteps(resolved);
    rt->loadPlacementStep(placementStep());
    rt->loadDecisionStep(decisionStep());
    rt->loadAgingStep(agingStep());
  }
}

/// Admits a full batch of requests (ids firstId, firstId + 1, ...; 300 to
/// 599 rows of up to 1400) into every runtime; returns their ids.
std::vector<std::uint64_t> admitBatch(const std::vector<Runtime *> &runtimes, Shadow &shadow,
                                      std::mt19937_64 &rng, std::uint64_t firstId) {
  std::vector<std::uint64_t> ids;
  for (std::int64_t b = 0; b < runtimes.front()->shape().batch; ++b) {
    ids.push_back(firstId + static_cast<std::uint64_t>(b));
    dhs::test::admitRandom(runtimes, shadow, rng, ids.back(),
                           300 + static_cast<std::int64_t>(rng() % 300), 1400);
  }
  return ids;
}

/// True when a step was compiled into `dir`; otherwise says the case skips.
bool compiledOrSkip(const std::string &dir) {
  if (std::ifstream(dir + "/manifest.json"))
    return true;
  WARN("SKIPPED: no compiled step at " << dir << " (built without the compiler)");
  return false;
}

/// The unit tests' tensor-core layer group (test/unit/steps/tensor_core_group_step.mlir:
/// two FP8 layers of one pool over one selection, 2 query positions)
/// compiled as written and with --overlap-retrieval.
struct GroupSteps {
  std::string fused, overlapped;
};
std::optional<GroupSteps> tensorCoreGroupStepsOrSkip() {
  GroupSteps steps{dhs::test::compiledStepsDir() + "/tensor_core_group",
                   dhs::test::compiledStepsDir() + "/tensor_core_group_overlapped"};
  if (!compiledOrSkip(steps.fused) || !compiledOrSkip(steps.overlapped))
    return std::nullopt;
  return steps;
}

} // namespace

TEST_CASE("per-layer pools (the naive step): every backend matches the oracle",
          "[runtime][backends]") {
  DHS_FOR_EACH_BACKEND(backend);
  DHS_SEEDED_RNG(rng, 500);
  const std::string step = dhs::test::stepsDir() + "/naive";
  auto runtimes = underTest(sessionConfig(3, 2), backend, // groups {0,1}, {2}
                            [&](Runtime &rt) { rt.loadStep(step); });
  Runtime &rt = *runtimes.front();
  INFO(rt.backendDescription());
  CHECK(rt.backendDescription().rfind(backend == BackendKind::Cuda ? "cuda on " : "cpu", 0) == 0);
  Shadow shadow(3);
  const int stepCount = sessionSteps(backend, 30);
  const double worst = session(pointers(runtimes), shadow, rng, stepCount);
  for (const std::unique_ptr<Runtime> &r : runtimes)
    r->checkInvariants();
  if (runtimes.size() > 1)
    dhs::test::expectSameResidency(rt, *runtimes[1]);
  WARN(dhs::test::backendName(backend)
       << ": " << stepCount << " steps x 3 layers, worst relative error " << worst);
  if (backend == BackendKind::Cuda) {
    // Device pointers: the same step in host, then device memory, gives the
    // same bits.
    const CudaDriver &cuda = CudaDriver::instance();
    const ProblemShape &s = rt.shape();
    std::vector<std::uint64_t> batch = {25, 21};
    std::vector<std::int32_t> rows(static_cast<std::size_t>(2 * 2 * s.queries * s.topk));
    for (std::int32_t &r : rows)
      r = static_cast<std::int32_t>(rng() % 500);
    std::vector<bf16_t> q(static_cast<std::size_t>(3 * 2 * s.heads * 576)),
        hostOut(3 * 2 * 16 * 512), deviceOut(hostOut.size());
    dhs::test::fillRandom(rng, q.data(), q.size());
    rt.step(batch.data(), 2, rows.data(), q.data(), hostOut.data());
    cuda_detail::DeviceBuffer dq(q.size() * 2, "queries"), dout(deviceOut.size() * 2, "output");
    cuda.check(cuda.memcpyHtoD(dq.get(), q.data(), q.size() * 2), "queries");
    rt.step(batch.data(), 2, rows.data(), reinterpret_cast<const bf16_t *>(dq.get()),
            reinterpret_cast<bf16_t *>(dout.get()), MemorySpace::Device);
    cuda.check(cuda.memcpyDtoH(deviceOut.data(), dout.get(), deviceOut.size() * 2), "output");
    CHECK(countBitDifferences(hostOut, deviceOut) == 0);
    // The step in parts: each layer's host output is complete when
    // attendLayer returns (an engine computes the next layer's queries from
    // it), before endStep.
    const std::size_t queryLayer = q.size() / 3, outputLayer = hostOut.size() / 3;
    const std::size_t selectionGroup = rows.size() / 2;
    std::vector<bf16_t> partsOut(hostOut.size(), 0), seen(hostOut.size(), 0);
    rt.beginStep(batch.data(), 2);
    for (std::int32_t g = 0; g < 2; ++g)
      rt.selectGroup(g, rows.data() + g * selectionGroup);
    for (std::int32_t l = 0; l < 3; ++l) {
      rt.attendLayer(l, q.data() + l * queryLayer, partsOut.data() + l * outputLayer);
      std::copy_n(partsOut.begin() + l * outputLayer, outputLayer, seen.begin() + l * outputLayer);
    }
    rt.endStep();
    CHECK(countBitDifferences(hostOut, seen) == 0);
  }
  for (std::uint64_t id : {21u, 22u, 23u, 24u, 25u})
    rt.finish(id);
  CHECK(rt.stats().hbmBytesUsed == 0);
}

TEST_CASE("layer-group pools (FP8, groups of 2 and 4): every backend matches the oracle",
          "[runtime][backends]") {
  DHS_FOR_EACH_BACKEND(backend);
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
    const std::vector<std::string> steps = dhs::test::groupSteps(G);
    // Any order of the set.
    const std::vector<std::string> reversed(steps.rbegin(), steps.rend());
    auto runtimes =
        underTest(sessionConfig(layers, G), backend, [&](Runtime &rt) { rt.loadSteps(reversed); });
    if (backend == BackendKind::Cuda) {
      // One layer index short is refused on CUDA (the CPU runs any subset).
      RuntimeConfig config = sessionConfig(layers, G);
      config.backend = BackendKind::Cuda;
      CHECK_THROWS_WITH(
          Runtime(config).loadSteps(std::vector<std::string>(steps.begin(), steps.end() - 1)),
          Catch::Contains("missing layer " + std::to_string(G - 1)));
    }
    std::mt19937_64 rng(seed + static_cast<std::uint64_t>(G));
    Shadow shadow(layers, RowFormat::MlaFp8);
    const int stepCount = sessionSteps(backend, 16);
    const double worst = session(pointers(runtimes), shadow, rng, stepCount);
    for (const std::unique_ptr<Runtime> &r : runtimes)
      r->checkInvariants();
    if (runtimes.size() > 1)
      dhs::test::expectSameResidency(*runtimes[0], *runtimes[1]);
    WARN(dhs::test::backendName(backend)
         << ", FP8 layer groups of " << G << ": " << stepCount << " steps x " << layers
         << " layers, worst relative error " << worst);
  }
}

/// Runs a session of `layers` layers of one FP8 group through a runtime on
/// `fused` and two on `overlapped` (the second with CUDA graphs, on CUDA):
/// every output matches the oracle and the fused runtime's bits, with the
/// same rows promoted and some rows fetched from the host store; `what`
/// names the pair in the report. Where `overlapped` has forms (LaunchForms.h)
/// the session runs each, the one it chose from the rows missing.
static void checkOverlappedMatchesFused(BackendKind backend, const std::string &fused,
                                        const std::string &overlapped, std::int32_t layers,
                                        std::uint64_t seed, const char *what) {
  const Manifest staged = Manifest::load(overlapped);
  const std::vector<double> lines = formLines(staged, 0, staged.launches.size());
  DHS_SEEDED_RNG(rng, seed);
  RuntimeConfig config =
      dhs::test::testConfig(layers, layers, backend, /*draftWindow=*/0, /*floor=*/0);
  std::vector<std::unique_ptr<Runtime>> owned;
  owned.push_back(std::make_unique<Runtime>(config));
  owned.push_back(std::make_unique<Runtime>(config));
  if (backend == BackendKind::Cuda) {
    config.cudaGraphs = true;
    owned.push_back(std::make_unique<Runtime>(config));
  }
  owned[0]->loadStep(fused);
  for (std::size_t i = 1; i < owned.size(); ++i)
    owned[i]->loadStep(overlapped);
  Shadow shadow(layers, RowFormat::MlaFp8);
  std::int64_t fetched = 0;
  std::set<std::string> forms;
  // With forms, histories that fit in HBM (at most 5 x 399 rows for 2048
  // slots) and 8 steps: the first step misses every row, later ones few
  // once the session promoted them (4 steps were not always enough).
  const bool withForms = !lines.empty();
  const double worst = session(
      pointers(owned), shadow, rng, withForms ? 8 : sessionSteps(backend, 9),
      [&](const std::vector<std::vector<bf16_t>> &outputs) {
        fetched += owned[0]->stats().lastStep.fetched;
        for (std::size_t i = 1; i < outputs.size(); ++i)
          CHECK(countBitDifferences(outputs[0], outputs[i]) == 0);
        // The form the step took, the same for every layer of the group and
        // with graphs.
        const double share = owned[1]->formShare(0);
        for (std::size_t i = 1; i < owned.size(); ++i)
          for (std::int32_t l = 0; l < layers; ++l)
            CHECK(owned[i]->formShare(l) == share);
        forms.insert(describeForm(lines, share));
      },
      /*deviceSelections=*/{},
      withForms ? std::pair<std::int64_t, std::int64_t>{300, 400}
                : std::pair<std::int64_t, std::int64_t>{500, 1200});
  CHECK(fetched > 0); // rows came from the host store
  if (withForms) {
    CHECK(forms.count(describeForm(lines, 1.0)) == 1); // a fetch, then staged attention
    CHECK(forms.size() > 1);                           // and the fused attentions
  }
  for (const std::unique_ptr<Runtime> &rt : owned)
    rt->checkInvariants();
  WARN(dhs::test::backendName(backend) << ", " << what << ": " << fetched << " rows fetched, "
                                       << forms.size() << " forms, worst relative error " << worst);
}

TEST_CASE("overlapped staging: the fused step's bits, on every backend and as CUDA graphs",
          "[runtime][backends][overlap]") {
  // test/unit/steps/tensor_core_step.mlir (FP8, 64 heads, 2 positions,
  // top-256) compiled as written and with --overlap-retrieval: the fetch
  // stages the missing rows beside the attention (on CUDA a programmatic
  // dependent launch, ready flags per tile; in a CUDA graph too), which
  // reads them in the same order. Same rows promoted, outputs equal to the
  // oracle, and bit-identical to the fused step's.
  DHS_FOR_EACH_BACKEND(backend);
  const std::string fused = dhs::test::compiledStepsDir() + "/tensor_core";
  const std::string overlapped = dhs::test::compiledStepsDir() + "/tensor_core_overlapped";
  if (!compiledOrSkip(fused) || !compiledOrSkip(overlapped))
    return;
  // The fused step reads the host store itself; the overlapped one fetches
  // first, into staging with ready flags.
  CHECK(Manifest::load(fused).launches.front().kind == abi::LaunchKind::SparseAttention);
  const Manifest staged = Manifest::load(overlapped);
  REQUIRE(staged.launches.front().kind == abi::LaunchKind::Fetch);
  CHECK(std::any_of(staged.launches.front().params.begin(), staged.launches.front().params.end(),
                    [](const LaunchParam &p) { return p.role == abi::ParamRole::ReadyFlags; }));
  checkOverlappedMatchesFused(backend, fused, overlapped, 1, 580,
                              "overlapped staging vs the fused step");
}

TEST_CASE("a layer group's overlapped staging: the fused group's bits, on every backend and as "
          "CUDA graphs",
          "[runtime][backends][overlap]") {
  // test/unit/steps/tensor_core_group_step.mlir (two FP8 layers of one pool
  // over one selection, a whole-model step of one group) compiled as written
  // (each layer's attention reads its host rows itself) and with
  // --overlap-retrieval (one fetch of whole tokens beside both attentions,
  // which wait for its ready flags; on CUDA programmatic dependent launches,
  // in a CUDA graph too). Same rows promoted, outputs equal to the oracle's
  // and bit-identical to the fused group's.
  DHS_FOR_EACH_BACKEND(backend);
  const std::optional<GroupSteps> steps = tensorCoreGroupStepsOrSkip();
  if (!steps)
    return;
  const std::string &fused = steps->fused, &overlapped = steps->overlapped;
  // One fetch for both layers, its ready flags read by both staged
  // attentions (each split in two along the rows, with a combine), the form
  // of steps that miss more than 8% of their rows; each layer's fused
  // attention the form below.
  const Manifest staged = Manifest::load(overlapped);
  REQUIRE(!staged.launches.empty());
  CHECK(staged.launches[0].kind == abi::LaunchKind::Fetch);
  const auto readsFlags = [](const Launch &launch) {
    return std::any_of(launch.params.begin(), launch.params.end(),
                       [](const LaunchParam &p) { return p.role == abi::ParamRole::ReadyFlags; });
  };
  CHECK(std::count_if(staged.launches.begin(), staged.launches.end(), readsFlags) == 3);
  CHECK(std::count_if(staged.launches.begin(), staged.launches.end(), [](const Launch &launch) {
          return launch.kind == abi::LaunchKind::Fetch && launch.missingAbove == 0.08;
        }) == 1);
  CHECK(std::count_if(staged.launches.begin(), staged.launches.end(), [](const Launch &launch) {
          return launch.kind == abi::LaunchKind::SparseAttention && launch.missingUpTo == 0.08;
        }) == 2);
  CHECK(formLines(staged, 0, staged.launches.size()) == std::vector<double>{0.02, 0.08});
  checkOverlappedMatchesFused(backend, fused, overlapped, 2, 585,
                              "a layer group's overlapped staging vs the fused group");
}

TEST_CASE("verify steps over a tensor-core layer group: its forms give the fused group's bits, "
          "and each form's host reads are the ones the runtime checks",
          "[runtime][backends][overlap][verify]") {
  // The group step of two FP8 layers and 2 query positions compiled fused
  // and with --overlap-retrieval, as verify steps (a draft of at most one
  // token a request, greedy acceptance) through two runtimes with the
  // invariant checker on: it checks each layer's host reads against the
  // form that ran (fused attention reads in every layer, the staged form's
  // fetch in the group's first), the outputs and accepted tokens agree bit
  // for bit, and the session passes through more than one form.
  DHS_FOR_EACH_BACKEND(backend);
  const std::optional<GroupSteps> steps = tensorCoreGroupStepsOrSkip();
  if (!steps)
    return;
  const std::string &fused = steps->fused, &overlapped = steps->overlapped;
  DHS_SEEDED_RNG(rng, 590);
  const RuntimeConfig config = dhs::test::testConfig(2, 2, backend, /*draftWindow=*/4, /*floor=*/0);
  Runtime a(config), b(config);
  a.loadStep(fused);
  b.loadStep(overlapped);
  const Manifest staged = Manifest::load(overlapped);
  const std::vector<double> lines = formLines(staged, 0, staged.launches.size());
  const ProblemShape &shape = a.shape();
  const std::int64_t B = shape.batch, Q = shape.queries, K = shape.topk, L = 2, V = 64;
  REQUIRE(Q == 2);
  Shadow shadow(L, RowFormat::MlaFp8);
  std::vector<std::uint64_t> ids;
  for (std::int64_t i = 0; i < B; ++i) {
    ids.push_back(41 + static_cast<std::uint64_t>(i));
    dhs::test::admitRandom({&a, &b}, shadow, rng, ids.back(),
                           300 + static_cast<std::int64_t>(rng() % 100), 1400);
  }
  std::set<std::string> forms;
  for (int step = 0; step < 6; ++step) {
    INFO("verify step " << step);
    std::vector<std::int32_t> lens(B), drafts(B * (Q - 1));
    for (std::int64_t r = 0; r < B; ++r) {
      lens[r] = static_cast<std::int32_t>(rng() % Q);
      drafts[r] = static_cast<std::int32_t>(rng() % V);
    }
    const std::vector<std::uint8_t> rows = shadow.randomRows(rng, B * Q * L);
    std::vector<std::int32_t> sel(B * Q * K, -1);
    for (std::int64_t r = 0; r < B; ++r)
      for (std::int64_t q = 0; q <= lens[r]; ++q)
        for (std::int64_t k = 0; k < K; ++k)
          sel[(r * Q + q) * K + k] = static_cast<std::int32_t>(
              rng() % static_cast<std::uint64_t>(a.historyLen(ids[r]) + q + 1));
    std::vector<bf16_t> queries(L * B * Q * shape.heads * shape.qkDim);
    dhs::test::fillRandom(rng, queries.data(), queries.size());
    std::vector<float> target(B * Q * V);
    for (float &p : target)
      p = static_cast<float>(rng() % 1000) / 100.0f;
    std::vector<std::vector<bf16_t>> outputs;
    std::vector<std::vector<std::int32_t>> accepted;
    for (Runtime *rt : {&a, &b}) {
      rt->verifyBegin(ids.data(), B, lens.data(), drafts.data(), rows.data());
      rt->selectGroup(0, sel.data());
      outputs.emplace_back(L * B * Q * shape.heads * shape.vDim);
      for (std::int32_t l = 0; l < L; ++l)
        rt->attendLayer(l, queries.data() + l * B * Q * shape.heads * shape.qkDim,
                        outputs.back().data() + l * B * Q * shape.heads * shape.vDim);
      if (rt == &b)
        forms.insert(describeForm(lines, b.formShare(0)));
      accepted.emplace_back(B + B * Q);
      rt->verifyAccept(AcceptRule::Greedy, V, target.data(), nullptr, 99, accepted.back().data(),
                       accepted.back().data() + B);
    }
    CHECK(countBitDifferences(outputs[0], outputs[1]) == 0);
    CHECK(accepted[0] == accepted[1]);
  }
  CHECK(forms.size() > 1);
  CHECK(b.specStats().hostRowsRead > 0);
  a.checkInvariants();
  b.checkInvariants();
  dhs::test::expectSameResidency(a, b);
}

TEST_CASE("through the runtime, fused FP8 attention runs its resident form when a group reads at "
          "most 2% of its rows from the host",
          "[runtime][backends]") {
  // test/unit/steps/tensor_core_step.mlir: its attention launch has a
  // resident form. A step selecting only each request's newest tokens
  // (always in HBM) runs it; a step selecting across the histories, most of
  // them on the host, runs the other form; both match the oracle and fp64.
  // Both backends choose alike (formShare); CUDA also counts the layers
  // whose resident kernel ran.
  DHS_FOR_EACH_BACKEND(backend);
  const std::string step = dhs::test::compiledStepsDir() + "/tensor_core";
  if (!compiledOrSkip(step))
    return;
  DHS_SEEDED_RNG(rng, 590);
  Runtime rt(dhs::test::testConfig(1, 1, backend, /*draftWindow=*/0, /*floor=*/0));
  rt.loadStep(step);
  Shadow shadow(1, RowFormat::MlaFp8);
  const std::vector<std::uint64_t> batch = {31, 32, 33, 34};
  for (std::uint64_t id : batch)
    dhs::test::admitRandom(rt, shadow, rng, id, 900, 1400);
  const ProblemShape &s = rt.shape();
  const std::int64_t perLane = s.queries * s.topk;
  std::vector<bf16_t> queries(static_cast<std::size_t>(4 * s.queries * s.heads * s.qkDim));
  std::vector<bf16_t> output(static_cast<std::size_t>(4 * s.queries * s.heads * s.vDim));
  const bool onCuda = backend == BackendKind::Cuda;
  // Runs a step over `rows`; checks its output and the form it ran.
  auto runStep = [&](const std::vector<std::int32_t> &rows, bool residentForm) {
    dhs::test::fillRandom(rng, queries.data(), queries.size());
    std::fill(output.begin(), output.end(), kBf16Poison);
    rt.step(batch.data(), 4, rows.data(), queries.data(), output.data(), MemorySpace::Host,
            MemorySpace::Host);
    const auto rowOf = [&](std::int64_t b, std::int32_t r) { return shadow.row(batch[b], 0, r); };
    dhs::test::expectMatchesOracle(
        output, dhs::test::oracleLayer(s, 4, rows.data(), queries.data(), rowOf), onCuda);
    dhs::test::expectNearReference(
        output, dhs::test::referenceLayer(s, 4, rows.data(), queries.data(), rowOf));
    CHECK(rt.formShare(0) == (residentForm ? kResidentFormMissing : 1.0));
    if (onCuda)
      CHECK(rt.residentFormLayers() == (residentForm ? 1 : 0));
  };
  // The newest 16 tokens of each request (the protected newest window).
  std::vector<std::int32_t> newest;
  for (std::uint64_t id : batch)
    for (std::int64_t i = 0; i < perLane; ++i)
      newest.push_back(static_cast<std::int32_t>(shadow.len(id) - 1 - i % 16));
  runStep(newest, true); // (admission left the newest window in HBM)
  runStep(newest, true);
  CHECK(rt.stats().lastStep.fetched == 0);
  // Rows across the histories: most are on the host.
  std::vector<std::int32_t> spread;
  for (std::uint64_t id : batch)
    for (std::int64_t i = 0; i < perLane; ++i)
      spread.push_back(
          static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(shadow.len(id))));
  runStep(spread, false);
  CHECK(rt.stats().lastStep.fetched * 50 > rt.stats().lastStep.entries);
  // And the newest again.
  runStep(newest, true);
  rt.checkInvariants();
}

TEST_CASE("an engine's CUDA stream: device queries and outputs pass between its work and the "
          "runtime's without host waits",
          "[cuda][gpu][runtime]") {
  // The engine writes each step's queries on its own stream behind a long
  // memset and copies the output away on it right after attendLayer
  // returns, before endStep: with the stream set, the layer's kernels wait
  // for the queries and the copy for the kernels (with graphs, the step's
  // launch in endStep waits). Both match fp64 over the new queries; without
  // the stream the kernels could read the previous queries.
  if (!dhs::test::gpuOrSkip())
    return;
  const std::string step = dhs::test::compiledStepsDir() + "/tensor_core";
  if (!compiledOrSkip(step))
    return;
  const CudaDriver &cuda = CudaDriver::instance();
  DHS_SEEDED_RNG(rng, 640);
  for (bool graphs : {false, true}) {
    INFO((graphs ? "graphs on" : "graphs off"));
    RuntimeConfig config = dhs::test::testConfig(1, 1, BackendKind::Cuda, 0, /*floor=*/0);
    config.cudaGraphs = graphs;
    Runtime rt(config);
    CHECK_THROWS_AS(rt.setEngineStream(nullptr), StateError); // no step loaded
    rt.loadStep(step);
    Shadow shadow(1, RowFormat::MlaFp8);
    const std::vector<std::uint64_t> batch = admitBatch({&rt}, shadow, rng, 31);
    REQUIRE(batch.size() == 4);
    const ProblemShape &s = rt.shape();
    const std::size_t qCount = static_cast<std::size_t>(4 * s.queries * s.heads * s.qkDim);
    const std::size_t oCount = static_cast<std::size_t>(4 * s.queries * s.heads * s.vDim);
    cuda_detail::Stream engine;
    rt.setEngineStream(engine.get());
    // The queries the engine computes (staged on the device beforehand),
    // the buffer the runtime reads them from, the output and its copy, and
    // 1 GiB the engine clears first (about 0.4 ms on an H200).
    cuda_detail::DeviceBuffer computed(qCount * 2, "queries"), queries(qCount * 2, "queries"),
        output(oCount * 2, "output"), copied(oCount * 2, "output copy"),
        busy(std::size_t{1} << 30, "engine work");
    for (int round = 0; round < 3; ++round) {
      INFO("step " << round);
      std::vector<bf16_t> q(qCount);
      dhs::test::fillRandom(rng, q.data(), q.size());
      cuda.check(cuda.memcpyHtoD(computed.get(), q.data(), qCount * 2), "queries");
      const std::vector<std::int32_t> rows = dhs::test::randomSelections(rng, shadow, batch, 1, s);
      auto engineWritesQueries = [&] {
        cuda.check(cuda.memsetD32Async(busy.get(), 0, (std::size_t{1} << 30) / 4, engine.get()),
                   "the engine's work");
        cuda.check(cuda.memcpyDtoDAsync(queries.get(), computed.get(), qCount * 2, engine.get()),
                   "the engine's queries");
      };
      if (!graphs)
        engineWritesQueries();
      rt.beginStep(batch.data(), 4);
      rt.selectGroup(0, rows.data());
      rt.attendLayer(0, reinterpret_cast<const bf16_t *>(queries.get()),
                     reinterpret_cast<bf16_t *>(output.get()), MemorySpace::Device);
      if (graphs)
        engineWritesQueries(); // before endStep, whose launch runs the step
      else
        cuda.check(cuda.memcpyDtoDAsync(copied.get(), output.get(), oCount * 2, engine.get()),
                   "the engine's copy of the output");
      if (!graphs) {
        // The copy is done once the engine's stream is, before endStep.
        cuda.check(cuda.streamSynchronize(engine.get()), "the engine's stream");
      }
      CHECK_THROWS_AS(rt.setEngineStream(nullptr), StateError); // during a step
      rt.endStep();
      if (graphs)
        cuda.check(cuda.memcpyDtoDAsync(copied.get(), output.get(), oCount * 2, engine.get()),
                   "the engine's copy of the output");
      cuda.check(cuda.streamSynchronize(engine.get()), "the engine's stream");
      std::vector<bf16_t> out(oCount);
      cuda.check(cuda.memcpyDtoH(out.data(), copied.get(), oCount * 2), "the output");
      dhs::test::expectNearReference(out,
                                     dhs::test::referenceLayer(s, 4, rows.data(), q.data(),
                                                               [&](std::int64_t b, std::int32_t r) {
                                                                 return shadow.row(batch[b], 0, r);
                                                               }));
    }
    rt.setEngineStream(nullptr); // (before the stream goes)
    rt.checkInvariants();
  }
}

TEST_CASE("a staged verify step (shared retrieval): every backend matches the oracle",
          "[runtime][backends]") {
  // examples/verify_step.mlir: 5 verify positions whose missing rows are
  // fetched once per request (union, fetch into the staging arena), then
  // attention over HBM and staging, for each of 3 layers.
  DHS_FOR_EACH_BACKEND(backend);
  const std::string step = dhs::test::compiledStepsDir() + "/verify";
  if (!compiledOrSkip(step))
    return;
  DHS_SEEDED_RNG(rng, 520);
  auto runtimes = underTest(sessionConfig(3, 1), backend, [&](Runtime &rt) { rt.loadStep(step); });
  Runtime &rt = *runtimes.front();
  REQUIRE(rt.shape().queries == 5);
  // The tiers allocated the staging arena the compiler planned.
  const std::int64_t planned = Manifest::load(step).arenaBytes;
  CHECK(planned > 0);
  for (const std::unique_ptr<Runtime> &r : runtimes)
    CHECK(r->arenaBytes() == planned);
  Shadow shadow(3);
  std::int64_t fetched = 0;
  const int stepCount = sessionSteps(backend, 12);
  const double worst = session(pointers(runtimes), shadow, rng, stepCount, [&](const auto &) {
    fetched += rt.stats().lastStep.fetched;
    // The shared fetch of the last layer copied at most the step's distinct
    // missing rows (the CPU runs the fetch launches too).
    const std::int64_t copied = rt.fetchedRows();
    CHECK(copied >= 0);
    CHECK(copied <= rt.stats().lastStep.fetched);
  });
  CHECK(fetched > 0); // rows were read from the host store
  for (const std::unique_ptr<Runtime> &r : runtimes)
    r->checkInvariants();
  if (runtimes.size() > 1)
    dhs::test::expectSameResidency(rt, *runtimes[1]);
  WARN(dhs::test::backendName(backend)
       << ", staged verify step (5 positions, shared fetch): 12 "
       << "steps x 3 layers, " << fetched << " rows fetched, worst relative error " << worst);
}

TEST_CASE("a placement step: the CPU checks it, CUDA places rows with its kernel",
          "[runtime][backends]") {
  // FP8 layer groups of 4 (one pool per group, 2624-byte tokens) with
  // examples/place_rows_step.mlir. On CUDA a runtime copying with the driver
  // runs in lockstep too: the same bits, whichever way the rows were copied.
  DHS_FOR_EACH_BACKEND(backend);
  const std::string missing = groupStepsUnavailable(4, "", /*placement=*/true);
  if (!missing.empty()) {
    WARN("SKIPPED: " << missing);
    return;
  }
  const std::uint64_t seed = dhs::test::freshSeed() + 530;
  INFO("DHS_TEST_SEED=" << seed - 530);
  const std::int32_t layers = 8;
  const std::vector<std::string> steps = dhs::test::groupSteps(4);
  auto runtimes = underTest(sessionConfig(layers, 4), backend, [&](Runtime &rt) {
    rt.loadSteps(steps);
    rt.loadPlacementStep(placementStep());
  });
  Runtime &placed = *runtimes.front();
  CHECK(placed.placementStepLoaded());
  CHECK_THROWS_AS(placed.loadPlacementStep(placementStep()), StateError);
  {
    // A step that is not a placement step is refused, whatever the backend.
    RuntimeConfig config = sessionConfig(layers, 4);
    config.backend = backend;
    Runtime other(config);
    other.loadSteps(steps);
    CHECK_THROWS_WITH(other.loadPlacementStep(dhs::test::compiledStepsDir() + "/resolve"),
                      Catch::Contains("is not a placement step"));
    // So is one with an argument the runtime does not pass (its kernel
    // would read the write-back ring entries at address 0).
    Manifest sourced = Manifest::load(placementStep(), {/*requirePtx=*/false});
    Argument sources = sourced.argument(ArgumentRole::PlaceSlots);
    sources.role = ArgumentRole::PlaceSources;
    sources.index = static_cast<int>(sourced.arguments.size());
    sourced.arguments.push_back(sources);
    CHECK_THROWS_WITH(other.loadPlacementStep(sourced),
                      Catch::Contains("takes argument 3 (place_sources), which the runtime does "
                                      "not pass it (it passes kv_pool, place_rows, place_slots)"));
    CHECK_FALSE(other.placementStepLoaded());
    // And one compiled for other HBM slots than the session's.
    Manifest fixed = Manifest::load(placementStep(), {/*requirePtx=*/false});
    for (Argument &argument : fixed.arguments)
      if (argument.isPool)
        argument.pool.hbmSlots = 7;
    CHECK_THROWS_WITH(other.loadPlacementStep(fixed),
                      Catch::Contains("was compiled for 7 HBM slots and -1 host rows (-1: any)"));
    CHECK_FALSE(other.placementStepLoaded());
  }
  std::unique_ptr<Runtime> copied;
  if (backend == BackendKind::Cuda) {
    RuntimeConfig config = sessionConfig(layers, 4);
    config.backend = BackendKind::Cuda;
    copied = std::make_unique<Runtime>(config);
    copied->loadSteps(steps);
  }
  std::vector<Runtime *> all = pointers(runtimes);
  if (copied)
    all.push_back(copied.get());
  std::mt19937_64 rng(seed);
  Shadow shadow(layers, RowFormat::MlaFp8);
  std::size_t differing = 0;
  const int stepCount = sessionSteps(backend, 16);
  const double worst = session(all, shadow, rng, stepCount, [&](const auto &outputs) {
    if (copied)
      differing += countBitDifferences(outputs.front(), outputs.back());
  });
  CHECK(differing == 0);
  for (Runtime *rt : all)
    rt->checkInvariants(); // the device residency maps included
  for (std::size_t i = 1; i < all.size(); ++i)
    dhs::test::expectSameResidency(placed, *all[i]);
  // Finishing releases every row from the maps.
  for (std::uint64_t id : {21u, 22u, 23u, 24u, 25u})
    placed.finish(id);
  placed.checkInvariants();
  CHECK(placed.stats().hbmBytesUsed == 0);
  WARN(dhs::test::backendName(backend)
       << " with a placement step, FP8 layer groups of 4: " << stepCount
       << " steps x 8 layers, worst relative error " << worst);
}

namespace {

/// A sliding-window session's test-side model: every raw token written, by
/// request and position ([L][row_bytes] each).
struct WindowModel {
  std::int32_t layers = 0;
  std::int64_t rowBytes = 0;
  std::map<std::uint64_t, std::map<std::int64_t, std::vector<std::uint8_t>>> tokens;
  std::map<std::uint64_t, std::int64_t> count;

  /// Writes `n` random raw tokens at positions position.. of request `id`
  /// into every runtime and the model.
  void write(const std::vector<Runtime *> &runtimes, std::uint64_t id, std::int64_t position,
             std::int64_t n, std::mt19937_64 &rng) {
    std::vector<std::uint8_t> rows(static_cast<std::size_t>(n * layers * rowBytes));
    for (std::int64_t i = 0; i < n * layers; ++i)
      fillRandomRow(RowFormat::V41Fp8, rows.data() + i * rowBytes, rng);
    for (Runtime *rt : runtimes)
      rt->writeWindow(id, position, n, rows.data());
    for (std::int64_t t = 0; t < n; ++t)
      tokens[id][position + t].assign(rows.begin() + t * layers * rowBytes,
                                      rows.begin() + (t + 1) * layers * rowBytes);
    count[id] = position + n;
  }
};

} // namespace

TEST_CASE("appendBatch makes the decisions and rows of appends one by one",
          "[runtime][backends][append]") {
  // FP8 layer groups of 4 with the placement step (on CUDA its kernel
  // places a batch's rows in one launch per group and layer), the adaptive
  // policy with CLOCK and hot floor 0, 2048 slots for 5 requests of 500 ..
  // 1199 rows: appends evict. One runtime appends request by request, the
  // other a batch at a time; both run the same steps, checked against the
  // oracle, and must hold the same rows in every slot after each append;
  // the invariant checker compares every copy with the host store.
  DHS_FOR_EACH_BACKEND(backend);
  const std::string missing = groupStepsUnavailable(4, "", /*placement=*/true);
  if (!missing.empty()) {
    WARN("SKIPPED: " << missing);
    return;
  }
  DHS_SEEDED_RNG(rng, 540);
  RuntimeConfig config = sessionConfig(8, 4);
  config.backend = backend;
  config.hotFloor = 0;
  Runtime single(config), batched(config);
  for (Runtime *rt : {&single, &batched}) {
    rt->loadSteps(dhs::test::groupSteps(4));
    rt->loadPlacementStep(placementStep());
  }
  Shadow shadow(8, RowFormat::MlaFp8);
  const std::vector<std::uint64_t> ids = {21, 22, 23, 24, 25};
  for (std::uint64_t id : ids)
    dhs::test::admitRandom({&single, &batched}, shadow, rng, id,
                           500 + static_cast<std::int64_t>(rng() % 700), 1400);
  const std::int64_t tokenBytes = 8 * shadow.rowBytes;
  const std::int64_t evictedBefore = batched.controller().evictionCount();
  for (int step = 0; step < sessionSteps(backend, 24); ++step) {
    std::vector<std::uint64_t> batch = ids;
    std::shuffle(batch.begin(), batch.end(), rng);
    batch.resize(4);
    dhs::test::stepAndCompare({&single, &batched}, shadow, rng, batch);
    // A token for some of the requests, in a random order.
    std::vector<std::uint64_t> growing = ids;
    std::shuffle(growing.begin(), growing.end(), rng);
    growing.resize(1 + rng() % ids.size());
    const std::vector<std::uint8_t> rows =
        shadow.randomRows(rng, static_cast<std::int64_t>(growing.size()) * 8);
    for (std::size_t i = 0; i < growing.size(); ++i) {
      single.append(growing[i], rows.data() + static_cast<std::int64_t>(i) * tokenBytes);
      for (std::int32_t l = 0; l < 8; ++l) {
        auto &layer = shadow.rows[growing[i]][static_cast<std::size_t>(l)];
        const auto *row =
            rows.data() + static_cast<std::int64_t>(i) * tokenBytes + l * shadow.rowBytes;
        layer.insert(layer.end(), row, row + shadow.rowBytes);
      }
    }
    batched.appendBatch(growing.data(), static_cast<std::int64_t>(growing.size()), rows.data());
    dhs::test::expectSameResidency(single, batched);
    REQUIRE(single.controller().evictionCount() == batched.controller().evictionCount());
    for (std::uint64_t id : ids)
      REQUIRE(single.historyLen(id) == batched.historyLen(id));
  }
  CHECK(batched.controller().evictionCount() > evictedBefore);
  single.checkInvariants();
  batched.checkInvariants();
  dhs::test::stepAndCompare({&single, &batched}, shadow, rng, {21, 22, 23, 24});

  // Checked before anything changes: an id twice, an unknown id, a request
  // at its maximum context, null pointers; an empty batch does nothing.
  const std::vector<std::uint8_t> two = shadow.randomRows(rng, 16);
  const std::int64_t length = batched.historyLen(21);
  const std::vector<std::uint64_t> twice = {21, 22, 21}, unknown = {21, 99};
  CHECK_THROWS_AS(batched.appendBatch(twice.data(), 3, shadow.randomRows(rng, 24).data()),
                  InputError);
  CHECK_THROWS_AS(batched.appendBatch(unknown.data(), 2, two.data()), UnknownRequestError);
  CHECK_THROWS_AS(batched.appendBatch(nullptr, 2, two.data()), InputError);
  CHECK_THROWS_AS(batched.appendBatch(ids.data(), 2, nullptr), InputError);
  CHECK_THROWS_AS(batched.appendBatch(ids.data(), -1, two.data()), InputError);
  batched.appendBatch(ids.data(), 0, nullptr);
  CHECK(batched.historyLen(21) == length);
  CHECK(batched.historyLen(22) == single.historyLen(22));
  batched.admit(26, 1, 1, shadow.randomRows(rng, 8).data());
  const std::vector<std::uint64_t> full = {22, 26};
  CHECK_THROWS_AS(batched.appendBatch(full.data(), 2, two.data()), CapacityError);
  CHECK(batched.historyLen(22) == single.historyLen(22));
  batched.checkInvariants();
}

TEST_CASE("sliding window: each lane attends to its request's ring on every backend",
          "[runtime][backends][window]") {
  // test/unit/steps/window_step.mlir: V4.1 rows, a 16-token window in rings
  // of 18, two layers. On CUDA the same session also runs as CUDA graphs,
  // which must give the same bits.
  DHS_FOR_EACH_BACKEND(backend);
  const std::string step = dhs::test::compiledStepsDir() + "/window";
  if (!compiledOrSkip(step))
    return;
  DHS_SEEDED_RNG(rng, 160);
  RuntimeConfig config = dhs::test::testConfig(2, 1, backend, /*draftWindow=*/0, /*floor=*/0, 4096);
  std::vector<std::unique_ptr<Runtime>> owned;
  owned.push_back(std::make_unique<Runtime>(config));
  if (backend == BackendKind::Cuda) {
    config.cudaGraphs = true;
    owned.push_back(std::make_unique<Runtime>(config));
  }
  const std::vector<Runtime *> all = pointers(owned);
  for (Runtime *rt : all)
    rt->loadStep(step);
  Runtime &rt = *all.front();
  const ProblemShape s = rt.shape(); // B=2 Q=3 H=4 K=32, W=16 in rings of 18
  REQUIRE(s.windowSize == 16);
  REQUIRE(s.windowRing == 18);
  const std::int64_t L = 2, rowBytes = 528, R = 18;
  WindowModel model{static_cast<std::int32_t>(L), rowBytes, {}, {}};
  // Request 7: 100 compressed entries, 400 raw tokens (its ring wrapped
  // many times); request 9: 60 entries, 10 raw tokens (fewer than the
  // window).
  std::map<std::uint64_t, std::vector<std::uint8_t>> history;
  for (auto [id, n] : {std::pair<std::uint64_t, std::int64_t>{7, 100}, {9, 60}}) {
    std::vector<std::uint8_t> &prefill = history[id];
    prefill.resize(static_cast<std::size_t>(L * n * rowBytes));
    for (std::int64_t i = 0; i < L * n; ++i)
      fillRandomRow(RowFormat::V41Fp8, prefill.data() + i * rowBytes, rng);
    for (Runtime *r : all)
      r->admit(id, n, 200, prefill.data());
  }
  for (std::int64_t p = 0; p < 400; p += 16)
    model.write(all, 7, p, 16, rng);
  model.write(all, 9, 0, 10, rng);

  std::vector<std::uint64_t> batch = {7, 9};
  const std::int64_t perLane = s.queries * s.topk;
  const std::int64_t qPerLayer = 2 * s.queries * s.heads * s.qkDim;
  const std::int64_t oPerLayer = 2 * s.queries * s.heads * s.vDim;
  auto runAndCheck = [&]() {
    std::vector<std::int32_t> rows(static_cast<std::size_t>(L * 2 * perLane));
    for (std::int64_t g = 0; g < L; ++g)
      for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t i = 0; i < perLane; ++i)
          rows[static_cast<std::size_t>((g * 2 + b) * perLane + i)] =
              rng() % 8 == 0 ? -1
                             : static_cast<std::int32_t>(
                                   rng() % static_cast<std::uint64_t>(rt.historyLen(batch[b])));
    std::vector<bf16_t> q(static_cast<std::size_t>(L * qPerLayer));
    dhs::test::fillRandom(rng, q.data(), q.size());
    std::vector<std::vector<bf16_t>> out(
        all.size(), std::vector<bf16_t>(static_cast<std::size_t>(L * oPerLayer)));
    for (std::size_t i = 0; i < all.size(); ++i)
      all[i]->step(batch.data(), 2, rows.data(), q.data(), out[i].data());
    for (std::size_t i = 1; i < all.size(); ++i)
      CHECK(countBitDifferences(out[0], out[i]) == 0);
    // The oracle: each layer's problem assembled here from the rows and
    // tokens written (every selection read from the host store).
    for (std::int64_t l = 0; l < L; ++l) {
      SparseAttentionProblem p;
      p.shape = s;
      p.shape.layer = 0;
      p.shape.layers = 1;
      p.shape.rowElems = rowBytes / 2;
      p.shape.hbmSlots = 0;
      std::vector<std::uint8_t> store;
      for (std::int64_t b = 0; b < 2; ++b) {
        const std::vector<std::uint8_t> &h = history[batch[b]];
        const std::int64_t n = rt.historyLen(batch[b]);
        p.historyStart.push_back(static_cast<std::int64_t>(store.size()) / rowBytes);
        p.historyLen.push_back(static_cast<std::int32_t>(n));
        store.insert(store.end(), h.begin() + l * n * rowBytes, h.begin() + (l + 1) * n * rowBytes);
      }
      p.shape.hostRows = static_cast<std::int64_t>(store.size()) / rowBytes;
      p.hostStore.resize(store.size() / 2);
      std::memcpy(p.hostStore.data(), store.data(), store.size());
      p.rowIds.assign(rows.begin() + l * 2 * perLane, rows.begin() + (l + 1) * 2 * perLane);
      p.slots.assign(p.rowIds.size(), -1);
      p.queries.assign(q.begin() + l * qPerLayer, q.begin() + (l + 1) * qPerLayer);
      p.windowRing.assign(static_cast<std::size_t>(2 * R * rowBytes / 2), 0);
      for (std::int64_t b = 0; b < 2; ++b) {
        const std::int64_t tokens = model.count[batch[b]];
        p.windowTokens.push_back(static_cast<std::int32_t>(tokens));
        for (std::int64_t t = std::max<std::int64_t>(0, tokens - R); t < tokens; ++t)
          std::memcpy(reinterpret_cast<std::uint8_t *>(p.windowRing.data()) +
                          (b * R + t % R) * rowBytes,
                      model.tokens[batch[b]][t].data() + l * rowBytes, rowBytes);
      }
      const std::vector<bf16_t> expected = CpuAttention(CpuPrecision::Float).run(p);
      const std::vector<bf16_t> actual(out[0].begin() + l * oPerLayer,
                                       out[0].begin() + (l + 1) * oPerLayer);
      INFO("layer " << l);
      dhs::test::expectMatchesOracle(actual, expected, backend == BackendKind::Cuda);
    }
  };
  runAndCheck();
  for (int round = 0; round < 6; ++round) {
    for (std::uint64_t id : batch) {
      std::vector<std::uint8_t> token(static_cast<std::size_t>(L * rowBytes));
      for (std::int64_t l = 0; l < L; ++l)
        fillRandomRow(RowFormat::V41Fp8, token.data() + l * rowBytes, rng);
      for (Runtime *r : all)
        r->append(id, token.data());
      for (std::int64_t l = 0; l < L; ++l) {
        std::vector<std::uint8_t> &h = history[id];
        const std::int64_t n = rt.historyLen(id) - 1;
        h.insert(h.begin() + l * (n + 1) * rowBytes + n * rowBytes, token.begin() + l * rowBytes,
                 token.begin() + (l + 1) * rowBytes);
      }
      model.write(all, id, model.count[id], 1, rng);
    }
    runAndCheck();
  }
  if (all.size() > 1)
    CHECK(all[1]->stats().graphReplays > 0);

  // Rolling back past what the ring still holds is caught at the next step.
  const std::int64_t end = model.count[7];
  model.write(all, 7, end - 5, 1, rng); // end - 4 tokens: end - 22 .. end - 19 were overwritten
  CHECK_THROWS_WITH(
      rt.step(batch.data(), 2, nullptr, nullptr, nullptr),
      Catch::Contains("request 7's sliding window lacks raw token " + std::to_string(end - 22)));
  CHECK_FALSE(rt.inStep());
  for (Runtime *r : all)
    if (r != &rt)
      CHECK_THROWS_AS(r->step(batch.data(), 2, nullptr, nullptr, nullptr), InputError);
  model.write(all, 7, end - 22, 18, rng); // the whole window again
  runAndCheck();
  // A write that fails (on CUDA token by token, some tokens may have
  // landed) leaves its slots holding no token: the next step refuses the
  // window instead of reading old and new tokens side by side.
  if (faults::kCompiledIn) {
    std::vector<std::uint8_t> fresh(static_cast<std::size_t>(4 * L * rowBytes), 0x5a);
    faults::arm(Fault::RingWrite);
    CHECK_THROWS_WITH(rt.writeWindow(7, end - 8, 4, fresh.data()),
                      Catch::Contains("(injected fault)"));
    faults::disarmAll();
    CHECK_THROWS_WITH(
        rt.step(batch.data(), 2, nullptr, nullptr, nullptr),
        Catch::Contains("request 7's sliding window lacks raw token " + std::to_string(end - 8)));
    CHECK_FALSE(rt.inStep());
    model.write(all, 7, end - 8, 4, rng);
    runAndCheck();
  }
  // Bad writes.
  std::vector<std::uint8_t> many(static_cast<std::size_t>(19 * L * rowBytes), 0);
  CHECK_THROWS_WITH(rt.writeWindow(7, 0, 19, many.data()),
                    Catch::Contains("a window ring holds 1 to 18"));
  CHECK_THROWS_AS(rt.writeWindow(7, 0, 1, nullptr), InputError);
  CHECK_THROWS_AS(rt.writeWindow(7, -1, 1, many.data()), InputError);
  CHECK_THROWS_AS(rt.writeWindow(42, 0, 1, many.data()), UnknownRequestError);
  for (Runtime *r : all)
    r->checkInvariants();
}

//===----------------------------------------------------------------------===//
// CUDA-only features
//===----------------------------------------------------------------------===//

TEST_CASE("CUDA graphs: a replayed step gives the bits of the launched one",
          "[cuda][gpu][runtime]") {
  const CudaDriver &cuda = CudaDriver::instance();
  const std::uint64_t seed = dhs::test::freshSeed() + 540;
  INFO("DHS_TEST_SEED=" << seed - 540);
  const std::int32_t G = 2, layers = 4;
  const std::string missing = groupStepsUnavailable(G);
  if (!missing.empty()) {
    WARN("SKIPPED: " << missing);
    return;
  }
  if (!dhs::test::gpuOrSkip())
    return;
  if (!cuda.graphsAvailable()) {
    WARN("SKIPPED: " << cuda.graphsUnavailableReason());
    return;
  }
  RuntimeConfig config = sessionConfig(layers, G);
  config.backend = BackendKind::Cuda;
  Runtime plain(config);
  config.cudaGraphs = true;
  Runtime graphed(config);
  plain.loadSteps(dhs::test::groupSteps(G));
  graphed.loadSteps(dhs::test::groupSteps(G));
  REQUIRE(graphed.cudaGraphs());
  REQUIRE_FALSE(plain.cudaGraphs());
  std::mt19937_64 rng(seed);
  Shadow shadow(layers, RowFormat::MlaFp8);
  int steps = 0;
  // Both match the oracle within tolerance; a graph replays the launched
  // kernels, so the two agree bit for bit.
  session({&plain, &graphed}, shadow, rng, 12, [&](const auto &outputs) {
    ++steps;
    REQUIRE(countBitDifferences(outputs[0], outputs[1]) == 0);
  });
  const std::int64_t perLane = plain.shape().queries * plain.shape().topk;
  const ProblemShape &s = graphed.shape();
  std::vector<std::uint64_t> batch = {23, 21};
  std::vector<std::int32_t> rows(static_cast<std::size_t>(2 * 2 * perLane));
  for (std::int32_t &r : rows)
    r = static_cast<std::int32_t>(rng() % 500);
  std::vector<bf16_t> q(static_cast<std::size_t>(layers * 2 * s.queries * s.heads * s.qkDim));
  dhs::test::fillRandom(rng, q.data(), q.size());
  std::vector<bf16_t> a(static_cast<std::size_t>(layers * 2 * s.queries * s.heads * s.vDim)),
      b(a.size()), c(a.size());
  // One capture, then replays: the shapes never changed.
  CHECK(graphed.stats().graphCaptures == 1);
  CHECK(graphed.stats().graphReplays == static_cast<std::uint64_t>(steps - 1));
  CHECK(plain.stats().graphCaptures + plain.stats().graphReplays == 0);
  graphed.checkInvariants();

  // A smaller batch is captured again; turning graphs off and on works
  // between steps, not during one.
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

TEST_CASE("selections in device memory: resolved on the GPU, booked after the step",
          "[cuda][gpu][runtime]") {
  // FP8 layer groups of 4 whose steps resolve on the device (dhs.resolve
  // through the residency maps kept by the placement kernel). The engine's
  // selections stay in device memory; the CPU runtime gets them in host
  // memory. Same rows, same promotions, outputs within tolerance of the
  // oracle and equal bits as graphs and without per-step checks.
  const CudaDriver &cuda = CudaDriver::instance();
  const std::uint64_t seed = dhs::test::freshSeed() + 550;
  INFO("DHS_TEST_SEED=" << seed - 550);
  const std::string placement = placementStep();
  const std::string missing = groupStepsUnavailable(4, "_resolved", /*placement=*/true);
  if (!missing.empty()) {
    WARN("SKIPPED: " << missing);
    return;
  }
  if (!dhs::test::gpuOrSkip())
    return;
  const std::vector<std::string> resolved = dhs::test::groupSteps(4, "_resolved");
  const std::int32_t layers = 8;
  RuntimeConfig config = sessionConfig(layers, 4);
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
  Shadow shadow(layers, RowFormat::MlaFp8);
  std::size_t differing = 0;
  const double worst = session({&cpu, &gpu, &graphed, &unchecked}, shadow, rng, 16,
                               [&](const auto &outputs) {
                                 differing += countBitDifferences(outputs[1], outputs[2]);
                                 differing += countBitDifferences(outputs[1], outputs[3]);
                               },
                               {false, true, true, true});
  CHECK(differing == 0);
  CHECK(graphed.stats().graphReplays > 0);
  for (Runtime *rt : {&gpu, &graphed, &unchecked})
    dhs::test::expectSameResidency(cpu, *rt);
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
  const auto *selections = reinterpret_cast<const std::int32_t *>(deviceRows.get());
  CHECK_THROWS_WITH(gpu.step(batch.data(), 2, selections, q.data(), out.data(), MemorySpace::Host,
                             MemorySpace::Device),
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
  CHECK_THROWS_WITH(unchecked.step(batch.data(), 2, selections, q.data(), out.data(),
                                   MemorySpace::Host, MemorySpace::Device),
                    Catch::Contains("row id 1048576 at [lane 1, query 0, k 3] of layer group 1 "
                                    "is outside request 22's history"));
  CHECK(unchecked.stats().steps == uncheckedBefore.steps);
  CHECK(unchecked.stats().totals.promoted == uncheckedBefore.totals.promoted);
  unchecked.checkInvariants();
  rows[static_cast<std::size_t>(2 * perLane + perLane + 3)] = 0;
  cuda.check(cuda.memcpyHtoD(deviceRows.get(), rows.data(), rows.size() * 4), "selections");
  gpu.step(batch.data(), 2, selections, q.data(), out.data(), MemorySpace::Host,
           MemorySpace::Device);
  CHECK(gpu.stats().steps == before.steps + 1);
  unchecked.step(batch.data(), 2, selections, q.data(), out.data(), MemorySpace::Host,
                 MemorySpace::Device);
  CHECK(unchecked.stats().steps == uncheckedBefore.steps + 1);
  unchecked.checkInvariants();
  WARN("device selections, FP8 layer groups of 4: 16 steps x 8 layers, worst relative error "
       << worst << ", same promotions as the CPU, device maps match; a bad row id fails the "
       << "step cleanly");
}

TEST_CASE("a layer group's forms with selections resolved on the device: each step's form from "
          "the group's last step log",
          "[runtime][overlap]") {
  // The tensor-core group resolving its selections on the device first
  // (dhs.resolve), compiled with --overlap-retrieval, with a placement step
  // for its 2-layer tokens. On the CPU (selections in host memory, counted)
  // it gives the fused group's bits in each form it takes. On CUDA the host
  // never counts device selections, so a step's form comes from the group's
  // log of the step before (booked by the host here: no decision step): the
  // first step, with nothing logged, takes the uncounted share (5%: the
  // fused attentions); the second, after a first step that missed every
  // row, the fetch and staged attentions. Every layer of a step runs one
  // form, with and without graphs and checks, each at the bits of the fused
  // group on CUDA with host selections.
  const std::optional<GroupSteps> steps = tensorCoreGroupStepsOrSkip();
  if (!steps)
    return;
  const std::string resolved =
      dhs::test::compiledStepsDir() + "/tensor_core_group_resolved_overlapped";
  const std::string placement = dhs::test::compiledStepsDir() + "/place_rows_l2"; // 2 layers
  if (!compiledOrSkip(resolved) || !compiledOrSkip(placement))
    return;
  const Manifest manifest = Manifest::load(resolved);
  const std::vector<double> lines = formLines(manifest, 0, manifest.launches.size());
  REQUIRE(lines == std::vector<double>{0.02, 0.08});
  const bool gpu = dhs::test::gpuOrSkip(); // the CUDA runtimes (device selections)
  DHS_SEEDED_RNG(rng, 600);
  RuntimeConfig config = dhs::test::testConfig(2, 2, BackendKind::Cpu, /*draftWindow=*/0,
                                               /*floor=*/0);
  // 0: the CPU on the fused group (the residency and bits reference); 1:
  // the CPU on the resolving step; then on CUDA 2: the fused group (the
  // GPU's bits), 3: the resolving step, 4: with graphs, 5: without checks
  // (each group booked from its log while the later layer runs).
  std::vector<std::unique_ptr<Runtime>> owned;
  owned.push_back(std::make_unique<Runtime>(config));
  owned.push_back(std::make_unique<Runtime>(config));
  if (gpu) {
    config.backend = BackendKind::Cuda;
    owned.push_back(std::make_unique<Runtime>(config));
    owned.push_back(std::make_unique<Runtime>(config));
    config.cudaGraphs = true;
    owned.push_back(std::make_unique<Runtime>(config));
    config.cudaGraphs = false;
    config.checkInvariants = false;
    owned.push_back(std::make_unique<Runtime>(config));
  }
  for (std::size_t i = 0; i < owned.size(); ++i) {
    const bool fused = i == 0 || i == 2;
    owned[i]->loadStep(fused ? steps->fused : resolved);
    if (!fused)
      owned[i]->loadPlacementStep(placement);
  }
  Shadow shadow(2, RowFormat::MlaFp8);
  std::vector<double> cpuShares, gpuShares;
  const double worst =
      session(pointers(owned), shadow, rng, 8,
              [&](const std::vector<std::vector<bf16_t>> &outputs) {
                CHECK(countBitDifferences(outputs[0], outputs[1]) == 0);
                cpuShares.push_back(owned[1]->formShare(0));
                CHECK(owned[1]->formShare(1) == cpuShares.back());
                for (std::size_t i = 3; i < outputs.size(); ++i) {
                  CHECK(countBitDifferences(outputs[2], outputs[i]) == 0);
                  for (std::int32_t l = 0; l < 2; ++l)
                    CHECK(owned[i]->formShare(l) == owned[3]->formShare(0));
                }
                if (gpu)
                  gpuShares.push_back(owned[3]->formShare(0));
              },
              gpu ? std::vector<bool>{false, false, false, true, true, true} : std::vector<bool>{},
              {300, 400});
  REQUIRE(cpuShares.size() == 8);
  CHECK(cpuShares[0] == 1.0); // counted: the first step misses every row
  CHECK(std::set<double>(cpuShares.begin(), cpuShares.end()).size() > 1);
  if (gpu) {
    REQUIRE(gpuShares.size() == 8);
    CHECK(gpuShares[0] == 0.08); // nothing logged yet: 5%, the fused attentions
    CHECK(gpuShares[1] == 1.0);  // the first step missed every row: the staged form
    CHECK(std::set<double>(gpuShares.begin(), gpuShares.end()).size() > 1);
  }
  for (const std::unique_ptr<Runtime> &rt : owned)
    rt->checkInvariants();
  auto sequence = [&](const std::vector<double> &shares) {
    std::string text;
    for (double share : shares)
      text += " " + describeForm(lines, share) + ";";
    return text;
  };
  WARN("a layer group's forms, resolving step: worst relative error "
       << worst << "; forms by step, CPU:" << sequence(cpuShares)
       << (gpu ? " CUDA, device selections:" + sequence(gpuShares) : std::string()));
}

TEST_CASE("residency decisions on the device: the rows the host would promote and release",
          "[cuda][gpu][runtime][decisions]") {
  // The same session as above with a decision step loaded: each step's
  // promotions and releases are decided and placed by the step's kernels
  // (union_missing, sort_rows, plan_promotions, place_rows). `decided` books
  // counts only (graphs on, checks off); `shadowed` also decides on the host
  // and compares the lists and the device state after every step. Both must
  // end with the CPU's residency, and the outputs with the CPU's bits.
  const CudaDriver &cuda = CudaDriver::instance();
  const std::uint64_t seed = dhs::test::freshSeed() + 660;
  INFO("DHS_TEST_SEED=" << seed - 660);
  const std::string placement = placementStep();
  const std::string decisions = decisionStep();
  const std::string aging = agingStep();
  if (!decisionStepsOrSkip())
    return;
  const std::vector<std::string> resolved = dhs::test::groupSteps(4, "_resolved");
  const std::int32_t layers = 8;
  // The device's rule: adaptive, CLOCK, hot floor 0.
  RuntimeConfig config = dhs::test::testConfig(layers, 4, BackendKind::Cpu, 4, /*floor=*/0);
  Runtime cpu(config);
  cpu.loadSteps(resolved);
  config.backend = BackendKind::Cuda;
  Runtime shadowed(config);
  config.checkInvariants = false;
  config.cudaGraphs = true;
  // `decided` takes the state back for every append; `aged` records them
  // and the device replays them before the next step (dhs.age_rows).
  Runtime decided(config), aged(config);
  for (Runtime *rt : {&shadowed, &decided, &aged}) {
    rt->loadSteps(resolved);
    // (Before the placement step: the decisions need its kernel.)
    CHECK_THROWS_WITH(rt->loadDecisionStep(decisions), Catch::Contains("placement step"));
    rt->loadPlacementStep(placement);
    CHECK_THROWS_WITH(rt->loadAgingStep(aging), Catch::Contains("decision step"));
    rt->loadDecisionStep(decisions);
    CHECK_THROWS_WITH(rt->loadDecisionStep(decisions), Catch::Contains("already loaded"));
  }
  aged.loadAgingStep(aging);
  // A session with a hot floor the device rule does not have is refused.
  {
    RuntimeConfig floored = config;
    floored.hotFloor = 8;
    Runtime other(floored);
    other.loadSteps(resolved);
    other.loadPlacementStep(placement);
    CHECK_THROWS_WITH(other.loadDecisionStep(decisions), Catch::Contains("hot floor 0"));
  }
  // So is one that carries write-back ring entries the attention steps do
  // not give.
  {
    Runtime other(config);
    other.loadSteps(resolved);
    other.loadPlacementStep(placement);
    CHECK_THROWS_WITH(
        other.loadDecisionStep(dhs::test::compiledStepsDir() + "/decisions_g4_write_back"),
        Catch::Contains("write-back ring entries"));
  }
  // So is one whose place list has fewer slots than rows (the runtime copies
  // both halves by the rows' count).
  {
    Runtime other(config);
    other.loadSteps(resolved);
    other.loadPlacementStep(placement);
    Manifest shorter = Manifest::load(decisions);
    for (Argument &argument : shorter.arguments)
      if (argument.role == ArgumentRole::PlaceSlots)
        argument.shape.back() /= 2;
    CHECK_THROWS_WITH(other.loadDecisionStep(shorter), Catch::Contains("place list must hold"));
  }
  // So are a decision and an aging step whose pool holds other tokens than
  // the session's (their place_rows would move rows of the wrong size).
  {
    Runtime other(config);
    other.loadSteps(resolved);
    other.loadPlacementStep(placement);
    auto onePerToken = [](Manifest manifest) {
      for (Argument &argument : manifest.arguments)
        if (argument.isPool)
          argument.pool.layers = 1;
      return manifest;
    };
    Manifest otherSlots = Manifest::load(decisions);
    for (Argument &argument : otherSlots.arguments)
      if (argument.isPool)
        argument.pool.hbmSlots = 1024;
    CHECK_THROWS_WITH(other.loadDecisionStep(otherSlots),
                      Catch::Contains("was compiled for 1024 HBM slots"));
    CHECK_THROWS_WITH(other.loadDecisionStep(onePerToken(Manifest::load(decisions))),
                      Catch::Contains("places tokens of 1 layers x 656 bytes (mla_fp8); this "
                                      "session's pools hold 4 layers x 656 bytes"));
    other.loadDecisionStep(decisions);
    CHECK_THROWS_WITH(other.loadAgingStep(onePerToken(Manifest::load(aging))),
                      Catch::Contains("the aging step"));
  }
  std::mt19937_64 rng(seed);
  Shadow shadow(layers, RowFormat::MlaFp8);
  std::size_t differing = 0;
  const double worst = session({&cpu, &shadowed, &decided, &aged}, shadow, rng, 24,
                               [&](const auto &outputs) {
                                 differing += countBitDifferences(outputs[1], outputs[2]);
                                 differing += countBitDifferences(outputs[1], outputs[3]);
                               },
                               {false, true, true, true});
  CHECK(differing == 0);
  CHECK(decided.stats().graphReplays > 0);
  for (Runtime *rt : {&decided, &aged}) {
    CHECK(rt->stats().totals.promoted == cpu.stats().totals.promoted);
    CHECK(rt->stats().totals.evicted == cpu.stats().totals.evicted);
  }
  CHECK(decided.stats().totals.promoted > 0);
  for (Runtime *rt : {&shadowed, &decided, &aged}) {
    rt->checkInvariants(); // downloads the device state into the controller
    dhs::test::expectSameResidency(cpu, *rt);
  }
  cpu.checkInvariants();

  // A bad row id among device selections: the step fails, the decisions do
  // nothing, the stamps roll back; the next step decides as the CPU does.
  std::vector<std::uint64_t> batch = {21, 22};
  const std::int64_t perLane = decided.shape().queries * decided.shape().topk;
  std::vector<std::int32_t> rows(static_cast<std::size_t>(2 * 2 * perLane));
  for (std::size_t i = 0; i < rows.size(); ++i)
    rows[i] = static_cast<std::int32_t>(rng() % 400);
  rows[static_cast<std::size_t>(2 * perLane + perLane + 3)] = 1 << 20; // group 1, lane 1
  cuda_detail::DeviceBuffer deviceRows(rows.size() * 4, "selections");
  cuda.check(cuda.memcpyHtoD(deviceRows.get(), rows.data(), rows.size() * 4), "selections");
  std::vector<bf16_t> q(
      static_cast<std::size_t>(layers * 2 * decided.shape().queries * decided.shape().heads * 576)),
      out(static_cast<std::size_t>(layers * 2 * decided.shape().queries * decided.shape().heads *
                                   512));
  dhs::test::fillRandom(rng, q.data(), q.size());
  const auto *selections = reinterpret_cast<const std::int32_t *>(deviceRows.get());
  const RuntimeStats before = decided.stats();
  CHECK_THROWS_WITH(decided.step(batch.data(), 2, selections, q.data(), out.data(),
                                 MemorySpace::Host, MemorySpace::Device),
                    Catch::Contains("is outside request 22's history"));
  CHECK_FALSE(decided.inStep());
  CHECK(decided.stats().steps == before.steps);
  CHECK(decided.stats().totals.promoted == before.totals.promoted);
  decided.checkInvariants();
  dhs::test::expectSameResidency(cpu, decided);
  rows[static_cast<std::size_t>(2 * perLane + perLane + 3)] = 7;
  cuda.check(cuda.memcpyHtoD(deviceRows.get(), rows.data(), rows.size() * 4), "selections");
  for (Runtime *rt : {&shadowed, &decided, &aged})
    rt->step(batch.data(), 2, selections, q.data(), out.data(), MemorySpace::Host,
             MemorySpace::Device);
  cpu.step(batch.data(), 2, rows.data(), q.data(), out.data(), MemorySpace::Host,
           MemorySpace::Host);
  decided.checkInvariants();
  aged.checkInvariants();
  dhs::test::expectSameResidency(cpu, decided);
  dhs::test::expectSameResidency(cpu, shadowed);
  dhs::test::expectSameResidency(cpu, aged);
  // A decision kernel that rejects the device's state on a replayed step
  // graph (group 0's CLOCK hand corrupted in HBM between steps): the step
  // fails although its own kernels took their input, and the runtime,
  // whose other group decided and placed its rows, refuses to go on.
  if (faults::kCompiledIn) {
    auto again = [&] {
      decided.step(batch.data(), 2, selections, q.data(), out.data(), MemorySpace::Host,
                   MemorySpace::Device);
    };
    // (The same step until its graph is replayed: its form settled.)
    std::uint64_t replays = decided.stats().graphReplays;
    for (int i = 0; i < 4 && decided.stats().graphReplays == replays; ++i)
      again();
    REQUIRE(decided.stats().graphReplays > replays);
    replays = decided.stats().graphReplays;
    faults::arm(Fault::BadState);
    CHECK_THROWS_WITH(again(), Catch::Contains("rejected the device's state part-way") &&
                                   Catch::Contains(describeStatus(abi::kStatusBadSlot)));
    faults::disarmAll();
    CHECK(decided.stats().graphReplays == replays + 1);
    CHECK_FALSE(decided.inStep());
    CHECK_THROWS_WITH(again(), Catch::Contains("cannot vouch for its tables since the device's "
                                               "residency decisions failed part-way"));
  }
  WARN("residency decisions on the device (appends taken back to the host, or replayed on the "
       "device), FP8 layer groups of 4: 24 steps x 8 layers, worst relative error "
       << worst << ", " << decided.stats().totals.promoted << " rows promoted and "
       << decided.stats().totals.evicted << " evicted as on the CPU; a bad row id fails the "
       << "step and decides nothing");
}

TEST_CASE("residency decisions on the device with write-back rings: promotions copied from HBM",
          "[cuda][gpu][runtime][decisions]") {
  // The session above with layer steps whose resolve gives each miss a
  // ring entry and whose launches that copy host rows write them there, and
  // a decision step that carries the entries to place_rows: the promoted
  // rows are copied from the rings (HBM to HBM). In groups of 4 layers each
  // fused attention writes its layer's part of the token; over one-layer
  // pools with 8 heads a CTA, a fetch stages the missing rows for the
  // query's two CTAs and writes them. `shadowed` also decides on the host
  // and checks every promoted slot's bytes against the host store before
  // the host copies them again; `small` has rings of 64 tokens, so that
  // most misses fall past them and are read from the host store. All must
  // end with the CPU's residency and output bits.
  const std::uint64_t seed = dhs::test::freshSeed() + 670;
  INFO("DHS_TEST_SEED=" << seed - 670);
  const auto [G, writingVariant, placement, decisions, copier] =
      GENERATE(table<int, std::string, std::string, std::string, abi::LaunchKind>(
          {{4, "_write_back", placementStep(),
            dhs::test::compiledStepsDir() + "/decisions_g4_write_back",
            abi::LaunchKind::SparseAttention},
           {1, "_write_back_staged", dhs::test::compiledStepsDir() + "/place_rows_g1",
            dhs::test::compiledStepsDir() + "/decisions_g1_write_back", abi::LaunchKind::Fetch}}));
  INFO("groups of " << G << " layers, steps fp8_g" << G << writingVariant);
  if (!decisionStepsOrSkip())
    return;
  const std::string unavailable = groupStepsUnavailable(G, writingVariant);
  if (!unavailable.empty() || !std::ifstream(decisions + "/manifest.json") ||
      !std::ifstream(placement + "/manifest.json")) {
    WARN("SKIPPED: " << (unavailable.empty()
                             ? "no compiled step at " + decisions + " or " + placement
                             : unavailable));
    return;
  }
  const std::vector<std::string> resolved = dhs::test::groupSteps(G, "_resolved");
  const std::vector<std::string> writing = dhs::test::groupSteps(G, writingVariant);
  {
    // The launch that writes the ring is the one this case means to test.
    const Manifest step = Manifest::load(writing.front());
    CHECK(std::any_of(step.launches.begin(), step.launches.end(), [&](const Launch &launch) {
      return launch.kind == copier &&
             std::any_of(launch.params.begin(), launch.params.end(), [](const LaunchParam &p) {
               return p.role == abi::ParamRole::WriteBackRing;
             });
    }));
  }
  const std::int32_t layers = 8;
  RuntimeConfig config = dhs::test::testConfig(layers, G, BackendKind::Cpu, 4, /*floor=*/0);
  Runtime cpu(config);
  cpu.loadSteps(resolved);
  config.backend = BackendKind::Cuda;
  config.writeBackRows = 1024;
  Runtime shadowed(config);
  config.checkInvariants = false;
  config.cudaGraphs = true;
  Runtime decided(config);
  config.writeBackRows = 64;
  Runtime small(config);
  for (Runtime *rt : {&shadowed, &decided, &small}) {
    rt->loadSteps(writing);
    rt->loadPlacementStep(placement);
    rt->loadDecisionStep(decisions);
  }
  std::mt19937_64 rng(seed);
  Shadow shadow(layers, RowFormat::MlaFp8);
  std::size_t differing = 0;
  const double worst = session({&cpu, &shadowed, &decided, &small}, shadow, rng, 24,
                               [&](const auto &outputs) {
                                 differing += countBitDifferences(outputs[1], outputs[2]);
                                 differing += countBitDifferences(outputs[1], outputs[3]);
                               },
                               {false, true, true, true});
  CHECK(differing == 0);
  for (Runtime *rt : {&shadowed, &decided, &small}) {
    CHECK(rt->stats().totals.promoted == cpu.stats().totals.promoted);
    CHECK(rt->stats().totals.evicted == cpu.stats().totals.evicted);
    rt->checkInvariants(); // downloads the device state into the controller
    dhs::test::expectSameResidency(cpu, *rt);
  }
  CHECK(decided.stats().totals.promoted > 0);
  WARN("residency decisions on the device with write-back rings of 1024 / 64 tokens, groups of "
       << G << " layers: 24 steps x 8 layers, worst relative error " << worst << ", "
       << decided.stats().totals.promoted << " rows promoted as on the CPU");
}

TEST_CASE("residency decisions on the device: the engine's device buffers used in place, a step "
          "graph of few nodes",
          "[cuda][gpu][runtime][decisions]") {
  // Selections, queries and outputs in device memory, filling the batch:
  // with graphs on, the layers read and write the engine's buffers in place
  // and the groups' small copies go as one copy per kind, so the step's
  // graph holds the kernels and 16 other nodes (2 groups: 2 decision
  // lanes, each group's history bounds), and 4 more where it replays the
  // appends first. `plain` (graphs off)
  // enqueues layer by layer and copies the selections; both replay the
  // appends on the device (the graphed one as a graph too). Same bits, same
  // residency. Outputs that overlap (one buffer for every layer) fall back
  // to per-layer copies and poison, same bits.
  const CudaDriver &cuda = CudaDriver::instance();
  const std::uint64_t seed = dhs::test::freshSeed() + 670;
  INFO("DHS_TEST_SEED=" << seed - 670);
  if (!decisionStepsOrSkip())
    return;
  if (!cuda.graphsAvailable()) {
    WARN("SKIPPED: " << cuda.graphsUnavailableReason());
    return;
  }
  const std::int32_t layers = 8, groups = 2;
  RuntimeConfig config = dhs::test::testConfig(layers, 4, BackendKind::Cuda, 4, /*floor=*/0);
  config.checkInvariants = false;
  Runtime plain(config);
  config.cudaGraphs = true;
  Runtime graphed(config);
  loadDecidingSteps({&plain, &graphed});
  std::mt19937_64 rng(seed);
  Shadow shadow(layers, RowFormat::MlaFp8);
  const ProblemShape &s = graphed.shape();
  const std::vector<std::uint64_t> ids = admitBatch({&plain, &graphed}, shadow, rng, 31);
  const std::size_t qPerLayer = static_cast<std::size_t>(s.batch * s.queries * s.heads * s.qkDim);
  const std::size_t oPerLayer = static_cast<std::size_t>(s.batch * s.queries * s.heads * s.vDim);
  const std::size_t perGroup = static_cast<std::size_t>(s.batch * s.queries * s.topk);
  cuda_detail::DeviceBuffer dq(qPerLayer * layers * 2, "queries"),
      dsel(perGroup * groups * 4, "selections"), outPlain(oPerLayer * layers * 2, "outputs"),
      outGraphed(oPerLayer * layers * 2, "outputs");
  // A step's selections and queries, uploaded (host copies kept for the
  // reference).
  std::vector<bf16_t> q(qPerLayer * layers);
  auto upload = [&](std::vector<std::uint64_t> &batch) {
    std::shuffle(batch.begin(), batch.end(), rng);
    const std::vector<std::int32_t> rows =
        dhs::test::randomSelections(rng, shadow, batch, groups, s);
    REQUIRE(rows.size() == perGroup * groups);
    cuda.check(cuda.memcpyHtoD(dsel.get(), rows.data(), rows.size() * 4), "selections");
    dhs::test::fillRandom(rng, q.data(), q.size());
    cuda.check(cuda.memcpyHtoD(dq.get(), q.data(), q.size() * 2), "queries");
    return rows;
  };
  auto download = [&](const cuda_detail::DeviceBuffer &from, std::size_t elements) {
    std::vector<bf16_t> values(elements);
    cuda.check(cuda.memcpyDtoH(values.data(), from.get(), elements * 2), "outputs");
    return values;
  };
  const auto *selections = reinterpret_cast<const std::int32_t *>(dsel.get());
  const auto *queries = reinterpret_cast<const bf16_t *>(dq.get());
  const int steps = 8;
  std::vector<std::uint64_t> batch = ids;
  double worst = 0.0;
  for (int step = 0; step < steps; ++step) {
    const std::vector<std::int32_t> rows = upload(batch);
    plain.step(batch.data(), s.batch, selections, queries,
               reinterpret_cast<bf16_t *>(outPlain.get()), MemorySpace::Device,
               MemorySpace::Device);
    graphed.step(batch.data(), s.batch, selections, queries,
                 reinterpret_cast<bf16_t *>(outGraphed.get()), MemorySpace::Device,
                 MemorySpace::Device);
    const std::vector<bf16_t> a = download(outPlain, oPerLayer * layers),
                              b = download(outGraphed, oPerLayer * layers);
    REQUIRE(countBitDifferences(a, b) == 0);
    REQUIRE(std::count(b.begin(), b.end(), kBf16Poison) == 0); // every element written
    // Each layer against the fp64 reference over the engine's selections.
    for (std::int32_t l = 0; l < layers; ++l) {
      const std::size_t g = static_cast<std::size_t>(l / (layers / groups));
      const std::vector<double> reference = dhs::test::referenceLayer(
          s, s.batch, rows.data() + g * perGroup, q.data() + l * qPerLayer,
          [&](std::int64_t lane, std::int32_t r) {
            return shadow.row(batch[static_cast<std::size_t>(lane)], l, r);
          });
      worst = std::max(worst, dhs::test::expectNearReference(
                                  std::vector<bf16_t>(b.begin() + l * oPerLayer,
                                                      b.begin() + (l + 1) * oPerLayer),
                                  reference));
    }
    for (std::uint64_t id : ids)
      dhs::test::appendRandom({&plain, &graphed}, shadow, rng, id);
  }
  const RuntimeStats stats = graphed.stats();
  // The first step's graph, then the graph of the steps after appends,
  // which replays them first: one launch a step.
  CHECK(stats.graphCaptures == 2);
  CHECK(stats.graphReplays == static_cast<std::uint64_t>(steps - 2));
  // That graph: its kernels; the exchange to the device (1); the appends'
  // budget words and lists from it (one copy each: the groups' parts lie
  // side by side), their slots and status words into it (4); the logs'
  // stamps, the budget words, the rollback copy, the history bounds (2,
  // once), every group's counts and log headers (2), the step's status
  // word into each decision lane's (a group each here) and the lanes'
  // words into the exchange; the exchange to the host (1); per group its
  // history bounds, saved for its plan (the grouped plan reads each
  // group's own); the status word and the outputs' poison (memsets). Of
  // the copies, 2 touch host memory: the exchange's (the history bounds
  // come from its mirror too).
  const std::size_t lanes = static_cast<std::size_t>(groups);
  const std::size_t groupCount = static_cast<std::size_t>(groups);
  // (A driver without cuGraphGetNodes lists no nodes: said, not counted.)
  const bool listsNodes = cuda.graphGetNodes && cuda.graphNodeGetType;
  if (!listsNodes)
    WARN("SKIPPED the graph's node counts: the driver has no cuGraphGetNodes");
  CHECK((stats.graphNodes > 0) == listsNodes);
  if (stats.graphNodes > 0) {
    CHECK(stats.graphCopyNodes == 14 + lanes + groupCount);
    CHECK(stats.graphMemsetNodes == 2);
    CHECK(stats.graphNodes == stats.graphKernelNodes + 16 + lanes + groupCount);
  }
  CHECK(graphed.stats().totals.promoted == plain.stats().totals.promoted);
  CHECK(graphed.stats().totals.evicted == plain.stats().totals.evicted);
  CHECK(graphed.stats().totals.promoted > 0);

  // Every layer's output in one buffer: the engine's buffers overlap, so
  // the selections are copied and each layer poisons the output before its
  // kernels; the buffer ends with the last layer's output, as without
  // graphs.
  cuda_detail::DeviceBuffer onePlain(oPerLayer * 2, "an output"),
      oneGraphed(oPerLayer * 2, "an output");
  upload(batch);
  for (auto [rt, out] : {std::pair{&plain, &onePlain}, std::pair{&graphed, &oneGraphed}}) {
    rt->beginStep(batch.data(), s.batch);
    for (std::int32_t g = 0; g < groups; ++g)
      rt->selectGroup(g, selections + g * perGroup, MemorySpace::Device);
    for (std::int32_t l = 0; l < layers; ++l)
      rt->attendLayer(l, queries + l * qPerLayer, reinterpret_cast<bf16_t *>(out->get()),
                      MemorySpace::Device);
    rt->endStep();
  }
  const std::vector<bf16_t> a = download(onePlain, oPerLayer), b = download(oneGraphed, oPerLayer);
  CHECK(countBitDifferences(a, b) == 0);
  CHECK(std::count(b.begin(), b.end(), kBf16Poison) == 0);
  CHECK(graphed.stats().graphCaptures == 3);
  if (graphed.stats().graphNodes > 0) {
    // Per layer: the selections' copy and the poison; per group: the
    // selections saved for the decisions.
    CHECK(graphed.stats().graphCopyNodes == 14 + lanes + groupCount + layers + groups);
    CHECK(graphed.stats().graphMemsetNodes == 1 + layers);
  }
  for (Runtime *rt : {&plain, &graphed})
    rt->checkInvariants(); // downloads the device state into the controller
  dhs::test::expectSameResidency(plain, graphed);

  // A bad row id among the engine's selections, read in place by the
  // replayed graph while appends wait to be replayed: the step fails whole
  // and decides nothing, so `plain`, which never ran it, gives the next
  // step's bits and residency.
  for (std::uint64_t id : ids)
    dhs::test::appendRandom({&plain, &graphed}, shadow, rng, id);
  const std::vector<std::int32_t> good = upload(batch);
  std::vector<std::int32_t> bad = good;
  bad[perGroup + 5] = 1 << 20; // layer group 1, the batch's first lane
  cuda.check(cuda.memcpyHtoD(dsel.get(), bad.data(), bad.size() * 4), "selections");
  const RuntimeStats before = graphed.stats();
  CHECK_THROWS_AS(graphed.step(batch.data(), s.batch, selections, queries,
                               reinterpret_cast<bf16_t *>(outGraphed.get()), MemorySpace::Device,
                               MemorySpace::Device),
                  OutOfRangeError);
  CHECK_FALSE(graphed.inStep());
  CHECK(graphed.stats().steps == before.steps);
  CHECK(graphed.stats().totals.promoted == before.totals.promoted);
  cuda.check(cuda.memcpyHtoD(dsel.get(), good.data(), good.size() * 4), "selections");
  for (auto [rt, out] : {std::pair{&plain, &outPlain}, std::pair{&graphed, &outGraphed}})
    rt->step(batch.data(), s.batch, selections, queries, reinterpret_cast<bf16_t *>(out->get()),
             MemorySpace::Device, MemorySpace::Device);
  CHECK(countBitDifferences(download(outPlain, oPerLayer * layers),
                            download(outGraphed, oPerLayer * layers)) == 0);
  for (Runtime *rt : {&plain, &graphed})
    rt->checkInvariants();
  dhs::test::expectSameResidency(plain, graphed);
  WARN("engine buffers in place: worst relative error "
       << worst << " against fp64; " << stats.graphNodes << " graph nodes ("
       << stats.graphKernelNodes << " kernels) a step of " << layers << " layers in " << groups
       << " groups; " << graphed.stats().totals.promoted
       << " rows promoted; a bad row id read in place fails the "
       << "step, which decides nothing");
}

TEST_CASE("residency decisions on the device: a step failing after its start (a launch, a host "
          "check) decides nothing",
          "[cuda][gpu][runtime][decisions][faults]") {
  // The appends recorded between steps are replayed by the aging kernels at
  // the next step's start, two launches or more a group, before the step's
  // own (with graphs on, the first launches of the step's graph). A launch
  // that fails among them (the first replay: the graph is being captured)
  // fails the step before anything of it runs, and no replay may have
  // happened twice: the failed step's end replays every group's appends
  // once (alone), or the next step does. A launch or a host check failing later, among the step's
  // own, fails the step too: the layers enqueued so far run, their stamps are rolled back, the
  // decisions never run, and the replayed appends are the controller's. `reference` never fails;
  // both run their steps with graphs or both without.
  const CudaDriver &cuda = CudaDriver::instance();
  const std::uint64_t seed = dhs::test::freshSeed() + 690;
  INFO("DHS_TEST_SEED=" << seed - 690);
  if (!faults::kCompiledIn) {
    WARN("SKIPPED: fault injection is not compiled in (DHS_FAULT_INJECTION)");
    return;
  }
  if (!decisionStepsOrSkip())
    return;
  const std::int32_t layers = 8, groups = 2;
  // A host check failing instead of a launch: the step's selections given
  // in host memory, which a deciding step refuses after its start.
  constexpr std::uint32_t kHostCheck = ~0u;
  // (graphs, step, skip): the launch failing is the (skip + 1)-th of that
  // step's. Without graphs, step 1's first ones are the aging replays'
  // (captured), step 2's the step's own (the replays' graph is replayed),
  // every group's layers and then its decisions; with graphs, step 0's
  // are its graph's (captured), step 1's its graph's, the aging replays'
  // first.
  const std::vector<std::tuple<bool, int, std::uint32_t>> failures = {
      {false, 1, 0},          {false, 1, 1},  {false, 1, 2},  {false, 2, 0},
      {false, 2, 1},          {false, 2, 2},  {false, 2, 3},  {false, 2, 5},
      {false, 2, 8},          {false, 2, 12}, {false, 2, 16}, {false, 2, kHostCheck},
      {false, 3, kHostCheck}, {true, 0, 3},   {true, 1, 0},   {true, 2, kHostCheck},
      {true, 3, kHostCheck}};
  for (auto [graphs, failing, skip] : failures) {
    INFO((graphs ? "graphs on" : "graphs off")
         << ", step " << failing << ", the launch failing: "
         << (skip == kHostCheck ? std::string("none (a host check)") : std::to_string(skip + 1)));
    // (Errors past the failing step are reported per case: every case runs.)
    try {
      RuntimeConfig config = dhs::test::testConfig(layers, 4, BackendKind::Cuda, 4, /*floor=*/0);
      config.checkInvariants = false;
      config.cudaGraphs = graphs && cuda.graphsAvailable();
      Runtime faulted(config), reference(config);
      loadDecidingSteps({&faulted, &reference});
      std::mt19937_64 rng(seed + skip + 100 * static_cast<std::uint64_t>(failing));
      Shadow shadow(layers, RowFormat::MlaFp8);
      const ProblemShape &s = faulted.shape();
      const std::vector<std::uint64_t> ids = admitBatch({&faulted, &reference}, shadow, rng, 41);
      const std::size_t qPerLayer =
          static_cast<std::size_t>(s.batch * s.queries * s.heads * s.qkDim);
      const std::size_t oPerLayer =
          static_cast<std::size_t>(s.batch * s.queries * s.heads * s.vDim);
      const std::size_t perGroup = static_cast<std::size_t>(s.batch * s.queries * s.topk);
      cuda_detail::DeviceBuffer dsel(perGroup * groups * 4, "selections");
      std::vector<bf16_t> q(qPerLayer * layers), outFaulted(oPerLayer * layers),
          outReference(oPerLayer * layers);
      const auto *selections = reinterpret_cast<const std::int32_t *>(dsel.get());
      const int steps = 6;
      std::vector<std::uint64_t> batch = ids;
      for (int step = 0; step < steps; ++step) {
        std::shuffle(batch.begin(), batch.end(), rng);
        const std::vector<std::int32_t> rows =
            dhs::test::randomSelections(rng, shadow, batch, groups, s);
        cuda.check(cuda.memcpyHtoD(dsel.get(), rows.data(), rows.size() * 4), "selections");
        dhs::test::fillRandom(rng, q.data(), q.size());
        if (step == failing) {
          // (A step of fewer launches than skip + 1 succeeds, as the
          // reference's.)
          const RuntimeStats before = faulted.stats();
          bool threw = false;
          if (skip == kHostCheck) {
            CHECK_THROWS_AS(faulted.step(batch.data(), s.batch, rows.data(), q.data(),
                                         outFaulted.data(), MemorySpace::Host, MemorySpace::Host),
                            InputError);
            threw = true;
          } else {
            faults::arm(Fault::Launch, skip);
            try {
              faulted.step(batch.data(), s.batch, selections, q.data(), outFaulted.data(),
                           MemorySpace::Host, MemorySpace::Device);
            } catch (const Error &error) {
              threw = true;
              CHECK_THAT(std::string(error.what()), Catch::Contains("(injected fault)"));
            }
            const std::uint64_t failed = faults::failed(Fault::Launch);
            faults::disarmAll();
            CHECK(failed == (threw ? 1u : 0u));
            // Every step has 4 launches or more (the aging replays alone are
            // two a group): the first four always fail it.
            if (skip <= 3)
              CHECK(threw);
          }
          if (threw) {
            CHECK_FALSE(faulted.inStep());
            CHECK(faulted.stats().steps == before.steps);
          } else {
            reference.step(batch.data(), s.batch, selections, q.data(), outReference.data(),
                           MemorySpace::Host, MemorySpace::Device);
            CHECK(countBitDifferences(outFaulted, outReference) == 0);
          }
        } else {
          faulted.step(batch.data(), s.batch, selections, q.data(), outFaulted.data(),
                       MemorySpace::Host, MemorySpace::Device);
          reference.step(batch.data(), s.batch, selections, q.data(), outReference.data(),
                         MemorySpace::Host, MemorySpace::Device);
          CHECK(countBitDifferences(outFaulted, outReference) == 0);
        }
        for (std::uint64_t id : ids)
          dhs::test::appendRandom({&faulted, &reference}, shadow, rng, id);
      }
      CHECK(faulted.stats().totals.promoted == reference.stats().totals.promoted);
      CHECK(faulted.stats().totals.evicted == reference.stats().totals.evicted);
      for (Runtime *rt : {&faulted, &reference})
        rt->checkInvariants(); // downloads the device state into the controller
      dhs::test::expectSameResidency(reference, faulted);
    } catch (const Error &error) {
      FAIL_CHECK((graphs ? "graphs on" : "graphs off")
                 << ", step " << failing << ", launch " << skip + 1 << ": " << error.what());
    }
  }
  WARN("a launch or host check failing in a decided step (among the aging replays or the step's "
       "own launches, graphs off and on) fails the step, which decides nothing: the next steps "
       "give the bits and residency of a runtime that never failed");
}
