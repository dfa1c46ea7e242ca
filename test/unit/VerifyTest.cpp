//===- VerifyTest.cpp - Verify steps: pending KV, acceptance, commit ------===//
//
// Verify steps on the CPU backend against an oracle over the rows the engine
// wrote: every verified position's output equals attention over its history
// and the block's positions up to itself; the accepted positions' KV is
// appended to the history (the host store holds it), the rejected ones'
// leaves no trace (host rows past the history unchanged, residency checked
// by the invariant checker); the host rows read equal the union of the
// positions' missing rows; the speculation statistics count it all.
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtil.h"

#include "runtime/Runtime.h"
#include "runtime/core/Accept.h"
#include "runtime/core/FaultInjection.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

using namespace dhs::runtime;
using dhs::test::Shadow;

namespace {

/// Greedy's reference: argmax with ties to the lower token.
std::int32_t argmaxOf(const float *row, std::int32_t vocab) {
  return static_cast<std::int32_t>(std::max_element(row, row + vocab) - row);
}

/// `vocab` random probabilities summing to 1.
void randomDistribution(std::mt19937_64 &rng, float *p, std::int32_t vocab) {
  double sum = 0;
  for (std::int32_t t = 0; t < vocab; ++t)
    sum += p[t] = static_cast<float>(1e-3 + static_cast<double>(rng() % 1000));
  for (std::int32_t t = 0; t < vocab; ++t)
    p[t] = static_cast<float>(p[t] / sum);
}

} // namespace

