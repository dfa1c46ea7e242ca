//===- TopKTest.cpp - The generated top-k kernel on a GPU -----------------===//
//
// examples/topk_step.mlir, compiled at build time: for each request and query
// position, the 512 highest indexer scores among the rows the query may see.
// On a GPU the ids must equal a CPU selection (score descending, ties to the
// lower id, -1 past the visible rows) on fresh random scores that include
// ties, negative scores and histories shorter than k; a history longer than
// its scores must set status bit 16 and select within the scored rows; and
// the host's selection (core/TopK.h, what every backend's dhs_topk runs)
// must give the kernel's ids bit for bit. The host selection is checked
// everywhere against an independent reference over every kind of float
// (ties, +-0, +-inf, NaNs of both signs), and through the runtime and the C
// API with a status per documented error.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"
#include "RuntimeTestUtil.h"

#include "runtime/Runtime.h"
#include "runtime/capi/dhs_runtime.h"
#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/TopK.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

using namespace dhs::runtime;

TEST_CASE("the generated top-k kernel selects the highest-scoring rows", "[cuda][gpu][topk]") {
  DHS_GPU_KERNEL_STEP(manifest, "topk", abi::LaunchKind::TopK);
  DHS_SEEDED_RNG(rng, 1700);

  // scores [4,2,16384] f32, history_len [4] i32, rows [4,2,512] i32.
  const std::size_t B = 4, Q = 2, N = 16384, K = 512;
  std::vector<float> scores(B * Q * N);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float &s : scores)
    // One score in eight is drawn from a handful of values: many ties.
    s = rng() % 8 == 0 ? static_cast<float>(rng() % 5) - 2.0f : normal(rng);
  // A long history, a history below k, one beyond the scores, one of 1 row.
  std::vector<std::int32_t> length = {static_cast<std::int32_t>(4000 + rng() % 12000),
                                      static_cast<std::int32_t>(100 + rng() % 300),
                                      static_cast<std::int32_t>(N), 1};

  for (bool beyond : {false, true}) {
    INFO((beyond ? "with" : "without") << " a history longer than its scores");
    if (beyond)
      length[2] = static_cast<std::int32_t>(N + 7);
    dhs::test::KernelRun run(manifest);
    run.argument(scores, "scores");
    run.argument(length, "history_len");
    run.buffers.arguments.push_back(run.filled(B * Q * K, 12345, "rows"));
    run.launch("topk");
    const std::vector<std::int32_t> rows =
        run.download<std::int32_t>(run.buffers.arguments[2], B * Q * K, "rows");
    const std::uint32_t word = run.status();
    // The selection stays within the scored rows either way.
    CHECK(word == (beyond ? static_cast<std::uint32_t>(abi::kStatusHistoryBeyondScores) : 0u));

    std::size_t mismatches = 0;
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t q = 0; q < Q; ++q) {
        const float *row = &scores[(b * Q + q) * N];
        std::int64_t visible =
            std::clamp<std::int64_t>(length[b] - static_cast<std::int64_t>(Q - 1 - q), 0, N);
        std::vector<std::int32_t> ids(static_cast<std::size_t>(visible));
        std::iota(ids.begin(), ids.end(), 0);
        std::size_t taken = std::min<std::size_t>(K, ids.size());
        std::partial_sort(ids.begin(), ids.begin() + taken, ids.end(),
                          [&](std::int32_t x, std::int32_t y) {
                            return row[x] != row[y] ? row[x] > row[y] : x < y;
                          });
        for (std::size_t k = 0; k < K; ++k) {
          std::int32_t expected = k < taken ? ids[k] : -1;
          std::int32_t got = rows[(b * Q + q) * K + k];
          if (got != expected && mismatches++ < 5)
            UNSCOPED_INFO("request " << b << " query " << q << " k " << k << ": got " << got
                                     << ", expected " << expected);
        }
      }
    CHECK(mismatches == 0);
    // The host selection the runtime runs gives the kernel's ids and status.
    std::vector<std::int32_t> host(B * Q * K, 12345);
    const TopKShape shape{static_cast<std::int64_t>(B), static_cast<std::int64_t>(Q),
                          static_cast<std::int64_t>(N), static_cast<std::int64_t>(K)};
    CHECK(selectTopK(shape, static_cast<std::int64_t>(B), scores.data(), length.data(),
                     host.data()) == word);
    CHECK(host == rows);
  }
}

