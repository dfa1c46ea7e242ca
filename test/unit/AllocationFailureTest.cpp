//===- AllocationFailureTest.cpp - Updates that fail for want of memory ---===//
//
// RELIABILITY.md: a host allocation that failed inside a table update (an
// append between the controller's record and the row writes, a step's end
// and its row copies, the commit of a verify step, an admission, a finish)
// gave DHS_ERROR_OUT_OF_MEMORY but left the tables half-updated. Here each
// such call runs on a CPU runtime with each of its allocations failing in
// turn (FailingAllocation.h): every failed call must leave the runtime
// exactly as a twin that never made it (residency, replacement order,
// counts, histories, host rows, statistics) and pass the full invariant
// check, and both must then serve steps with the oracle's outputs.
//
//===----------------------------------------------------------------------===//

#include "ControllerState.h"
#include "FailingAllocation.h"
#include "RuntimeTestUtil.h"

#include "runtime/Runtime.h"
#include "runtime/capi/dhs_runtime.h"
#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <memory>

using namespace dhs::runtime;
using dhs::test::Shadow;

namespace {

/// A verify step's inputs (verifyBlock).
struct VerifyBlock {
  std::vector<std::int32_t> lens, drafts, selections;
  std::vector<std::uint8_t> rows; // [batch][Q][L] pending KV
  std::vector<bf16_t> queries;
  std::vector<float> target;
};

/// A step's inputs (TwinRuntimes::stepInputs).
struct StepInputs {
  std::vector<std::int32_t> rows;
  std::vector<bf16_t> queries;
  std::size_t outputs = 0;
};

/// Two CPU runtimes on one small step (B = 3, Q = 3, 4 layers in 2 groups,
/// 64 slots: optional rows fill the pool) that make the same calls, except
/// that `a` makes each call of interest under every failing allocation
/// first (whole). The invariant checker runs after each call, not inside
/// it, unless `checks` (then inside too, and a full check every second
/// step).
struct TwinRuntimes {
  static constexpr std::int32_t L = 4, G = 2, B = 3, Q = 3, H = 2, K = 8, V = 32;
  dhs::test::TempDir dir;
  std::unique_ptr<Runtime> a, b;
  Shadow shadow{L};
  // (One seed for every TwinRuntimes of a run: the skip loops replay one
  // sequence of calls.)
  std::mt19937_64 rng{dhs::test::freshSeed() + 29};

  TwinRuntimes(ResidencyPolicy policy, Replacement replacement, bool checks = false) {
    dir.write("manifest.json", dhs::test::stepManifest(B, Q, H, K));
    RuntimeConfig config = dhs::test::testConfig(L, 2, BackendKind::Cpu, /*draftWindow=*/Q,
                                                 /*floor=*/2, /*hostRows=*/2048);
    config.hbmSlots = 64;
    config.newestWindow = 4;
    config.policy = policy;
    config.replacement = replacement;
    config.checkInvariants = checks;
    config.fullCheckInterval = 2;
    a = std::make_unique<Runtime>(config);
    b = std::make_unique<Runtime>(config);
    a->loadStep(dir.path());
    b->loadStep(dir.path());
  }

  std::vector<Runtime *> both() { return {a.get(), b.get()}; }

  /// `a` is as `b`, and both hold the shadow's histories.
  void expectSame() {
    REQUIRE(dhs::test::stateDifference(a->controller(), b->controller()) == "");
    REQUIRE(a->inStep() == b->inStep());
    REQUIRE(a->verifying() == b->verifying());
    const RuntimeStats sa = a->stats(), sb = b->stats();
    REQUIRE(sa.steps == sb.steps);
    REQUIRE(sa.admittedRequests == static_cast<std::int32_t>(shadow.rows.size()));
    REQUIRE(sa.hbmBytesUsed == sb.hbmBytesUsed);
    REQUIRE(sa.hostBytesUsed == sb.hostBytesUsed);
    expectSameSpec(a->specStats(), b->specStats());
    for (const auto &[id, layers] : shadow.rows) {
      REQUIRE(a->requestIndex(id) == b->requestIndex(id));
      REQUIRE(a->historyLen(id) == shadow.len(id));
      expectSameSpec(a->specStats(id), b->specStats(id));
      for (std::int32_t l = 0; l < L; ++l)
        for (std::int64_t r = 0; r < shadow.len(id); ++r)
          REQUIRE(std::memcmp(a->hostRow(id, l, r).data(), shadow.row(id, l, r),
                              static_cast<std::size_t>(shadow.rowBytes)) == 0);
    }
    a->checkInvariants();
  }

