//===- DraftRingRuntimeTest.cpp - The runtime's per-request draft rings ---===//
//
// Runtime::appendDraft / readDraft against a simple model (a map from logical
// position to the token last written there, and what each ring slot holds),
// on fresh random rows and positions: wrap-around, overwrite, rewinding,
// reads longer than the compiled step's read window, and every error. The
// draft traffic must leave the residency controller, the HBM pools and the
// host store exactly as they were, on the CPU and on CUDA (the generated
// ring_index + copy_rows kernels of examples/draft_ring_step.mlir; without a
// GPU that case says so and skips). The C API's draft entry points are
// checked for their error codes.
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtil.h"

#include "runtime/Runtime.h"
#include "runtime/capi/dhs_runtime.h"
#include "runtime/capi/dhs_runtime.hpp"
#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"
#include "runtime/cuda/CudaDriver.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <random>

using namespace dhs::runtime;

namespace {

/// The compiled example draft-ring step ("" when the compiler was not built).
std::string draftStepDir() {
  const std::string dir = dhs::test::compiledStepsDir() + "/draft_ring";
  return std::filesystem::exists(dir + "/manifest.json") ? dir : std::string();
}

/// The model of one request's draft rings: token bytes by position, and the
/// position each slot holds.
struct RingModel {
  std::int64_t window = 0;
  std::map<std::int64_t, std::vector<std::uint8_t>> tokens; // [L * row] per position
  std::vector<std::int64_t> slots;

  explicit RingModel(std::int64_t w) : window(w), slots(static_cast<std::size_t>(w), -1) {}
  void append(std::int64_t position, std::int64_t count, const std::uint8_t *rows,
              std::size_t tokenBytes) {
    for (std::int64_t t = 0; t < count; ++t) {
      tokens[position + t].assign(rows + t * tokenBytes, rows + (t + 1) * tokenBytes);
      slots[static_cast<std::size_t>((position + t) % window)] = position + t;
    }
  }
  /// True if positions end-count .. end-1 all hold what was last written.
  bool readable(std::int64_t end, std::int64_t count) const {
    for (std::int64_t p = end - count; p < end; ++p)
      if (p < 0 || slots[static_cast<std::size_t>(p % window)] != p)
        return false;
    return true;
  }
  std::vector<std::uint8_t> expected(std::int64_t end, std::int64_t count) const {
    std::vector<std::uint8_t> out;
    for (std::int64_t p = end - count; p < end; ++p) {
      const auto &t = tokens.at(p);
      out.insert(out.end(), t.begin(), t.end());
    }
    return out;
  }
};

/// Everything draft traffic must not change: the controller's occupancy and
/// statistics, every live row's slot, the HBM pools and the host rows.
struct TargetState {
  std::vector<std::int64_t> values;
  std::vector<std::vector<std::uint8_t>> hbm;
  std::vector<std::vector<std::uint8_t>> rows;