namespace {

/// Scores of every kind: normal values, a handful of tied values, +-0,
/// +-inf and NaNs of both signs.
std::vector<float> mixedScores(std::mt19937_64 &rng, std::size_t count) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  auto bits = [](std::uint32_t b) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
  };
  const float specials[] = {
      0.0f, -0.0f, INFINITY, -INFINITY, bits(0x7fc00000u), bits(0xffc00000u), bits(0x7fc00001u),
      1.0f, -2.0f};
  std::vector<float> scores(count);
  for (float &s : scores)
    s = rng() % 6 == 0 ? specials[rng() % std::size(specials)] : normal(rng);
  return scores;
}

/// An independent reference of the kernel's order: NaNs with the sign bit
/// below everything, then the numbers ascending with -0 below +0, then the
/// other NaNs, NaNs among themselves by payload; equal scores to the lower
/// id.
bool ranksHigher(float a, std::int32_t ia, float b, std::int32_t ib) {
  auto rank = [](float x) { return std::isnan(x) ? (std::signbit(x) ? 0 : 2) : 1; };
  auto payload = [](float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u & 0x7fffffu;
  };
  if (rank(a) != rank(b))
    return rank(a) > rank(b);
  if (rank(a) == 1 && a != b)
    return a > b;
  if (rank(a) == 1 && std::signbit(a) != std::signbit(b))
    return !std::signbit(a);
  if (rank(a) != 1 && payload(a) != payload(b))
    return rank(a) == 2 ? payload(a) > payload(b) : payload(a) < payload(b);
  return ia < ib;
}

/// The top-k rule by its definition: per lane below `batch` and position q,
/// the ids [0, visible) sorted by ranksHigher, the first K of them, -1 past
/// the visible ones (visible = length[b] - (Q - 1 - q), clamped to
/// [0, N]); lanes from `batch` on keep `untouched`.
std::vector<std::int32_t> referenceTopK(const TopKShape &shape, std::int64_t batch,
                                        const std::vector<float> &scores,
                                        const std::vector<std::int32_t> &length,
                                        std::int32_t untouched) {
  const std::int64_t Q = shape.positions, N = shape.scored, K = shape.k;
  std::vector<std::int32_t> rows(static_cast<std::size_t>(shape.batch * Q * K), untouched);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t q = 0; q < Q; ++q) {
      const float *row = &scores[static_cast<std::size_t>((b * Q + q) * N)];
      const std::int64_t visible = std::clamp<std::int64_t>(length[b] - (Q - 1 - q), 0, N);
      std::vector<std::int32_t> ids(static_cast<std::size_t>(visible));
      std::iota(ids.begin(), ids.end(), 0);
      std::sort(ids.begin(), ids.end(),
                [&](std::int32_t x, std::int32_t y) { return ranksHigher(row[x], x, row[y], y); });
      for (std::int64_t k = 0; k < K; ++k)
        rows[static_cast<std::size_t>((b * Q + q) * K + k)] =
            k < visible ? ids[static_cast<std::size_t>(k)] : -1;
    }
  return rows;
}

} // namespace

TEST_CASE("the host top-k selects as the kernel does: every float, ties, causal bounds", "[topk]") {
  DHS_SEEDED_RNG(rng, 1710);
  const std::int64_t B = 5, Q = 3, N = 300, K = 40;
  const TopKShape shape{B, Q, N, K};
  for (int round = 0; round < 4; ++round) {
    const std::vector<float> scores = mixedScores(rng, B * Q * N);
    // Histories: empty, below K, within the scores, all of them, and (round
    // 3) one beyond them.
    std::vector<std::int32_t> length = {0, static_cast<std::int32_t>(1 + rng() % K),
                                        static_cast<std::int32_t>(K + rng() % (N - K)),
                                        static_cast<std::int32_t>(N), 2};
    if (round == 3)
      length[4] = N + 5;
    std::vector<std::int32_t> rows(B * Q * K, 12345);
    const std::uint32_t status = selectTopK(shape, B, scores.data(), length.data(), rows.data());
    CHECK(status ==
          (round == 3 ? static_cast<std::uint32_t>(abi::kStatusHistoryBeyondScores) : 0u));
    std::int64_t selected = 0;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t q = 0; q < Q; ++q) {
        const float *row = &scores[(b * Q + q) * N];
        const std::int64_t visible = std::clamp<std::int64_t>(length[b] - (Q - 1 - q), 0, N);
        std::vector<std::int32_t> ids(static_cast<std::size_t>(visible));
        std::iota(ids.begin(), ids.end(), 0);
        std::sort(ids.begin(), ids.end(), [&](std::int32_t x, std::int32_t y) {
          return ranksHigher(row[x], x, row[y], y);
        });
        for (std::int64_t k = 0; k < K; ++k) {
          const std::int32_t expected = k < visible ? ids[static_cast<std::size_t>(k)] : -1;
          INFO("lane " << b << " position " << q << " k " << k);
          REQUIRE(rows[(b * Q + q) * K + k] == expected);
          selected += expected >= 0;
        }
      }
    CHECK(selected > K * Q); // not all -1
  }
}

