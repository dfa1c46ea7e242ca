//===- RegressionTest.cpp - Defects found by hostile input (issue 12) -----===//
//
// One case per defect found by trying the C API as a hostile user would
// (CPU backend): each failed before its fix (a crash, a hang, an unbounded
// read or allocation, a wrong status or message). These use the C API
// only, so that they also build against an older runtime.
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtil.h"

#include "runtime/capi/dhs_runtime.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

using dhs::runtime::bf16_t;

namespace {

constexpr std::int64_t kMax64 = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin64 = std::numeric_limits<std::int64_t>::min();

std::string lastError() { return dhs_last_error(); }

/// A runtime with the small step loaded; destroyed with the object.
struct Session {
  dhs::test::TempDir dir;
  dhs_runtime *rt = nullptr;
  explicit Session(dhs_runtime_config config = dhs::test::smallCApiConfig()) {
    dir.write("manifest.json", dhs::test::stepManifest(2, 1, 1, 4));
    REQUIRE(dhs_runtime_create(&config, &rt) == DHS_OK);
    REQUIRE(dhs_runtime_load_step(rt, dir.path().c_str()) == DHS_OK);
  }
  ~Session() { dhs_runtime_destroy(rt); }
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;
};

/// Loads `dir` into a fresh CPU runtime: the status, the message in *message.
dhs_status loadInto(const std::string &dir, std::string *message,
                    dhs_runtime_config config = dhs::test::smallCApiConfig()) {
  dhs_runtime *rt = nullptr;
  REQUIRE(dhs_runtime_create(&config, &rt) == DHS_OK);
  dhs_status status = dhs_runtime_load_step(rt, dir.c_str());
  *message = lastError();
  dhs_runtime_destroy(rt);
  return status;
}

/// Admits `id` with `len` random rows of both layers and runs one step of
/// it against the oracle: the runtime still serves and computes exactly.
void admitAndStep(dhs_runtime *rt, std::uint64_t id, std::mt19937_64 &rng) {
  const std::int64_t len = 12;
  std::vector<bf16_t> prefill(static_cast<std::size_t>(2 * len * 576));
  dhs::test::fillRandom(rng, prefill.data(), prefill.size());
  REQUIRE(dhs_request_admit(rt, id, len, 40, prefill.data()) == DHS_OK);
  std::vector<std::int32_t> rows = {0, 5, 11, -1, 3, 3, 7, 2}; // [group][lane 0][Q=1][K=4]
  std::vector<bf16_t> q(2 * 576), out(2 * 512);
  dhs::test::fillRandom(rng, q.data(), q.size());
  REQUIRE(dhs_step_run(rt, &id, 1, rows.data(), q.data(), out.data(), DHS_MEMORY_HOST) == DHS_OK);
  dhs::runtime::ProblemShape shape = dhs::test::smallShape(2, 1, 1, 4);
  for (int l = 0; l < 2; ++l) {
    std::vector<bf16_t> expected = dhs::test::oracleLayer(
        shape, 1, rows.data() + l * 4, q.data() + l * 576, [&](std::int64_t, std::int32_t r) {
          return prefill.data() + (static_cast<std::size_t>(l) * len + r) * 576;
        });
    REQUIRE(std::vector<bf16_t>(out.begin() + l * 512, out.begin() + (l + 1) * 512) == expected);
  }
  REQUIRE(dhs_runtime_check(rt) == DHS_OK);
  REQUIRE(dhs_request_finish(rt, id) == DHS_OK);
}

/// Resident set size of this process, in bytes.
std::uint64_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

} // namespace