  static void expectSameSpec(const SpecStats &x, const SpecStats &y) {
    REQUIRE(x.verifySteps == y.verifySteps);
    REQUIRE(x.blocks == y.blocks);
    REQUIRE(x.drafted == y.drafted);
    REQUIRE(x.accepted == y.accepted);
    REQUIRE(x.emitted == y.emitted);
    REQUIRE(x.draftedAt == y.draftedAt);
    REQUIRE(x.acceptedAt == y.acceptedAt);
    REQUIRE(x.hostRowsRead == y.hostRowsRead);
    REQUIRE(x.hostRowsSelectedMissing == y.hostRowsSelectedMissing);
  }

  /// `call` on `a` with each of its allocations failing in turn (each
  /// failed call must leave `a` as `b`), then whole on `b`; `done()` then
  /// records what the call did in the shadow. Returns the failed calls.
  std::uint64_t whole(const std::function<void(Runtime &)> &call,
                      const std::function<void()> &done) {
    const std::uint64_t failures =
        dhs::test::failEachAllocation([&] { call(*a); }, [&] { expectSame(); });
    call(*b);
    done();
    expectSame();
    b->checkInvariants();
    return failures;
  }

  /// A step's random inputs over `ids` (B = 3): selections of each group
  /// [G, B, Q, K] and queries [L, B, Q, H, 576], and the outputs' size.
  StepInputs stepInputs(const std::vector<std::uint64_t> &ids) {
    StepInputs in;
    in.rows = dhs::test::randomSelections(rng, shadow, ids, G, a->shape());
    in.queries.resize(static_cast<std::size_t>(L * 3 * Q * H * 576));
    dhs::test::fillRandom(rng, in.queries.data(), in.queries.size());
    in.outputs = static_cast<std::size_t>(L * 3 * Q * H * 512);
    return in;
  }

  /// A random token's rows [L][row_bytes] for `id`, and what appending it
  /// does to the shadow.
  std::vector<std::uint8_t> token() { return shadow.randomRows(rng, L); }
  void appended(std::uint64_t id, const std::uint8_t *rows) {
    for (std::int32_t l = 0; l < L; ++l) {
      auto &layer = shadow.rows[id][static_cast<std::size_t>(l)];
      layer.insert(layer.end(), rows + l * shadow.rowBytes, rows + (l + 1) * shadow.rowBytes);
    }
  }