TEST_CASE("verify steps: outputs equal the oracle, accepted KV is committed, rejected KV leaves "
          "no trace",
          "[verify]") {
  DHS_SEEDED_RNG(rng, 4100);
  const std::int32_t L = 4, G = 2, B = 3, Q = 4, H = 2, K = 8, V = 50;
  dhs::test::TempDir dir;
  dir.write("manifest.json", dhs::test::stepManifest(B, Q, H, K));
  RuntimeConfig config = dhs::test::testConfig(L, G, BackendKind::Cpu, 0, 4, 4096);
  config.hbmSlots = 96; // small: many selected rows miss
  config.fullCheckInterval = 3;
  Runtime rt(config);
  rt.loadStep(dir.path());
  const ProblemShape &shape = rt.shape();
  Shadow shadow(L);
  std::vector<std::uint64_t> ids = {11, 12, 13};
  for (std::uint64_t id : ids)
    dhs::test::admitRandom(rt, shadow, rng, id, 30 + static_cast<std::int64_t>(id), 400);
  const std::int64_t rowBytes = shadow.rowBytes, perLane = Q * K;
  const std::int64_t qPerLane = Q * H * 576, oPerLane = Q * H * 512;
  SpecStats expected;
  bool someRejected = false, someAccepted = false;
  for (int step = 0; step < 14; ++step) {
    INFO("verify step " << step);
    std::shuffle(ids.begin(), ids.end(), rng);
    const std::int64_t batch = step % 5 == 4 ? 2 : 3;
    std::vector<std::int32_t> lens(batch), drafts(batch * (Q - 1), 7777);
    for (std::int64_t b = 0; b < batch; ++b) {
      lens[b] = static_cast<std::int32_t>(rng() % Q);
      for (std::int32_t i = 0; i < lens[b]; ++i)
        drafts[b * (Q - 1) + i] = static_cast<std::int32_t>(rng() % V);
    }
    std::vector<std::uint8_t> rows = shadow.randomRows(rng, batch * Q * L); // [b][Q][L]
    auto pending = [&](std::int64_t b, std::int64_t j, std::int32_t l) {
      return rows.data() + ((b * Q + j) * L + l) * rowBytes;
    };
    // Host rows just past each history, before the step (must stay as they are).
    std::vector<std::vector<std::uint8_t>> past(batch);
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int32_t index = rt.requestIndex(ids[b]);
      const std::int64_t first = rt.controller().historyStart(index) + shadow.len(ids[b]);
      for (std::int32_t j = 0; j < Q; ++j)
        for (std::int32_t l = 0; l < L; ++l) {
          const std::uint8_t *raw = rt.storageForTesting().hostRow(l, first + j);
          past[b].insert(past[b].end(), raw, raw + rowBytes);
        }
    }
    // Every other step gives each layer's rows just before its attention.
    const bool perLayer = step % 2 == 1;
    rt.verifyBegin(ids.data(), batch, lens.data(), drafts.data(), perLayer ? nullptr : rows.data());
    CHECK(rt.verifying());
    // Selections: position q of lane b selects from its history and the
    // block's positions 0 .. q; positions past the block get junk, which
    // the runtime must ignore.
    std::vector<std::int32_t> sel(G * batch * perLane);
    std::uint64_t unionRows = 0, positionRows = 0;
    for (std::int32_t g = 0; g < L / G; ++g) {
      for (std::int64_t b = 0; b < batch; ++b) {
        const std::int64_t len = shadow.len(ids[b]);
        std::set<std::int32_t> lanes;
        for (std::int32_t q = 0; q < Q; ++q) {
          std::set<std::int32_t> position;
          for (std::int32_t k = 0; k < K; ++k) {
            std::int32_t &id = sel[(g * batch + b) * perLane + q * K + k];
            if (q > lens[b]) {
              id = 100000 + k;
              continue;
            }
            id = rng() % 6 == 0
                     ? -1
                     : static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(len + q + 1));
            if (id >= 0 && id < len && rt.controller().slotOf(g, rt.requestIndex(ids[b]), id) < 0 &&
                position.insert(id).second)
              lanes.insert(id);
          }
          positionRows += G * position.size();
        }
        unionRows += G * lanes.size();
      }
      rt.selectGroup(g, sel.data() + g * batch * perLane);
    }
    std::vector<bf16_t> queries(L * batch * qPerLane), out(L * batch * oPerLane);
    dhs::test::fillRandom(rng, queries.data(), queries.size());
    for (std::int32_t l = 0; l < L; ++l) {
      if (perLayer) {
        std::vector<std::uint8_t> layerRows(batch * Q * rowBytes);
        for (std::int64_t p = 0; p < batch * Q; ++p)
          std::memcpy(layerRows.data() + p * rowBytes, pending(p / Q, p % Q, l), rowBytes);
        rt.verifyWriteRows(l, layerRows.data());
      }
      rt.attendLayer(l, queries.data() + l * batch * qPerLane, out.data() + l * batch * oPerLane);
    }
    // The oracle over the shadow's rows and the pending ones.
    for (std::int32_t l = 0; l < L; ++l) {
      std::vector<std::int32_t> oracleSel(sel.begin() + (l / G) * batch * perLane,
                                          sel.begin() + (l / G + 1) * batch * perLane);
      for (std::int64_t b = 0; b < batch; ++b)
        for (std::int64_t i = (lens[b] + 1) * K; i < perLane; ++i)
          oracleSel[b * perLane + i] = -1;
      const std::vector<bf16_t> want = dhs::test::oracleLayer(
          shape, batch, oracleSel.data(), queries.data() + l * batch * qPerLane,
          [&](std::int64_t b, std::int32_t r) -> const void * {
            const std::int64_t len = shadow.len(ids[b]);
            return r < len ? shadow.row(ids[b], l, r) : pending(b, r - len, l);
          });
      for (std::int64_t b = 0; b < batch; ++b)
        for (std::int64_t e = 0; e < (lens[b] + 1) * H * 512; ++e)
          REQUIRE(out[l * batch * oPerLane + b * oPerLane + e] == want[b * oPerLane + e]);
    }
    // Greedy acceptance: the target agrees with most drafts.
    std::vector<float> target(batch * Q * V);
    std::vector<std::int32_t> wantAccepted(batch), wantNext(batch);
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int32_t j = 0; j < Q; ++j) {
        float *row = target.data() + (b * Q + j) * V;
        for (std::int32_t t = 0; t < V; ++t)
          row[t] = static_cast<float>(rng() % 1000) / 100.0f;
        if (j < lens[b] && rng() % 10 < 7)
          row[drafts[b * (Q - 1) + j]] = 11.0f;
      }
      std::int32_t n = 0;
      while (n < lens[b] && argmaxOf(target.data() + (b * Q + n) * V, V) == drafts[b * (Q - 1) + n])
        ++n;
      wantAccepted[b] = n;
      wantNext[b] = argmaxOf(target.data() + (b * Q + n) * V, V);
    }
    std::vector<std::int32_t> accepted(batch, -5), tokens(batch * Q, -5);
    rt.verifyAccept(AcceptRule::Greedy, V, target.data(), nullptr, 99, accepted.data(),
                    tokens.data());
    CHECK_FALSE(rt.verifying());
    CHECK_FALSE(rt.inStep());
    CHECK(accepted == wantAccepted);
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::uint64_t id = ids[b];
      const std::int32_t n = accepted[b];
      someAccepted = someAccepted || n > 0;
      someRejected = someRejected || n < lens[b];
      for (std::int32_t i = 0; i < Q; ++i)
        CHECK(tokens[b * Q + i] == (i < n ? drafts[b * (Q - 1) + i] : i == n ? wantNext[b] : -1));
      // The commit: the last accepted token and the accepted drafts.
      const std::int64_t before = shadow.len(id);
      for (std::int32_t j = 0; j <= n; ++j)
        for (std::int32_t l = 0; l < L; ++l) {
          auto &layer = shadow.rows[id][static_cast<std::size_t>(l)];
          layer.insert(layer.end(), pending(b, j, l), pending(b, j, l) + rowBytes);
        }
      REQUIRE(rt.historyLen(id) == before + n + 1);
      for (std::int32_t j = 0; j <= n; ++j)
        for (std::int32_t l = 0; l < L; ++l)
          REQUIRE(std::memcmp(rt.hostRow(id, l, before + j).data(), pending(b, j, l), rowBytes) ==
                  0);
      // The rejected positions never reached the host store.
      const std::int64_t first = rt.controller().historyStart(rt.requestIndex(id)) + before;
      for (std::int32_t j = n + 1; j < Q; ++j)
        for (std::int32_t l = 0; l < L; ++l)
          REQUIRE(std::memcmp(rt.storageForTesting().hostRow(l, first + j),
                              past[b].data() + (j * L + l) * rowBytes, rowBytes) == 0);
      expected.blocks += 1;
      expected.drafted += lens[b];
      expected.accepted += n;
      expected.emitted += n + 1;
      for (std::int32_t i = 0; i < lens[b]; ++i) {
        ++expected.draftedAt[i];
        expected.acceptedAt[i] += i < n;
      }
    }
    expected.verifySteps += 1;
    expected.hostRowsRead += unionRows;
    expected.hostRowsSelectedMissing += positionRows;
    const SpecStats &s = rt.specStats();
    CHECK(s.hostRowsRead == expected.hostRowsRead);
    CHECK(s.hostRowsSelectedMissing == expected.hostRowsSelectedMissing);
  }
  CHECK(someAccepted);
  CHECK(someRejected);
  rt.checkInvariants();
  const SpecStats &s = rt.specStats();
  CHECK(s.verifySteps == expected.verifySteps);
  CHECK(s.blocks == expected.blocks);
  CHECK(s.drafted == expected.drafted);
  CHECK(s.accepted == expected.accepted);
  CHECK(s.emitted == expected.emitted);
  CHECK(s.draftedAt == expected.draftedAt);
  CHECK(s.acceptedAt == expected.acceptedAt);
  CHECK(s.meanAcceptedLength() ==
        Approx(static_cast<double>(expected.emitted) / static_cast<double>(expected.blocks)));
  CHECK(s.hostRowsRead > 0);
  CHECK(s.hostRowsRead <= s.hostRowsSelectedMissing);
  // Per request, summing to the whole.
  SpecStats sum;
  for (std::uint64_t id : ids)
    sum += rt.specStats(id);
  CHECK(sum.blocks == s.blocks);
  CHECK(sum.emitted == s.emitted);
  CHECK(sum.hostRowsRead == s.hostRowsRead);
  CHECK(sum.hostRowsSelectedMissing == s.hostRowsSelectedMissing);
  rt.finish(ids[0]);
  CHECK_THROWS_AS(rt.specStats(ids[0]), UnknownRequestError);
}

