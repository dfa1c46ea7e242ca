//===- AcceptRuleTest.cpp - The acceptance rules on the host --------------===//
//
// core/Accept.h: greedy acceptance against a plain replay (ties, shorter
// blocks), and rejection sampling's losslessness: over 10^6 verify blocks
// with fixed p and q and a fixed seed, the first emitted token follows p
// (a chi-square test, its p-value printed), while the drafts alone (q)
// fail the same test.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "runtime/core/Accept.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

using namespace dhs::runtime;

namespace {

/// The regularized upper incomplete gamma function Q(a, x) (series below
/// a + 1, Lentz's continued fraction above).
double upperGamma(double a, double x) {
  if (x <= 0)
    return 1.0;
  const double front = std::exp(-x + a * std::log(x) - std::lgamma(a));
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000 && term > sum * 1e-16; ++n)
      sum += term *= x / (a + n);
    return 1.0 - sum * front;
  }
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    d = std::fabs(d) < tiny ? tiny : d;
    c = b + an / c;
    c = std::fabs(c) < tiny ? tiny : c;
    d = 1 / d;
    h *= d * c;
    if (std::fabs(d * c - 1) < 1e-16)
      break;
  }
  return front * h;
}

/// The p-value of a chi-square test of `counts` against probabilities `p`.
double chiSquarePValue(const std::vector<std::uint64_t> &counts, const std::vector<double> &p) {
  double n = 0, statistic = 0;
  for (std::uint64_t c : counts)
    n += static_cast<double>(c);
  for (std::size_t t = 0; t < p.size(); ++t) {
    const double expected = n * p[t];
    statistic += (static_cast<double>(counts[t]) - expected) *
                 (static_cast<double>(counts[t]) - expected) / expected;
  }
  return upperGamma(0.5 * static_cast<double>(p.size() - 1), 0.5 * statistic);
}

std::int32_t argmaxOf(const float *row, std::int64_t vocab) {
  return static_cast<std::int32_t>(std::max_element(row, row + vocab) - row);
}

} // namespace

TEST_CASE("the chi-square p-value is right", "[accept]") {
  // Q(k/2, x/2) for known quantiles: chi2(1) at 3.841 -> 0.05, chi2(5) at
  // 11.07 -> 0.05, chi2(5) at 1.145 -> 0.95.
  CHECK(upperGamma(0.5, 3.841459 / 2) == Approx(0.05).epsilon(1e-4));
  CHECK(upperGamma(2.5, 11.0705 / 2) == Approx(0.05).epsilon(1e-4));
  CHECK(upperGamma(2.5, 1.145476 / 2) == Approx(0.95).epsilon(1e-4));
}

TEST_CASE("host acceptance: greedy takes the longest matching prefix, then the argmax",
          "[accept]") {
  DHS_SEEDED_RNG(rng, 5100);
  const std::int64_t B = 6, gamma = 4, V = 300;
  std::vector<float> target(B * (gamma + 1) * V);
  for (float &x : target)
    x = static_cast<float>(rng() % 100000) / 1000.0f - 50.0f;
  std::vector<std::int32_t> drafts(B * gamma);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t prefix = b % (gamma + 1), block = b == 5 ? 2 : gamma;
    for (std::int64_t i = 0; i < gamma; ++i) {
      const std::int32_t best = argmaxOf(&target[(b * (gamma + 1) + i) * V], V);
      drafts[b * gamma + i] = i >= block ? -1 : i < prefix ? best : (best + 1) % V;
    }
  }
  // Lane 1: a tie at position 0 goes to the lower token.
  float *row = &target[(1 * (gamma + 1)) * V];
  const std::int32_t top = argmaxOf(row, V), lower = top / 2;
  row[lower] = row[top];
  drafts[1 * gamma] = lower;
  std::vector<std::uint64_t> seeds(B, 0);
  AcceptProblem p;
  p.batch = B;
  p.gamma = gamma;
  p.vocab = V;
  p.drafts = drafts.data();
  p.target = target.data();
  p.seeds = seeds.data();
  std::vector<std::int32_t> accepted(B), next(B);
  acceptOnHost(p, accepted.data(), next.data());
  for (std::int64_t b = 0; b < B; ++b) {
    INFO("lane " << b);
    // Lane 5's block ends after 2 drafts (its prefix 0 rejects at once).
    const std::int32_t want = b == 5 ? 0 : static_cast<std::int32_t>(b % (gamma + 1));
    CHECK(accepted[b] == want);
    CHECK(next[b] == argmaxOf(&target[(b * (gamma + 1) + want) * V], V));
  }
  // A block all of whose drafts match, shorter than gamma: the bonus after it.
  for (std::int64_t i = 0; i < 2; ++i)
    drafts[5 * gamma + i] = argmaxOf(&target[(5 * (gamma + 1) + i) * V], V);
  acceptOnHost(p, accepted.data(), next.data());
  CHECK(accepted[5] == 2);
  CHECK(next[5] == argmaxOf(&target[(5 * (gamma + 1) + 2) * V], V));
}