  /// A verify block of `ids`: random draft lengths and tokens, pending rows,
  /// selections of each position's history and the block up to itself, and
  /// a target that accepts most drafts (greedy).
  VerifyBlock verifyBlock(const std::vector<std::uint64_t> &ids) {
    VerifyBlock v;
    const std::int64_t batch = static_cast<std::int64_t>(ids.size()), perLane = Q * K;
    v.lens.resize(ids.size());
    v.drafts.assign(ids.size() * (Q - 1), 0);
    for (std::size_t b = 0; b < ids.size(); ++b) {
      v.lens[b] = 1 + static_cast<std::int32_t>(rng() % (Q - 1));
      for (std::int32_t i = 0; i < v.lens[b]; ++i)
        v.drafts[b * (Q - 1) + static_cast<std::size_t>(i)] = static_cast<std::int32_t>(rng() % V);
    }
    v.rows = shadow.randomRows(rng, batch * Q * L);
    v.selections.assign(static_cast<std::size_t>(G * batch * perLane), -1);
    for (std::int32_t g = 0; g < G; ++g)
      for (std::int64_t b = 0; b < batch; ++b)
        for (std::int32_t q = 0; q <= v.lens[static_cast<std::size_t>(b)]; ++q)
          for (std::int32_t k = 0; k < K; ++k)
            v.selections[static_cast<std::size_t>((g * batch + b) * perLane + q * K + k)] =
                rng() % 6 == 0
                    ? -1
                    : static_cast<std::int32_t>(
                          rng() % static_cast<std::uint64_t>(
                                      shadow.len(ids[static_cast<std::size_t>(b)]) + q + 1));
    v.queries.resize(static_cast<std::size_t>(L * batch * Q * H * 576));
    dhs::test::fillRandom(rng, v.queries.data(), v.queries.size());
    v.target.resize(static_cast<std::size_t>(batch * Q * V));
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int32_t j = 0; j < Q; ++j) {
        float *row = v.target.data() + (b * Q + j) * V;
        for (std::int32_t t = 0; t < V; ++t)
          row[t] = static_cast<float>(rng() % 1000) / 100.0f;
        // (The first lane's first draft always: some request commits
        // several tokens, whatever the seed.)
        if (j < v.lens[static_cast<std::size_t>(b)] && ((b == 0 && j == 0) || rng() % 4 != 0))
          row[v.drafts[static_cast<std::size_t>(b * (Q - 1) + j)]] = 11.0f;
      }
    return v;
  }

  /// A whole verify step of `ids` over `v` on `rt`: attention outputs into
  /// `out`, acceptance into `accepted` and `tokens`.
  static void verify(Runtime &rt, const std::vector<std::uint64_t> &ids, const VerifyBlock &v,
                     std::vector<bf16_t> &out, std::vector<std::int32_t> &accepted,
                     std::vector<std::int32_t> &tokens) {
    const std::int64_t batch = static_cast<std::int64_t>(ids.size());
    rt.verifyBegin(ids.data(), batch, v.lens.data(), v.drafts.data(), v.rows.data());
    for (std::int32_t g = 0; g < G; ++g)
      rt.selectGroup(g, v.selections.data() + g * batch * Q * K);
    for (std::int32_t l = 0; l < L; ++l)
      rt.attendLayer(l, v.queries.data() + l * batch * Q * H * 576,
                     out.data() + l * batch * Q * H * 512);
    rt.verifyAccept(AcceptRule::Greedy, V, v.target.data(), nullptr, 5, accepted.data(),
                    tokens.data());
  }

  /// What committing `accepted` of `v` does to the shadow.
  void committed(const std::vector<std::uint64_t> &ids, const VerifyBlock &v,
                 const std::vector<std::int32_t> &accepted) {
    for (std::size_t b = 0; b < ids.size(); ++b)
      for (std::int32_t j = 0; j <= accepted[b]; ++j)
        appended(ids[b],
                 v.rows.data() + ((static_cast<std::int64_t>(b) * Q + j) * L) * shadow.rowBytes);
  }
};

} // namespace

