//===- Accept.h - Speculative acceptance on the host ------------*- C++ -*-===//
//
// The acceptance rules of a verify step (dhs.accept), run on the host with
// exactly the arithmetic of the generated kernel (codegen/AcceptKernel.cpp):
// greedy (the longest prefix of drafts equal to the target's argmax, ties to
// the lower token, then the argmax after it) and lossless rejection sampling
// (draft x accepted when u q(x) < p(x) in f32; at the first rejection a
// token drawn from max(0, p - q), after all drafts from p), with the
// kernel's counter-based generator and its f32 sums in the kernel's order
// (1024 threads owning contiguous chunks, warp scans by shuffles), so that
// the CPU backend accepts the same tokens as the kernel for the same seeds.
// A request's block may be shorter than gamma: its drafts end at the first
// -1 (the kernel stops there too, and samples the bonus token from p).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_ACCEPT_H
#define DHS_RUNTIME_CORE_ACCEPT_H

#include <cstdint>
#include <string>

namespace dhs::runtime {

/// Acceptance rules (the C API's dhs_accept_rule).
enum class AcceptRule : std::int32_t {
  Greedy = 0,            ///< target argmax match, then the argmax after
  RejectionSampling = 1, ///< min(1, p/q), residual or bonus sample
};

/// One verify step's acceptance inputs (host memory, row-major).
struct AcceptProblem {
  AcceptRule rule = AcceptRule::Greedy;
  std::int64_t batch = 0;               ///< requests
  std::int64_t gamma = 0;               ///< drafts per block (the step's Q - 1)
  std::int64_t vocab = 0;               ///< tokens
  const std::int32_t *drafts = nullptr; ///< [batch][gamma], -1 after a block's drafts
  const float *target = nullptr;        ///< [batch][gamma+1][vocab] p (greedy: any scores)
  const float *draftProbs = nullptr;    ///< [batch][gamma][vocab] q (rejection sampling)
  const std::uint64_t *seeds = nullptr; ///< [batch] the kernel's per-request seeds
  std::uint64_t step = 0;               ///< the kernel's step counter
};

/// Runs acceptance: accepted[b] drafts accepted (0 .. the block's drafts)
/// and next[b] the bonus or corrected token. Inputs must be valid (see
/// validateAcceptRows); only the rows a request's block uses are read.
void acceptOnHost(const AcceptProblem &problem, std::int32_t *accepted, std::int32_t *next);

/// The kernel's uniform f32 in [0, 1) (24 random bits) for (seed, step,
/// counter), from splitmix64's finalizer (mix64, RandomStream.h): draft i
/// uses counter i, the sample after n acceptances gamma + n.
float acceptUniform(std::uint64_t seed, std::uint64_t step, std::uint64_t counter);
/// The per-request seed of a verify step: the engine's seed, the request's
/// id and the position of its block (its history length), so a request's
/// draws do not depend on the batch it runs in.
std::uint64_t acceptSeed(std::uint64_t seed, std::uint64_t id, std::int64_t position);

/// Checks a row of `vocab` floats: probabilities (finite, >= 0, summing to
/// 1 within 1e-3) or, for greedy scores, no NaN. Returns "" or what is wrong
/// ("entry 7 is -0.5", "it sums to 0.93").
std::string checkAcceptRow(const float *row, std::int64_t vocab, bool probabilities);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_ACCEPT_H
