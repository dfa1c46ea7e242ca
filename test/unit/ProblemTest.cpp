//===- ProblemTest.cpp - Generator, residency, input validation -----------===//

#include "TestUtil.h"

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/ProblemShape.h"
#include "runtime/core/RowFormat.h"
#include "runtime/core/SparseAttentionProblem.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/testing/ProblemGenerator.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

using namespace dhs::runtime;
using dhs::test::smallShape;

namespace {

/// A small problem with fixed 64-row histories.
SparseAttentionProblem smallProblem(double residency = 0.5, std::uint64_t seed = 7) {
  GeneratorOptions options;
  options.seed = seed;
  options.historyRows = 64;
  options.residency = residency;
  return generateProblem(smallShape(), options);
}

/// Validation's message for a problem ("" when valid).
std::string validationError(const SparseAttentionProblem &p) {
  try {
    p.validate();
  } catch (const InputError &error) {
    return error.what();
  }
  return "";
}

/// The first (request 1) selection that reads from `wantResident` memory.
std::size_t findSelection(const SparseAttentionProblem &p, bool wantResident, std::int64_t &q,
                          std::int64_t &k) {
  for (q = 0; q < p.shape.queries; ++q)
    for (k = 0; k < p.shape.topk; ++k) {
      std::size_t i = p.selectionIndex(1, q, k);
      if (p.rowIds[i] != -1 && (p.slots[i] >= 0) == wantResident)
        return i;
    }
  FAIL("no such selection");
  return 0;
}

} // namespace

TEST_CASE("generated problems have the requested structure", "[problem]") {
  GeneratorOptions options;
  options.seed = 11;
  SparseAttentionProblem p = generateProblem(smallShape(3, 2, 2, 32), options);
  REQUIRE_NOTHROW(p.validate());
  const ProblemShape &s = p.shape;
  CHECK(p.queries.size() == static_cast<std::size_t>(3 * 2 * 2 * 576));
  // Random histories of a few thousand rows, laid out contiguously.
  std::int64_t next = 0;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    CHECK(p.historyLen[b] >= 2048);
    CHECK(p.historyLen[b] <= 6144);
    CHECK(p.historyStart[b] == next);
    next += p.historyLen[b];
  }
  CHECK(s.hostRows == next);
  // K distinct rows per query, inside the history; no unused entries.
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t q = 0; q < s.queries; ++q) {
      std::set<std::int32_t> rows;
      for (std::int64_t k = 0; k < s.topk; ++k) {
        std::int32_t r = p.rowIds[p.selectionIndex(b, q, k)];
        CHECK(r >= 0);
        CHECK(r < p.historyLen[b]);
        rows.insert(r);
      }
      CHECK(rows.size() == static_cast<std::size_t>(s.topk));
    }
  // Values are never zero (and finite).
  for (bf16_t v : p.queries)
    REQUIRE((v & 0x7FFF) != 0);
  for (bf16_t v : p.hostStore)
    REQUIRE(((v & 0x7FFF) != 0 && (v & 0x7F80) != 0x7F80));
  // Roughly N(0, 1).
  double sum = 0, squares = 0;
  for (bf16_t v : p.hostStore) {
    double x = bf16ToFloat(v);
    sum += x;
    squares += x * x;
  }
  double n = static_cast<double>(p.hostStore.size());
  CHECK(std::fabs(sum / n) < 0.01);
  CHECK(std::fabs(squares / n - 1.0) < 0.02);
}

TEST_CASE("generation is deterministic for a seed", "[problem]") {
  SparseAttentionProblem a = smallProblem(0.5, 3), b = smallProblem(0.5, 3),
                         c = smallProblem(0.5, 4);
  CHECK(a.queries == b.queries);
  CHECK(a.rowIds == b.rowIds);
  CHECK(a.slots == b.slots);
  CHECK(a.hostStore == b.hostStore);
  CHECK(a.hbmPool == b.hbmPool);
  CHECK(a.rowIds != c.rowIds);
  CHECK(a.queries != c.queries);
}