TEST_CASE("runtime calls whose allocations fail change nothing: append, append batch, step, "
          "verify accept, admit, finish",
          "[faults][alloc-failure]") {
  const auto [policy, replacement] =
      GENERATE(table<ResidencyPolicy, Replacement>({{ResidencyPolicy::Adaptive, Replacement::Clock},
                                                    {ResidencyPolicy::Adaptive, Replacement::Lru},
                                                    {ResidencyPolicy::Fixed, Replacement::Lru2}}));
  INFO(abi::name(policy) << " " << abi::name(replacement));
  INFO("DHS_TEST_SEED=" << dhs::test::freshSeed());
  TwinRuntimes t(policy, replacement);
  using Twin = TwinRuntimes;
  std::vector<std::uint64_t> ids = {11, 12, 13};
  for (std::uint64_t id : ids)
    dhs::test::admitRandom(t.both(), t.shadow, t.rng, id,
                           20 + 7 * static_cast<std::int64_t>(id % 3), 400);
  // Steps and appends until optional rows fill the pool.
  for (int i = 0; i < 10; ++i) {
    dhs::test::stepAndCompare(t.both(), t.shadow, t.rng, ids);
    dhs::test::appendRandom(t.both(), t.shadow, t.rng, ids[static_cast<std::size_t>(i) % 3]);
  }
  std::uint64_t failures = 0;
  SECTION("append") {
    for (std::uint64_t id : ids) {
      const std::vector<std::uint8_t> token = t.token();
      failures += t.whole([&](Runtime &rt) { rt.append(id, token.data()); },
                          [&] { t.appended(id, token.data()); });
    }
    CHECK(failures > 0);
  }
  SECTION("append batch") {
    const std::vector<std::uint8_t> tokens = t.shadow.randomRows(t.rng, 3 * Twin::L);
    failures += t.whole([&](Runtime &rt) { rt.appendBatch(ids.data(), 3, tokens.data()); },
                        [&] {
                          for (std::size_t i = 0; i < 3; ++i)
                            t.appended(ids[i], tokens.data() + i * Twin::L * t.shadow.rowBytes);
                        });
    CHECK(failures > 0);
  }
  SECTION("step") {
    const StepInputs in = t.stepInputs(ids);
    std::vector<bf16_t> outA(in.outputs), outB(in.outputs);
    failures += t.whole(
        [&](Runtime &rt) {
          rt.step(ids.data(), 3, in.rows.data(), in.queries.data(),
                  (&rt == t.a.get() ? outA : outB).data());
        },
        [] {});
    REQUIRE(outA == outB);
    CHECK(failures > 0);
  }
  SECTION("step in parts") {
    // What an engine calls layer by layer. A part that fails leaves the
    // step open as it was (the engine may retry it; this one aborts), or,
    // failing in the end once the step's work is taken, has abandoned it.
    const StepInputs in = t.stepInputs(ids);
    std::vector<bf16_t> outA(in.outputs), outB(in.outputs);
    failures += t.whole(
        [&](Runtime &rt) {
          bf16_t *out = (&rt == t.a.get() ? outA : outB).data();
          try {
            rt.beginStep(ids.data(), 3);
            for (std::int32_t g = 0; g < Twin::G; ++g)
              rt.selectGroup(g, in.rows.data() + g * 3 * Twin::Q * Twin::K);
            for (std::int32_t l = 0; l < Twin::L; ++l)
              rt.attendLayer(l, in.queries.data() + l * 3 * Twin::Q * Twin::H * 576,
                             out + l * 3 * Twin::Q * Twin::H * 512);
            rt.endStep();
          } catch (...) {
            if (rt.inStep())
              rt.abortStep();
            throw;
          }
        },
        [] {});
    REQUIRE(outA == outB);
    CHECK(failures > 0);
  }
  SECTION("verify accept") {
    const VerifyBlock v = t.verifyBlock(ids);
    const std::size_t outputs = static_cast<std::size_t>(Twin::L * 3 * Twin::Q * Twin::H * 512);
    std::vector<bf16_t> outA(outputs), outB(outputs);
    std::vector<std::int32_t> acceptedA(3), acceptedB(3), tokensA(3 * Twin::Q),
        tokensB(3 * Twin::Q);
    failures += t.whole(
        [&](Runtime &rt) {
          const bool first = &rt == t.a.get();
          Twin::verify(rt, ids, v, first ? outA : outB, first ? acceptedA : acceptedB,
                       first ? tokensA : tokensB);
        },
        [&] { t.committed(ids, v, acceptedB); });
    REQUIRE(outA == outB);
    REQUIRE(acceptedA == acceptedB);
    REQUIRE(tokensA == tokensB);
    // (Several tokens committed for a request, one after the other.)
    CHECK(*std::max_element(acceptedA.begin(), acceptedA.end()) > 0);
    CHECK(failures > 0);
  }
  SECTION("admit, releasing optional rows") {
    const std::int64_t optionalBefore = t.a->stats().optionalUsedSlots;
    const std::vector<std::uint8_t> prefill = t.shadow.randomRows(t.rng, Twin::L * 30);
    failures += t.whole([&](Runtime &rt) { rt.admit(21, 30, 100, prefill.data()); },
                        [&] {
                          auto &layers = t.shadow.rows[21];
                          layers.resize(Twin::L);
                          for (std::int32_t l = 0; l < Twin::L; ++l)
                            layers[static_cast<std::size_t>(l)].assign(
                                prefill.begin() + l * 30 * t.shadow.rowBytes,
                                prefill.begin() + (l + 1) * 30 * t.shadow.rowBytes);
                        });
    if (policy == ResidencyPolicy::Adaptive)
      CHECK(t.a->stats().optionalUsedSlots < optionalBefore);
    ids.push_back(21);
    CHECK(failures > 0);
  }
  SECTION("admit refused for want of ring memory") {
    // (The rings are allocated before the controller admits: a refusal has
    // not released optional rows for the request.)
    if (!faults::kCompiledIn) {
      WARN("SKIPPED: fault injection is not compiled in (DHS_FAULT_INJECTION)");
      return;
    }
    const std::int64_t optionalBefore = t.a->stats().optionalUsedSlots;
    const std::vector<std::uint8_t> prefill = t.shadow.randomRows(t.rng, Twin::L * 30);
    {
      ScopedFault rings(Fault::DeviceAlloc);
      REQUIRE_THROWS_AS(t.a->admit(21, 30, 100, prefill.data()), CapacityError);
    }
    t.expectSame();
    // Admitted, the request does take optional rows.
    for (Runtime *rt : t.both())
      rt->admit(21, 30, 100, prefill.data());
    if (policy == ResidencyPolicy::Adaptive)
      CHECK(t.a->stats().optionalUsedSlots < optionalBefore);
    REQUIRE(dhs::test::stateDifference(t.a->controller(), t.b->controller()) == "");
    t.shadow.rows.erase(21);
    for (Runtime *rt : t.both())
      rt->finish(21);
  }
  SECTION("finish") {
    // (It allocates nothing: the host range's map node moves to the free
    // ranges; before, a new node was allocated after the used one went.)
    failures +=
        t.whole([&](Runtime &rt) { rt.finish(ids[1]); }, [&] { t.shadow.rows.erase(ids[1]); });
    REQUIRE_FALSE(t.a->admitted(ids[1]));
    ids.erase(ids.begin() + 1);
  }
  // What the failed calls could have left behind shows in later steps (of
  // the step's B = 3 requests at most).
  const std::vector<std::uint64_t> batch(ids.end() - std::min<std::ptrdiff_t>(3, ids.size()),
                                         ids.end());
  for (int i = 0; i < 6; ++i) {
    dhs::test::appendRandom(t.both(), t.shadow, t.rng,
                            ids[static_cast<std::size_t>(i) % ids.size()]);
    dhs::test::stepAndCompare(t.both(), t.shadow, t.rng, batch);
  }
  t.expectSame();
}

