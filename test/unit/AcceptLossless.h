//===- AcceptLossless.h - Chi-square test of lossless sampling --*- C++ -*-===//
//
// What the host rule's test (AcceptRuleTest) and the generated kernel's
// (AcceptTest) share: the chi-square p-value, and one fixed problem (p, q
// over 6 tokens, gamma = 2, drafts and seeds from fixed seeds) whose first
// emitted token must follow p over 10^6 verify blocks, with its two
// controls: blocks of no drafts (the bonus token from p) and the drafts
// alone (drawn from q, which the test must tell from p).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_TEST_UNIT_ACCEPTLOSSLESS_H
#define DHS_TEST_UNIT_ACCEPTLOSSLESS_H

#include "runtime/core/Accept.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace dhs::test {

/// The regularized upper incomplete gamma function Q(a, x) (series below
/// a + 1, Lentz's continued fraction above).
inline double upperGamma(double a, double x) {
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
inline double chiSquarePValue(const std::vector<std::uint64_t> &counts,
                              const std::vector<double> &p) {
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

/// The fixed problem: p and q over 6 tokens at the first position (uniform
/// at the later ones), gamma = 2, step counter 17. Block i's seed is
/// acceptSeed(7, 1, i); its drafts come, in block order, from one
/// mt19937_64 seeded 20261201 (draft 0 from q, draft 1 uniform). The empty
/// blocks' seeds are acceptSeed(8, 1, i).
struct LosslessProblem {
  static constexpr std::int64_t gamma = 2, vocab = 6;
  static constexpr std::int64_t blocks = 1000000, emptyBlocks = 100000;
  static constexpr std::uint64_t step = 17;
  const std::vector<double> p = {0.30, 0.05, 0.20, 0.15, 0.25, 0.05};
  const std::vector<double> q = {0.10, 0.30, 0.20, 0.05, 0.05, 0.30};

  /// One block's target rows, [gamma + 1][vocab].
  std::vector<float> targetRows() const {
    std::vector<float> rows((gamma + 1) * vocab, 1.0f / vocab);
    for (std::int64_t t = 0; t < vocab; ++t)
      rows[t] = static_cast<float>(p[t]);
    return rows;
  }
  /// One block's drafter rows, [gamma][vocab].
  std::vector<float> draftRows() const {
    std::vector<float> rows(gamma * vocab, 1.0f / vocab);
    for (std::int64_t t = 0; t < vocab; ++t)
      rows[t] = static_cast<float>(q[t]);
    return rows;
  }
  static std::uint64_t seed(std::int64_t block) { return runtime::acceptSeed(7, 1, block); }
  static std::uint64_t emptySeed(std::int64_t block) { return runtime::acceptSeed(8, 1, block); }
};

/// The drafts of the problem's blocks, in block order.
class LosslessDrafts {
public:
  explicit LosslessDrafts(const LosslessProblem &problem)
      : fromQ(problem.q.begin(), problem.q.end()) {}
  /// Writes the next block's gamma drafts.
  void next(std::int32_t *drafts) {
    drafts[0] = fromQ(rng);
    drafts[1] = uniform(rng);
  }

private:
  std::mt19937_64 rng{20261201};
  std::discrete_distribution<std::int32_t> fromQ;
  std::uniform_int_distribution<std::int32_t> uniform{0, LosslessProblem::vocab - 1};
};

/// The counts the test compares with p.
struct LosslessTally {
  std::vector<std::uint64_t> emitted = std::vector<std::uint64_t>(LosslessProblem::vocab, 0);
  std::vector<std::uint64_t> drafted = std::vector<std::uint64_t>(LosslessProblem::vocab, 0);
  std::vector<std::uint64_t> empty = std::vector<std::uint64_t>(LosslessProblem::vocab, 0);
  std::int64_t acceptedFirst = 0;

  /// A block with drafts: its first emitted token (the accepted first draft,
  /// or the sample after its rejection) and its first draft.
  void addBlock(const std::int32_t *drafts, std::int32_t accepted, std::int32_t next) {
    ++emitted.at(static_cast<std::size_t>(accepted > 0 ? drafts[0] : next));
    ++drafted.at(static_cast<std::size_t>(drafts[0]));
    acceptedFirst += accepted > 0;
  }
  /// A block of no drafts: the bonus token.
  void addEmpty(std::int32_t next) { ++empty.at(static_cast<std::size_t>(next)); }
};

/// Prints the p-values of `tally` (`who` ran the rule) and checks them: the
/// first emitted token and the empty blocks' token follow p, the drafts
/// alone do not, and the first draft is accepted half the time.
inline void checkLossless(const LosslessProblem &problem, const LosslessTally &tally,
                          const std::string &who) {
  std::uint64_t blocks = 0, emptyBlocks = 0;
  for (std::size_t t = 0; t < problem.p.size(); ++t) {
    blocks += tally.emitted[t];
    emptyBlocks += tally.empty[t];
  }
  REQUIRE(blocks == LosslessProblem::blocks);
  REQUIRE(emptyBlocks == LosslessProblem::emptyBlocks);
  const double pValue = chiSquarePValue(tally.emitted, problem.p);
  const double emptyPValue = chiSquarePValue(tally.empty, problem.p);
  const double draftsPValue = chiSquarePValue(tally.drafted, problem.p);
  std::ostringstream line;
  line << who << ": rejection sampling, 10^6 blocks over 6 tokens: first emitted token vs p: "
       << "chi-square p-value " << pValue << " (empty blocks, 10^5: " << emptyPValue
       << "; the drafts alone vs p: " << draftsPValue << ")";
  std::cout << line.str() << "\n";
  INFO(line.str());
  CHECK(pValue > 1e-3);
  CHECK(emptyPValue > 1e-3);
  CHECK(draftsPValue < 1e-12); // the test can tell q from p
  // Acceptance rate: sum_x min(p(x), q(x)) = 0.10+0.05+0.20+0.05+0.05+0.05.
  CHECK(static_cast<double>(tally.acceptedFirst) / LosslessProblem::blocks ==
        Approx(0.50).margin(0.003));
}

} // namespace dhs::test

#endif // DHS_TEST_UNIT_ACCEPTLOSSLESS_H