TEST_CASE("host acceptance: rejection sampling is lossless (chi-square over 10^6 blocks)",
          "[accept]") {
  // Fixed p and q over 6 tokens, gamma = 2, a fixed seed: the first emitted
  // token (the accepted draft, or the sample after its rejection) follows p.
  const std::int64_t gamma = 2, V = 6;
  const std::vector<double> p0 = {0.30, 0.05, 0.20, 0.15, 0.25, 0.05};
  const std::vector<double> q0 = {0.10, 0.30, 0.20, 0.05, 0.05, 0.30};
  std::vector<float> target((gamma + 1) * V), q(gamma * V);
  for (std::int64_t t = 0; t < V; ++t) {
    target[t] = static_cast<float>(p0[t]);
    q[t] = static_cast<float>(q0[t]);
    target[V + t] = target[2 * V + t] = q[V + t] = 1.0f / V; // later positions
  }
  std::mt19937_64 rng(20261201);
  std::discrete_distribution<std::int32_t> fromQ(q0.begin(), q0.end());
  std::uniform_int_distribution<std::int32_t> uniform(0, V - 1);
  const std::int64_t draws = 1000000;
  std::vector<std::uint64_t> emitted(V, 0), drafted(V, 0), shorter(V, 0);
  std::int64_t acceptedFirst = 0;
  std::int32_t drafts[2], accepted = 0, next = 0;
  std::uint64_t seed = 0;
  AcceptProblem p;
  p.rule = AcceptRule::RejectionSampling;
  p.batch = 1;
  p.gamma = gamma;
  p.vocab = V;
  p.drafts = drafts;
  p.target = target.data();
  p.draftProbs = q.data();
  p.seeds = &seed;
  p.step = 17;
  for (std::int64_t i = 0; i < draws; ++i) {
    drafts[0] = fromQ(rng);
    drafts[1] = uniform(rng);
    seed = acceptSeed(7, 1, i);
    acceptOnHost(p, &accepted, &next);
    ++emitted[static_cast<std::size_t>(accepted > 0 ? drafts[0] : next)];
    ++drafted[static_cast<std::size_t>(drafts[0])];
    acceptedFirst += accepted > 0;
  }
  // Blocks of no drafts (per-request gamma 0): the bonus token from p.
  drafts[0] = drafts[1] = -1;
  for (std::int64_t i = 0; i < draws / 10; ++i) {
    seed = acceptSeed(8, 1, i);
    acceptOnHost(p, &accepted, &next);
    REQUIRE(accepted == 0);
    ++shorter[static_cast<std::size_t>(next)];
  }
  const double pValue = chiSquarePValue(emitted, p0);
  const double shorterPValue = chiSquarePValue(shorter, p0);
  const double draftsPValue = chiSquarePValue(drafted, p0);
  std::cout << "rejection sampling, 10^6 blocks over 6 tokens: first emitted token vs p: "
               "chi-square p-value "
            << pValue << " (empty blocks, 10^5: " << shorterPValue
            << "; the drafts alone vs p: " << draftsPValue << ")\n";
  CHECK(pValue > 1e-3);
  CHECK(shorterPValue > 1e-3);
  CHECK(draftsPValue < 1e-12); // the test can tell q from p
  // Acceptance rate: sum_x min(p(x), q(x)) = 0.10+0.05+0.20+0.05+0.05+0.05.
  CHECK(static_cast<double>(acceptedFirst) / draws == Approx(0.50).margin(0.003));
}

TEST_CASE("host acceptance: the kernel's generator, and draws that depend on seed and position",
          "[accept]") {
  // The generator of codegen/AcceptKernel.cpp, written out again.
  auto mix = [](std::uint64_t x) {
    std::uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (std::uint64_t s : {0ull, 1ull, 0xFFFFFFFFFFFFFFFFull, 0x123456789ull})
    for (std::uint64_t c = 0; c < 9; ++c) {
      const std::uint64_t z = mix(mix(mix(s) ^ 3) ^ c);
      CHECK(acceptUniform(s, 3, c) == static_cast<float>(z >> 40) / 16777216.0f);
      CHECK(acceptUniform(s, 3, c) < 1.0f);
    }
  CHECK(acceptSeed(1, 2, 3) == acceptSeed(1, 2, 3));
  CHECK(acceptSeed(1, 2, 3) != acceptSeed(1, 2, 4));
  CHECK(acceptSeed(1, 2, 3) != acceptSeed(1, 3, 3));
  CHECK(acceptSeed(1, 2, 3) != acceptSeed(2, 2, 3));
}

TEST_CASE("host acceptance: distribution checks", "[accept]") {
  std::vector<float> p = {0.25f, 0.25f, 0.5f};
  CHECK(checkAcceptRow(p.data(), 3, true).empty());
  p[2] = 0.4f;
  CHECK_THAT(checkAcceptRow(p.data(), 3, true), Catch::Contains("sums to 0.9"));
  CHECK(checkAcceptRow(p.data(), 3, false).empty()); // greedy scores need not sum to 1
  p[1] = -1.0f;
  CHECK(checkAcceptRow(p.data(), 3, true) == "entry 1 is -1");
  p[1] = std::numeric_limits<float>::infinity();
  CHECK(checkAcceptRow(p.data(), 3, true) == "entry 1 is inf");
  CHECK(checkAcceptRow(p.data(), 3, false).empty());
  p[1] = std::nanf("");
  CHECK(checkAcceptRow(p.data(), 3, false) == "entry 1 is nan");
}