  static TargetState of(Runtime &rt, const std::vector<std::uint64_t> &ids) {
    TargetState s;
    const ResidencyController &c = rt.controller();
    for (std::int32_t g = 0; g < rt.groups(); ++g) {
      GroupOccupancy o = c.occupancy(g);
      s.values.insert(s.values.end(),
                      {o.slots, o.used, o.newest, o.ring, o.hot, o.optionalBudget, o.optionalUsed});
    }
    RuntimeStats st = rt.stats();
    s.values.insert(s.values.end(),
                    {st.admittedRequests, st.hbmBytesUsed, st.hostBytesUsed, st.optionalBudgetSlots,
                     st.optionalUsedSlots, static_cast<std::int64_t>(st.steps)});
    TierStorage &tiers = rt.storageForTesting();
    const TierLayout &layout = tiers.layout();
    for (std::int32_t l = 0; l < layout.layers; l += layout.layersPerPool) {
      const std::uint8_t *pool = tiers.hbmSnapshot(l);
      s.hbm.emplace_back(pool,
                         pool + static_cast<std::size_t>(layout.hbmSlots) *
                                    static_cast<std::size_t>(layout.tokenBytes(layout.poolOf(l))));
    }
    for (std::uint64_t id : ids) {
      const std::int64_t len = rt.historyLen(id);
      s.values.push_back(len);
      for (std::int32_t l = 0; l < rt.layers(); ++l)
        for (std::int64_t r = 0; r < len; ++r)
          s.rows.push_back(rt.hostRow(id, l, r));
    }
    // Every live request's slot map (by controller index).
    for (std::int32_t index = 0; index < c.config().maxRequests; ++index) {
      if (!c.live(index))
        continue;
      s.values.push_back(index);
      for (std::int32_t g = 0; g < rt.groups(); ++g)
        for (std::int64_t r = 0; r < c.historyLen(index); ++r)
          s.values.push_back(c.slotOf(g, index, r));
    }
    return s;
  }
  bool operator==(const TargetState &o) const {
    return values == o.values && hbm == o.hbm && rows == o.rows;
  }
};

/// Random rows [count][L][row_bytes].
std::vector<std::uint8_t> randomRows(std::mt19937_64 &rng, std::int64_t count,
                                     std::size_t tokenBytes) {
  std::vector<std::uint8_t> rows(static_cast<std::size_t>(count) * tokenBytes);
  for (auto &b : rows)
    b = static_cast<std::uint8_t>(rng());
  return rows;
}

/// A random draft operation sequence over `ids`, applied to every runtime in
/// `runtimes` and the models; reads are compared with the model (and so
/// with each other).
void driveDrafts(std::mt19937_64 &rng, const std::vector<Runtime *> &runtimes,
                 const std::vector<std::uint64_t> &ids, std::int64_t window, std::size_t tokenBytes,
                 int operations) {
  std::map<std::uint64_t, RingModel> models;
  std::map<std::uint64_t, std::int64_t> next;
  for (std::uint64_t id : ids) {
    models.emplace(id, RingModel(window));
    next[id] = 0;
  }
  int reads = 0, refused = 0, wraps = 0;
  for (int op = 0; op < operations; ++op) {
    const std::uint64_t id = ids[rng() % ids.size()];
    RingModel &model = models.at(id);
    if (rng() % 2 == 0) {
      // Mostly the next block; sometimes rewind (rejected drafts) or jump.
      std::int64_t position = next[id];
      const int kind = static_cast<int>(rng() % 8);
      if (kind == 0)
        position = std::max<std::int64_t>(0, position - static_cast<std::int64_t>(rng() % 9));
      else if (kind == 1)
        position += static_cast<std::int64_t>(rng() % (3 * window));
      const std::int64_t count =
          rng() % 4 == 0
              ? window
              : 1 + static_cast<std::int64_t>(rng() % std::min<std::int64_t>(window, 12));
      std::vector<std::uint8_t> rows = randomRows(rng, count, tokenBytes);
      for (Runtime *rt : runtimes)
        rt->appendDraft(id, position, count, rows.data());
      model.append(position, count, rows.data(), tokenBytes);
      wraps += (position % window) + count > window;
      next[id] = position + count;
    } else {
      const std::int64_t end =
          std::max<std::int64_t>(1, next[id] - static_cast<std::int64_t>(rng() % 4));
      const std::int64_t count = 1 + static_cast<std::int64_t>(rng() % window);
      std::vector<std::uint8_t> out(static_cast<std::size_t>(count) * tokenBytes, 0xCD);
      if (model.readable(end, count)) {
        for (Runtime *rt : runtimes) {
          std::fill(out.begin(), out.end(), 0xCD);
          rt->readDraft(id, end, count, out.data());
          REQUIRE(out == model.expected(end, count));
        }
        ++reads;
      } else {
        for (Runtime *rt : runtimes)
          REQUIRE_THROWS_AS(rt->readDraft(id, end, count, out.data()), OutOfRangeError);
        ++refused;
      }
    }
  }
  INFO("reads " << reads << ", refused " << refused << ", wrapping appends " << wraps);
  CHECK(reads > operations / 8);
  CHECK(refused > 0);
  CHECK(wraps > 0);
}

/// A CPU runtime over the small test step: 3 layers in groups of 2.
std::unique_ptr<Runtime> cpuRuntime(const dhs::test::TempDir &dir, std::int32_t draftWindow,
                                    std::int32_t layers = 3, std::int32_t groupSize = 2) {
  RuntimeConfig config =
      dhs::test::testConfig(layers, groupSize, BackendKind::Cpu, draftWindow, /*floor=*/16, 4096);
  auto rt = std::make_unique<Runtime>(config);
  dir.write("manifest.json", dhs::test::stepManifest(2, 1, 2, 8, 512));
  rt->loadStep(dir.path());
  return rt;
}

/// Admits `ids` with random prefill of `history` rows.
void admitAll(std::mt19937_64 &rng, const std::vector<Runtime *> &runtimes,
              const std::vector<std::uint64_t> &ids, std::int64_t history) {
  const Runtime &first = *runtimes.front();
  std::vector<std::uint8_t> prefill =
      randomRows(rng, history * first.layers(), static_cast<std::size_t>(first.rowBytes()));
  for (Runtime *rt : runtimes)
    for (std::uint64_t id : ids)
      rt->admit(id, history, history + 64, prefill.data());
}

} // namespace