TEST_CASE("generation does not depend on the number of threads", "[problem]") {
  // FP8 rows in a group of 2 layers with a sliding window: every kind of
  // generated data (queries, host rows, window rows, HBM noise, residency).
  ProblemShape shape = smallShape(/*B=*/5, /*Q=*/2, /*H=*/3, /*K=*/16);
  const RowFormatInfo &fp8 = rowFormatInfo(RowFormat::MlaFp8);
  shape.format = fp8.format;
  shape.rowBytes = fp8.rowBytes;
  shape.layers = 2;
  shape.rowElems = shape.layers * shape.rowBytes / 2;
  shape.windowSize = 4;
  shape.windowRing = 5;
  GeneratorOptions options;
  options.seed = dhs::test::freshSeed();
  options.minHistoryRows = 700;
  options.maxHistoryRows = 900;
  options.residency = 0.6;
  options.threads = 1;
  const SparseAttentionProblem one = generateProblem(shape, options);
  for (unsigned threads : {2u, 3u, 8u, 0u}) {
    INFO("threads " << threads << ", seed " << options.seed);
    options.threads = threads;
    SparseAttentionProblem many = generateProblem(shape, options);
    CHECK(many.historyLen == one.historyLen);
    CHECK(many.queries == one.queries);
    CHECK(many.rowIds == one.rowIds);
    CHECK(many.slots == one.slots);
    CHECK(many.hostStore == one.hostStore);
    CHECK(many.hbmPool == one.hbmPool);
    CHECK(many.windowTokens == one.windowTokens);
    CHECK(many.windowRing == one.windowRing);
    // Residency redone on its own, too.
    applyResidency(many, 0.3, options.seed, threads);
    SparseAttentionProblem again = one;
    applyResidency(again, 0.3, options.seed, 1);
    CHECK(many.slots == again.slots);
    CHECK(many.hbmPool == again.hbmPool);
    // The same slots without touching the tiers.
    CHECK(residencySlots(one, 0.3, options.seed) == again.slots);
  }
  // Rows differ from each other (each from its own stream) and from the
  // window's.
  const std::size_t tokenElems = static_cast<std::size_t>(shape.rowElems);
  auto token = [&](const std::vector<bf16_t> &v, std::size_t i) {
    return std::vector<bf16_t>(v.begin() + i * tokenElems, v.begin() + (i + 1) * tokenElems);
  };
  CHECK(token(one.hostStore, 0) != token(one.hostStore, 1));
  CHECK(token(one.hostStore, 0) != token(one.windowRing, 0));
  CHECK(token(one.hbmPool, 0) != token(one.hbmPool, 1));
}

TEST_CASE("unused selections", "[problem]") {
  GeneratorOptions options;
  options.historyRows = 64;
  options.unusedFraction = 0.25;
  SparseAttentionProblem p = generateProblem(smallShape(2, 2, 1, 16), options);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t q = 0; q < 2; ++q) {
      int unused = 0;
      for (std::int64_t k = 0; k < 16; ++k)
        unused += p.rowIds[p.selectionIndex(b, q, k)] == -1;
      CHECK(unused == 4);
    }
  ProblemStats stats = p.stats();
  CHECK(stats.unusedSelections == 16);
  CHECK(stats.selections == 48);
}

TEST_CASE("residency makes exactly round(f * D) rows of each request resident", "[problem]") {
  for (double f : {0.0, 0.3, 0.5, 1.0}) {
    INFO("residency " << f);
    SparseAttentionProblem p = smallProblem(f);
    REQUIRE_NOTHROW(p.validate());
    const ProblemShape &s = p.shape;
    std::int64_t expected = 0;
    std::set<std::int32_t> usedSlots;
    for (std::int64_t b = 0; b < s.batch; ++b) {
      std::set<std::int32_t> distinct, resident;
      for (std::int64_t q = 0; q < s.queries; ++q)
        for (std::int64_t k = 0; k < s.topk; ++k) {
          std::size_t i = p.selectionIndex(b, q, k);
          std::int32_t r = p.rowIds[i];
          distinct.insert(r);
          std::int32_t slot = p.slots[i];
          if (slot < 0)
            continue;
          resident.insert(r);
          usedSlots.insert(slot);
          // The HBM copy is byte-exact.
          REQUIRE(std::memcmp(&p.hbmPool[slot * 576], &p.hostStore[(p.historyStart[b] + r) * 576],
                              576 * sizeof(bf16_t)) == 0);
        }
      CHECK(static_cast<std::int64_t>(resident.size()) ==
            std::llround(f * static_cast<double>(distinct.size())));
      expected += std::llround(f * static_cast<double>(distinct.size()));
    }
    ProblemStats stats = p.stats();
    CHECK(stats.distinctResidentRows == expected);
    // Every resident row has its own slot (a row of one request is always
    // read from the same slot).
    CHECK(static_cast<std::int64_t>(usedSlots.size()) == expected);
    CHECK(stats.residentReads + stats.hostReads == stats.selections);
    if (f == 0.0)
      CHECK(stats.residentReads == 0);
    if (f == 1.0)
      CHECK(stats.hostReads == 0);
  }
}