TEST_CASE("top-k through the runtime and the C API: the kernel's selection, a status per error",
          "[topk][capi]") {
  const std::string step = dhs::test::compiledStepsDir() + "/topk";
  if (!dhs::test::compiledStepOrSkip("topk"))
    return;
  DHS_SEEDED_RNG(rng, 1720);
  // The step: scores [4, 2, 16384], rows [4, 2, 512].
  const std::int64_t B = 4, Q = 2, N = 16384, K = 512, batch = 3;
  dhs_runtime_config config;
  dhs_runtime_config_init(&config);
  dhs_runtime *rt = nullptr;
  REQUIRE(dhs_runtime_create(&config, &rt) == DHS_OK);
  const std::vector<float> scores = mixedScores(rng, B * Q * N);
  std::vector<std::int32_t> length = {static_cast<std::int32_t>(1 + rng() % N), 300, 0, 9};
  std::vector<std::int32_t> rows(B * Q * K, 777);
  CHECK(dhs_topk(nullptr, scores.data(), length.data(), batch, rows.data()) ==
        DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_topk(rt, scores.data(), length.data(), batch, rows.data()) == DHS_ERROR_NOT_LOADED);
  CHECK_THAT(std::string(dhs_last_error()), Catch::Contains("dhs_runtime_load_topk_step"));
  CHECK(dhs_runtime_load_topk_step(nullptr, step.c_str(), nullptr) == DHS_ERROR_INVALID_HANDLE);
  CHECK(dhs_runtime_load_topk_step(rt, nullptr, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
  const std::string accept = dhs::test::compiledStepsDir() + "/accept";
  CHECK(dhs_runtime_load_topk_step(rt, accept.c_str(), nullptr) == DHS_ERROR_STEP);
  CHECK_THAT(std::string(dhs_last_error()), Catch::Contains("is not a top-k step"));
  CHECK(dhs_runtime_load_topk_step(rt, "/nonexistent/topk", nullptr) == DHS_ERROR_STEP);
  {
    // A top-k step with an argument the runtime does not pass is refused.
    Manifest extra = Manifest::load(step, {/*requirePtx=*/false});
    Argument counts = extra.argument(ArgumentRole::HistoryLen);
    counts.role = ArgumentRole::Accepted;
    counts.index = static_cast<int>(extra.arguments.size());
    extra.arguments.push_back(counts);
    CHECK_THROWS_WITH(topKShapeOf(extra),
                      Catch::Contains("takes argument 3 (accepted), which the runtime does not "
                                      "pass it (it passes scores, history_len, row_ids)"));
  }
  dhs_topk_shape shape{};
  REQUIRE(dhs_runtime_load_topk_step(rt, step.c_str(), &shape) == DHS_OK);
  CHECK(shape.batch == B);
  CHECK(shape.positions == Q);
  CHECK(shape.scored == N);
  CHECK(shape.k == K);
  CHECK(dhs_runtime_load_topk_step(rt, step.c_str(), nullptr) == DHS_ERROR_STATE);

  // Bad input: nothing written.
  CHECK(dhs_topk(rt, nullptr, length.data(), batch, rows.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_topk(rt, scores.data(), nullptr, batch, rows.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_topk(rt, scores.data(), length.data(), batch, nullptr) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_topk(rt, scores.data(), length.data(), 0, rows.data()) == DHS_ERROR_INVALID_ARGUMENT);
  CHECK(dhs_topk(rt, scores.data(), length.data(), B + 1, rows.data()) ==
        DHS_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(dhs_last_error()), Catch::Contains("takes 1 .. 4"));
  for (std::int32_t bad : {-1, static_cast<std::int32_t>(N + 1)}) {
    std::vector<std::int32_t> badLength = length;
    badLength[1] = bad;
    CHECK(dhs_topk(rt, scores.data(), badLength.data(), batch, rows.data()) ==
          DHS_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(std::string(dhs_last_error()), Catch::Contains("of lane 1 is outside 0 .. 16384"));
  }
  CHECK(std::all_of(rows.begin(), rows.end(), [](std::int32_t r) { return r == 777; }));

  // A batch below B: the kernel's selection for those lanes, the rest untouched.
  REQUIRE(dhs_topk(rt, scores.data(), length.data(), batch, rows.data()) == DHS_OK);
  CHECK(std::string(dhs_last_error()).empty());
  // (Against the rule's definition, not selectTopK: the CPU backend's
  // dhs_topk runs selectTopK itself.)
  CHECK(rows == referenceTopK(TopKShape{B, Q, N, K}, batch, scores, length, 777));
  CHECK(rows[0] >= 0);
  CHECK(rows[(2 * Q) * K] == -1); // lane 2 has no history
  dhs_runtime_destroy(rt);
}

TEST_CASE("a kernel whose parameters are not its launch's is refused when CUDA loads it",
          "[topk][cuda][gpu]") {
  // The driver reads as many parameters as the kernel declares: a manifest
  // that lists fewer (here the top-k launch without its status word: 23 of
  // the kernel's 28 values) would have it read past the list.
  if (!dhs::test::gpuOrSkip())
    return;
  std::optional<Manifest> manifest = dhs::test::compiledStepOrSkip("topk");
  if (!manifest)
    return;
  REQUIRE(manifest->launches.front().params.back().role == abi::ParamRole::Status);
  REQUIRE(manifest->launches.front().flattenedParamCount() == 28);
  Runtime rt(dhs::test::testConfig(2, 1, BackendKind::Cuda));
  rt.loadStep(dhs::test::stepsDir() + "/naive");
  Manifest shorter = *manifest;
  shorter.launches.front().params.pop_back();
  CHECK_THROWS_WITH(rt.loadTopKStep(shorter),
                    Catch::Contains("kernel 'topk' takes 28 parameters (224 bytes); its launch in "
                                    "the manifest passes 23 of 8 bytes"));
  // Nothing was loaded: the step as compiled loads after it.
  rt.loadTopKStep(*manifest);
}

TEST_CASE("top-k on a CUDA runtime runs the kernel: the host's rows", "[topk][cuda][gpu]") {
  if (!dhs::test::gpuOrSkip())
    return;
  const std::string step = dhs::test::compiledStepsDir() + "/topk";
  if (!dhs::test::compiledStepOrSkip("topk"))
    return;
  DHS_SEEDED_RNG(rng, 1730);
  const std::int64_t B = 4, Q = 2, N = 16384, K = 512;
  for (bool before : {true, false}) {
    INFO("top-k step loaded " << (before ? "before" : "after") << " the attention step");
    Runtime rt(dhs::test::testConfig(2, 1, BackendKind::Cuda));
    if (before)
      rt.loadTopKStep(step);
    rt.loadStep(dhs::test::stepsDir() + "/naive");
    if (!before)
      rt.loadTopKStep(step);
    const std::vector<float> scores = mixedScores(rng, B * Q * N);
    std::vector<std::int32_t> length = {static_cast<std::int32_t>(rng() % N), 200, 0,
                                        static_cast<std::int32_t>(N)};
    for (std::int64_t batch : {B, std::int64_t(3)}) {
      std::vector<std::int32_t> rows(B * Q * K, 777), expected(B * Q * K, 777);
      rt.topK(scores.data(), length.data(), batch, rows.data());
      CHECK(selectTopK(TopKShape{B, Q, N, K}, batch, scores.data(), length.data(),
                       expected.data()) == 0);
      CHECK(rows == expected);
    }
  }
}