TEST_CASE("C API: a verify step or an append that fails for want of memory is "
          "DHS_ERROR_OUT_OF_MEMORY and changes nothing",
          "[faults][alloc-failure][capi]") {
  DHS_SEEDED_RNG(rng, 4400);
  dhs::test::TempDir dir;
  dir.write("manifest.json", dhs::test::stepManifest(2, 3, 1, 4)); // B = 2, Q = 3
  dhs_runtime_config c = dhs::test::smallCApiConfig();
  c.check_invariants = 0; // (checked after each call)
  c.draft_window = 3;
  dhs_runtime *runtimes[2] = {nullptr, nullptr};
  for (dhs_runtime *&rt : runtimes) {
    REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
    REQUIRE(dhs_runtime_load_step(rt, dir.path().c_str()) == DHS_OK);
  }
  dhs_runtime *a = runtimes[0], *b = runtimes[1];
  const std::int32_t V = 16, Q = 3;
  std::vector<bf16_t> prefill(2 * 20 * 576);
  dhs::test::fillRandom(rng, prefill.data(), prefill.size());
  const std::uint64_t ids[2] = {1, 2};
  for (dhs_runtime *rt : runtimes)
    for (std::uint64_t id : ids)
      REQUIRE(dhs_request_admit(rt, id, 20, 60, prefill.data()) == DHS_OK);
  const auto expectSame = [&] {
    for (std::uint64_t id : ids) {
      std::int64_t na = -1, nb = -2;
      REQUIRE(dhs_request_length(a, id, &na) == DHS_OK);
      REQUIRE(dhs_request_length(b, id, &nb) == DHS_OK);
      REQUIRE(na == nb);
      dhs_spec_stats sa, sb;
      std::memset(&sa, 0, sizeof sa);
      std::memset(&sb, 0, sizeof sb);
      REQUIRE(dhs_request_spec_stats(a, id, &sa) == DHS_OK);
      REQUIRE(dhs_request_spec_stats(b, id, &sb) == DHS_OK);
      REQUIRE(std::memcmp(&sa, &sb, sizeof sa) == 0);
    }
    dhs_stats sa, sb;
    std::memset(&sa, 0, sizeof sa);
    std::memset(&sb, 0, sizeof sb);
    REQUIRE(dhs_runtime_get_stats(a, &sa) == DHS_OK);
    REQUIRE(dhs_runtime_get_stats(b, &sb) == DHS_OK);
    REQUIRE(std::memcmp(&sa, &sb, sizeof sa) == 0);
    REQUIRE(dhs_runtime_check(a) == DHS_OK);
  };
  // A status of DHS_ERROR_OUT_OF_MEMORY becomes std::bad_alloc for
  // failEachAllocation; any other error ends the case.
  const auto call = [](dhs_status status) {
    if (status == DHS_ERROR_OUT_OF_MEMORY)
      throw std::bad_alloc();
    if (status != DHS_OK)
      throw std::runtime_error(std::string(dhs_status_name(status)) + ": " + dhs_last_error());
  };
  // Verify steps (each request's block accepted whole: three tokens
  // committed each), then an append.
  const std::int32_t lens[2] = {2, 2}, drafts[4] = {3, 4, 5, 6};
  std::vector<bf16_t> rows(2 * Q * 2 * 576);
  dhs::test::fillRandom(rng, rows.data(), rows.size());
  std::vector<std::int32_t> sel(2 * 2 * Q * 4); // [group][lane][Q][K]
  for (std::size_t i = 0; i < sel.size(); ++i)
    sel[i] = static_cast<std::int32_t>(rng() % 20);
  std::vector<bf16_t> q(2 * 2 * Q * 576); // [layer][lane][Q][576]
  dhs::test::fillRandom(rng, q.data(), q.size());
  std::vector<float> p(2 * Q * V, 0.0f);
  for (std::int32_t lane = 0; lane < 2; ++lane)
    for (std::int32_t j = 0; j < Q; ++j)
      p[(lane * Q + j) * V + (j < 2 ? drafts[lane * 2 + j] : 9)] = 1.0f;
  std::uint64_t failures = 0;
  for (int round = 0; round < 2; ++round) {
    std::vector<bf16_t> outA(2 * 2 * Q * 512), outB(outA.size());
    std::int32_t acceptedA[2], acceptedB[2], tokensA[2 * Q], tokensB[2 * Q];
    const auto verify = [&](dhs_runtime *rt, bf16_t *out, std::int32_t *accepted,
                            std::int32_t *tokens) {
      call(dhs_verify_begin(rt, ids, 2, lens, drafts, rows.data()));
      for (std::int32_t g = 0; g < 2; ++g)
        call(dhs_step_select(rt, g, sel.data() + g * 2 * Q * 4, DHS_MEMORY_HOST));
      for (std::int32_t l = 0; l < 2; ++l)
        call(dhs_step_attend(rt, l, q.data() + l * 2 * Q * 576, out + l * 2 * Q * 512,
                             DHS_MEMORY_HOST));
      call(dhs_verify_accept(rt, DHS_ACCEPT_GREEDY, V, p.data(), nullptr, 1, accepted, tokens));
    };
    failures += dhs::test::failEachAllocation([&] { verify(a, outA.data(), acceptedA, tokensA); },
                                              expectSame);
    verify(b, outB.data(), acceptedB, tokensB);
    CHECK(acceptedA[0] == 2);
    CHECK(std::equal(acceptedA, acceptedA + 2, acceptedB));
    CHECK(std::equal(tokensA, tokensA + 2 * Q, tokensB));
    CHECK(outA == outB);
    expectSame();
  }
  std::vector<bf16_t> token(2 * 576);
  dhs::test::fillRandom(rng, token.data(), token.size());
  failures += dhs::test::failEachAllocation([&] { call(dhs_request_append(a, 2, token.data())); },
                                            expectSame);
  REQUIRE(dhs_request_append(b, 2, token.data()) == DHS_OK);
  expectSame();
  CHECK(failures > 0);
  // Both serve the same step.
  std::vector<bf16_t> outA(2 * 2 * Q * 512), outB(outA.size());
  REQUIRE(dhs_step_run(a, ids, 2, sel.data(), q.data(), outA.data(), DHS_MEMORY_HOST) == DHS_OK);
  REQUIRE(dhs_step_run(b, ids, 2, sel.data(), q.data(), outB.data(), DHS_MEMORY_HOST) == DHS_OK);
  CHECK(outA == outB);
  expectSame();
  for (dhs_runtime *rt : runtimes)
    dhs_runtime_destroy(rt);
}