TEST_CASE("verify steps: rejection sampling accepts what the host rule gives for the request's "
          "seed",
          "[verify]") {
  DHS_SEEDED_RNG(rng, 4200);
  const std::int32_t B = 2, Q = 3, K = 4, V = 40;
  dhs::test::TempDir dir;
  dir.write("manifest.json", dhs::test::stepManifest(B, Q, 1, K));
  RuntimeConfig config = dhs::test::testConfig(2, 1, BackendKind::Cpu, 0, 4, 4096);
  config.hbmSlots = 64;
  Runtime rt(config);
  rt.loadStep(dir.path());
  Shadow shadow(2);
  const std::uint64_t ids[2] = {5, 9};
  for (std::uint64_t id : ids)
    dhs::test::admitRandom(rt, shadow, rng, id, 20, 100);
  for (int step = 0; step < 6; ++step) {
    const std::int32_t lens[2] = {static_cast<std::int32_t>(rng() % Q), Q - 1};
    std::vector<std::int32_t> drafts(B * (Q - 1));
    for (std::int32_t &x : drafts)
      x = static_cast<std::int32_t>(rng() % V);
    std::vector<std::uint8_t> rows = shadow.randomRows(rng, B * Q * 2);
    std::vector<float> p(B * Q * V), q(B * (Q - 1) * V);
    for (std::int32_t i = 0; i < B * Q; ++i)
      randomDistribution(rng, p.data() + i * V, V);
    for (std::int32_t i = 0; i < B * (Q - 1); ++i)
      randomDistribution(rng, q.data() + i * V, V);
    const std::int64_t lengths[2] = {rt.historyLen(ids[0]), rt.historyLen(ids[1])};
    rt.verifyBegin(ids, B, lens, drafts.data(), rows.data());
    std::vector<std::int32_t> sel(B * Q * K, -1);
    for (std::int32_t g = 0; g < 2; ++g)
      rt.selectGroup(g, sel.data());
    std::vector<bf16_t> queries(B * Q * 576), out(B * Q * 512);
    for (std::int32_t l = 0; l < 2; ++l)
      rt.attendLayer(l, queries.data(), out.data());
    std::vector<std::int32_t> accepted(B), tokens(B * Q);
    rt.verifyAccept(AcceptRule::RejectionSampling, V, p.data(), q.data(), 1234 + step,
                    accepted.data(), tokens.data());
    // The host rule with the runtime's seeds; drafts past a block are -1.
    std::vector<std::int32_t> padded(drafts);
    for (std::int32_t b = 0; b < B; ++b)
      for (std::int32_t i = lens[b]; i < Q - 1; ++i)
        padded[b * (Q - 1) + i] = -1;
    const std::uint64_t seeds[2] = {acceptSeed(1234 + step, ids[0], lengths[0]),
                                    acceptSeed(1234 + step, ids[1], lengths[1])};
    AcceptProblem problem;
    problem.rule = AcceptRule::RejectionSampling;
    problem.batch = B;
    problem.gamma = Q - 1;
    problem.vocab = V;
    problem.drafts = padded.data();
    problem.target = p.data();
    problem.draftProbs = q.data();
    problem.seeds = seeds;
    std::int32_t wantAccepted[2], wantNext[2];
    acceptOnHost(problem, wantAccepted, wantNext);
    for (std::int32_t b = 0; b < B; ++b) {
      INFO("step " << step << ", lane " << b);
      CHECK(accepted[b] == wantAccepted[b]);
      CHECK(accepted[b] <= lens[b]);
      CHECK(tokens[b * Q + accepted[b]] == wantNext[b]);
      CHECK(rt.historyLen(ids[b]) == lengths[b] + accepted[b] + 1);
    }
  }
}

