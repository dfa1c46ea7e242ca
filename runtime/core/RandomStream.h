//===- RandomStream.h - Counter-based random streams for test data -*- C++ -*-===//
//
// Test data generated in parallel (testing/ProblemGenerator.h fills host
// stores of millions of rows): each piece of data (a row, a query vector, an
// HBM slot's noise) draws from its own stream, named by a key (the seed and
// the kind of data) and an index (the row), so that the values depend on the
// seed alone, not on which thread fills them or in what order. A stream is
// splitmix64 (Steele, Lea, Flood 2014) started from a hash of (key, index);
// nothing here depends on the platform's standard library but libm's erfc
// (the normal table, computed once).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_RANDOMSTREAM_H
#define DHS_RUNTIME_CORE_RANDOMSTREAM_H

#include "runtime/core/Bf16.h"

#include <cstddef>
#include <cstdint>

namespace dhs::runtime {

/// splitmix64's finalizer: a bijective 64-bit mix (derives seeds and keys).
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Stream `index` of the family `key`: 64-bit numbers (a
/// UniformRandomBitGenerator).
class RandomStream {
public:
  using result_type = std::uint64_t;

  RandomStream(std::uint64_t key, std::uint64_t index) : state_(mix64(key ^ mix64(index))) {}

  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type(0); }

  result_type operator()() {
    state_ += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

private:
  std::uint64_t state_;
};

/// A standard normal sample rounded to bf16 (nearest even), never zero: drawn
/// exactly from the distribution of round(N(0,1)) over the bf16 values
/// (Walker's alias method over a table of every bf16 magnitude in
/// [2^-40, 16); the rest of the mass, 2e-12 below and 1e-57 above, goes to the
/// end values). One number of `rng` per sample.
bf16_t normalBf16(RandomStream &rng);

/// `count` normalBf16 samples in order, stored at `out` (any alignment).
void normalsBf16(RandomStream &rng, void *out, std::size_t count);

/// The probability that normalBf16 returns a value of magnitude `magnitude`
/// (bits of a positive bf16), both signs together (for tests).
double normalBf16Probability(bf16_t magnitude);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_RANDOMSTREAM_H