TEST_CASE("a verify step whose copies into HBM fail commits whole or changes nothing, whatever "
          "allocation fails",
          "[faults][alloc-failure]") {
  if (!faults::kCompiledIn) {
    WARN("SKIPPED: fault injection is not compiled in (DHS_FAULT_INJECTION)");
    return;
  }
  // Copies into HBM failing keep each of the commit's batches for a retry
  // (their lists move out, and the commit's next token takes a spare list
  // made before the step ended). So an allocation that fails leaves the
  // verify step abandoned, nothing changed, or (failing inside a copy)
  // lets the commit finish whole, as the twin's without failures. Before
  // 2026-12-05 the commit's next token allocated its list, and a failure
  // there stopped the commit half-way (the runtime then refused every
  // call).
  INFO("DHS_TEST_SEED=" << dhs::test::freshSeed());
  using Twin = TwinRuntimes;
  const std::vector<std::uint64_t> ids = {11, 12, 13};
  std::uint64_t unchanged = 0, committed = 0;
  for (std::uint64_t skip = 0;; ++skip) {
    TwinRuntimes t(ResidencyPolicy::Adaptive, Replacement::Clock);
    for (std::uint64_t id : ids)
      dhs::test::admitRandom(t.both(), t.shadow, t.rng, id, 24, 400);
    const VerifyBlock v = t.verifyBlock(ids);
    std::vector<bf16_t> out(static_cast<std::size_t>(Twin::L * 3 * Twin::Q * Twin::H * 512));
    std::vector<std::int32_t> accepted(3), tokens(3 * Twin::Q);
    ScopedFault copies(Fault::Copy, 0, 1u << 30);
    bool threw = false, failed = false;
    {
      dhs::test::FailingAllocation failing(skip);
      try {
        Twin::verify(*t.a, ids, v, out, accepted, tokens);
      } catch (const std::bad_alloc &) {
        threw = true;
      } catch (const CapacityError &) {
        threw = true;
      }
      failed = failing.failed();
    }
    faults::disarmAll();
    if (!failed)
      break; // (no allocation of the call was left to fail)
    INFO("allocation " << skip << " failed");
    if (threw) {
      // Nothing committed: the histories and the residency are the twin's.
      ++unchanged;
      REQUIRE_FALSE(t.a->verifying());
      REQUIRE(dhs::test::stateDifference(t.a->controller(), t.b->controller()) == "");
      t.expectSame();
      continue;
    }
    // The commit is whole: the twin's verify step, without failures, makes
    // the same tables, and once the copies are retried the runtime serves.
    ++committed;
    std::vector<bf16_t> twinOut(out.size());
    std::vector<std::int32_t> twinAccepted(3), twinTokens(3 * Twin::Q);
    Twin::verify(*t.b, ids, v, twinOut, twinAccepted, twinTokens);
    REQUIRE(accepted == twinAccepted);
    REQUIRE(tokens == twinTokens);
    t.committed(ids, v, accepted);
    t.expectSame();
    dhs::test::stepAndCompare(*t.a, t.shadow, t.rng, ids);
  }
  CHECK(unchanged > 0);
  CHECK(committed > 0);
}

