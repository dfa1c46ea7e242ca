//===- TopKTest.cpp - The generated top-k kernel on a GPU -----------------===//
//
// examples/topk_step.mlir, compiled at build time: for each request and query
// position, the 512 highest indexer scores among the rows the query may see.
// On a GPU the ids must equal a CPU selection (score descending, ties to the
// lower id, -1 past the visible rows) on fresh random scores that include
// ties, negative scores and histories shorter than k; a history longer than
// its scores must set status bit 16 and select within the scored rows.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include "runtime/core/Manifest.h"

#include <catch2/catch.hpp>

#include <algorithm>
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
  }
}
