//===- LimitsTest.cpp - Checked arithmetic, input files, memory limits ----===//
//
// The pieces dhs's limits rest on: overflow-checked arithmetic, the bounded
// reader of input files, what the process may allocate (cgroup v1/v2,
// MemAvailable, rlimits, read from files laid out as the kernel does), the
// refusal of a load that needs more, and the C API's status for every kind
// of failure dhs_runtime.h documents.
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtil.h"

#include "runtime/Runtime.h"
#include "runtime/capi/ErrorStatus.h"
#include "runtime/capi/dhs_runtime.h"
#include "runtime/core/BoundedFile.h"
#include "runtime/core/Checked.h"
#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"
#include "runtime/core/HostMemory.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <limits>

#include <sys/stat.h>
#include <unistd.h>

using namespace dhs::runtime;

namespace {

constexpr std::int64_t kMax64 = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin64 = std::numeric_limits<std::int64_t>::min();

/// Writes `text` to `path`, making its directories.
void put(const std::string &path, const std::string &text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

} // namespace

TEST_CASE("checked arithmetic detects every overflow", "[limits]") {
  CHECK(tryAdd<std::int64_t>(kMax64 - 1, 1) == kMax64);
  CHECK_FALSE(tryAdd<std::int64_t>(kMax64, 1));
  CHECK_FALSE(tryAdd<std::int64_t>(kMin64, -1));
  CHECK(trySub<std::int64_t>(kMin64 + 1, 1) == kMin64);
  CHECK_FALSE(trySub<std::int64_t>(kMin64 + 1, 2));
  CHECK_FALSE(trySub<std::int64_t>(0, kMin64));
  CHECK_FALSE(tryMul<std::int64_t>(std::int64_t(1) << 32, std::int64_t(1) << 31));
  CHECK(tryMul<std::int32_t>(46340, 46340) == 2147395600);
  CHECK_FALSE(tryMul<std::int32_t>(46341, 46341));
  CHECK(tryProduct({1 << 20, 1 << 20, 1 << 22}) == std::int64_t(1) << 62);
  CHECK_FALSE(tryProduct({1 << 20, 1 << 20, 1 << 23}));
  CHECK_FALSE(tryProduct({4, -1}));
  CHECK(tryProduct({}) == 1);
  CHECK(tryProduct({0, kMax64}) == 0);
  CHECK_THROWS_MATCHES(checkedProduct({1 << 30, 1 << 30, 1 << 30}, "the host store"), InputError,
                       Catch::Matchers::Message("the host store: 1073741824 * 1073741824 * "
                                                "1073741824 (or a negative factor) overflows "
                                                "64-bit arithmetic"));
  CHECK_THROWS_AS(checkedBytes<CapacityError>({kMax64, 2}, "x"), CapacityError);
  CHECK(checkedBytes({3, 1152}, "rows") == 3456u);
  for (std::int64_t m : {1, 2, 3, 7, 64}) {
    INFO("m = " << m);
    for (std::int64_t x : {kMin64, kMin64 + 1, std::int64_t(-65), std::int64_t(-1), std::int64_t(0),
                           std::int64_t(1), std::int64_t(65), kMax64 - 1, kMax64}) {
      const std::int64_t r = floorMod(x, m);
      CHECK(r >= 0);
      CHECK(r < m);
      CHECK((static_cast<__int128>(x) - r) % m == 0);
    }
  }
  CHECK(floorMod(-1, 3) == 2);
  CHECK(floorMod(kMin64, 3) == 1); // -2^63 = 3 * (-3074457345618258603) + 1
}

TEST_CASE("input files: regular files of bounded size only", "[limits]") {
  dhs::test::TempDir dir;
  const std::string small = dir.write("small", "hello");
  CHECK(readRegularFile(small, 5, "file") == "hello");
  CHECK(readRegularFileHead(small, 3, 5, "file") == "hel");
  CHECK(readRegularFileHead(small, 100, 100, "file") == "hello");
  CHECK_THROWS_WITH(readRegularFile(small, 4, "manifest"),
                    Catch::Contains("manifest " + small + " is 5 B (5 bytes), more than the 4 B"));
  CHECK(readRegularFile(dir.write("empty", ""), 4, "file").empty());
  CHECK_THROWS_WITH(readRegularFile(dir.path() + "/missing", 4, "PTX file"),
                    Catch::Contains("PTX file " + dir.path() + "/missing does not exist"));
  CHECK_FALSE(fileExists(dir.path() + "/missing"));
  CHECK(fileExists(small));
  const std::string fifo = dir.path() + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(readRegularFile(fifo, 100, "f"), Catch::Contains("is a FIFO"));
  CHECK_THROWS_WITH(readRegularFileHead(fifo, 1, 100, "f"), Catch::Contains("is a FIFO"));
  CHECK_THROWS_WITH(readRegularFile(dir.path(), 100, "f"), Catch::Contains("is a directory"));
  CHECK_THROWS_WITH(readRegularFile("/dev/null", 100, "f"),
                    Catch::Contains("is a character device"));
  // A link to a regular file is read; a dangling one does not exist.
  std::filesystem::create_symlink(small, dir.path() + "/link");
  CHECK(readRegularFile(dir.path() + "/link", 5, "f") == "hello");
  std::filesystem::create_symlink(dir.path() + "/gone", dir.path() + "/dangling");
  CHECK_FALSE(fileExists(dir.path() + "/dangling"));
  // Unreadable (when not root).
  const std::string secret = dir.write("secret", "x");
  chmod(secret.c_str(), 0);
  if (geteuid() != 0)
    CHECK_THROWS_WITH(readRegularFile(secret, 5, "f"), Catch::Contains("cannot be opened"));
  // A PTX file whose first 64 KiB are a comment: its start cannot be checked.
  const std::string ptx =
      dir.write("long.ptx", "/*" + std::string(70000, 'x') + "*/ .version 8.0\n");
  CHECK_THROWS_WITH(checkPtxFile(ptx), Catch::Contains("no .version directive in its first 65536"));
  CHECK_NOTHROW(readPtxFile(ptx));
}

TEST_CASE("usable host memory: cgroup v2, v1, MemAvailable", "[limits]") {
  dhs::test::TempDir root;
  HostMemorySources sources;
  sources.procRoot = root.path() + "/proc";
  sources.cgroupRoot = root.path() + "/cg";
  sources.resourceLimits = false;
  put(sources.procRoot + "/meminfo", "MemTotal:  33554432 kB\nMemAvailable:  16777216 kB\n");
  SECTION("no cgroup: MemAvailable") {
    HostMemoryBudget b = usableHostMemory(sources);
    CHECK(b.bytes == (std::uint64_t(16) << 30));
    CHECK_THAT(b.limitedBy, Catch::Contains("MemAvailable 16.0 GiB"));
  }
  SECTION("cgroup v2: the tightest of the cgroup and its ancestors") {
    put(sources.procRoot + "/self/cgroup", "0::/serving/engine\n");
    put(sources.cgroupRoot + "/serving/engine/memory.max", "max\n");
    put(sources.cgroupRoot + "/serving/engine/memory.current", "1000\n");
    put(sources.cgroupRoot + "/serving/memory.max", "8589934592\n");
    put(sources.cgroupRoot + "/serving/memory.current", "1073741824\n");
    HostMemoryBudget b = usableHostMemory(sources);
    CHECK(b.bytes == (std::uint64_t(7) << 30));
    CHECK_THAT(b.limitedBy, Catch::Contains("cgroup v2") &&
                                Catch::Contains("memory.max 8.0 GiB - memory.current 1.0 GiB"));
  }
  SECTION("cgroup v2 inside a cgroup namespace: the mount's root") {
    put(sources.procRoot + "/self/cgroup", "0::/\n");
    put(sources.cgroupRoot + "/memory.max", "4294967296\n");
    put(sources.cgroupRoot + "/memory.current", "4294967296\n");
    CHECK(usableHostMemory(sources).bytes == 0); // at its limit
  }
  SECTION("cgroup v1, unlimited and limited") {
    put(sources.procRoot + "/self/cgroup", "9:name=systemd:/\n4:cpu,memory:/job/7\n3:cpuset:/\n");
    put(sources.cgroupRoot + "/memory/job/7/memory.limit_in_bytes", "9223372036854771712\n");
    put(sources.cgroupRoot + "/memory/job/7/memory.usage_in_bytes", "5\n");
    CHECK(usableHostMemory(sources).bytes == (std::uint64_t(16) << 30)); // MemAvailable
    put(sources.cgroupRoot + "/memory/job/memory.limit_in_bytes", "2147483648\n");
    put(sources.cgroupRoot + "/memory/job/memory.usage_in_bytes", "536870912\n");
    HostMemoryBudget b = usableHostMemory(sources);
    CHECK(b.bytes == (std::uint64_t(3) << 29));
    CHECK_THAT(b.limitedBy,
               Catch::Contains("cgroup v1") && Catch::Contains("memory.limit_in_bytes"));
  }
  SECTION("garbage and missing files are skipped") {
    put(sources.procRoot + "/self/cgroup", "garbage\n0::/x\n");
    put(sources.cgroupRoot + "/x/memory.max", "12abc\n");
    put(sources.procRoot + "/meminfo", "MemAvailable: lots kB\n");
    CHECK(usableHostMemory(sources).bytes == UINT64_MAX);
  }
  SECTION("the real machine gives a positive figure and says why") {
    HostMemoryBudget b = usableHostMemory();
    CHECK(b.bytes > 0);
    CHECK_FALSE(b.limitedBy.empty());
  }
}

TEST_CASE("loads that need more host memory than the process may use are refused", "[limits]") {
  if (!faults::kCompiledIn) {
    WARN("SKIPPED: fault injection is not compiled in (DHS_FAULT_INJECTION)");
    return;
  }
  struct Restore {
    ~Restore() { faults::disarmAll(); }
  } restore;
  dhs::test::TempDir dir;
  dir.write("manifest.json", dhs::test::stepManifest(2, 1, 1, 4));
  RuntimeConfig config;
  config.layers = 2;
  config.hbmSlots = 64;
  config.hostRows = 1 << 18; // 2 x 2^18 x 1152 B = 576 MiB of host store
  config.newestWindow = 4;
  faults::setHostMemoryLimit(std::uint64_t(256) << 20);
  CHECK_THROWS_MATCHES(
      Runtime(config).loadStep(dir.path()), CapacityError,
      Catch::Matchers::Predicate<CapacityError>([](const CapacityError &e) {
        const std::string m = e.what();
        return m.find("needs 5") != std::string::npos &&
               m.find("MiB of host memory (host store 576.0 MiB") != std::string::npos &&
               m.find("this process may use 256.0 MiB more (a limit set for testing") !=
                   std::string::npos;
      }));
  // Within the limit it loads.
  config.hostRows = 1 << 14;
  Runtime fits(config);
  fits.loadStep(dir.path());
  // Through the C API: DHS_ERROR_OUT_OF_MEMORY.
  dhs_runtime_config c = dhs::test::smallCApiConfig();
  c.host_rows = 1 << 18;
  dhs_runtime *rt = nullptr;
  REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
  CHECK(dhs_runtime_load_step(rt, dir.path().c_str()) == DHS_ERROR_OUT_OF_MEMORY);
  faults::disarmAll();
  CHECK(dhs_runtime_load_step(rt, dir.path().c_str()) == DHS_OK);
  dhs_runtime_destroy(rt);
}

TEST_CASE("every status dhs_runtime.h documents comes from its kind of failure", "[limits][capi]") {
  auto statusOf = [](auto thrown, std::string *message = nullptr) {
    std::string text;
    dhs_status status = DHS_OK;
    try {
      throw thrown;
    } catch (...) {
      status = statusOfException(std::current_exception(), DHS_ERROR_STEP, text);
    }
    if (message)
      *message = text;
    return status;
  };
  std::string message;
  CHECK(statusOf(InputError("a")) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(statusOf(OutOfRangeError("a")) == DHS_ERROR_OUT_OF_RANGE);
  CHECK(statusOf(UnknownRequestError("a")) == DHS_ERROR_UNKNOWN_REQUEST);
  CHECK(statusOf(CapacityError("a")) == DHS_ERROR_OUT_OF_MEMORY);
  CHECK(statusOf(std::bad_alloc()) == DHS_ERROR_OUT_OF_MEMORY);
  CHECK(statusOf(StateError("a")) == DHS_ERROR_STATE);
  CHECK(statusOf(InvariantError("a")) == DHS_ERROR_INVARIANT);
  CHECK(statusOf(DeviceError("a")) == DHS_ERROR_DEVICE);
  CHECK(statusOf(Error("plain"), &message) == DHS_ERROR_STEP); // the entry point's own
  CHECK(message == "plain");
  CHECK(statusOf(std::logic_error("bug"), &message) == DHS_ERROR_INTERNAL);
  CHECK(message == "internal error: bug");
  CHECK(statusOf(42, &message) == DHS_ERROR_INTERNAL);
  CHECK(message == "internal error: an unknown exception");

  // And from real calls, one per status.
  dhs::test::TempDir dir;
  dir.write("manifest.json", dhs::test::stepManifest(2, 1, 1, 4));
  dhs_runtime_config c = dhs::test::smallCApiConfig();
  c.hbm_slots = 16; // room for two requests' protected tokens
  dhs_runtime *rt = nullptr;
  CHECK(dhs_request_finish(nullptr, 1) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_runtime_create(nullptr, &rt) == DHS_ERROR_INVALID_ARGUMENT);
  REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
  CHECK(dhs_request_admit(rt, 1, 0, 10, nullptr) == DHS_ERROR_NOT_LOADED);
  CHECK(dhs_runtime_load_step(rt, (dir.path() + "/none").c_str()) == DHS_ERROR_STEP);
  REQUIRE(dhs_runtime_load_step(rt, dir.path().c_str()) == DHS_OK);
  CHECK(dhs_runtime_set_cuda_graphs(rt, 1) == DHS_ERROR_DEVICE);
  CHECK(dhs_request_finish(rt, 3) == DHS_ERROR_UNKNOWN_REQUEST);
  CHECK(dhs_step_end(rt) == DHS_ERROR_STATE);
  REQUIRE(dhs_request_admit(rt, 1, 4, 10, std::vector<bf16_t>(2 * 4 * 576).data()) == DHS_OK);
  REQUIRE(dhs_request_admit(rt, 2, 0, 10, nullptr) == DHS_OK);
  CHECK(dhs_request_admit(rt, 3, 0, 10, nullptr) == DHS_ERROR_OUT_OF_MEMORY); // 16 slots / 8
  REQUIRE(dhs_step_begin(rt, std::vector<std::uint64_t>{1}.data(), 1) == DHS_OK);
  std::vector<std::int32_t> rows = {0, 1, 2, 4};
  CHECK(dhs_step_select(rt, 0, rows.data(), DHS_MEMORY_HOST) == DHS_ERROR_OUT_OF_RANGE);
  REQUIRE(dhs_step_abort(rt) == DHS_OK);
  dhs_runtime_destroy(rt);
  // DHS_ERROR_INVARIANT and DHS_ERROR_DEVICE from failures that are injected
  // are in FaultInjectionTest.cpp; DHS_ERROR_INTERNAL is what no other
  // status describes (above).
}

TEST_CASE("manifests: every argument's size is bounded", "[limits]") {
  const std::string huge =
      R"({"format": "dhs-step-manifest", "version": 2, "arena_bytes": 0,
          "target": {"chip": "sm_90a", "features": "+ptx80"}, "step": "s",
          "arguments": [{"index": 0, "role": "rows", "kind": "memref", "dtype": "i8",
                         "shape": [2147483647, 2147483647, 2147483647, 2]}],
          "launches": []})";
  CHECK_THROWS_WITH(Manifest::parse(huge, "/tmp", "m.json"),
                    Catch::Contains("m.json: arguments[0].shape") &&
                        Catch::Contains("more than 2^40 elements"));
  std::string fits = huge;
  fits.replace(fits.find("2147483647, 2147483647, 2147483647"), 34, "4, 16, 2, 1152");
  fits.replace(fits.find(", 2]"), 4, "]");
  // (It fails later, for its empty launches: its argument was fine.)
  CHECK_THROWS_WITH(Manifest::parse(fits, "/tmp", "m.json"),
                    Catch::Contains("launches: must be a non-empty array"));
}