TEST_CASE("regression: a draft append near INT64_MAX is refused and never written before the ring",
          "[regression]") {
  std::mt19937_64 rng(dhs::test::freshSeed() + 1200);
  dhs_runtime_config c = dhs::test::smallCApiConfig();
  c.draft_window = 3; // INT64_MIN % 3 is negative
  Session s(c);
  std::vector<bf16_t> token(2 * 2 * 576), back(2 * 2 * 576);
  dhs::test::fillRandom(rng, token.data(), token.size());
  REQUIRE(dhs_request_admit(s.rt, 9, 0, 16, nullptr) == DHS_OK);
  // Positions kMax64 and kMax64 + 1: the second does not exist.
  CHECK(dhs_draft_append(s.rt, 9, kMax64, 2, token.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("position 9223372036854775807") &&
                              Catch::Contains("run past the largest position"));
  CHECK(dhs_draft_append(s.rt, 9, kMax64 - 1, 2, token.data()) == DHS_ERROR_INVALID_ARGUMENT);
  // The last two positions that exist, written and read back.
  REQUIRE(dhs_draft_append(s.rt, 9, kMax64 - 2, 2, token.data()) == DHS_OK);
  REQUIRE(dhs_draft_read(s.rt, 9, kMax64, 2, back.data()) == DHS_OK);
  CHECK(back == token);
  // Finishing frees what admission allocated (a corrupted ring table would
  // crash here), and the runtime keeps serving.
  REQUIRE(dhs_request_finish(s.rt, 9) == DHS_OK);
  admitAndStep(s.rt, 10, rng);
}

TEST_CASE("regression: a draft read whose first position overflows is out of range",
          "[regression]") {
  dhs_runtime_config c = dhs::test::smallCApiConfig();
  c.draft_window = 3;
  Session s(c);
  std::vector<bf16_t> out(3 * 2 * 576, 0x7fff);
  REQUIRE(dhs_request_admit(s.rt, 4, 0, 16, nullptr) == DHS_OK);
  // end - count = kMin64 + 1 - 2 does not exist.
  CHECK(dhs_draft_read(s.rt, 4, kMin64 + 1, 2, out.data()) == DHS_ERROR_OUT_OF_RANGE);
  CHECK_THAT(lastError(), Catch::Contains("start at a negative position"));
  CHECK(dhs_draft_read(s.rt, 4, kMin64, 3, out.data()) == DHS_ERROR_OUT_OF_RANGE);
  CHECK(dhs_draft_read(s.rt, 4, -1, 1, out.data()) == DHS_ERROR_OUT_OF_RANGE);
  // Nothing was written into the output.
  CHECK(std::all_of(out.begin(), out.end(), [](bf16_t v) { return v == 0x7fff; }));
}

TEST_CASE("regression: a manifest that is a FIFO is refused at once", "[regression]") {
  dhs::test::TempDir dir;
  const std::string path = dir.path() + "/manifest.json";
  REQUIRE(mkfifo(path.c_str(), 0600) == 0);
  std::string message;
  const auto start = std::chrono::steady_clock::now();
  CHECK(loadInto(dir.path(), &message) == DHS_ERROR_STEP);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK_THAT(message, Catch::Contains(path) && Catch::Contains("is a FIFO, not a regular file"));
}

TEST_CASE("regression: a manifest linked to /dev/zero is refused without reading it",
          "[regression]") {
  dhs::test::TempDir dir;
  std::filesystem::create_symlink("/dev/zero", dir.path() + "/manifest.json");
  std::string message;
  CHECK(loadInto(dir.path(), &message) == DHS_ERROR_STEP);
  CHECK_THAT(message, Catch::Contains("is a character device, not a regular file"));
  // A directory in its place.
  dhs::test::TempDir other;
  std::filesystem::create_directory(other.path() + "/manifest.json");
  CHECK(loadInto(other.path(), &message) == DHS_ERROR_STEP);
  CHECK_THAT(message, Catch::Contains("is a directory"));
}

TEST_CASE("regression: a huge (sparse) PTX file is refused by its size without reading it",
          "[regression]") {
  dhs::test::TempDir dir;
  dir.write("manifest.json", dhs::test::stepManifest(2, 1, 1, 4));
  const std::string ptx = dir.write("step.ptx", ".version 8.0\n.target sm_90a\n");
  REQUIRE(truncate(ptx.c_str(), std::int64_t(64) << 30) == 0); // 64 GiB, no blocks
  std::string message;
  const std::uint64_t before = residentBytes();
  CHECK(loadInto(dir.path(), &message) == DHS_ERROR_STEP);
  CHECK(residentBytes() < before + (std::uint64_t(256) << 20));
  CHECK_THAT(message, Catch::Contains("step.ptx is 64.0 GiB") && Catch::Contains("more than"));
  // A link to /dev/zero as PTX.
  std::filesystem::remove(ptx);
  std::filesystem::create_symlink("/dev/zero", ptx);
  CHECK(loadInto(dir.path(), &message) == DHS_ERROR_STEP);
  CHECK_THAT(message, Catch::Contains("launches[0].ptx") &&
                          Catch::Contains("is a character device, not a regular file"));
}

TEST_CASE("regression: a batch of 2^28 is refused before its tables are allocated",
          "[regression]") {
  dhs::test::TempDir dir;
  dir.write("manifest.json", dhs::test::stepManifest(1 << 28, 1, 1, 4));
  std::string message;
  const std::uint64_t before = residentBytes();
  CHECK(loadInto(dir.path(), &message) == DHS_ERROR_OUT_OF_MEMORY);
  CHECK(residentBytes() < before + (std::uint64_t(256) << 20));
  CHECK_THAT(message, Catch::Contains("needs") && Catch::Contains("GiB of host memory") &&
                          Catch::Contains("CPU attention scratch") &&
                          Catch::Contains("per-lane and selection tables") &&
                          Catch::Contains("this process may use"));
}

TEST_CASE("regression: max_requests of 10^8 costs nothing until requests are admitted",
          "[regression]") {
  std::mt19937_64 rng(dhs::test::freshSeed() + 1210);
  dhs_runtime_config c = dhs::test::smallCApiConfig();
  c.max_requests = 100000000;
  const std::uint64_t before = residentBytes();
  Session s(c);
  CHECK(residentBytes() < before + (std::uint64_t(256) << 20));
  admitAndStep(s.rt, 1, rng);
  // As many as the protected sets allow: 64 slots / 8 per request.
  for (std::uint64_t id = 100; id < 108; ++id)
    REQUIRE(dhs_request_admit(s.rt, id, 0, 10, nullptr) == DHS_OK);
  CHECK(dhs_request_admit(s.rt, 108, 0, 10, nullptr) == DHS_ERROR_OUT_OF_MEMORY);
}

TEST_CASE("regression: draft windows and slot tables larger than memory are refused",
          "[regression]") {
  dhs::test::TempDir dir;
  dir.write("manifest.json", dhs::test::stepManifest(2, 1, 1, 4));
  std::string message;
  // 2^20-token draft rings (1.1 GiB each) for every request that fits.
  dhs_runtime_config c = dhs::test::smallCApiConfig();
  c.draft_window = 1 << 20;
  c.hbm_slots = 1 << 20;
  c.max_requests = 100000;
  CHECK(loadInto(dir.path(), &message, c) == DHS_ERROR_OUT_OF_MEMORY);
  CHECK_THAT(message, Catch::Contains("draft rings (CPU)") && Catch::Contains("GiB"));
  // An HBM tier of 2^31 - 1 slots (2.3 TiB on the CPU).
  c = dhs::test::smallCApiConfig();
  c.hbm_slots = std::numeric_limits<std::int32_t>::max();
  CHECK(loadInto(dir.path(), &message, c) == DHS_ERROR_OUT_OF_MEMORY);
  CHECK_THAT(message, Catch::Contains("HBM tier (CPU)"));
}

TEST_CASE("regression: JSON library errors name the manifest and field", "[regression]") {
  dhs::test::TempDir dir;
  std::string message;
  const std::string good = dhs::test::stepManifest(2, 1, 1, 4);
  auto loadText = [&](const std::string &text) {
    dir.write("manifest.json", text);
    return loadInto(dir.path(), &message);
  };
  // A number that overflows a double.
  std::string text = good;
  text.replace(text.find("\"version\": 2"), 12, "\"version\": 1e400");
  CHECK(loadText(text) == DHS_ERROR_STEP);
  CHECK_THAT(message, Catch::Contains("manifest " + dir.path() + "/manifest.json") &&
                          Catch::Contains("invalid JSON"));
  // A launch without its op, a launch that is not an object.
  nlohmann::json m = nlohmann::json::parse(good);
  m["launches"][0].erase("op");
  CHECK(loadText(m.dump()) == DHS_ERROR_STEP);
  CHECK_THAT(message, Catch::Contains("launches[0]: missing key 'op'"));
  m = nlohmann::json::parse(good);
  m["launches"][0] = 7;
  CHECK(loadText(m.dump()) == DHS_ERROR_STEP);
  CHECK_THAT(message, Catch::Contains("launches[0]") && Catch::Contains("must be a JSON object"));
  m = nlohmann::json::parse(good);
  m["launches"][0]["params"][0] = "argument";
  CHECK(loadText(m.dump()) == DHS_ERROR_STEP);
  CHECK_THAT(message, Catch::Contains("launches[0].params[0]"));
  m = nlohmann::json::parse(good);
  m["arguments"][0]["shape"] = 4;
  CHECK(loadText(m.dump()) == DHS_ERROR_STEP);
  CHECK_THAT(message, Catch::Contains("arguments[0].shape") && Catch::Contains("must be an array"));
  m = nlohmann::json::parse(good);
  m["target"] = nlohmann::json::array();
  CHECK(loadText(m.dump()) == DHS_ERROR_STEP);
  CHECK_THAT(message, Catch::Contains("target"));
}

TEST_CASE("regression: admission arguments give DHS_ERROR_INVALID_ARGUMENT", "[regression]") {
  Session s;
  std::vector<bf16_t> prefill(2 * 20 * 576, 0x3f80);
  CHECK(dhs_request_admit(s.rt, 5, -1, 10, prefill.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("request 5") && Catch::Contains("negative history"));
  CHECK(dhs_request_admit(s.rt, 5, 20, 12, prefill.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("request 5") && Catch::Contains("maximum context 12"));
  CHECK(dhs_request_admit(s.rt, 5, 0, 0, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_request_admit(s.rt, 5, 0, -7, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_request_admit(s.rt, 5, kMin64, kMax64, prefill.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_request_admit(s.rt, 5, 0, std::int64_t(1) << 31, nullptr) ==
        DHS_ERROR_INVALID_ARGUMENT);
  // Nothing was admitted by any of them.
  dhs_stats stats;
  REQUIRE(dhs_runtime_get_stats(s.rt, &stats) == DHS_OK);
  CHECK(stats.admitted_requests == 0);
  CHECK(stats.host_bytes_used == 0);
}

TEST_CASE("regression: appending past the maximum context names the caller's request id",
          "[regression]") {
  Session s;
  std::vector<bf16_t> token(2 * 576, 0x3f80);
  REQUIRE(dhs_request_admit(s.rt, 77, 0, 1, nullptr) == DHS_OK); // request index 0
  REQUIRE(dhs_request_append(s.rt, 77, token.data()) == DHS_OK);
  CHECK(dhs_request_append(s.rt, 77, token.data()) == DHS_ERROR_OUT_OF_MEMORY);
  CHECK_THAT(lastError(), Catch::Contains("request 77") &&
                              Catch::Contains("maximum context of 1 rows") &&
                              !Catch::Contains("request 0"));
}

TEST_CASE("regression: a GQA step whose query heads do not divide by its KV heads is refused "
          "at load",
          "[regression]") {
  // stepManifest's MLA pool made a GQA pool of `kvHeads` heads of 128 dims.
  auto gqa = [](int heads, int kvHeads) {
    nlohmann::json m = nlohmann::json::parse(dhs::test::stepManifest(2, 1, heads, 4, 64));
    const int rowBytes = 2 * kvHeads * 128 * 2;
    m["arguments"][5] = {{"index", 5},      {"role", "kv_pool"},     {"kind", "kv_pool"},
                         {"format", "gqa"}, {"kv_heads", kvHeads},   {"element", "bf16"},
                         {"layers", 1},     {"row_bytes", rowBytes}, {"row_elems", rowBytes / 2},
                         {"qk_dim", 128},   {"v_dim", 128},          {"hbm_slots", 64},
                         {"host_rows", -1}};
    const nlohmann::json q = {2, 1, heads, 128};
    m["arguments"][0]["shape"] = q;
    m["arguments"][6]["shape"] = q;
    nlohmann::json &params = m["launches"][0]["params"];
    params[0]["shape"] = q;
    params[7]["shape"] = q;
    params[5]["shape"] = {-1, 1, rowBytes};
    params[6]["shape"] = {-1, 1, rowBytes};
    return m.dump();
  };
  dhs::test::TempDir dir;
  std::string message;
  dir.write("manifest.json", gqa(4, 2));
  CHECK(loadInto(dir.path(), &message) == DHS_OK);
  dir.write("manifest.json", gqa(4, 3));
  CHECK(loadInto(dir.path(), &message) == DHS_ERROR_STEP);
  CHECK_THAT(message, Catch::Contains("4 query heads cannot share 3 KV heads evenly"));
}
