//===- CpuAttentionTest.cpp - The CPU reference ---------------------------===//

#include "TestUtil.h"

#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"
#include "runtime/core/RowFormat.h"
#include "runtime/core/SparseAttentionProblem.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/testing/ProblemGenerator.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <new>

using namespace dhs::runtime;
using dhs::test::smallShape;

namespace {

/// An independent, deliberately plain fp64 sparse attention: every quantity
/// written out from the specification, sharing no code with CpuAttention.
std::vector<double> naiveAttention(const SparseAttentionProblem &p) {
  const ProblemShape &s = p.shape;
  std::vector<double> out(static_cast<std::size_t>(s.batch * s.queries * s.heads * 512), 0.0);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t q = 0; q < s.queries; ++q)
      for (std::int64_t h = 0; h < s.heads; ++h) {
        std::vector<double> scores;
        std::vector<const bf16_t *> rows;
        for (std::int64_t k = 0; k < s.topk; ++k) {
          std::size_t sel = static_cast<std::size_t>((b * s.queries + q) * s.topk + k);
          std::int32_t r = p.rowIds[sel];
          if (r == -1)
            continue;
          std::int32_t slot = p.slots[sel];
          const bf16_t *row =
              slot >= 0 ? &p.hbmPool[static_cast<std::size_t>(slot) * 576]
                        : &p.hostStore[static_cast<std::size_t>(p.historyStart[b] + r) * 576];
          const bf16_t *query =
              &p.queries[static_cast<std::size_t>(((b * s.queries + q) * s.heads + h) * 576)];
          double dot = 0;
          for (int d = 0; d < 576; ++d)
            dot += static_cast<double>(bf16ToFloat(query[d])) * bf16ToFloat(row[d]);
          scores.push_back(static_cast<double>(s.softmaxScale) * dot);
          rows.push_back(row);
        }
        if (rows.empty())
          continue;
        const double max = *std::max_element(scores.begin(), scores.end());
        double denominator = 0;
        for (double score : scores)
          denominator += std::exp(score - max);
        double *o = &out[static_cast<std::size_t>(((b * s.queries + q) * s.heads + h) * 512)];
        for (int v = 0; v < 512; ++v) {
          double numerator = 0;
          for (std::size_t k = 0; k < rows.size(); ++k)
            numerator += std::exp(scores[k] - max) * bf16ToFloat(rows[k][v]);
          o[v] = numerator / denominator;
        }
      }
  return out;
}

/// A small random problem: fresh data every run (freshSeed, named by the
/// DHS_TEST_SEED message of the case), `seed` telling a case's problems
/// apart.
SparseAttentionProblem problemFor(std::uint64_t seed, double residency = 0.5, double unused = 0.0) {
  GeneratorOptions options;
  options.seed = dhs::test::freshSeed() + seed;
  options.historyRows = 300;
  options.residency = residency;
  options.unusedFraction = unused;
  return generateProblem(smallShape(2, 2, 4, 64), options);
}

} // namespace

TEST_CASE("float and fp64 CPU backends agree", "[cpu]") {
  INFO("DHS_TEST_SEED=" << dhs::test::freshSeed());
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    INFO("seed " << seed);
    SparseAttentionProblem p = problemFor(seed, 0.5, 0.1);
    std::vector<double> f = CpuAttention(CpuPrecision::Float).runUnrounded(p);
    std::vector<double> d = CpuAttention(CpuPrecision::Double).runUnrounded(p);
    Comparison c = compareOutputs(f, d);
    CHECK(c.relativeError < 1e-5);
    CHECK(c.relativeError > 0.0); // float really is less precise
    CHECK(c.nonFinite == 0);
    // After rounding, nearly every bf16 value is the same.
    std::vector<bf16_t> fb = CpuAttention(CpuPrecision::Float).run(p);
    std::vector<bf16_t> db = CpuAttention(CpuPrecision::Double).run(p);
    std::size_t differing = countBitDifferences(fb, db);
    CHECK(differing < fb.size() / 50);
    // Rounding the unrounded results gives the rounded ones.
    for (std::size_t i = 0; i < d.size(); ++i)
      REQUIRE(db[i] == doubleToBf16(d[i]));
  }
}

