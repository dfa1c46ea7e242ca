//===- TestUtil.h - Helpers shared by the unit tests ------------*- C++ -*-===//

#ifndef DHS_TEST_UNIT_TESTUTIL_H
#define DHS_TEST_UNIT_TESTUTIL_H

#include "runtime/core/Manifest.h"
#include "runtime/core/SparseAttentionProblem.h"
#include "runtime/cuda/CudaDriver.h"

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace dhs::test {

/// A fresh temporary directory, removed with its contents on destruction.
class TempDir {
public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "dhs-unit-XXXXXX").string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!mkdtemp(buffer.data()))
      throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    path_ = buffer.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;

  /// The directory.
  const std::string &path() const { return path_; }

  /// Writes `text` to `name` inside the directory; returns the file's path.
  std::string write(const std::string &name, const std::string &text) const {
    std::string file = (std::filesystem::path(path_) / name).string();
    std::ofstream out(file, std::ios::binary);
    out << text;
    if (!out)
      throw std::runtime_error("cannot write " + file);
    return file;
  }

private:
  std::string path_;
};

/// A small shape for fast tests.
inline runtime::ProblemShape smallShape(std::int64_t B = 2, std::int64_t Q = 2, std::int64_t H = 3,
                                        std::int64_t K = 16) {
  runtime::ProblemShape shape;
  shape.batch = B;
  shape.queries = Q;
  shape.heads = H;
  shape.topk = K;
  shape.softmaxScale = 0.0416666679f; // 1/sqrt(576)
  return shape;
}

/// The directory of the test steps: $DHS_TEST_STEPS_DIR if set (for running
/// the test binary from another checkout), else the source tree's.
inline std::string stepsDir() {
  if (const char *dir = std::getenv("DHS_TEST_STEPS_DIR"))
    return dir;
  return DHS_TEST_STEPS_DIR;
}

/// The directory of steps compiled from examples/ at build time (when the
/// compiler is built): $DHS_COMPILED_STEPS_DIR if set (for running the test
/// binary on another machine), else the build tree's.
inline std::string compiledStepsDir() {
  if (const char *dir = std::getenv("DHS_COMPILED_STEPS_DIR"))
    return dir;
  return DHS_COMPILED_STEPS_DIR;
}

/// The base seed of randomized tests: $DHS_TEST_SEED if set (to replay a
/// failure), else fresh from std::random_device, once per process. Tests
/// print it (INFO) so that a failure names the seed that replays it.
inline std::uint64_t freshSeed() {
  static const std::uint64_t seed = [] {
    if (const char *text = std::getenv("DHS_TEST_SEED"))
      return static_cast<std::uint64_t>(std::strtoull(text, nullptr, 0));
    std::random_device device;
    return (static_cast<std::uint64_t>(device()) << 32) ^ device();
  }();
  return seed;
}

/// A minimal valid PTX module with one empty kernel `k`.
inline const char *kTinyPtx = ".version 8.0\n"
                              ".target sm_90a\n"
                              ".address_size 64\n"
                              "\n"
                              ".visible .entry k()\n"
                              "{\n"
                              "  ret;\n"
                              "}\n";

/// The manifest of the step the build compiled into compiled-steps/`name`,
/// or nothing after saying that the test is skipped (built without the
/// compiler).
inline std::optional<runtime::Manifest> compiledStepOrSkip(const std::string &name) {
  const std::string dir = compiledStepsDir() + "/" + name;
  if (!std::filesystem::exists(dir + "/manifest.json")) {
    WARN("SKIPPED: " << dir << " was not compiled (built without the compiler)");
    return std::nullopt;
  }
  return runtime::Manifest::load(dir);
}

/// The compiled step `name` of a kernel test (no attention), after checking
/// that its launches are `kinds`, in order; nothing after saying that the
/// test is skipped (built without the compiler).
inline std::optional<runtime::Manifest>
kernelStepOrSkip(const std::string &name, std::initializer_list<runtime::abi::LaunchKind> kinds) {
  std::optional<runtime::Manifest> manifest = compiledStepOrSkip(name);
  if (!manifest)
    return manifest;
  REQUIRE_FALSE(manifest->hasAttention());
  REQUIRE(manifest->launches.size() == kinds.size());
  std::size_t i = 0;
  for (runtime::abi::LaunchKind kind : kinds)
    CHECK(manifest->launches[i++].kind == kind);
  return manifest;
}

/// Declares `rng` seeded from freshSeed() + `offset` and names the seed that
/// replays the test (DHS_TEST_SEED).
#define DHS_SEEDED_RNG(rng, offset)                                                                \
  const std::uint64_t rng##Seed = ::dhs::test::freshSeed() + (offset);                             \
  INFO("DHS_TEST_SEED=" << rng##Seed - (offset));                                                  \
  std::mt19937_64 rng(rng##Seed)

/// True when a GPU is usable; otherwise says that the test is skipped.
inline bool gpuOrSkip() {
  const runtime::CudaDriver &cuda = runtime::CudaDriver::instance();
  if (cuda.available())
    return true;
  WARN("SKIPPED (no GPU): " << cuda.unavailableReason());
  return false;
}

} // namespace dhs::test

#endif // DHS_TEST_UNIT_TESTUTIL_H