TEST_CASE("draft rings follow the ring model and leave the target alone, on every backend",
          "[runtime][draft][backends]") {
  // On CUDA only the generated ring_index + copy_rows kernels of
  // examples/draft_ring_step.mlir touch the rings; the CPU checks that step
  // and copies with the modulo arithmetic itself.
  DHS_FOR_EACH_BACKEND(backend);
  const std::string ring = draftStepDir();
  if (ring.empty() && backend == BackendKind::Cuda) {
    WARN("SKIPPED: " << dhs::test::compiledStepsDir()
                     << "/draft_ring was not compiled (built without the compiler)");
    return;
  }
  DHS_SEEDED_RNG(rng, 4100);
  // The example ring: 64 tokens of 1 x 1152 bytes (mla_bf16, one layer per group).
  const std::int32_t W = 64;
  Runtime rt(dhs::test::testConfig(2, 1, backend, W, /*floor=*/32, 4096));
  rt.loadStep(dhs::test::stepsDir() + "/naive");
  const std::vector<std::uint64_t> ids = {3, 1, 4, 15, 9};
  admitAll(rng, {&rt}, ids, 70);
  const std::size_t tokenBytes = static_cast<std::size_t>(rt.layers() * rt.rowBytes());
  if (backend == BackendKind::Cuda) {
    std::vector<std::uint8_t> rows(tokenBytes);
    CHECK_THROWS_WITH(rt.appendDraft(3, 0, 1, rows.data()),
                      Catch::Contains("load a compiled draft-ring step first"));
  }
  if (!ring.empty()) {
    rt.loadDraftStep(ring); // checked (and unused) by the CPU tiers
    CHECK(rt.draftStepLoaded());
  }
  // A step, so that hot rows and statistics exist.
  {
    const ProblemShape &s = rt.shape();
    std::vector<std::int32_t> rows(static_cast<std::size_t>(rt.groups() * 2 * s.queries * s.topk));
    for (std::size_t i = 0; i < rows.size(); ++i)
      rows[i] = static_cast<std::int32_t>((i * 7 + rng() % 70) % 70);
    std::vector<bf16_t> queries(
        static_cast<std::size_t>(rt.layers() * 2 * s.queries * s.heads * s.qkDim));
    dhs::test::fillRandom(rng, queries.data(), queries.size());
    std::vector<bf16_t> out(
        static_cast<std::size_t>(rt.layers() * 2 * s.queries * s.heads * s.vDim));
    rt.step(ids.data(), 2, rows.data(), queries.data(), out.data());
  }
  const TargetState before = TargetState::of(rt, ids);
  driveDrafts(rng, {&rt}, ids, W, tokenBytes, 1000);
  // Every ring whole.
  for (std::uint64_t id : ids) {
    std::vector<std::uint8_t> rows = randomRows(rng, W, tokenBytes), out(W * tokenBytes, 1);
    rt.appendDraft(id, 5000 + id, W, rows.data());
    rt.readDraft(id, 5000 + W + id, W, out.data());
    CHECK(out == rows);
  }
  CHECK(TargetState::of(rt, ids) == before);
  rt.checkInvariants();

  SECTION("finish frees the rings; a new admission starts empty") {
    std::vector<std::uint8_t> rows = randomRows(rng, 3, tokenBytes), out(3 * tokenBytes);
    rt.appendDraft(1, 100, 3, rows.data());
    rt.finish(1);
    CHECK_THROWS_AS(rt.readDraft(1, 103, 3, out.data()), UnknownRequestError);
    CHECK_THROWS_AS(rt.appendDraft(1, 0, 1, rows.data()), UnknownRequestError);
    std::vector<std::uint8_t> prefill(static_cast<std::size_t>(rt.layers() * rt.rowBytes()));
    rt.admit(1, 1, 64, prefill.data());
    CHECK_THROWS_WITH(rt.readDraft(1, 103, 3, out.data()),
                      Catch::Contains("position 100 was never written"));
  }
  SECTION("a full window wraps exactly once; older positions are gone") {
    std::vector<std::uint8_t> a = randomRows(rng, W, tokenBytes),
                              b = randomRows(rng, 5, tokenBytes);
    std::vector<std::uint8_t> out(static_cast<std::size_t>(W) * tokenBytes);
    rt.appendDraft(4, 10000, W, a.data());
    rt.appendDraft(4, 10000 + W, 5, b.data()); // overwrites 10000 .. 10004
    rt.readDraft(4, 10000 + W + 5, W, out.data());
    CHECK(std::equal(a.begin() + 5 * tokenBytes, a.end(), out.begin()));
    CHECK(std::equal(b.begin(), b.end(), out.begin() + (W - 5) * tokenBytes));
    CHECK_THROWS_WITH(rt.readDraft(4, 10005, 1, out.data()),
                      Catch::Contains("position 10004 is not in the draft ring") &&
                          Catch::Contains("now holds position 10068"));
  }
}

