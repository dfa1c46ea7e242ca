//===- JitLinkTest.cpp - nvJitLink linking and cubin inspection -----------===//

#include "TestUtil.h"

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"
#include "runtime/cuda/JitLink.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

using namespace dhs::runtime;

namespace {

/// True (after a warning) when nvJitLink cannot be loaded here.
bool skipWithoutJitLink() {
  const JitLink &jitLink = JitLink::instance();
  if (jitLink.available())
    return false;
  WARN("SKIPPED: nvJitLink unavailable: " << jitLink.unavailableReason());
  return true;
}

} // namespace

TEST_CASE("nvJitLink links a tiny PTX module", "[jitlink]") {
  if (skipWithoutJitLink())
    return;
  const JitLink &jitLink = JitLink::instance();
  INFO("nvJitLink " << jitLink.version() << " from " << jitLink.libraryName());
  LinkedCubin linked = jitLink.linkPtx(dhs::test::kTinyPtx, "sm_90a", "tiny.ptx");
  REQUIRE(linked.cubin.size() > 64);
  CHECK(std::memcmp(linked.cubin.data(),
                    "\x7f"
                    "ELF",
                    4) == 0);
  CHECK(cubinFunctionNames(linked.cubin) == std::vector<std::string>{"k"});
  // Portable PTX links for later architectures too; arch-specific does not.
  std::string portable = dhs::test::kTinyPtx;
  portable.replace(portable.find("sm_90a"), 6, "sm_80");
  CHECK(cubinFunctionNames(jitLink.linkPtx(portable, "sm_100", "tiny80.ptx").cubin) ==
        std::vector<std::string>{"k"});
  CHECK_THROWS_WITH(jitLink.linkPtx(dhs::test::kTinyPtx, "sm_100", "tiny.ptx"),
                    Catch::Contains("cannot link tiny.ptx for sm_100"));
}

TEST_CASE("nvJitLink rejects garbage PTX with its error log", "[jitlink]") {
  if (skipWithoutJitLink())
    return;
  const JitLink &jitLink = JitLink::instance();
  const char *garbage = ".version 8.0\n.target sm_90a\n.address_size 64\n"
                        ".visible .entry k() { this is not ptx; }\n";
  try {
    jitLink.linkPtx(garbage, "sm_90a", "garbage.ptx");
    FAIL("garbage PTX linked");
  } catch (const Error &error) {
    std::string message = error.what();
    CHECK_THAT(message, Catch::Contains("cannot link garbage.ptx for sm_90a"));
    CHECK_THAT(message, Catch::Contains("NVJITLINK_ERROR_PTX_COMPILE"));
    // The log is folded into the one-line message.
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.size() > std::strlen("cannot link garbage.ptx for sm_90a: "
                                       "nvJitLinkComplete failed with "
                                       "NVJITLINK_ERROR_PTX_COMPILE"));
  }
  // sm_90a-only PTX cannot target an older architecture.
  CHECK_THROWS_AS(jitLink.linkPtx(dhs::test::kTinyPtx, "sm_80", "tiny.ptx"), Error);
  CHECK_THROWS_WITH(jitLink.linkPtx(dhs::test::kTinyPtx, "sm_9", "tiny.ptx"),
                    Catch::Contains("'sm_9' is not an architecture"));
  CHECK_THROWS_WITH(jitLink.linkPtx("", "sm_90a", "empty.ptx"),
                    Catch::Contains("the PTX is empty"));
}

TEST_CASE("the naive test step's PTX links and has its kernel", "[jitlink]") {
  if (skipWithoutJitLink())
    return;
  Manifest manifest = Manifest::load(dhs::test::stepsDir() + "/naive");
  for (const Launch &launch : manifest.launches) {
    LinkedCubin linked =
        JitLink::instance().linkPtx(readPtxFile(launch.ptxPath), "sm_90a", launch.ptxPath);
    std::vector<std::string> names = cubinFunctionNames(linked.cubin);
    CHECK(std::find(names.begin(), names.end(), launch.kernel) != names.end());
  }
}

TEST_CASE("architecture names", "[jitlink]") {
  CHECK(isChipName("sm_90a"));
  CHECK(isChipName("sm_90"));
  CHECK(isChipName("sm_100f"));
  CHECK(isChipName("sm_120"));
  CHECK_FALSE(isChipName("sm_9"));
  CHECK_FALSE(isChipName("sm_90ab"));
  CHECK_FALSE(isChipName("compute_90"));
  CHECK_FALSE(isChipName("sm_1000"));
  CHECK_FALSE(isChipName(""));
}

TEST_CASE("cubin inspection rejects malformed images without crashing", "[jitlink]") {
  CHECK_THROWS_WITH(cubinFunctionNames({}), Catch::Contains("malformed cubin"));
  CHECK_THROWS_WITH(cubinFunctionNames(std::vector<std::uint8_t>(100, 0x41)),
                    Catch::Contains("no ELF magic"));
  if (skipWithoutJitLink())
    return;
  std::vector<std::uint8_t> cubin =
      JitLink::instance().linkPtx(dhs::test::kTinyPtx, "sm_90a", "tiny.ptx").cubin;
  // Every truncation is rejected (or parsed) without reading past the end.
  for (std::size_t size = 0; size < cubin.size(); size += 37) {
    std::vector<std::uint8_t> truncated(cubin.begin(), cubin.begin() + size);
    try {
      cubinFunctionNames(truncated);
    } catch (const Error &error) {
      REQUIRE_THAT(error.what(), Catch::Contains("malformed cubin"));
    }
  }
  // Corrupted section offsets are caught.
  std::vector<std::uint8_t> corrupt = cubin;
  std::uint64_t hugeOffset = ~0ull / 2;
  std::memcpy(corrupt.data() + 0x28, &hugeOffset, sizeof(hugeOffset)); // e_shoff
  CHECK_THROWS_WITH(cubinFunctionNames(corrupt), Catch::Contains("malformed cubin"));
}