TEST_CASE("the fp64 CPU backend matches a naive implementation", "[cpu]") {
  INFO("DHS_TEST_SEED=" << dhs::test::freshSeed());
  for (std::uint64_t seed : {5u, 6u}) {
    for (double residency : {0.0, 0.7}) {
      INFO("seed " << seed << " residency " << residency);
      SparseAttentionProblem p = problemFor(seed, residency, 0.2);
      std::vector<double> naive = naiveAttention(p);
      std::vector<double> d = CpuAttention(CpuPrecision::Double, 3).runUnrounded(p);
      Comparison c = compareOutputs(d, naive);
      CHECK(c.relativeError < 1e-12);
      CHECK(c.referenceNorm > 1.0);
      // The bf16 output within bf16 precision of the naive one.
      Comparison rounded = compareOutputs(CpuAttention(CpuPrecision::Double).run(p), naive);
      CHECK(rounded.relativeError < 4e-3);
      CHECK(rounded.relativeError > 0.0);
    }
  }
}

namespace {

/// Plain fp64 attention over any row format, one head at a time, every sum
/// in index order (the order CpuAttention's blocked loops keep).
std::vector<double> plainAttention(const SparseAttentionProblem &p) {
  const ProblemShape &s = p.shape;
  const bool gqa = s.format == RowFormat::Gqa;
  const std::int64_t groupHeads = gqa ? s.heads / s.gqa.kvHeads : s.heads;
  std::vector<double> out(static_cast<std::size_t>(s.outputCount()), 0.0);
  std::vector<double> key(static_cast<std::size_t>(s.qkDim)),
      value(static_cast<std::size_t>(s.vDim));
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t q = 0; q < s.queries; ++q)
      for (std::int64_t h = 0; h < s.heads; ++h) {
        std::vector<double> scores;
        std::vector<std::vector<double>> values;
        const bf16_t *query =
            &p.queries[static_cast<std::size_t>(((b * s.queries + q) * s.heads + h) * s.qkDim)];
        for (std::int64_t k = 0; k < s.topk; ++k) {
          const bf16_t *token = p.row(b, q, k);
          if (!token)
            continue;
          const auto *row = reinterpret_cast<const std::uint8_t *>(token) + s.layer * s.rowBytes;
          if (gqa)
            decodeGqa(s.gqa, row, h / groupHeads, key.data(), value.data());
          else
            decodeKey(s.format, row, key.data());
          double dot = 0;
          for (std::int64_t d = 0; d < s.qkDim; ++d)
            dot += static_cast<double>(bf16ToFloat(query[d])) * key[static_cast<std::size_t>(d)];
          scores.push_back(static_cast<double>(s.softmaxScale) * dot);
          values.emplace_back(gqa ? value.begin() : key.begin(),
                              (gqa ? value.begin() : key.begin()) + s.vDim);
        }
        if (scores.empty())
          continue;
        const double max = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double &score : scores) {
          score = std::exp(score - max);
          sum += score;
        }
        double *o = &out[static_cast<std::size_t>(((b * s.queries + q) * s.heads + h) * s.vDim)];
        for (std::int64_t v = 0; v < s.vDim; ++v) {
          double acc = 0;
          for (std::size_t k = 0; k < values.size(); ++k)
            acc += scores[k] * values[k][static_cast<std::size_t>(v)];
          o[v] = acc / sum;
        }
      }
  return out;
}

} // namespace

TEST_CASE("the blocked fp64 backend sums in the plain order", "[cpu]") {
  // Heads and valid rows that fill no block evenly (blocks of 8 heads and
  // 32 rows; rows in pairs and fours), MLA and GQA (KV heads of 9 and 5
  // query heads), FP8 in a layer group.
  struct Case {
    const char *name;
    RowFormat format;
    GqaLayout gqa;
    std::int64_t heads;
  };
  for (const Case &c : {Case{"mla_bf16", RowFormat::MlaBf16, {}, 11},
                        Case{"mla_fp8, layer 1 of 2", RowFormat::MlaFp8, {}, 17},
                        Case{"gqa 4 x 9", RowFormat::Gqa, {4, 64, GqaElement::BF16}, 36},
                        Case{"gqa 2 x 5 f32", RowFormat::Gqa, {2, 32, GqaElement::F32}, 10}}) {
    INFO(c.name);
    ProblemShape shape = smallShape(/*B=*/2, /*Q=*/2, c.heads, /*K=*/90);
    shape.format = c.format;
    if (c.format == RowFormat::Gqa) {
      shape.gqa = c.gqa;
      shape.rowBytes = c.gqa.rowBytes();
      shape.qkDim = shape.vDim = c.gqa.headDim;
    } else {
      const RowFormatInfo &info = rowFormatInfo(c.format);
      shape.rowBytes = info.rowBytes;
      shape.qkDim = info.qkDim;
      shape.vDim = info.vDim;
    }
    if (c.format == RowFormat::MlaFp8) {
      shape.layers = 2;
      shape.layer = 1;
    }
    shape.rowElems = shape.layers * shape.rowBytes / 2;
    GeneratorOptions options;
    options.seed = dhs::test::freshSeed();
    options.historyRows = 300;
    options.unusedFraction = 0.3; // 63 valid rows per query
    options.residency = 0.5;
    SparseAttentionProblem p = generateProblem(shape, options);
    INFO("seed " << options.seed);
    const std::vector<double> plain = plainAttention(p);
    for (unsigned threads : {1u, 3u}) {
      const std::vector<double> blocked =
          CpuAttention(CpuPrecision::Double, threads).runUnrounded(p);
      Comparison cmp = compareOutputs(blocked, plain);
      CHECK(cmp.referenceNorm > 0.1);
#if defined(__x86_64__)
      // x86-64 code has no fused multiply-add to contract sums into.
      CHECK(blocked == plain);
#else
      CHECK(cmp.relativeError < 1e-13);
#endif
    }
  }
}