TEST_CASE("draft rings: the errors", "[runtime][draft]") {
  dhs::test::TempDir dir;
  const std::int32_t W = 8;
  auto rt = cpuRuntime(dir, W, 2, 1);
  std::vector<std::uint8_t> prefill(static_cast<std::size_t>(2 * rt->rowBytes() * 4), 1);
  rt->admit(5, 4, 32, prefill.data());
  const std::size_t tokenBytes = static_cast<std::size_t>(2 * rt->rowBytes());
  std::vector<std::uint8_t> rows((W + 1) * tokenBytes, 7), out((W + 1) * tokenBytes);
  const TargetState before = TargetState::of(*rt, {5});

  CHECK_THROWS_AS(rt->appendDraft(6, 0, 1, rows.data()), UnknownRequestError);
  CHECK_THROWS_AS(rt->readDraft(6, 1, 1, out.data()), UnknownRequestError);
  CHECK_THROWS_WITH(rt->appendDraft(5, 0, W + 1, rows.data()),
                    Catch::Contains("9 tokens; a draft ring holds 1 to 8"));
  CHECK_THROWS_AS(rt->appendDraft(5, 0, W + 1, rows.data()), InputError);
  CHECK_THROWS_AS(rt->appendDraft(5, 0, 0, rows.data()), InputError);
  CHECK_THROWS_AS(rt->readDraft(5, 9, W + 1, out.data()), InputError);
  CHECK_THROWS_AS(rt->appendDraft(5, 0, 1, nullptr), InputError);
  CHECK_THROWS_AS(rt->readDraft(5, 1, 1, nullptr), InputError);
  CHECK_THROWS_WITH(rt->appendDraft(5, -1, 1, rows.data()), Catch::Contains("negative position"));
  CHECK_THROWS_WITH(rt->readDraft(5, 1, 1, out.data()),
                    Catch::Contains("position 0 was never written"));
  rt->appendDraft(5, 0, 3, rows.data());
  CHECK_THROWS_WITH(rt->readDraft(5, 3, 4, out.data()),
                    Catch::Contains("start at a negative position"));
  CHECK_NOTHROW(rt->readDraft(5, 3, 3, out.data()));
  CHECK_THROWS_WITH(rt->readDraft(5, 4, 2, out.data()),
                    Catch::Contains("position 3 was never written"));
  // During a step: refused.
  std::uint64_t id = 5;
  rt->beginStep(&id, 1);
  CHECK_THROWS_AS(rt->appendDraft(5, 3, 1, rows.data()), StateError);
  CHECK_THROWS_AS(rt->readDraft(5, 3, 1, out.data()), StateError);
  rt->abortStep();
  CHECK(TargetState::of(*rt, {5}) == before);

  // No draft rings configured.
  dhs::test::TempDir dir0;
  auto none = cpuRuntime(dir0, 0, 1, 1);
  none->admit(1, 0, 16, nullptr);
  CHECK_THROWS_WITH(none->appendDraft(1, 0, 1, rows.data()), Catch::Contains("draft_window is 0"));

  // Draft-ring steps that do not fit.
  CHECK_THROWS_WITH(rt->loadDraftStep(dhs::test::stepsDir() + "/naive"),
                    Catch::Contains("is not a draft-ring step"));
  const std::string ring = draftStepDir();
  if (ring.empty()) {
    WARN("SKIPPED the draft-ring step checks: the compiler was not built");
    return;
  }
  CHECK_THROWS_WITH(rt->loadDraftStep(ring),
                    Catch::Contains("has rings of 64 tokens x 1152 bytes") &&
                        Catch::Contains("8 tokens (draft_window) x 1 layers x 1152 bytes"));
  CHECK_THROWS_WITH(none->loadDraftStep(ring), Catch::Contains("draft_window is 0"));
  CHECK_FALSE(rt->draftStepLoaded());
}

