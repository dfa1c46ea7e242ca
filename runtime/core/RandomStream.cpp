//===- RandomStream.cpp - Counter-based random streams for test data ------===//

#include "runtime/core/RandomStream.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace dhs::runtime {

namespace {

/// The magnitudes normalBf16 draws: the positive bf16 patterns in [2^-40, 16),
/// consecutive integers.
constexpr bf16_t kFirstMagnitude = (127 - 40) << 7;
constexpr bf16_t kEndMagnitude = (127 + 4) << 7;
constexpr std::uint32_t kMagnitudes = kEndMagnitude - kFirstMagnitude;

/// P(round(|N(0,1)|) = magnitude i), the tails folded into the end values.
std::vector<double> magnitudeProbabilities() {
  std::vector<double> p(kMagnitudes);
  auto value = [](std::uint32_t i) {
    return static_cast<double>(bf16ToFloat(static_cast<bf16_t>(kFirstMagnitude + i)));
  };
  const double inf = std::numeric_limits<double>::infinity();
  for (std::uint32_t i = 0; i < kMagnitudes; ++i) {
    // Every real in [lo, hi] rounds to value(i) (ties have no mass).
    const double lo = i == 0 ? 0.0 : 0.5 * (value(i - 1) + value(i));
    const double hi = i + 1 == kMagnitudes ? inf : 0.5 * (value(i) + value(i + 1));
    // Both signs: erf(hi / sqrt 2) - erf(lo / sqrt 2), from the side where
    // the difference does not cancel.
    const double a = lo / std::sqrt(2.0), b = hi / std::sqrt(2.0);
    p[i] = lo < 1.0 ? std::erf(b) - std::erf(a) : std::erfc(a) - std::erfc(b);
  }
  return p;
}

/// Walker's alias table over the magnitudes: bin i keeps i with probability
/// keep / 2^31, else gives alias.
struct AliasTable {
  struct Bin {
    std::uint32_t keep;
    std::uint32_t alias;
  };
  std::vector<Bin> bins;

  AliasTable() : bins(kMagnitudes) {
    const std::vector<double> p = magnitudeProbabilities();
    double total = 0.0;
    for (double x : p)
      total += x;
    // Vose's construction, in a fixed order (the table is the same wherever
    // erf and erfc are).
    std::vector<double> scaled(kMagnitudes);
    std::vector<std::uint32_t> small, large;
    for (std::uint32_t i = 0; i < kMagnitudes; ++i) {
      scaled[i] = p[i] / total * kMagnitudes;
      (scaled[i] < 1.0 ? small : large).push_back(i);
    }
    auto keep = [](double share) {
      return static_cast<std::uint32_t>(
          std::min(2147483648.0, std::max(0.0, std::round(share * 2147483648.0))));
    };
    while (!small.empty() && !large.empty()) {
      const std::uint32_t s = small.back(), l = large.back();
      small.pop_back();
      bins[s] = {keep(scaled[s]), l};
      scaled[l] = (scaled[l] + scaled[s]) - 1.0;
      if (scaled[l] < 1.0) {
        large.pop_back();
        small.push_back(l);
      }
    }
    // What is left is full (up to rounding).
    for (std::uint32_t i : large)
      bins[i] = {keep(1.0), i};
    for (std::uint32_t i : small)
      bins[i] = {keep(1.0), i};
  }
};

const AliasTable &aliasTable() {
  static const AliasTable table;
  return table;
}

} // namespace

namespace {

/// One sample: the high half of a number of `rng` picks the bin, bits 1..31
/// decide within it, bit 0 is the sign.
inline bf16_t sample(const AliasTable &table, RandomStream &rng) {
  const std::uint64_t u = rng();
  const auto bin = static_cast<std::uint32_t>(((u >> 32) * kMagnitudes) >> 32);
  const auto within = static_cast<std::uint32_t>(u >> 1) & 0x7FFFFFFFu;
  const AliasTable::Bin &b = table.bins[bin];
  const std::uint32_t magnitude = within < b.keep ? bin : b.alias;
  return static_cast<bf16_t>((kFirstMagnitude + magnitude) | ((u & 1u) << 15));
}

} // namespace

bf16_t normalBf16(RandomStream &rng) { return sample(aliasTable(), rng); }

void normalsBf16(RandomStream &rng, void *out, std::size_t count) {
  const AliasTable &table = aliasTable();
  auto *bytes = static_cast<std::uint8_t *>(out);
  for (std::size_t i = 0; i < count; ++i) {
    const bf16_t value = sample(table, rng);
    std::memcpy(bytes + 2 * i, &value, sizeof value);
  }
}

double normalBf16Probability(bf16_t magnitude) {
  if (magnitude < kFirstMagnitude || magnitude >= kEndMagnitude)
    return 0.0;
  static const std::vector<double> p = magnitudeProbabilities();
  return p[magnitude - kFirstMagnitude];
}

} // namespace dhs::runtime