TEST_CASE("C API: verify errors change nothing, and the next step runs", "[verify][capi]") {
  DHS_SEEDED_RNG(rng, 4300);
  dhs::test::TempDir dir;
  dir.write("manifest.json", dhs::test::stepManifest(2, 3, 1, 4)); // B = 2, Q = 3
  dhs_runtime_config c = dhs::test::smallCApiConfig();
  dhs_runtime *rt = nullptr;
  REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
  REQUIRE(dhs_runtime_load_step(rt, dir.path().c_str()) == DHS_OK);
  const std::int32_t V = 16, Q = 3;
  std::vector<bf16_t> prefill(2 * 10 * 576);
  dhs::test::fillRandom(rng, prefill.data(), prefill.size());
  REQUIRE(dhs_request_admit(rt, 1, 10, 50, prefill.data()) == DHS_OK);
  REQUIRE(dhs_request_admit(rt, 2, 10, 50, prefill.data()) == DHS_OK);
  REQUIRE(dhs_request_admit(rt, 3, 10, 50, prefill.data()) == DHS_OK);
  REQUIRE(dhs_request_finish(rt, 3) == DHS_OK);
  const std::uint64_t ids[2] = {1, 2};
  std::int32_t lens[2] = {2, 1};
  std::int32_t drafts[4] = {3, 4, 5, -9};
  std::vector<bf16_t> rows(2 * Q * 2 * 576);
  dhs::test::fillRandom(rng, rows.data(), rows.size());
  std::vector<std::int32_t> sel(2 * Q * 4, -1);
  std::vector<bf16_t> q(2 * Q * 576), out(2 * Q * 512);
  std::vector<float> p(2 * Q * V, 1.0f / V), qd(2 * (Q - 1) * V, 1.0f / V);
  std::int32_t accepted[2], tokens[2 * Q];
  auto lengthOf = [&](std::uint64_t id) {
    std::int64_t n = -1;
    REQUIRE(dhs_request_length(rt, id, &n) == DHS_OK);
    return n;
  };
  // What a failed verify step must leave as it was: the residency and step
  // statistics, the tiers' use, the speculation statistics.
  dhs_stats before;
  REQUIRE(dhs_runtime_get_stats(rt, &before) == DHS_OK);
  auto unchanged = [&] {
    CHECK(lengthOf(1) == 10);
    CHECK(lengthOf(2) == 10);
    CHECK(dhs_verify_accept(rt, DHS_ACCEPT_GREEDY, V, p.data(), nullptr, 1, accepted, tokens) ==
          DHS_ERROR_STATE);
    CHECK(dhs_runtime_check(rt) == DHS_OK);
    dhs_stats now;
    REQUIRE(dhs_runtime_get_stats(rt, &now) == DHS_OK);
    CHECK(now.steps == before.steps);
    CHECK(now.total_selected == before.total_selected);
    CHECK(now.total_fetched == before.total_fetched);
    CHECK(now.total_promoted == before.total_promoted);
    CHECK(now.total_evicted == before.total_evicted);
    CHECK(now.hbm_bytes_used == before.hbm_bytes_used);
    CHECK(now.host_bytes_used == before.host_bytes_used);
    CHECK(now.optional_used_slots == before.optional_used_slots);
    dhs_spec_stats spec;
    REQUIRE(dhs_runtime_get_spec_stats(rt, &spec) == DHS_OK);
    CHECK(spec.verify_steps == 0);
    CHECK(spec.drafted == 0);
    CHECK(spec.emitted == 0);
    CHECK(spec.host_rows_read == 0);
  };
  auto selectAndAttend = [&] {
    for (std::int32_t g = 0; g < 2; ++g)
      REQUIRE(dhs_step_select(rt, g, sel.data(), DHS_MEMORY_HOST) == DHS_OK);
    for (std::int32_t l = 0; l < 2; ++l)
      REQUIRE(dhs_step_attend(rt, l, q.data(), out.data(), DHS_MEMORY_HOST) == DHS_OK);
  };
  auto begin = [&] { return dhs_verify_begin(rt, ids, 2, lens, drafts, rows.data()); };

  SECTION("accept without a verify step") { unchanged(); }
  SECTION("draft lengths outside 0 .. Q-1") {
    lens[1] = 3;
    CHECK(begin() == DHS_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(std::string(dhs_last_error()),
               Catch::Contains("request 2's block has 3 drafts; a block holds 0 to 2"));
    lens[1] = -1;
    CHECK(begin() == DHS_ERROR_INVALID_ARGUMENT);
    lens[1] = 1;
    unchanged();
  }
  SECTION("unknown or finished requests") {
    const std::uint64_t unknown[2] = {1, 7}, finished[2] = {3, 2};
    CHECK(dhs_verify_begin(rt, unknown, 2, lens, drafts, rows.data()) == DHS_ERROR_UNKNOWN_REQUEST);
    CHECK(dhs_verify_begin(rt, finished, 2, lens, drafts, rows.data()) ==
          DHS_ERROR_UNKNOWN_REQUEST);
    unchanged();
  }
  SECTION("a block that would pass the request's maximum context") {
    REQUIRE(dhs_request_admit(rt, 4, 10, 12, prefill.data()) == DHS_OK);
    const std::uint64_t full[2] = {1, 4};
    lens[1] = 2; // 10 rows + a block of 3 positions > 12
    CHECK(dhs_verify_begin(rt, full, 2, lens, drafts, rows.data()) == DHS_ERROR_OUT_OF_MEMORY);
    CHECK_THAT(std::string(dhs_last_error()),
               Catch::Contains("request 4's block of 3 positions after its 10 rows would pass its "
                               "maximum context of 12 rows"));
    lens[1] = 1; // 10 + 2 fits
    REQUIRE(dhs_verify_begin(rt, full, 2, lens, drafts, rows.data()) == DHS_OK);
    REQUIRE(dhs_step_abort(rt) == DHS_OK);
    REQUIRE(dhs_request_finish(rt, 4) == DHS_OK);
    unchanged();
  }
  SECTION("a step in progress, or end step during a verify step") {
    REQUIRE(dhs_step_begin(rt, ids, 2) == DHS_OK);
    CHECK(begin() == DHS_ERROR_STATE);
    REQUIRE(dhs_step_abort(rt) == DHS_OK);
    REQUIRE(begin() == DHS_OK);
    selectAndAttend();
    CHECK(dhs_step_end(rt) == DHS_ERROR_STATE);
    REQUIRE(dhs_step_abort(rt) == DHS_OK);
    unchanged();
  }
  SECTION("a row id outside the history and the positions up to its own") {
    REQUIRE(begin() == DHS_OK);
    sel[4] = 11; // lane 0, position 1 may select rows 0 .. 11 (history 10 + positions 0, 1)
    CHECK(dhs_step_select(rt, 0, sel.data(), DHS_MEMORY_HOST) == DHS_OK);
    REQUIRE(dhs_step_abort(rt) == DHS_OK);
    REQUIRE(begin() == DHS_OK);
    sel[4] = 12;
    CHECK(dhs_step_select(rt, 0, sel.data(), DHS_MEMORY_HOST) == DHS_ERROR_OUT_OF_RANGE);
    CHECK_THAT(std::string(dhs_last_error()),
               Catch::Contains("row id 12 at [lane 0, query 1, k 0] of layer group 0 (verify "
                               "step) is outside request 1's history (length 10)"));
    CHECK(dhs_step_attend(rt, 0, q.data(), out.data(), DHS_MEMORY_HOST) == DHS_ERROR_STATE);
    sel[4] = -1;
    unchanged();
  }
  SECTION("rows given layer by layer: each once, before the layer's attention") {
    std::vector<bf16_t> layerRows(2 * Q * 576);
    auto beginWithout = [&] {
      REQUIRE(dhs_verify_begin(rt, ids, 2, lens, drafts, nullptr) == DHS_OK);
      for (std::int32_t g = 0; g < 2; ++g)
        REQUIRE(dhs_step_select(rt, g, sel.data(), DHS_MEMORY_HOST) == DHS_OK);
    };
    beginWithout();
    CHECK(dhs_step_attend(rt, 0, q.data(), out.data(), DHS_MEMORY_HOST) == DHS_ERROR_STATE);
    CHECK_THAT(std::string(dhs_last_error()), Catch::Contains("has no pending rows yet"));
    unchanged();
    beginWithout();
    REQUIRE(dhs_verify_write_rows(rt, 0, layerRows.data()) == DHS_OK);
    CHECK(dhs_verify_write_rows(rt, 0, layerRows.data()) == DHS_ERROR_STATE);
    unchanged();
    beginWithout();
    CHECK(dhs_verify_write_rows(rt, 2, layerRows.data()) == DHS_ERROR_OUT_OF_RANGE);
    unchanged();
    beginWithout();
    CHECK(dhs_verify_write_rows(rt, 1, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
    unchanged();
    REQUIRE(begin() == DHS_OK);
    CHECK(dhs_verify_write_rows(rt, 1, layerRows.data()) == DHS_ERROR_STATE); // given at begin
    unchanged();
    CHECK(dhs_verify_write_rows(rt, 0, layerRows.data()) == DHS_ERROR_STATE); // no verify step
  }
  SECTION("bad probabilities, draft tokens or rules abandon the verify step") {
    auto failsAccept = [&](std::int32_t rule, const char *message) {
      REQUIRE(begin() == DHS_OK);
      selectAndAttend();
      CHECK(dhs_verify_accept(rt, rule, V, p.data(), qd.data(), 1, accepted, tokens) ==
            DHS_ERROR_INVALID_ARGUMENT);
      CHECK_THAT(std::string(dhs_last_error()), Catch::Contains(message));
      unchanged();
    };
    p[1] = -0.25f;
    failsAccept(DHS_ACCEPT_REJECTION_SAMPLING,
                "position 0 of lane 0 (request 1): entry 1 is -0.25");
    p[1] = std::nanf("");
    failsAccept(DHS_ACCEPT_GREEDY, "entry 1 is nan");
    p[1] = 0.5f; // finite and positive, but the row sums to 1.4375
    failsAccept(DHS_ACCEPT_REJECTION_SAMPLING,
                "the target's probabilities at position 0 of lane 0 (request 1): it sums to "
                "1.4375, not 1");
    p[1] = 1.0f / V;
    qd[V + 3] = 0.5f; // lane 0, position 1
    failsAccept(DHS_ACCEPT_REJECTION_SAMPLING, "draft probabilities at position 1 of lane 0");
    qd[V + 3] = 1.0f / V;
    drafts[2] = V; // lane 1's draft 0
    failsAccept(DHS_ACCEPT_GREEDY, "draft token 16 at position 0 of lane 1 (request 2) is "
                                   "outside the vocabulary [0, 16)");
    drafts[2] = 5;
    drafts[0] = -1; // lane 0's draft 0
    failsAccept(DHS_ACCEPT_REJECTION_SAMPLING,
                "draft token -1 at position 0 of lane 0 (request 1) is outside the vocabulary");
    drafts[0] = 3;
    failsAccept(7, "rule 7 is not an acceptance rule");
    REQUIRE(begin() == DHS_OK);
    selectAndAttend();
    CHECK(dhs_verify_accept(rt, DHS_ACCEPT_REJECTION_SAMPLING, V, p.data(), nullptr, 1, accepted,
                            tokens) == DHS_ERROR_INVALID_ARGUMENT);
    unchanged();
  }
  SECTION("the wait for the device's work fails at accept: the verify step is abandoned") {
    if (!faults::kCompiledIn) {
      WARN("SKIPPED: built with DHS_FAULT_INJECTION=OFF");
    } else {
      REQUIRE(begin() == DHS_OK);
      selectAndAttend();
      faults::arm(Fault::Wait);
      CHECK(dhs_verify_accept(rt, DHS_ACCEPT_GREEDY, V, p.data(), nullptr, 1, accepted, tokens) ==
            DHS_ERROR_DEVICE);
      CHECK(faults::failed(Fault::Wait) == 1);
      faults::disarmAll();
      CHECK_THAT(std::string(dhs_last_error()), Catch::Contains("(injected fault)"));
      unchanged();
    }
  }
  // Whatever failed, a verify step runs now and commits.
  INFO(dhs_last_error());
  REQUIRE(begin() == DHS_OK);
  selectAndAttend();
  REQUIRE(dhs_verify_accept(rt, DHS_ACCEPT_REJECTION_SAMPLING, V, p.data(), qd.data(), 3, accepted,
                            tokens) == DHS_OK);
  CHECK(lengthOf(1) == 10 + accepted[0] + 1);
  CHECK(lengthOf(2) == 10 + accepted[1] + 1);
  dhs_spec_stats stats;
  REQUIRE(dhs_runtime_get_spec_stats(rt, &stats) == DHS_OK);
  CHECK(stats.verify_steps == 1);
  CHECK(stats.drafted == 3);
  CHECK(stats.emitted == static_cast<std::uint64_t>(accepted[0] + accepted[1] + 2));
  REQUIRE(dhs_request_spec_stats(rt, 2, &stats) == DHS_OK);
  CHECK(stats.verify_steps == 1);
  CHECK(stats.drafted == 1);
  CHECK(stats.drafted_at[0] == 1);
  CHECK(stats.mean_accepted_length == Approx(accepted[1] + 1));
  CHECK(dhs_request_spec_stats(rt, 3, &stats) == DHS_ERROR_UNKNOWN_REQUEST);
  CHECK(dhs_runtime_check(rt) == DHS_OK);
  dhs_runtime_destroy(rt);
}

TEST_CASE("C API: verify needs a step of several positions", "[verify][capi]") {
  dhs::test::TempDir dir;
  dir.write("manifest.json", dhs::test::stepManifest(2, 1, 1, 4));
  dhs_runtime_config c = dhs::test::smallCApiConfig();
  dhs_runtime *rt = nullptr;
  REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
  REQUIRE(dhs_runtime_load_step(rt, dir.path().c_str()) == DHS_OK);
  std::vector<bf16_t> prefill(2 * 4 * 576);
  REQUIRE(dhs_request_admit(rt, 1, 4, 10, prefill.data()) == DHS_OK);
  const std::uint64_t id = 1;
  const std::int32_t len = 0;
  CHECK(dhs_verify_begin(rt, &id, 1, &len, nullptr, prefill.data()) == DHS_ERROR_STATE);
  CHECK_THAT(std::string(dhs_last_error()), Catch::Contains("Q = gamma + 1 >= 2"));
  dhs_runtime_destroy(rt);
}
