//===- AcceptRuleTest.cpp - The acceptance rules on the host --------------===//
//
// core/Accept.h: greedy acceptance against a plain replay (ties, shorter
// blocks), and rejection sampling's losslessness: over 10^6 verify blocks
// with fixed p and q and a fixed seed, the first emitted token follows p
// (a chi-square test, its p-value printed), while the drafts alone (q)
// fail the same test (AcceptLossless.h, shared with the kernel's test).
//
//===----------------------------------------------------------------------===//

#include "AcceptLossless.h"
#include "TestUtil.h"

#include "runtime/core/Accept.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace dhs::runtime;
using namespace dhs::test;

namespace {

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
  // The fixed problem of AcceptLossless.h (AcceptTest runs it through the
  // generated kernel): the first emitted token (the accepted draft, or the
  // sample after its rejection) follows p.
  const LosslessProblem problem;
  const std::vector<float> target = problem.targetRows(), q = problem.draftRows();
  LosslessDrafts draws(problem);
  LosslessTally tally;
  std::int32_t drafts[LosslessProblem::gamma], accepted = 0, next = 0;
  std::uint64_t seed = 0;
  AcceptProblem p;
  p.rule = AcceptRule::RejectionSampling;
  p.batch = 1;
  p.gamma = LosslessProblem::gamma;
  p.vocab = LosslessProblem::vocab;
  p.drafts = drafts;
  p.target = target.data();
  p.draftProbs = q.data();
  p.seeds = &seed;
  p.step = LosslessProblem::step;
  for (std::int64_t i = 0; i < LosslessProblem::blocks; ++i) {
    draws.next(drafts);
    seed = LosslessProblem::seed(i);
    acceptOnHost(p, &accepted, &next);
    tally.addBlock(drafts, accepted, next);
  }
  // Blocks of no drafts (per-request gamma 0): the bonus token from p.
  drafts[0] = drafts[1] = -1;
  for (std::int64_t i = 0; i < LosslessProblem::emptyBlocks; ++i) {
    seed = LosslessProblem::emptySeed(i);
    acceptOnHost(p, &accepted, &next);
    REQUIRE(accepted == 0);
    tally.addEmpty(next);
  }
  checkLossless(problem, tally, "host");
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