TEST_CASE("a draft write that fails part-way leaves its positions unreadable, not mixed",
          "[runtime][draft][faults]") {
  if (!faults::kCompiledIn) {
    WARN("SKIPPED: fault injection is not compiled in (DHS_FAULT_INJECTION)");
    return;
  }
  // Two layers in two groups: a ring per group, written one after the
  // other. The second group's write fails after the first's landed.
  DHS_SEEDED_RNG(rng, 3400);
  dhs::test::TempDir dir;
  const std::int32_t W = 8;
  auto rt = cpuRuntime(dir, W, 2, 1);
  REQUIRE(rt->groups() == 2);
  std::vector<std::uint8_t> prefill(static_cast<std::size_t>(2 * rt->rowBytes() * 4), 1);
  rt->admit(5, 4, 32, prefill.data());
  const std::size_t tokenBytes = static_cast<std::size_t>(2 * rt->rowBytes());
  const std::vector<std::uint8_t> first =
      randomRows(rng, 4 * 2, static_cast<std::size_t>(rt->rowBytes()));
  const std::vector<std::uint8_t> second =
      randomRows(rng, 3 * 2, static_cast<std::size_t>(rt->rowBytes()));
  rt->appendDraft(5, 0, 4, first.data()); // positions 0 .. 3
  faults::arm(Fault::RingWrite, /*skip=*/1);
  CHECK_THROWS_WITH(rt->appendDraft(5, 2, 3, second.data()),
                    Catch::Contains("layer group 1") && Catch::Contains("(injected fault)"));
  faults::disarmAll();
  std::vector<std::uint8_t> out(4 * tokenBytes);
  // Positions 0 and 1 were not written again; 2 .. 4 refuse.
  rt->readDraft(5, 2, 2, out.data());
  CHECK(std::equal(first.begin(), first.begin() + 2 * tokenBytes, out.begin()));
  CHECK_THROWS_WITH(rt->readDraft(5, 3, 1, out.data()),
                    Catch::Contains("position 2 was never written"));
  CHECK_THROWS_WITH(rt->readDraft(5, 5, 1, out.data()),
                    Catch::Contains("position 4 was never written"));
  // Written again, they read back whole.
  rt->appendDraft(5, 2, 3, second.data());
  rt->readDraft(5, 5, 3, out.data());
  CHECK(std::equal(second.begin(), second.end(), out.begin()));
}