TEST_CASE("generator errors", "[problem]") {
  GeneratorOptions options;
  options.historyRows = 8;
  CHECK_THROWS_WITH(generateProblem(smallShape(), options),
                    Catch::Contains("a history of 8 rows cannot provide K = 16"));
  options.historyRows = 64;
  options.hbmSlots = 4;
  options.residency = 1.0;
  CHECK_THROWS_WITH(generateProblem(smallShape(), options),
                    Catch::Contains("distinct selected rows resident, but the pool has 4 HBM "
                                    "slots"));
  options.hbmSlots = -1;
  options.hostRows = 100;
  CHECK_THROWS_WITH(generateProblem(smallShape(), options),
                    Catch::Contains("the host store has 100 rows, but the requests' "
                                    "histories need 128"));
  options.hostRows = -1;
  options.residency = 1.5;
  CHECK_THROWS_WITH(generateProblem(smallShape(), options),
                    Catch::Contains("residency fraction must lie in [0, 1]"));
}

TEST_CASE("input validation names the offending entry", "[problem][validation]") {
  std::int64_t q = 0, k = 0;
  SECTION("row id outside the history") {
    SparseAttentionProblem p = smallProblem();
    std::size_t i = findSelection(p, false, q, k);
    p.rowIds[i] = 5000;
    CHECK(validationError(p) == "row id 5000 at [request 1, query " + std::to_string(q) + ", k " +
                                    std::to_string(k) +
                                    "] is outside the request's history (length 64)");
    // The CPU backend validates too, and never reads out of bounds.
    CHECK_THROWS_AS(CpuAttention().run(p), InputError);
  }
  SECTION("row id just past the history, read from HBM") {
    SparseAttentionProblem p = smallProblem();
    std::size_t i = findSelection(p, true, q, k);
    p.rowIds[i] = 64;
    CHECK_THAT(validationError(p), Catch::Contains("row id 64 at [request 1"));
  }
  SECTION("row id -2") {
    SparseAttentionProblem p = smallProblem();
    std::size_t i = findSelection(p, false, q, k);
    p.rowIds[i] = -2;
    CHECK_THAT(validationError(p),
               Catch::Contains("row id -2 at [request 1, query " + std::to_string(q)) &&
                   Catch::Contains("is invalid (only -1 marks an unused selection)"));
    CHECK_THROWS_AS(CpuAttention(CpuPrecision::Double).run(p), InputError);
  }
  SECTION("slot out of range") {
    SparseAttentionProblem p = smallProblem();
    std::size_t i = findSelection(p, true, q, k);
    p.slots[i] = static_cast<std::int32_t>(p.shape.hbmSlots);
    CHECK(validationError(p) == "slot " + std::to_string(p.shape.hbmSlots) +
                                    " at [request 1, query " + std::to_string(q) + ", k " +
                                    std::to_string(k) + "] is outside the HBM pool (" +
                                    std::to_string(p.shape.hbmSlots) + " slots)");
    CHECK_THROWS_AS(CpuAttention().run(p), InputError);
  }
  SECTION("slot below -1") {
    SparseAttentionProblem p = smallProblem();
    std::size_t i = findSelection(p, true, q, k);
    p.slots[i] = -3;
    CHECK_THAT(validationError(p),
               Catch::Contains("slot -3 at [request 1") && Catch::Contains("is invalid"));
  }
  SECTION("host row outside the store") {
    SparseAttentionProblem p = smallProblem();
    std::size_t i = findSelection(p, false, q, k);
    std::int32_t r = p.rowIds[i];
    p.historyStart[1] = p.shape.hostRows - r;
    CHECK(validationError(p) ==
          "host row " + std::to_string(p.shape.hostRows) + " (history start " +
              std::to_string(p.shape.hostRows - r) + " + row id " + std::to_string(r) +
              ") for [request 1, query " + std::to_string(q) + ", k " + std::to_string(k) +
              "] is outside the host store (" + std::to_string(p.shape.hostRows) + " rows)");
    CHECK_THROWS_AS(CpuAttention().run(p), InputError);
  }
  SECTION("negative history") {
    SparseAttentionProblem p = smallProblem();
    p.historyLen[0] = -1;
    CHECK_THAT(validationError(p), Catch::Contains("history length -1 of request 0"));
  }
  SECTION("array sizes") {
    SparseAttentionProblem p = smallProblem();
    p.slots.pop_back();
    CHECK_THAT(validationError(p), Catch::Contains("slots holds"));
    CHECK_THROWS_AS(CpuAttention().run(p), InputError);
  }
  SECTION("the slot of an unused selection is ignored") {
    SparseAttentionProblem p = smallProblem();
    std::size_t i = findSelection(p, false, q, k);
    p.rowIds[i] = -1;
    p.slots[i] = 1 << 30;
    CHECK(validationError(p).empty());
  }
  SECTION("a valid problem passes") { CHECK(validationError(smallProblem()).empty()); }
}