TEST_CASE("with the invariant checker on, a call whose allocation fails is made whole or changes "
          "nothing: a check that runs out of memory after the update is owed, not the call's "
          "failure",
          "[faults][alloc-failure]") {
  // The checks that follow an update (the copies, the controller's
  // consistency, the full check every second step) allocate. Before
  // 2026-12-05 a failure there failed a call that was made: an engine told
  // DHS_ERROR_OUT_OF_MEMORY for an append that happened would append again.
  // Each allocation of an append and of a step fails in turn, on a fresh
  // pair of runtimes each time.
  INFO("DHS_TEST_SEED=" << dhs::test::freshSeed());
  using Twin = TwinRuntimes;
  const std::vector<std::uint64_t> ids = {11, 12, 13};
  const auto call = GENERATE(as<std::string>{}, "append", "step");
  INFO(call);
  std::uint64_t unchanged = 0, made = 0;
  for (std::uint64_t skip = 0;; ++skip) {
    TwinRuntimes t(ResidencyPolicy::Adaptive, Replacement::Clock, /*checks=*/true);
    for (std::uint64_t id : ids)
      dhs::test::admitRandom(t.both(), t.shadow, t.rng, id, 24, 400);
    dhs::test::stepAndCompare(t.both(), t.shadow, t.rng, ids); // (the full check is due next)
    const std::vector<std::uint8_t> token = t.token();
    const StepInputs in = t.stepInputs(ids);
    std::vector<bf16_t> outA(in.outputs), outB(in.outputs);
    auto run = [&](Runtime &rt) {
      if (call == "append")
        rt.append(ids[0], token.data());
      else
        rt.step(ids.data(), 3, in.rows.data(), in.queries.data(),
                (&rt == t.a.get() ? outA : outB).data());
    };
    bool threw = false, failed = false;
    {
      dhs::test::FailingAllocation failing(skip);
      try {
        run(*t.a);
      } catch (const std::bad_alloc &) {
        threw = true;
      } catch (const CapacityError &) {
        threw = true;
      }
      failed = failing.failed();
    }
    if (!failed)
      break; // (no allocation of the call was left to fail)
    INFO("allocation " << skip << " failed");
    if (threw) {
      ++unchanged;
      t.expectSame();
      continue;
    }
    // Made whole, as on the twin.
    ++made;
    run(*t.b);
    if (call == "append")
      t.appended(ids[0], token.data());
    else
      REQUIRE(outA == outB);
    t.expectSame();
    dhs::test::stepAndCompare(t.both(), t.shadow, t.rng, ids);
  }
  CHECK(unchanged > 0);
  CHECK(made > 0);
}