TEST_CASE("outputs do not depend on residency", "[cpu][residency]") {
  INFO("DHS_TEST_SEED=" << dhs::test::freshSeed());
  SparseAttentionProblem p = problemFor(9, 0.0, 0.1);
  std::vector<bf16_t> atZero = CpuAttention(CpuPrecision::Float).run(p);
  std::vector<bf16_t> atZeroDouble = CpuAttention(CpuPrecision::Double).run(p);
  for (double f : {0.5, 1.0, 0.25}) {
    INFO("residency " << f);
    applyResidency(p, f, 9);
    REQUIRE(p.stats().residentReads > 0);
    CHECK(countBitDifferences(CpuAttention(CpuPrecision::Float).run(p), atZero) == 0);
    CHECK(countBitDifferences(CpuAttention(CpuPrecision::Double).run(p), atZeroDouble) == 0);
  }
}

TEST_CASE("resident rows are read from HBM", "[cpu][residency]") {
  INFO("DHS_TEST_SEED=" << dhs::test::freshSeed());
  // Changing a resident row's HBM copy must change the output: the backend
  // reads the slot, not the host store.
  SparseAttentionProblem p = problemFor(4, 1.0);
  std::vector<bf16_t> before = CpuAttention().run(p);
  std::int32_t slot = p.slots[p.selectionIndex(0, 0, 0)];
  REQUIRE(slot >= 0);
  for (int d = 0; d < 576; ++d)
    p.hbmPool[static_cast<std::size_t>(slot) * 576 + d] = floatToBf16(3.0f);
  CHECK(countBitDifferences(CpuAttention().run(p), before) > 0);
}

TEST_CASE("unused selections and duplicates", "[cpu]") {
  INFO("DHS_TEST_SEED=" << dhs::test::freshSeed());
  SparseAttentionProblem p = problemFor(12, 0.0);
  const ProblemShape &s = p.shape;
  std::int32_t a = p.rowIds[p.selectionIndex(0, 0, 0)];
  std::int32_t b = p.rowIds[p.selectionIndex(0, 0, 1)];

  SECTION("a query with no valid selection gives zeros") {
    for (std::int64_t k = 0; k < s.topk; ++k)
      p.rowIds[p.selectionIndex(0, 1, k)] = -1;
    std::vector<bf16_t> out = CpuAttention().run(p);
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (int v = 0; v < 512; ++v)
        REQUIRE(out[static_cast<std::size_t>(((0 * s.queries + 1) * s.heads + h) * 512 + v)] == 0);
    // Other queries are not zero.
    CHECK(out[0] != 0);
  }
  SECTION("a single selection returns its value row") {
    for (std::int64_t k = 1; k < s.topk; ++k)
      p.rowIds[p.selectionIndex(0, 0, k)] = -1;
    std::vector<double> out = CpuAttention(CpuPrecision::Double).runUnrounded(p);
    for (int v = 0; v < 512; ++v)
      REQUIRE(out[v] == bf16ToFloat(p.hostStore[(p.historyStart[0] + a) * 576 + v]));
  }
  SECTION("a duplicated row counts twice") {
    // Selection {a, a, b} weighs a twice: compare with the closed form.
    for (std::int64_t k = 0; k < s.topk; ++k)
      p.rowIds[p.selectionIndex(0, 0, k)] = -1;
    p.rowIds[p.selectionIndex(0, 0, 0)] = a;
    p.rowIds[p.selectionIndex(0, 0, 5)] = a;
    p.rowIds[p.selectionIndex(0, 0, 9)] = b;
    std::vector<double> out = CpuAttention(CpuPrecision::Double).runUnrounded(p);
    const bf16_t *rowA = &p.hostStore[(p.historyStart[0] + a) * 576];
    const bf16_t *rowB = &p.hostStore[(p.historyStart[0] + b) * 576];
    const bf16_t *query = &p.queries[0];
    double sa = 0, sb = 0;
    for (int d = 0; d < 576; ++d) {
      sa += static_cast<double>(bf16ToFloat(query[d])) * bf16ToFloat(rowA[d]);
      sb += static_cast<double>(bf16ToFloat(query[d])) * bf16ToFloat(rowB[d]);
    }
    sa *= s.softmaxScale;
    sb *= s.softmaxScale;
    double wa = 2 * std::exp(sa), wb = std::exp(sb);
    for (int v = 0; v < 512; ++v) {
      double expected = (wa * bf16ToFloat(rowA[v]) + wb * bf16ToFloat(rowB[v])) / (wa + wb);
      REQUIRE(out[v] == Approx(expected).epsilon(1e-12).margin(1e-12));
    }
    CHECK(compareOutputs(out, naiveAttention(p)).relativeError < 1e-12);
  }
}

