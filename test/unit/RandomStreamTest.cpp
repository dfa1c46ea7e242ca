//===- RandomStreamTest.cpp - Counter-based streams, normals, parallelFor ===//

#include "TestUtil.h"

#include "runtime/core/Parallel.h"
#include "runtime/core/RandomStream.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace dhs::runtime;

TEST_CASE("random streams are named by a key and an index", "[random]") {
  auto draw = [](std::uint64_t key, std::uint64_t index) {
    RandomStream rng(key, index);
    std::vector<std::uint64_t> out(16);
    for (std::uint64_t &x : out)
      x = rng();
    return out;
  };
  CHECK(draw(7, 3) == draw(7, 3));
  CHECK(draw(7, 3) != draw(7, 4));
  CHECK(draw(7, 3) != draw(8, 3));
  // Neighbouring streams are not shifted copies of each other.
  std::vector<std::uint64_t> a = draw(7, 3), b = draw(7, 4);
  for (std::uint64_t x : a)
    for (std::uint64_t y : b)
      CHECK(x != y);
  // Each bit is set about half the time.
  RandomStream rng(1, 0);
  std::vector<int> ones(64);
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    std::uint64_t x = rng();
    for (int bit = 0; bit < 64; ++bit)
      ones[bit] += static_cast<int>((x >> bit) & 1);
  }
  for (int bit = 0; bit < 64; ++bit) {
    INFO("bit " << bit);
    CHECK(std::abs(ones[bit] - n / 2) < 5 * 71); // 5 sigma
  }
}

TEST_CASE("normalBf16 draws N(0,1) rounded to bf16", "[random]") {
  // The exact distribution: all the mass, the central interval where it
  // should be (bf16 rounding moves the edge by at most half a step).
  double total = 0, withinOne = 0;
  for (std::uint32_t m = 0; m < 0x7F80; ++m) {
    const double p = normalBf16Probability(static_cast<bf16_t>(m));
    REQUIRE(p >= 0.0);
    total += p;
    if (bf16ToFloat(static_cast<bf16_t>(m)) <= 1.0f)
      withinOne += p;
  }
  CHECK(std::fabs(total - 1.0) < 1e-12);
  CHECK(std::fabs(withinOne - std::erf(1.0 / std::sqrt(2.0))) < 3e-3);

  // Samples, from many streams: never zero or non-finite, and the empirical
  // distribution of the magnitudes is the exact one.
  const std::uint64_t key = dhs::test::freshSeed();
  INFO("key " << key);
  const std::vector<float> edges = {0.01f, 0.25f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f};
  std::vector<double> exact(edges.size()), counted(edges.size());
  for (std::size_t e = 0; e < edges.size(); ++e)
    for (std::uint32_t m = 0; m < 0x7F80 && bf16ToFloat(static_cast<bf16_t>(m)) <= edges[e]; ++m)
      exact[e] += normalBf16Probability(static_cast<bf16_t>(m));
  const int streams = 2000, perStream = 1000;
  const double n = static_cast<double>(streams) * perStream;
  double sum = 0, squares = 0, negative = 0;
  for (int s = 0; s < streams; ++s) {
    RandomStream rng(key, static_cast<std::uint64_t>(s));
    for (int i = 0; i < perStream; ++i) {
      const bf16_t value = normalBf16(rng);
      REQUIRE((value & 0x7FFF) != 0);
      REQUIRE((value & 0x7F80) != 0x7F80);
      const double x = bf16ToFloat(value);
      sum += x;
      squares += x * x;
      negative += x < 0;
      for (std::size_t e = 0; e < edges.size(); ++e)
        counted[e] += std::fabs(x) <= edges[e];
    }
  }
  CHECK(std::fabs(sum / n) < 0.004);           // 5.6 sigma
  CHECK(std::fabs(squares / n - 1.0) < 0.006); // 6 sigma
  CHECK(std::fabs(negative / n - 0.5) < 0.002);
  for (std::size_t e = 0; e < edges.size(); ++e) {
    INFO("P(|x| <= " << edges[e] << ") = " << exact[e]);
    const double sigma = std::sqrt(exact[e] * (1 - exact[e]) / n);
    CHECK(std::fabs(counted[e] / n - exact[e]) < 6 * sigma + 1e-6);
  }

  // normalsBf16 is normalBf16 in order.
  RandomStream a(key, 99), b(key, 99);
  std::vector<bf16_t> many(37);
  normalsBf16(a, many.data(), many.size());
  for (bf16_t value : many)
    CHECK(value == normalBf16(b));
}

TEST_CASE("parallelFor covers every index once and hands back exceptions", "[random][cpu]") {
  for (unsigned threads : {1u, 2u, 5u, 0u})
    for (std::int64_t count : {0, 1, 7, 1000})
      for (std::int64_t grain : {1, 3, 64}) {
        INFO("threads " << threads << " count " << count << " grain " << grain);
        std::vector<std::atomic<int>> seen(static_cast<std::size_t>(count));
        for (auto &s : seen)
          s = 0;
        std::atomic<bool> tooLong{false};
        // On one thread, one call covers everything.
        const unsigned effective = threads == 0 ? hardwareThreads() : threads;
        parallelFor(count, grain, threads, [&](std::int64_t begin, std::int64_t end) {
          if (effective > 1 && end - begin > grain)
            tooLong = true;
          for (std::int64_t i = begin; i < end; ++i)
            ++seen[static_cast<std::size_t>(i)];
        });
        CHECK_FALSE(tooLong);
        for (auto &s : seen)
          REQUIRE(s == 1);
      }
  // A chunk's exception reaches the caller after every thread has finished.
  // (Chunks not yet taken when it is caught are not run, but how many that
  // leaves depends on scheduling: on two cores the other threads may finish
  // every chunk first, so no bound is checked.)
  std::atomic<std::int64_t> ran{0};
  CHECK_THROWS_WITH(parallelFor(1000, 1, 4,
                                [&](std::int64_t begin, std::int64_t) {
                                  ++ran;
                                  if (begin == 10)
                                    throw std::runtime_error("chunk 10 failed");
                                }),
                    "chunk 10 failed");
  CHECK(ran >= 11);
  CHECK(ran <= 1000);
}

TEST_CASE("parallelFor inside a body and from two threads at once covers every index once",
          "[random][cpu]") {
  // The pool runs one job at a time: a call from inside a body, or from a
  // second thread while the pool is busy, runs on its own thread.
  constexpr std::int64_t outer = 64, inner = 300;
  std::vector<std::atomic<int>> seen(static_cast<std::size_t>(outer * inner));
  for (auto &s : seen)
    s = 0;
  auto nested = [&](std::int64_t part, std::int64_t parts) {
    parallelFor(outer / parts, 1, 0, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o)
        parallelFor(inner, 7, 0, [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i)
            ++seen[static_cast<std::size_t>((part * (outer / parts) + o) * inner + i)];
        });
    });
  };
  std::thread other([&] { nested(1, 2); });
  nested(0, 2);
  other.join();
  for (auto &s : seen)
    REQUIRE(s == 1);
  // And the pool still serves a plain call afterwards, on several threads
  // where the machine has them.
  std::mutex idsMutex;
  std::set<std::thread::id> ids;
  parallelFor(256, 1, 0, [&](std::int64_t, std::int64_t) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::lock_guard<std::mutex> lock(idsMutex);
    ids.insert(std::this_thread::get_id());
  });
  CHECK(ids.size() <= hardwareThreads());
  if (hardwareThreads() > 1)
    CHECK(ids.size() > 1);
}
