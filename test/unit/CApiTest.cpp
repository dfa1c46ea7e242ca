//===- CApiTest.cpp - The C API and its C++ wrapper -----------------------===//

#include "RuntimeTestUtil.h"

#include "runtime/capi/dhs_runtime.h"
#include "runtime/capi/dhs_runtime.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

using dhs::runtime::bf16_t;
using dhs::test::freshSeed;

namespace {

/// A CPU runtime config for the small test step: 2 layers in 2 groups, draft
/// rings of 2 tokens.
dhs_runtime_config smallConfig() {
  dhs_runtime_config c = dhs::test::smallCApiConfig();
  c.draft_window = 2;
  return c;
}

std::string lastError() { return dhs_last_error(); }

} // namespace

TEST_CASE("C API: creation and configuration errors", "[capi]") {
  dhs_runtime *rt = reinterpret_cast<dhs_runtime *>(0x1);
  CHECK(dhs_runtime_create(nullptr, &rt) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(rt == nullptr);
  CHECK_THAT(lastError(), Catch::Contains("dhs_runtime_create: null config"));
  dhs_runtime_config c = smallConfig();
  CHECK(dhs_runtime_create(&c, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
  // A config with one bad field, and what the error says.
  const struct {
    void (*spoil)(dhs_runtime_config &);
    const char *message;
  } bad[] = {
      {[](dhs_runtime_config &c) { c.struct_size = 12; }, "struct_size is 12"},
      {[](dhs_runtime_config &c) { c.policy = 7; }, "config.policy 7"},
      {[](dhs_runtime_config &c) { c.layers = 0; }, "layers is 0"},
      // (Counts of groups overflowed 32 bits on the way to a load.)
      {[](dhs_runtime_config &c) { c.layers = INT32_MAX; }, "it must be at most 65536"},
      {[](dhs_runtime_config &c) { c.backend = 9; }, "config.backend 9"},
      {[](dhs_runtime_config &c) { c.write_back_rows = -1; },
       "write_back_rows must not be negative"},
  };
  for (const auto &b : bad) {
    INFO(b.message);
    c = smallConfig();
    b.spoil(c);
    CHECK(dhs_runtime_create(&c, &rt) == DHS_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Catch::Contains(b.message));
  }
  c = smallConfig();
  REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
  CHECK(lastError().empty());
  dhs_runtime_destroy(rt);
  dhs_runtime_destroy(nullptr);     // fine
  dhs_runtime_config_init(nullptr); // fine
}

TEST_CASE("C API: null handles and a step not loaded", "[capi]") {
  dhs_step_shape shape;
  dhs_stats stats;
  std::uint64_t id = 1;
  std::int64_t length = 0;
  char text[64];
  CHECK(dhs_runtime_load_step(nullptr, "x") == DHS_ERROR_INVALID_HANDLE);
  CHECK_THAT(lastError(), Catch::Contains("dhs_runtime_load_step: null runtime handle"));
  CHECK(dhs_runtime_get_shape(nullptr, &shape) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_runtime_get_stats(nullptr, &stats) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_runtime_describe(nullptr, text, sizeof(text)) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_request_admit(nullptr, 1, 0, 10, nullptr) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_request_append(nullptr, 1, nullptr) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_request_finish(nullptr, 1) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_request_length(nullptr, 1, &length) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_step_run(nullptr, &id, 1, nullptr, nullptr, nullptr, DHS_MEMORY_HOST) ==
        DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_step_begin(nullptr, &id, 1) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_step_select(nullptr, 0, nullptr, DHS_MEMORY_HOST) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_step_attend(nullptr, 0, nullptr, nullptr, DHS_MEMORY_HOST) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_step_end(nullptr) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_step_abort(nullptr) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_runtime_check(nullptr) == DHS_ERROR_INVALID_HANDLE);
  double share = -1.0;
  CHECK(dhs_runtime_get_form_share(nullptr, 0, &share) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_runtime_set_stream(nullptr, nullptr) == DHS_ERROR_INVALID_HANDLE);

  dhs_runtime_config c = smallConfig();
  dhs_runtime *rt = nullptr;
  REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
  CHECK(dhs_runtime_get_shape(rt, &shape) == DHS_ERROR_NOT_LOADED);
  CHECK_THAT(lastError(), Catch::Contains("no step is loaded"));
  CHECK(dhs_request_admit(rt, 1, 0, 10, nullptr) == DHS_ERROR_NOT_LOADED);
  CHECK(dhs_request_append(rt, 1, text) == DHS_ERROR_NOT_LOADED);
  CHECK(dhs_request_finish(rt, 1) == DHS_ERROR_NOT_LOADED);
  CHECK(dhs_step_run(rt, &id, 1, nullptr, nullptr, nullptr, DHS_MEMORY_HOST) ==
        DHS_ERROR_NOT_LOADED);
  CHECK(dhs_step_begin(rt, &id, 1) == DHS_ERROR_NOT_LOADED);
  CHECK(dhs_runtime_check(rt) == DHS_ERROR_NOT_LOADED);
  CHECK(dhs_runtime_get_form_share(rt, 0, &share) == DHS_ERROR_NOT_LOADED);
  // Statistics and the description work without a step.
  CHECK(dhs_runtime_get_stats(rt, &stats) == DHS_OK);
  CHECK(stats.steps == 0);
  CHECK(dhs_runtime_describe(rt, text, sizeof(text)) == DHS_OK);
  CHECK(std::string(text) == "none (no step loaded)");
  CHECK(dhs_runtime_describe(rt, text, 0) == DHS_ERROR_INVALID_ARGUMENT);
  // Loading errors.
  CHECK(dhs_runtime_load_step(rt, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_runtime_load_step(rt, "/nonexistent/step") == DHS_ERROR_STEP);
  CHECK_THAT(lastError(), Catch::Contains("/nonexistent/step"));
  dhs::test::TempDir dir;
  dir.write("manifest.json", "{\"format\": \"something else\"}");
  CHECK(dhs_runtime_load_step(rt, dir.path().c_str()) == DHS_ERROR_STEP);
  CHECK_THAT(lastError(), Catch::Contains("unknown format"));
  dir.write("manifest.json", dhs::test::stepManifest(2, 1, 1, 4));
  CHECK(dhs_runtime_load_steps(rt, nullptr, 1) == DHS_ERROR_INVALID_ARGUMENT);
  const char *noDirectory[] = {nullptr};
  CHECK(dhs_runtime_load_steps(rt, noDirectory, 1) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("step directory 0 is null"));
  CHECK(dhs_runtime_set_cuda_graphs(rt, 1) == DHS_ERROR_NOT_LOADED);
  CHECK(dhs_runtime_set_stream(rt, nullptr) == DHS_ERROR_NOT_LOADED);
  const char *twice[] = {dir.path().c_str(), dir.path().c_str()};
  CHECK(dhs_runtime_load_steps(rt, twice, 2) == DHS_ERROR_STEP);
  CHECK_THAT(lastError(), Catch::Contains("two steps read layer 0"));
  REQUIRE(dhs_runtime_load_steps(rt, twice, 1) == DHS_OK);
  CHECK(dhs_runtime_load_step(rt, dir.path().c_str()) == DHS_ERROR_STATE);
  CHECK(dhs_runtime_set_cuda_graphs(rt, 1) == DHS_ERROR_DEVICE);
  CHECK_THAT(lastError(), Catch::Contains("need the CUDA backend"));
  CHECK(dhs_runtime_set_cuda_graphs(rt, 0) == DHS_OK);
  // No streams on the CPU: none is the default, a stream is refused.
  int notAStream = 0;
  CHECK(dhs_runtime_set_stream(rt, nullptr) == DHS_OK);
  CHECK(dhs_runtime_set_stream(rt, &notAStream) == DHS_ERROR_STATE);
  CHECK_THAT(lastError(), Catch::Contains("the CPU backend runs no CUDA streams"));
  REQUIRE(dhs_runtime_get_shape(rt, &shape) == DHS_OK);
  CHECK(shape.batch == 2);
  CHECK(shape.topk == 4);
  CHECK(shape.row_bytes == 1152);
  CHECK(shape.layers == 2);
  CHECK(shape.groups == 2);
  CHECK(shape.hbm_slots == 64);
  // A step of one form: its layers' launches all run (share 1).
  CHECK(dhs_runtime_get_form_share(rt, 1, &share) == DHS_OK);
  CHECK(share == 1.0);
  CHECK(dhs_runtime_get_form_share(rt, 2, &share) == DHS_ERROR_OUT_OF_RANGE);
  CHECK_THAT(lastError(), Catch::Contains("form share: layer 2 does not exist (2 layers)"));
  CHECK(dhs_runtime_get_form_share(rt, 0, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
  dhs_runtime_destroy(rt);

  SECTION("the CUDA backend without a GPU, or memory that cannot be had") {
    c = smallConfig();
    c.backend = DHS_BACKEND_CUDA;
    REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
    dhs_status status = dhs_runtime_load_step(rt, dir.path().c_str());
    // No PTX in the test step: either CUDA is missing or the step is.
    CHECK((status == DHS_ERROR_DEVICE || status == DHS_ERROR_STEP));
    dhs_runtime_destroy(rt);
    c = smallConfig();
    c.host_rows = std::int64_t(1) << 36;            // 2^36 rows x 1152 B per layer: refused
    REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK); // before any allocation
    CHECK(dhs_runtime_load_step(rt, dir.path().c_str()) == DHS_ERROR_OUT_OF_MEMORY);
    CHECK_THAT(lastError(), Catch::Contains("of host memory (host store") &&
                                Catch::Contains("this process may use"));
    dhs_runtime_destroy(rt);
  }
}

TEST_CASE("C API: request and step errors", "[capi]") {
  std::mt19937_64 rng(freshSeed() + 400);
  dhs::test::TempDir dir;
  dir.write("manifest.json", dhs::test::stepManifest(2, 1, 1, 4));
  dhs_runtime_config c = smallConfig();
  dhs_runtime *rt = nullptr;
  REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
  REQUIRE(dhs_runtime_load_step(rt, dir.path().c_str()) == DHS_OK);
  std::vector<bf16_t> prefill(2 * 10 * 576), token(2 * 576);
  dhs::test::fillRandom(rng, prefill.data(), prefill.size());
  dhs::test::fillRandom(rng, token.data(), token.size());
  REQUIRE(dhs_request_admit(rt, 42, 10, 12, prefill.data()) == DHS_OK);
  REQUIRE(dhs_request_admit(rt, 43, 10, 100, prefill.data()) == DHS_OK);
  CHECK(dhs_request_admit(rt, 42, 10, 12, prefill.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("request 42 is already admitted"));
  CHECK(dhs_request_admit(rt, 44, 10, 12, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_request_admit(rt, 44, 20, 12, prefill.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_request_append(rt, 7, token.data()) == DHS_ERROR_UNKNOWN_REQUEST);
  CHECK_THAT(lastError(), Catch::Contains("request 7 is not admitted"));
  CHECK(dhs_request_finish(rt, 7) == DHS_ERROR_UNKNOWN_REQUEST);
  std::int64_t length = 0;
  CHECK(dhs_request_length(rt, 7, &length) == DHS_ERROR_UNKNOWN_REQUEST);
  CHECK(dhs_request_length(rt, 42, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_request_append(rt, 42, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
  // Maximum context: 12 rows.
  CHECK(dhs_request_append(rt, 42, token.data()) == DHS_OK);
  CHECK(dhs_request_append(rt, 42, token.data()) == DHS_OK);
  CHECK(dhs_request_append(rt, 42, token.data()) == DHS_ERROR_OUT_OF_MEMORY);
  CHECK_THAT(lastError(), Catch::Contains("maximum context of 12"));
  CHECK(dhs_request_length(rt, 42, &length) == DHS_OK);
  CHECK(length == 12);
  // A batch: checked whole before anything changes (42 is full, an id twice).
  std::vector<bf16_t> tokens(2 * token.size());
  dhs::test::fillRandom(rng, tokens.data(), tokens.size());
  const std::uint64_t both[2] = {43, 42}, twice[2] = {43, 43};
  CHECK(dhs_request_append_batch(rt, both, 2, tokens.data()) == DHS_ERROR_OUT_OF_MEMORY);
  CHECK_THAT(lastError(), Catch::Contains("maximum context of 12"));
  CHECK(dhs_request_append_batch(rt, twice, 2, tokens.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("request 43 is given twice"));
  CHECK(dhs_request_append_batch(nullptr, both, 1, tokens.data()) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_request_length(rt, 43, &length) == DHS_OK);
  CHECK(length == 10);

  // Steps: [groups=2][batch=2][Q=1][K=4].
  std::uint64_t ids[2] = {42, 43};
  std::vector<std::int32_t> rows = {0, 11, -1, 3,  4, 5, 6, 7,   // group 0: lanes 0, 1
                                    1, 2,  9,  -1, 1, 2, 9, -1}; // group 1
  std::vector<bf16_t> q(2 * 2 * 576), out(2 * 2 * 512);
  dhs::test::fillRandom(rng, q.data(), q.size());
  rows[14] = 10; // request 43 has 10 rows
  CHECK(dhs_step_run(rt, ids, 2, rows.data(), q.data(), out.data(), DHS_MEMORY_HOST) ==
        DHS_ERROR_OUT_OF_RANGE);
  CHECK_THAT(lastError(), Catch::Contains("row id 10 at [lane 1, query 0, k 2] of layer group 1 "
                                          "is outside request 43's history (length 10)"));
  rows[14] = 9;
  std::uint64_t unknown[2] = {42, 99};
  CHECK(dhs_step_run(rt, unknown, 2, rows.data(), q.data(), out.data(), DHS_MEMORY_HOST) ==
        DHS_ERROR_UNKNOWN_REQUEST);
  CHECK(dhs_step_run(rt, ids, 3, rows.data(), q.data(), out.data(), DHS_MEMORY_HOST) ==
        DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_step_run(rt, ids, 2, nullptr, q.data(), out.data(), DHS_MEMORY_HOST) ==
        DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_step_run(rt, ids, 2, rows.data(), q.data(), out.data(), DHS_MEMORY_DEVICE) ==
        DHS_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("host pointers only"));
  CHECK(dhs_step_run(rt, ids, 2, rows.data(), q.data(), out.data(), static_cast<dhs_memory>(5)) ==
        DHS_ERROR_INVALID_ARGUMENT);
  dhs_stats stats;
  REQUIRE(dhs_runtime_get_stats(rt, &stats) == DHS_OK);
  CHECK(stats.steps == 0); // every failed step was abandoned
  // Parts in the wrong order.
  CHECK(dhs_step_select(rt, 0, rows.data(), DHS_MEMORY_HOST) == DHS_ERROR_STATE);
  CHECK(dhs_step_end(rt) == DHS_ERROR_STATE);
  CHECK(dhs_step_abort(rt) == DHS_ERROR_STATE);
  REQUIRE(dhs_step_begin(rt, ids, 2) == DHS_OK);
  CHECK(dhs_step_begin(rt, ids, 2) == DHS_ERROR_STATE);
  CHECK(dhs_step_attend(rt, 0, q.data(), out.data(), DHS_MEMORY_HOST) == DHS_ERROR_STATE);
  CHECK(dhs_step_select(rt, 2, rows.data(), DHS_MEMORY_HOST) == DHS_ERROR_OUT_OF_RANGE);
  REQUIRE(dhs_step_select(rt, 0, rows.data(), DHS_MEMORY_HOST) == DHS_OK); // group 0 only
  CHECK(dhs_step_attend(rt, 5, q.data(), out.data(), DHS_MEMORY_HOST) == DHS_ERROR_OUT_OF_RANGE);
  REQUIRE(dhs_step_attend(rt, 0, q.data(), out.data(), DHS_MEMORY_HOST) == DHS_OK);
  CHECK(dhs_step_end(rt) == DHS_ERROR_STATE);
  CHECK_THAT(lastError(), Catch::Contains("layer group 1 has no selections"));
  CHECK(dhs_request_finish(rt, 43) == DHS_ERROR_STATE);
  REQUIRE(dhs_step_abort(rt) == DHS_OK);
  // A valid whole step, then the checks.
  REQUIRE(dhs_step_run(rt, ids, 2, rows.data(), q.data(), out.data(), DHS_MEMORY_HOST) == DHS_OK);
  CHECK(lastError().empty());
  REQUIRE(dhs_runtime_get_stats(rt, &stats) == DHS_OK);
  CHECK(stats.steps == 1);
  CHECK(stats.last_selected == 13); // distinct per request and group
  CHECK(stats.last_resident + stats.last_fetched == 13);
  CHECK(stats.admitted_requests == 2);
  CHECK(dhs_runtime_check(rt) == DHS_OK);

  // Admission refused when protected sets cannot be guaranteed: 64 slots,
  // 8 per request (newest 4 + floor 4; draft rings have memory of their
  // own), 2 admitted, so 6 more fit and the 7th is refused.
  for (std::uint64_t id = 100; id < 106; ++id)
    REQUIRE(dhs_request_admit(rt, id, 0, 10, nullptr) == DHS_OK);
  CHECK(dhs_request_admit(rt, 106, 0, 10, nullptr) == DHS_ERROR_OUT_OF_MEMORY);
  CHECK_THAT(lastError(), Catch::Contains("admission refused"));
  REQUIRE(dhs_runtime_get_stats(rt, &stats) == DHS_OK);
  CHECK(stats.admitted_requests == 8);
  CHECK(stats.optional_budget_slots == 0);
  REQUIRE(dhs_request_finish(rt, 100) == DHS_OK);
  CHECK(dhs_request_admit(rt, 106, 0, 10, nullptr) == DHS_OK);
  // A batch append that succeeds: one token each, checked against the store.
  CHECK(dhs_request_append_batch(rt, both + 0, 1, tokens.data()) == DHS_OK);
  const std::uint64_t fresh[2] = {105, 106};
  CHECK(dhs_request_append_batch(rt, fresh, 2, tokens.data()) == DHS_OK);
  CHECK(dhs_request_length(rt, 43, &length) == DHS_OK);
  CHECK(length == 11);
  CHECK(dhs_request_length(rt, 106, &length) == DHS_OK);
  CHECK(length == 1);
  CHECK(dhs_runtime_check(rt) == DHS_OK);
  dhs_runtime_destroy(rt);
}

TEST_CASE("C API: the last error is per thread and cleared by success", "[capi]") {
  CHECK(dhs_request_finish(nullptr, 1) == DHS_ERROR_INVALID_HANDLE);
  std::string other = "unset";
  std::thread([&] {
    other = dhs_last_error();
    CHECK(dhs_runtime_check(nullptr) == DHS_ERROR_INVALID_HANDLE);
  }).join();
  CHECK(other.empty());
  CHECK_THAT(lastError(), Catch::Contains("dhs_request_finish"));
  dhs_runtime_config c = smallConfig();
  dhs_runtime *rt = nullptr;
  REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
  CHECK(lastError().empty());
  dhs_runtime_destroy(rt);
  for (int s = 0; s <= 11; ++s)
    CHECK(std::string(dhs_status_name(static_cast<dhs_status>(s))).rfind("DHS_", 0) == 0);
  CHECK(std::string(dhs_status_name(DHS_ERROR_OUT_OF_RANGE)) == "DHS_ERROR_OUT_OF_RANGE");
  CHECK(std::string(dhs_status_name(static_cast<dhs_status>(77))) == "DHS_ERROR_UNKNOWN_STATUS");
}

TEST_CASE("C++ wrapper: a session end to end, outputs equal the oracle", "[capi]") {
  DHS_SEEDED_RNG(rng, 410);
  dhs::test::TempDir dir;
  dir.write("manifest.json", dhs::test::stepManifest(3, 2, 2, 8));
  dhs_runtime_config c = smallConfig();
  c.layers = 4;
  c.layers_per_group = 2;
  dhs::api::Runtime rt(c);
  rt.loadStep(dir.path());
  CHECK(rt.describe() == "cpu");
  const dhs_step_shape s = rt.shape();
  CHECK(s.groups == 2);
  // Two requests; rows kept here for the oracle.
  std::map<std::uint64_t, std::vector<bf16_t>> rows; // [layer][row][576]
  std::map<std::uint64_t, std::int64_t> len;
  for (std::uint64_t id : {5u, 6u}) {
    len[id] = 30;
    std::vector<bf16_t> prefill(static_cast<std::size_t>(4 * 30 * 576));
    dhs::test::fillRandom(rng, prefill.data(), prefill.size());
    rt.admit(id, 30, 200, prefill.data());
    rows[id] = prefill;
  }
  auto rowOf = [&](std::uint64_t id, std::int32_t layer, std::int32_t r) {
    // Rows were stored per layer: [layer][len][576] at admission, appends after.
    return rows[id].data() + (static_cast<std::size_t>(layer) * 200 + r) * 576;
  };
  // Re-layout to [layer][200][576] so that appends have room.
  for (auto &[id, data] : rows) {
    std::vector<bf16_t> wide(static_cast<std::size_t>(4 * 200 * 576));
    for (int l = 0; l < 4; ++l)
      std::copy(data.begin() + l * 30 * 576, data.begin() + (l + 1) * 30 * 576,
                wide.begin() + l * 200 * 576);
    data = wide;
  }
  std::uint64_t ids[2] = {6, 5};
  for (int step = 0; step < 20; ++step) {
    const std::int64_t perLane = s.queries * s.topk;
    std::vector<std::int32_t> sel(static_cast<std::size_t>(2 * 2 * perLane));
    for (int g = 0; g < 2; ++g)
      for (int b = 0; b < 2; ++b)
        for (std::int64_t i = 0; i < perLane; ++i)
          sel[static_cast<std::size_t>((g * 2 + b) * perLane + i)] =
              rng() % 5 == 0
                  ? -1
                  : static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(len[ids[b]]));
    const std::int64_t qPerLayer = 2 * s.queries * s.heads * s.qk_dim;
    const std::int64_t oPerLayer = 2 * s.queries * s.heads * s.v_dim;
    std::vector<std::uint16_t> q(static_cast<std::size_t>(4 * qPerLayer)),
        out(static_cast<std::size_t>(4 * oPerLayer));
    dhs::test::fillRandom(rng, q.data(), q.size());
    rt.step(ids, 2, sel.data(), q.data(), out.data());
    dhs::runtime::ProblemShape shape = dhs::test::smallShape(3, 2, 2, 8);
    for (int l = 0; l < 4; ++l) {
      std::vector<bf16_t> expected = dhs::test::oracleLayer(
          shape, 2, sel.data() + (l / 2) * 2 * perLane, q.data() + l * qPerLayer,
          [&](std::int64_t b, std::int32_t r) { return rowOf(ids[b], l, r); });
      std::vector<bf16_t> actual(out.begin() + l * oPerLayer, out.begin() + (l + 1) * oPerLayer);
      REQUIRE(actual == expected);
    }
    for (std::uint64_t id : {5u, 6u}) {
      std::vector<bf16_t> token(4 * 576);
      dhs::test::fillRandom(rng, token.data(), token.size());
      rt.append(id, token.data());
      for (int l = 0; l < 4; ++l)
        std::copy(token.begin() + l * 576, token.begin() + (l + 1) * 576,
                  rows[id].begin() + (static_cast<std::size_t>(l) * 200 + len[id]) * 576);
      ++len[id];
    }
  }
  dhs_stats stats = rt.stats();
  CHECK(stats.steps == 20);
  CHECK(stats.total_fetched > 0);
  CHECK(stats.total_resident > 0);
  CHECK(rt.length(5) == 50);
  rt.checkInvariants();
  // Errors come back as exceptions with the status.
  try {
    rt.finish(77);
    FAIL("no exception");
  } catch (const dhs::api::Error &error) {
    CHECK(error.status() == DHS_ERROR_UNKNOWN_REQUEST);
    CHECK_THAT(error.what(), Catch::StartsWith("DHS_ERROR_UNKNOWN_REQUEST: dhs_request_finish: "));
  }
  rt.finish(5);
  rt.finish(6);
  CHECK(rt.stats().hbm_bytes_used == 0);
  dhs::api::Runtime moved = std::move(rt);
  CHECK(moved.get() != nullptr);
  CHECK(rt.get() == nullptr);
}

TEST_CASE("C API: window writes, placement and accept steps give the statuses dhs_runtime.h "
          "documents",
          "[capi]") {
  const std::string compiled = dhs::test::compiledStepsDir();
  for (const char *name : {"window", "place_rows", "accept", "accept_sampling", "topk"})
    if (!std::filesystem::exists(compiled + "/" + name + "/manifest.json")) {
      WARN("SKIPPED: " << compiled << "/" << name << " was not compiled");
      return;
    }
  const std::string window = compiled + "/window", placement = compiled + "/place_rows",
                    accept = compiled + "/accept", sampling = compiled + "/accept_sampling",
                    topk = compiled + "/topk";
  dhs::test::TempDir plain; // a step of one position, no window
  plain.write("manifest.json", dhs::test::stepManifest(2, 1, 1, 4));
  std::vector<std::uint8_t> bytes(1 << 20, 0);
  dhs_runtime *rt = nullptr;

  SECTION("dhs_window_write") {
    dhs_runtime_config c = dhs::test::smallCApiConfig(); // 2 layers
    c.hbm_slots = -1;                                    // the step's 512
    c.newest_window = 16;
    c.hot_floor = 0;
    CHECK(dhs_window_write(nullptr, 7, 0, 1, bytes.data()) == DHS_ERROR_INVALID_HANDLE);
    REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
    CHECK(dhs_window_write(rt, 7, 0, 1, bytes.data()) == DHS_ERROR_NOT_LOADED);
    REQUIRE(dhs_runtime_load_step(rt, window.c_str()) == DHS_OK);
    dhs_step_shape shape;
    REQUIRE(dhs_runtime_get_shape(rt, &shape) == DHS_OK);
    REQUIRE(shape.row_bytes == 528);
    REQUIRE(dhs_request_admit(rt, 7, 40, 100, bytes.data()) == DHS_OK);
    CHECK(dhs_window_write(rt, 8, 0, 1, bytes.data()) == DHS_ERROR_UNKNOWN_REQUEST);
    CHECK(dhs_window_write(rt, 7, 0, 0, bytes.data()) == DHS_ERROR_INVALID_ARGUMENT);
    CHECK(dhs_window_write(rt, 7, 0, 19, bytes.data()) == DHS_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Catch::Contains("a window ring holds 1 to 18"));
    CHECK(dhs_window_write(rt, 7, 0, 1, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
    CHECK(dhs_window_write(rt, 7, -1, 1, bytes.data()) == DHS_ERROR_INVALID_ARGUMENT);
    CHECK(dhs_window_write(rt, 7, INT32_MAX - 1, 2, bytes.data()) == DHS_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Catch::Contains("outside [0, 2^31 - count)"));
    CHECK(dhs_window_write(rt, 7, INT64_MAX, 1, bytes.data()) == DHS_ERROR_INVALID_ARGUMENT);
    CHECK(dhs_window_write(rt, 7, INT32_MAX - 2, 2, bytes.data()) == DHS_OK); // the last that fits
    CHECK(dhs_window_write(rt, 7, 0, 18, bytes.data()) == DHS_OK);
    const std::uint64_t id = 7;
    REQUIRE(dhs_step_begin(rt, &id, 1) == DHS_OK);
    CHECK(dhs_window_write(rt, 7, 18, 1, bytes.data()) == DHS_ERROR_STATE);
    REQUIRE(dhs_step_abort(rt) == DHS_OK);
    CHECK(dhs_runtime_check(rt) == DHS_OK);
    dhs_runtime_destroy(rt);
    // A step without a sliding window.
    c = dhs::test::smallCApiConfig();
    REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
    REQUIRE(dhs_runtime_load_step(rt, plain.path().c_str()) == DHS_OK);
    REQUIRE(dhs_request_admit(rt, 7, 4, 10, bytes.data()) == DHS_OK);
    CHECK(dhs_window_write(rt, 7, 0, 1, bytes.data()) == DHS_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Catch::Contains("the step has no sliding window"));
    dhs_runtime_destroy(rt);
  }

  SECTION("dhs_runtime_load_placement_step") {
    CHECK(dhs_runtime_load_placement_step(nullptr, placement.c_str()) == DHS_ERROR_INVALID_HANDLE);
    dhs_runtime_config c = dhs::test::smallCApiConfig(); // BF16 rows, pools of 1 layer
    REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
    CHECK(dhs_runtime_load_placement_step(rt, placement.c_str()) == DHS_ERROR_NOT_LOADED);
    REQUIRE(dhs_runtime_load_step(rt, plain.path().c_str()) == DHS_OK);
    CHECK(dhs_runtime_load_placement_step(rt, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
    CHECK(dhs_runtime_load_placement_step(rt, accept.c_str()) == DHS_ERROR_STEP);
    CHECK_THAT(lastError(), Catch::Contains("is not a placement step"));
    CHECK(dhs_runtime_load_placement_step(rt, placement.c_str()) == DHS_ERROR_STEP);
    CHECK_THAT(lastError(), Catch::Contains("places tokens of 4 layers") &&
                                Catch::Contains("this session's pools hold 1 layers x 1152 bytes"));
    dhs_runtime_destroy(rt);
    // Its own pools: FP8 layer groups of 4.
    const std::vector<std::string> group = dhs::test::groupSteps(4);
    if (!std::filesystem::exists(group.back() + "/manifest.json")) {
      WARN("SKIPPED the layer-group part: " << group.back() << " was not compiled");
      return;
    }
    c = dhs::test::smallCApiConfig();
    c.layers = 8;
    c.layers_per_group = 4;
    c.hbm_slots = -1;
    c.newest_window = 16;
    REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
    std::vector<const char *> dirs;
    for (const std::string &d : group)
      dirs.push_back(d.c_str());
    REQUIRE(dhs_runtime_load_steps(rt, dirs.data(), dirs.size()) == DHS_OK);
    REQUIRE(dhs_request_admit(rt, 7, 40, 100, bytes.data()) == DHS_OK);
    const std::uint64_t id = 7;
    REQUIRE(dhs_step_begin(rt, &id, 1) == DHS_OK);
    CHECK(dhs_runtime_load_placement_step(rt, placement.c_str()) == DHS_ERROR_STATE);
    CHECK_THAT(lastError(), Catch::Contains("during a step"));
    REQUIRE(dhs_step_abort(rt) == DHS_OK);
    CHECK(dhs_runtime_load_placement_step(rt, placement.c_str()) == DHS_OK);
    CHECK(dhs_runtime_load_placement_step(rt, placement.c_str()) == DHS_ERROR_STATE);
    CHECK_THAT(lastError(), Catch::Contains("is already loaded"));
    CHECK(dhs_runtime_check(rt) == DHS_OK);
    dhs_runtime_destroy(rt);
  }

  SECTION("dhs_runtime_load_accept_step") {
    CHECK(dhs_runtime_load_accept_step(nullptr, accept.c_str()) == DHS_ERROR_INVALID_HANDLE);
    dhs_runtime_config c = dhs::test::smallCApiConfig();
    c.hbm_slots = 256;
    REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
    CHECK(dhs_runtime_load_accept_step(rt, accept.c_str()) == DHS_ERROR_NOT_LOADED);
    dhs::test::TempDir four; // B = 4: the accept steps verify 8 requests x 4 drafts
    four.write("manifest.json", dhs::test::stepManifest(4, 5, 1, 4));
    REQUIRE(dhs_runtime_load_step(rt, four.path().c_str()) == DHS_OK);
    CHECK(dhs_runtime_load_accept_step(rt, accept.c_str()) == DHS_ERROR_STEP);
    CHECK_THAT(lastError(), Catch::Contains("verifies 8 requests x 4 drafts") &&
                                Catch::Contains("compile it with draft memref<4x4xi32>"));
    dhs_runtime_destroy(rt);
    dhs::test::TempDir eight; // B = 8, Q = 5: theirs
    eight.write("manifest.json", dhs::test::stepManifest(8, 5, 1, 4));
    REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
    REQUIRE(dhs_runtime_load_step(rt, eight.path().c_str()) == DHS_OK);
    CHECK(dhs_runtime_load_accept_step(rt, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
    CHECK(dhs_runtime_load_accept_step(rt, topk.c_str()) == DHS_ERROR_STEP);
    CHECK_THAT(lastError(), Catch::Contains("is not an accept step"));
    CHECK(dhs_runtime_load_accept_step(rt, "/nonexistent/accept") == DHS_ERROR_STEP);
    REQUIRE(dhs_request_admit(rt, 7, 4, 100, bytes.data()) == DHS_OK);
    const std::uint64_t id = 7;
    REQUIRE(dhs_step_begin(rt, &id, 1) == DHS_OK);
    CHECK(dhs_runtime_load_accept_step(rt, accept.c_str()) == DHS_ERROR_STATE);
    CHECK_THAT(lastError(), Catch::Contains("during a step"));
    REQUIRE(dhs_step_abort(rt) == DHS_OK);
    CHECK(dhs_runtime_load_accept_step(rt, accept.c_str()) == DHS_OK);
    CHECK(dhs_runtime_load_accept_step(rt, accept.c_str()) == DHS_ERROR_STATE);
    CHECK_THAT(lastError(), Catch::Contains("is already loaded"));
    CHECK(dhs_runtime_load_accept_step(rt, sampling.c_str()) == DHS_OK); // the other rule
    CHECK(dhs_runtime_load_accept_step(rt, sampling.c_str()) == DHS_ERROR_STATE);
    // With both loaded, the CPU accepts by the host rule: the target's
    // argmax is draft 0 (3), then 5 against draft 1 (4).
    const std::int32_t V = 8, Q = 5, len = 2, drafts[4] = {3, 4, 0, 0};
    REQUIRE(dhs_verify_begin(rt, &id, 1, &len, drafts, bytes.data()) == DHS_OK);
    const std::vector<std::int32_t> none(Q * 4, -1);
    std::vector<bf16_t> queries(Q * 576), out(Q * 512);
    for (std::int32_t g = 0; g < 2; ++g)
      REQUIRE(dhs_step_select(rt, g, none.data(), DHS_MEMORY_HOST) == DHS_OK);
    for (std::int32_t l = 0; l < 2; ++l)
      REQUIRE(dhs_step_attend(rt, l, queries.data(), out.data(), DHS_MEMORY_HOST) == DHS_OK);
    std::vector<float> target(Q * V, 0.0f);
    target[0 * V + 3] = 1.0f;
    target[1 * V + 5] = 1.0f;
    std::int32_t accepted = -1, tokens[Q];
    REQUIRE(dhs_verify_accept(rt, DHS_ACCEPT_GREEDY, V, target.data(), nullptr, 1, &accepted,
                              tokens) == DHS_OK);
    CHECK(accepted == 1);
    CHECK(std::vector<std::int32_t>(tokens, tokens + Q) ==
          std::vector<std::int32_t>{3, 5, -1, -1, -1});
    std::int64_t length = 0;
    REQUIRE(dhs_request_length(rt, 7, &length) == DHS_OK);
    CHECK(length == 4 + 2);
    CHECK(dhs_runtime_check(rt) == DHS_OK);
    dhs_runtime_destroy(rt);
  }
}