TEST_CASE("large scores do not overflow the softmax", "[cpu]") {
  INFO("DHS_TEST_SEED=" << dhs::test::freshSeed());
  SparseAttentionProblem p = problemFor(13, 0.5);
  p.shape.softmaxScale = 1000.0f;
  std::vector<bf16_t> out = CpuAttention().run(p);
  const std::vector<double> naive = naiveAttention(p);
  // The float path, as the runtime runs it: finite and within bf16
  // tolerance; the fp64 one to rounding.
  const Comparison c = compareOutputs(out, naive);
  CHECK(c.nonFinite == 0);
  CHECK(c.relativeError < 1e-2);
  CHECK(compareOutputs(CpuAttention(CpuPrecision::Double).runUnrounded(p), naive).relativeError <
        1e-12);
}

TEST_CASE("output comparisons", "[cpu]") {
  std::vector<double> ref = {3.0, 4.0};
  CHECK(compareOutputs(std::vector<double>{3.0, 4.0}, ref).relativeError == 0.0);
  Comparison c = compareOutputs(std::vector<double>{3.0, 4.5}, ref);
  CHECK(c.relativeError == Approx(0.1));
  CHECK(c.maxAbsError == Approx(0.5));
  CHECK(c.referenceNorm == Approx(5.0));
  Comparison nan = compareOutputs(std::vector<bf16_t>{kBf16Poison, floatToBf16(4.0f)}, ref);
  CHECK(nan.nonFinite == 1);
  CHECK(std::isinf(nan.relativeError));
  CHECK(compareOutputs(std::vector<double>{0.0}, std::vector<double>{0.0}).relativeError == 0.0);
  CHECK(
      std::isinf(compareOutputs(std::vector<double>{1.0}, std::vector<double>{0.0}).relativeError));
  CHECK_THROWS_AS(compareOutputs(std::vector<double>{1.0}, ref), Error);
  CHECK(countBitDifferences({1, 2, 3}, {1, 5, 3}) == 1);
  CHECK_THROWS_AS(countBitDifferences({1}, {1, 2}), Error);
}