TEST_CASE("tier views read the same rows as owned tiers", "[problem]") {
  for (std::uint64_t seed : {21u, 22u}) {
    INFO("seed " << seed);
    SparseAttentionProblem owned = smallProblem(0.5, seed);
    SparseAttentionProblem viewed = owned;
    std::vector<bf16_t> host = viewed.hostStore, hbm = viewed.hbmPool;
    viewed.hostStore.clear();
    viewed.hbmPool.clear();
    viewed.hostStoreView = host.data();
    viewed.hbmPoolView = hbm.data();
    REQUIRE(validationError(viewed).empty());
    CHECK(CpuAttention(CpuPrecision::Float, 1).run(viewed) ==
          CpuAttention(CpuPrecision::Float, 1).run(owned));
    // A view changes what is read: poison one resident row in the view only.
    std::int64_t q = 0, k = 0;
    std::size_t i = findSelection(owned, true, q, k);
    std::fill_n(hbm.begin() + owned.slots[i] * owned.shape.rowElems, owned.shape.rowElems,
                floatToBf16(100.0f));
    CHECK(CpuAttention(CpuPrecision::Float, 1).run(viewed) !=
          CpuAttention(CpuPrecision::Float, 1).run(owned));
    // Both an owned tier and a view is an error.
    viewed.hostStore = host;
    CHECK_THAT(validationError(viewed), Catch::Contains("both a host store and a host store view"));
  }
}

TEST_CASE("a layer group's step is checked against a problem of any of its layers",
          "[problem][manifest]") {
  // test/unit/steps/tensor_core_group_step.mlir: two layers of one pool over
  // one selection. A problem reads layer 0 or 1 of the pool's tokens; one of
  // a layer the step does not attend (or of another shape) is refused.
  std::optional<Manifest> manifest = dhs::test::compiledStepOrSkip("tensor_core_group");
  if (!manifest)
    return;
  ProblemShape shape = problemShapeFromManifest(*manifest);
  REQUIRE(shape.layers == 2);
  GeneratorOptions options;
  options.seed = 5;
  for (std::int64_t layer : {0, 1}) {
    INFO("layer " << layer);
    shape.layer = layer;
    CHECK_NOTHROW(checkProblemMatchesManifest(generateProblem(shape, options), *manifest));
  }
  shape.layer = 0;
  SparseAttentionProblem problem = generateProblem(shape, options);
  problem.shape.layer = 2; // not a layer of the step (nor of the pool)
  CHECK_THROWS_WITH(checkProblemMatchesManifest(problem, *manifest),
                    Catch::Contains("the problem's layer is 2"));
  problem.shape.layer = 1;
  problem.shape.heads = 128;
  CHECK_THROWS_WITH(checkProblemMatchesManifest(problem, *manifest),
                    Catch::Contains("head count H is 128"));
}
