//===- WholeModelTest.cpp - A compiled whole-model step in the runtime ----===//
//
// `dhs-compile examples/glm5.mlir` (the build compiles it into
// compiled-steps/glm5): 78 layers in 20 layer groups of 4 (the last group's
// pool holds its own 2 layers per token), FP8 rows, 64 heads, top-2048, a
// verify step of 5 positions over 8 requests, one staging arena planned
// across the groups and a miss plan per group fetched once for its layers.
// Each backend loads it whole (the arena the compiler planned), runs verify
// steps through it, and every layer's output matches the fp64 reference over
// the rows the engine wrote (on the CPU also the float oracle, bit for bit;
// CUDA's tensor-core kernel sums in another order); each group's first layer
// reads the union of the group's missing rows, its other layers none.
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtil.h"

#include "runtime/Runtime.h"
#include "runtime/core/StepPlan.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

using namespace dhs::runtime;
using dhs::test::Shadow;

TEST_CASE("the whole-model GLM-5 step runs verify steps: every layer matches the fp64 reference",
          "[runtime][wholemodel]") {
  const std::string dir = dhs::test::compiledStepsDir() + "/glm5";
  if (!std::filesystem::exists(dir + "/manifest.json")) {
    WARN("SKIPPED: no compiled step at " << dir << " (built without the compiler)");
    return;
  }
  DHS_FOR_EACH_BACKEND(backend);
  DHS_SEEDED_RNG(rng, 6100);
  const Manifest manifest = Manifest::load(dir);
  const StepPlan plan = planStep(manifest);
  REQUIRE(plan.wholeModel());
  REQUIRE(plan.layers.size() == 78);
  REQUIRE(plan.groups.size() == 20);
  CHECK(manifest.arenaBytes > 0);

  const std::int32_t L = 78, G = 4, Q = 5, H = 64, K = 2048, V = 64, valid = 24;
  RuntimeConfig config;
  config.layers = L;
  config.layersPerGroup = G;
  config.hbmSlots = 1024; // the step leaves HBM and the host store to run time
  config.hostRows = 1024;
  config.maxRequests = 4;
  config.checkInvariants = true;
  config.fullCheckInterval = 2;
  config.backend = backend;
  Runtime rt(config);
  rt.loadStep(dir);
  CHECK(rt.wholeModelStep());
  CHECK(rt.arenaBytes() == manifest.arenaBytes); // the arena the compiler planned
  CHECK(rt.groups() == 20);
  CHECK(rt.controller().config().newestWindow == 128); // the step's dhs.residency
  const ProblemShape &shape = rt.shape();
  REQUIRE(shape.queries == Q);
  REQUIRE(shape.topk == K);
  // The tiers store each group's own layers: 78 rows per token, the last
  // pool's tokens 2 rows.
  const TierLayout &layout = rt.storageForTesting().layout();
  CHECK(layout.pools() == 20);
  CHECK(layout.layersIn(0) == 4);
  CHECK(layout.layersIn(19) == 2);
  CHECK(rt.stats().hostBytesCapacity == 1024 * L * 656);
  CHECK(rt.stats().hbmBytesCapacity == 1024 * L * 656);
  {
    // The same step with a padded last pool (4 layers per token for 2
    // layers) is refused.
    Manifest padded = manifest;
    padded.arguments[static_cast<std::size_t>(plan.groups.back().pool)].pool.layers = 4;
    CHECK_THROWS_WITH(Runtime(config).loadStep(padded),
                      Catch::Contains("layer group 19 of the step") &&
                          Catch::Contains("has 2 layers over a pool of 4 layers per token") &&
                          Catch::Contains("declare its pool with layers = 2"));
  }
  {
    // The same step with the last group's pool as its first kv_pool
    // argument: the tiers still hold each group's own layers (the layout
    // follows the groups, not the arguments' order).
    Manifest swapped = manifest;
    const int first = plan.groups.front().pool, last = plan.groups.back().pool;
    auto swapIndex = [&](auto &index) {
      index = index == first ? last : index == last ? first : index;
    };
    std::swap(swapped.arguments[static_cast<std::size_t>(first)].pool,
              swapped.arguments[static_cast<std::size_t>(last)].pool);
    for (Launch &launch : swapped.launches)
      for (LaunchParam &param : launch.params)
        swapIndex(param.argumentIndex);
    for (ResidencySpec &spec : swapped.residency)
      swapIndex(spec.pool);
    REQUIRE(swapped.argument(ArgumentRole::KvPool).pool.layers == 2);
    Runtime other(config);
    other.loadStep(swapped);
    const TierLayout &otherLayout = other.storageForTesting().layout();
    CHECK(otherLayout.pools() == 20);
    CHECK(otherLayout.layersIn(0) == 4);
    CHECK(otherLayout.layersIn(19) == 2);
  }

  Shadow shadow(L, RowFormat::MlaFp8);
  const std::int64_t rowBytes = shadow.rowBytes;
  const std::uint64_t ids[2] = {3, 4};
  dhs::test::admitRandom(rt, shadow, rng, ids[0], 300, 400);
  dhs::test::admitRandom(rt, shadow, rng, ids[1], 170, 400);
  {
    // HBM in use: each group's resident tokens of its own layers.
    std::int64_t used = 0;
    for (std::int32_t g = 0; g < 20; ++g)
      used += rt.controller().occupancy(g).used * (std::min(L, (g + 1) * G) - g * G) * 656;
    CHECK(used > 0);
    CHECK(rt.stats().hbmBytesUsed == used);
  }
  const std::int64_t batch = 2, perLane = Q * K;
  const std::int64_t qPerLane = Q * H * 576, oPerLane = Q * H * 512;
  double worst = 0.0;
  std::uint64_t unionRows = 0;
  for (int step = 0; step < 3; ++step) {
    INFO("verify step " << step);
    const std::int32_t lens[2] = {4, static_cast<std::int32_t>(rng() % Q)};
    std::vector<std::int32_t> drafts(batch * (Q - 1));
    for (std::int32_t &x : drafts)
      x = static_cast<std::int32_t>(rng() % V);
    std::vector<std::uint8_t> rows = shadow.randomRows(rng, batch * Q * L); // [b][Q][L]
    auto pending = [&](std::int64_t b, std::int64_t j, std::int32_t l) {
      return rows.data() + ((b * Q + j) * L + l) * rowBytes;
    };
    // Steps 1 and 2 give each layer's rows just before its attention.
    const bool perLayer = step > 0;
    rt.verifyBegin(ids, batch, lens, drafts.data(), perLayer ? nullptr : rows.data());
    std::vector<bf16_t> queries(batch * qPerLane), out(batch * oPerLane);
    for (std::int32_t g = 0; g < 20; ++g) {
      // A few selections per position: history rows and the block's
      // positions up to the selecting one.
      std::vector<std::int32_t> sel(batch * perLane, -1);
      for (std::int64_t b = 0; b < batch; ++b) {
        const std::int64_t len = shadow.len(ids[b]);
        std::set<std::int32_t> missing;
        for (std::int32_t q = 0; q <= lens[b]; ++q)
          for (std::int32_t k = 0; k < valid; ++k) {
            const std::int32_t id = k == 0 ? static_cast<std::int32_t>(len + q)
                                           : static_cast<std::int32_t>(rng() % (len + q + 1));
            sel[b * perLane + q * K + k] = id;
            if (id < len && rt.controller().slotOf(g, rt.requestIndex(ids[b]), id) < 0)
              missing.insert(id);
          }
        unionRows += missing.size();
      }
      rt.selectGroup(g, sel.data());
      for (std::int32_t l = g * G; l < std::min(L, (g + 1) * G); ++l) {
        if (perLayer) {
          std::vector<std::uint8_t> layerRows(batch * Q * rowBytes);
          for (std::int64_t p = 0; p < batch * Q; ++p)
            std::memcpy(layerRows.data() + p * rowBytes, pending(p / Q, p % Q, l), rowBytes);
          rt.verifyWriteRows(l, layerRows.data());
        }
        dhs::test::fillRandom(rng, queries.data(), queries.size());
        rt.attendLayer(l, queries.data(), out.data());
        // Each group's first layer fetched the union of its missing rows,
        // the others read its staging.
        auto rowOf = [&](std::int64_t b, std::int32_t r) -> const void * {
          const std::int64_t len = shadow.len(ids[b]);
          return r < len ? shadow.row(ids[b], l, r) : pending(b, r - len, l);
        };
        const std::vector<bf16_t> oracle =
            dhs::test::oracleLayer(shape, batch, sel.data(), queries.data(), rowOf);
        const std::vector<double> reference =
            dhs::test::referenceLayer(shape, batch, sel.data(), queries.data(), rowOf);
        for (std::int64_t b = 0; b < batch; ++b) {
          const std::int64_t used = (lens[b] + 1) * H * 512;
          std::vector<bf16_t> actual(out.begin() + b * oPerLane, out.begin() + b * oPerLane + used);
          if (backend == BackendKind::Cpu)
            REQUIRE(actual == std::vector<bf16_t>(oracle.begin() + b * oPerLane,
                                                  oracle.begin() + b * oPerLane + used));
          const Comparison c =
              compareOutputs(actual, std::vector<double>(reference.begin() + b * oPerLane,
                                                         reference.begin() + b * oPerLane + used));
          worst = std::max(worst, c.relativeError);
          REQUIRE(c.relativeError < 1e-2);
        }
      }
    }
    std::vector<float> target(batch * Q * V, 0.0f);
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int32_t j = 0; j < Q; ++j)
        target[(b * Q + j) * V + (j < lens[b] && j < 2 ? drafts[b * (Q - 1) + j] : 0)] = 1.0f;
    std::int32_t accepted[2], tokens[2 * Q];
    const std::int64_t before[2] = {shadow.len(ids[0]), shadow.len(ids[1])};
    rt.verifyAccept(AcceptRule::Greedy, V, target.data(), nullptr, 1, accepted, tokens);
    for (std::int64_t b = 0; b < batch; ++b) {
      // The target's argmax: the draft at positions 0 and 1, else token 0.
      std::int32_t n = 0;
      while (n < lens[b] && drafts[b * (Q - 1) + n] == (n < 2 ? drafts[b * (Q - 1) + n] : 0))
        ++n;
      CHECK(accepted[b] == n);
      for (std::int32_t j = 0; j <= accepted[b]; ++j)
        for (std::int32_t l = 0; l < L; ++l) {
          auto &layer = shadow.rows[ids[b]][static_cast<std::size_t>(l)];
          layer.insert(layer.end(), pending(b, j, l), pending(b, j, l) + rowBytes);
        }
      CHECK(rt.historyLen(ids[b]) == before[b] + accepted[b] + 1);
    }
  }
  rt.checkInvariants();
  // Per group its first layer's fetch: the union of the group's missing rows.
  CHECK(rt.specStats().hostRowsRead == unionRows);
  CHECK(rt.specStats().hostRowsRead < rt.specStats().hostRowsSelectedMissing);
  WARN("GLM-5 whole-model step on " << dhs::test::backendName(backend)
                                    << ": 3 verify steps x 78 layers, worst relative error vs fp64 "
                                    << worst << ", host rows read " << rt.specStats().hostRowsRead
                                    << " of " << rt.specStats().hostRowsSelectedMissing
                                    << " a per-position, per-layer fetch would read");
}