TEST_CASE("a sliding window attends like extra selected rows", "[cpu][window]") {
  // Query q of Q sees the W raw tokens before token windowTokens - (Q-1-q)
  // (none before token 0). The same problem with those tokens appended to
  // the host store and selected after the K rows (-1 where the window does
  // not reach) must give the same bits: same rows, same order.
  ProblemShape shape = smallShape(/*B=*/3, /*Q=*/3, /*H=*/4, /*K=*/16);
  shape.windowSize = 8;
  shape.windowRing = 8 + 3 - 1;
  GeneratorOptions options;
  options.seed = dhs::test::freshSeed() + 41;
  INFO("DHS_TEST_SEED=" << dhs::test::freshSeed());
  options.minHistoryRows = 64;
  options.maxHistoryRows = 96;
  options.residency = 0.5;
  SparseAttentionProblem windowed = generateProblem(shape, options);
  // Request 0 sees fewer raw tokens than the window; the others wrapped.
  REQUIRE(windowed.windowTokens[0] < shape.windowSize);
  REQUIRE(windowed.windowTokens[1] >= shape.windowRing);

  SparseAttentionProblem flat = windowed;
  flat.shape.windowSize = flat.shape.windowRing = 0;
  flat.windowRing.clear();
  flat.windowTokens.clear();
  const std::int64_t K = shape.topk, W = shape.windowSize, wide = K + W;
  flat.shape.topk = wide;
  flat.rowIds.assign(static_cast<std::size_t>(shape.batch * shape.queries * wide), -1);
  flat.slots.assign(flat.rowIds.size(), -1);
  // Window tokens go to a fresh host range per (request, query); the
  // request's history is widened to reach them.
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    for (std::int64_t q = 0; q < shape.queries; ++q) {
      for (std::int64_t k = 0; k < K; ++k) {
        flat.rowIds[static_cast<std::size_t>((b * shape.queries + q) * wide + k)] =
            windowed.rowIds[windowed.selectionIndex(b, q, k)];
        flat.slots[static_cast<std::size_t>((b * shape.queries + q) * wide + k)] =
            windowed.slots[windowed.selectionIndex(b, q, k)];
      }
      for (std::int64_t j = 0; j < W; ++j) {
        const bf16_t *row = windowed.windowRow(b, q, j);
        if (!row)
          continue;
        const std::int64_t hostRow = flat.shape.hostRows++;
        flat.hostStore.insert(flat.hostStore.end(), row, row + shape.rowElems);
        flat.rowIds[static_cast<std::size_t>((b * shape.queries + q) * wide + K + j)] =
            static_cast<std::int32_t>(hostRow - windowed.historyStart[b]);
      }
    }
    flat.historyLen[b] = static_cast<std::int32_t>(flat.shape.hostRows - flat.historyStart[b]);
  }
  for (CpuPrecision precision : {CpuPrecision::Float, CpuPrecision::Double}) {
    std::vector<bf16_t> a = CpuAttention(precision).run(windowed);
    std::vector<bf16_t> b = CpuAttention(precision).run(flat);
    CHECK(countBitDifferences(a, b) == 0);
  }
  // The window matters: without it the output changes.
  SparseAttentionProblem without = windowed;
  without.shape.windowSize = without.shape.windowRing = 0;
  without.windowRing.clear();
  without.windowTokens.clear();
  CHECK(countBitDifferences(CpuAttention(CpuPrecision::Float).run(windowed),
                            CpuAttention(CpuPrecision::Float).run(without)) > 0);
}

TEST_CASE("sliding-window inputs are validated", "[cpu][window][validation]") {
  ProblemShape shape = smallShape(2, 3, 2, 8);
  shape.windowSize = 4;
  shape.windowRing = 6;
  GeneratorOptions options;
  options.minHistoryRows = 16;
  options.maxHistoryRows = 16;
  SparseAttentionProblem p = generateProblem(shape, options);
  REQUIRE_NOTHROW(p.validate());
  SparseAttentionProblem negative = p;
  negative.windowTokens[1] = -3;
  REQUIRE_THROWS_WITH(negative.validate(), "window token count -3 of request 1 is negative");
  SparseAttentionProblem small = p;
  small.shape.windowRing = 5;
  REQUIRE_THROWS_WITH(small.validate(),
                      "a window ring of 5 tokens cannot hold a 4-token window for 3 "
                      "query positions");
  shape.windowRing = 5;
  REQUIRE_THROWS_AS(generateProblem(shape, options), Error);
}

TEST_CASE("a failing worker thread's exception reaches the caller", "[cpu][faults]") {
  if (!faults::kCompiledIn) {
    WARN("SKIPPED: built with DHS_FAULT_INJECTION=OFF");
    return;
  }
  struct Disarm {
    ~Disarm() { faults::disarmAll(); }
  } disarm;
  // 8 (request, query) pairs on 4 threads; the scratch allocation of the
  // third pair any worker takes fails. Without the hand-over the thread's
  // exception would terminate the process.
  GeneratorOptions options;
  options.seed = dhs::test::freshSeed();
  options.historyRows = 300;
  options.residency = 0.5;
  SparseAttentionProblem p = generateProblem(smallShape(4, 2, 4, 64), options);
  const CpuAttention threaded(CpuPrecision::Float, 4);
  faults::arm(Fault::HostAlloc, /*skip=*/2);
  CHECK_THROWS_AS(threaded.run(p), std::bad_alloc);
  CHECK(faults::failed(Fault::HostAlloc) == 1);
  CHECK(faults::reached(Fault::HostAlloc) >= 3);
  faults::disarmAll();
  // The same backend still runs, and threads do not change the result,
  // which matches the fp64 reference.
  std::vector<bf16_t> out = threaded.run(p);
  CHECK(out == CpuAttention(CpuPrecision::Float, 1).run(p));
  Comparison c = compareOutputs(out, naiveAttention(p));
  CHECK(c.nonFinite == 0);
  CHECK(c.referenceNorm > 0.0);
  CHECK(c.relativeError < 1e-2);
}
