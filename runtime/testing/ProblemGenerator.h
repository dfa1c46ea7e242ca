//===- ProblemGenerator.h - Seeded sparse-attention problems ----*- C++ -*-===//
//
// Test support: generates the inputs of one sparse_attention step (histories,
// selections, queries, KV rows, a sliding window) from a seed, identically on
// every platform, with a chosen residency. dhs-run and the unit tests use it.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_TESTING_PROBLEMGENERATOR_H
#define DHS_RUNTIME_TESTING_PROBLEMGENERATOR_H

#include "runtime/core/SparseAttentionProblem.h"

#include <cstdint>
#include <vector>

namespace dhs::runtime {

/// How to generate a problem.
struct GeneratorOptions {
  std::uint64_t seed = 1;             ///< seeds every random stream
  std::int64_t historyRows = 0;       ///< rows per request; 0: random in [min, max]
  std::int64_t minHistoryRows = 2048; ///< lower bound for random histories
  std::int64_t maxHistoryRows = 6144; ///< upper bound for random histories
  double unusedFraction = 0.0;        ///< fraction of each query's K entries set to -1
  /// Fraction of a query position's rows that the next position of the same
  /// request selects again (verify positions overlap: 0.85 is typical).
  double positionOverlap = 0.0;
  double residency = 0.0;     ///< fraction of selected rows made resident
  std::int64_t hbmSlots = -1; ///< if the shape leaves it open; -1: enough for residency 1
  std::int64_t hostRows = -1; ///< if the shape leaves it open; -1: sum of histories
  /// Threads that fill the values (0: one per hardware thread); the problem
  /// is the same for any number.
  unsigned threads = 0;
};

/// Generates a problem: histories of the requests laid out contiguously in the
/// host store, with a sliding window when the shape has one (request 0 has
/// fewer raw tokens than the window, the others more than the ring), K distinct random rows per
/// query from its request's history (then round(unusedFraction * K) of them, at random positions,
/// replaced by -1), queries and KV rows drawn from N(0,1) in bf16 (never zero), and the given
/// residency (see applyResidency). Deterministic for a seed on every platform and any number of
/// threads: the histories and selections come from std::mt19937_64, each query vector and each
/// row (host store, window ring) from a counter-based stream of its own (RandomStream.h), filled
/// in parallel. Throws Error for impossible options (history shorter than K, host store or HBM
/// pool too small).
SparseAttentionProblem generateProblem(const ProblemShape &shape, const GeneratorOptions &options);

/// Redoes the residency of a problem, leaving every other input unchanged:
/// for each request, round(fraction * D) of its D distinct selected rows
/// (chosen at random) are copied byte-exact into distinct random HBM slots and
/// every selection of those rows points there; all other selections read the
/// host store (slot -1). HBM slots not used are filled with noise, so that a
/// backend reading a wrong slot gives a wrong answer (each slot's noise from a
/// stream of its own, on `threads` threads, 0: all; the same for any number).
/// Throws Error if fraction is outside [0, 1] or the pool has too few slots.
void applyResidency(SparseAttentionProblem &problem, double fraction, std::uint64_t seed,
                    unsigned threads = 0);

/// The slots applyResidency(problem, fraction, seed) would give the
/// selections (-1: host), without touching the problem's tiers.
std::vector<std::int32_t> residencySlots(const SparseAttentionProblem &problem, double fraction,
                                         std::uint64_t seed);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_TESTING_PROBLEMGENERATOR_H