TEST_CASE("C API: draft rings and their error codes", "[capi][draft]") {
  dhs::test::TempDir dir;
  dir.write("manifest.json", dhs::test::stepManifest(2, 1, 2, 8, 512));
  // One group of 2 layers, the step's 512 slots, draft rings of 6 tokens.
  dhs_runtime_config c = dhs::test::smallCApiConfig();
  c.layers_per_group = 2;
  c.hbm_slots = -1;
  c.host_rows = 1024;
  c.draft_window = 6;
  c.hot_floor = 8;
  std::vector<std::uint8_t> rows(7 * 2 * 1152), out(7 * 2 * 1152);
  for (std::size_t i = 0; i < rows.size(); ++i)
    rows[i] = static_cast<std::uint8_t>(i * 7 + 3);

  CHECK(dhs_draft_append(nullptr, 1, 0, 1, rows.data()) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_draft_read(nullptr, 1, 1, 1, out.data()) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_runtime_load_draft_step(nullptr, "x") == DHS_ERROR_INVALID_HANDLE);
  dhs::api::Runtime rt(c);
  CHECK(dhs_draft_append(rt.get(), 1, 0, 1, rows.data()) == DHS_ERROR_NOT_LOADED);
  CHECK(dhs_runtime_load_draft_step(rt.get(), dir.path().c_str()) == DHS_ERROR_NOT_LOADED);
  rt.loadStep(dir.path());
  rt.admit(1, 0, 32, nullptr);

  CHECK(dhs_draft_append(rt.get(), 2, 0, 1, rows.data()) == DHS_ERROR_UNKNOWN_REQUEST);
  CHECK_THAT(std::string(dhs_last_error()),
             Catch::Contains("dhs_draft_append") && Catch::Contains("request 2 is not admitted"));
  CHECK(dhs_draft_read(rt.get(), 2, 1, 1, out.data()) == DHS_ERROR_UNKNOWN_REQUEST);
  CHECK(dhs_draft_append(rt.get(), 1, 0, 7, rows.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(dhs_last_error()), Catch::Contains("a draft ring holds 1 to 6"));
  CHECK(dhs_draft_read(rt.get(), 1, 7, 7, out.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_draft_append(rt.get(), 1, 0, 0, rows.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_draft_append(rt.get(), 1, 0, 1, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_draft_append(rt.get(), 1, -3, 1, rows.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_draft_read(rt.get(), 1, 1, 1, out.data()) == DHS_ERROR_OUT_OF_RANGE);
  CHECK_THAT(std::string(dhs_last_error()), Catch::Contains("position 0 was never written"));
  CHECK(dhs_runtime_load_draft_step(rt.get(), nullptr) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_runtime_load_draft_step(rt.get(), "/nonexistent/draft") == DHS_ERROR_STEP);
  CHECK(dhs_runtime_load_draft_step(rt.get(), dir.path().c_str()) == DHS_ERROR_STEP);
  CHECK_THAT(std::string(dhs_last_error()), Catch::Contains("is not a draft-ring step"));

  // A round trip through the C++ wrapper: 7 tokens into a ring of 6 wrap.
  rt.appendDraft(1, 4, 6, rows.data());
  rt.appendDraft(1, 10, 1, rows.data() + 6 * 2 * 1152);
  rt.readDraft(1, 11, 6, out.data());
  CHECK(std::equal(rows.begin() + 2 * 1152, rows.begin() + 7 * 2 * 1152, out.begin()));
  CHECK(dhs_draft_read(rt.get(), 1, 5, 1, out.data()) == DHS_ERROR_OUT_OF_RANGE);
  CHECK_THAT(std::string(dhs_last_error()), Catch::Contains("now holds position 10"));
  try {
    rt.readDraft(1, 12, 1, out.data());
    FAIL("reading a position never written succeeded");
  } catch (const dhs::api::Error &error) {
    CHECK(error.status() == DHS_ERROR_OUT_OF_RANGE);
  }
  rt.finish(1);
  CHECK(dhs_draft_read(rt.get(), 1, 11, 1, out.data()) == DHS_ERROR_UNKNOWN_REQUEST);
}
