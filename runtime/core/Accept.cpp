//===- Accept.cpp - Speculative acceptance on the host ----------------------===//
//
// Mirrors codegen/AcceptKernel.cpp operation by operation; every float
// operation below is one f32 operation of the kernel, in the kernel's order
// (this file is compiled without FP contraction: see runtime/CMakeLists.txt).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Accept.h"

#include "runtime/core/RandomStream.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

namespace dhs::runtime {

namespace {

// The kernel's block: 1024 threads in warps of 32, one block per request.
constexpr std::int64_t kThreads = 1024;
constexpr std::int64_t kWarpSize = 32;

/// The first maximum of a row (ties to the lower token; 0 when nothing
/// exceeds -inf), as the kernel's block argmax finds it.
std::int32_t argmax(const float *row, std::int64_t vocab) {
  float best = -std::numeric_limits<float>::infinity();
  std::int32_t token = 0;
  for (std::int64_t t = 0; t < vocab; ++t)
    if (row[t] > best) {
      best = row[t];
      token = static_cast<std::int32_t>(t);
    }
  return token;
}

void greedy(const AcceptProblem &p, std::int64_t b, std::int32_t *accepted, std::int32_t *next) {
  const std::int32_t *draft = p.drafts + b * p.gamma;
  const float *target = p.target + b * (p.gamma + 1) * p.vocab;
  std::int64_t n = 0;
  while (n < p.gamma && draft[n] >= 0 && draft[n] == argmax(target + n * p.vocab, p.vocab))
    ++n;
  accepted[b] = static_cast<std::int32_t>(n);
  next[b] = argmax(target + n * p.vocab, p.vocab);
}

void rejectionSampling(const AcceptProblem &p, std::int64_t b, std::int32_t *accepted,
                       std::int32_t *next) {
  const std::int64_t V = p.vocab, gamma = p.gamma;
  const std::int32_t *draft = p.drafts + b * gamma;
  const float *target = p.target + b * (gamma + 1) * V;
  const float *q = p.draftProbs + b * gamma * V;
  const std::uint64_t seed = p.seeds[b];

  // 1. Draft i is accepted when u q(x) < p(x), u from (seed, step, i).
  std::int64_t n = 0;
  for (; n < gamma; ++n) {
    const std::int32_t x = draft[n];
    if (x < 0 || !(acceptUniform(seed, p.step, static_cast<std::uint64_t>(n)) * q[n * V + x] <
                   target[n * V + x]))
      break;
  }
  accepted[b] = static_cast<std::int32_t>(n);

  // 2. The token at position n: from max(0, p - q) after a rejection, from p
  // after the block's last draft.
  const bool bonus = n == gamma || draft[n] < 0;
  const float *pn = target + n * V;
  const float *qn = bonus ? nullptr : q + n * V;
  auto weight = [&](std::int64_t t) -> float {
    if (bonus)
      return pn[t];
    const float d = pn[t] - qn[t];
    return d > 0.0f ? d : 0.0f;
  };
  // Thread t owns tokens [t chunk, (t + 1) chunk); threads past the
  // vocabulary own nothing and add zeros, which change no sum.
  const std::int64_t chunk = (V + kThreads - 1) / kThreads;
  const std::int64_t active = (V + chunk - 1) / chunk;
  const std::int64_t warps = (active + kWarpSize - 1) / kWarpSize;
  const std::int64_t lanes = warps * kWarpSize;
  std::vector<float> mine(static_cast<std::size_t>(lanes), 0.0f);
  for (std::int64_t tid = 0; tid < active; ++tid) {
    const std::int64_t begin = std::min(tid * chunk, V), end = std::min(begin + chunk, V);
    float sum = 0.0f;
    for (std::int64_t t = begin; t < end; ++t)
      sum = sum + weight(t);
    mine[static_cast<std::size_t>(tid)] = sum;
  }
  // Inclusive scans within each warp (shuffle up by 1, 2, 4, 8, 16).
  std::vector<float> scan = mine, before;
  for (std::int64_t offset = 1; offset < kWarpSize; offset *= 2) {
    before = scan;
    for (std::int64_t tid = 0; tid < lanes; ++tid) {
      const std::size_t i = static_cast<std::size_t>(tid);
      scan[i] = before[i] + (tid % kWarpSize >= offset ? before[i - offset] : 0.0f);
    }
  }
  // Each warp's prior (the sums of the warps before it) and the total.
  std::vector<float> prior(static_cast<std::size_t>(warps) + 1, 0.0f);
  for (std::int64_t w = 0; w < warps; ++w)
    prior[static_cast<std::size_t>(w + 1)] =
        prior[static_cast<std::size_t>(w)] + scan[static_cast<std::size_t>(w * kWarpSize + 31)];
  const float total = prior[static_cast<std::size_t>(warps)];
  const float threshold =
      acceptUniform(seed, p.step, static_cast<std::uint64_t>(gamma + n)) * total;
  // The owners (exclusive <= threshold < exclusive + mine) walk their chunk
  // to the first token whose running sum passes the threshold; the lowest
  // token wins (the kernel's atomic min).
  std::int32_t picked = std::numeric_limits<std::int32_t>::max();
  for (std::int64_t tid = 0; tid < active; ++tid) {
    const std::size_t i = static_cast<std::size_t>(tid);
    const float exclusive = prior[static_cast<std::size_t>(tid / kWarpSize)] + (scan[i] - mine[i]);
    if (!(exclusive <= threshold && threshold < exclusive + mine[i]))
      continue;
    const std::int64_t begin = std::min(tid * chunk, V), end = std::min(begin + chunk, V);
    float running = exclusive;
    std::int32_t found = -1, lastPositive = -1;
    for (std::int64_t t = begin; t < end; ++t) {
      const float w = weight(t);
      running = running + w;
      if (found == -1 && running > threshold)
        found = static_cast<std::int32_t>(t);
      if (w > 0.0f)
        lastPositive = static_cast<std::int32_t>(t);
    }
    picked = std::min(picked, found == -1 ? lastPositive : found);
  }
  if (picked == std::numeric_limits<std::int32_t>::max()) {
    // A threshold that rounding put between or past the chunks: the last
    // token with weight (0 when none has any).
    picked = 0;
    for (std::int64_t t = 0; t < V; ++t)
      if (weight(t) > 0.0f)
        picked = static_cast<std::int32_t>(t);
  }
  next[b] = picked;
}

} // namespace

float acceptUniform(std::uint64_t seed, std::uint64_t step, std::uint64_t counter) {
  const std::uint64_t z = mix64(mix64(mix64(seed) ^ step) ^ counter);
  return static_cast<float>(static_cast<std::uint32_t>(z >> 40)) * (1.0f / 16777216.0f);
}

std::uint64_t acceptSeed(std::uint64_t seed, std::uint64_t id, std::int64_t position) {
  return mix64(mix64(seed ^ mix64(id)) ^ static_cast<std::uint64_t>(position));
}

void acceptOnHost(const AcceptProblem &problem, std::int32_t *accepted, std::int32_t *next) {
  for (std::int64_t b = 0; b < problem.batch; ++b)
    if (problem.rule == AcceptRule::Greedy)
      greedy(problem, b, accepted, next);
    else
      rejectionSampling(problem, b, accepted, next);
}

std::string checkAcceptRow(const float *row, std::int64_t vocab, bool probabilities) {
  double sum = 0.0;
  for (std::int64_t t = 0; t < vocab; ++t) {
    const float v = row[t];
    if (std::isnan(v) || (probabilities && (!std::isfinite(v) || v < 0.0f))) {
      std::ostringstream out;
      out << "entry " << t << " is " << v;
      return out.str();
    }
    sum += v;
  }
  if (probabilities && std::fabs(sum - 1.0) > 1e-3) {
    std::ostringstream out;
    out.precision(9);
    out << "it sums to " << sum << ", not 1 (within 1e-3)";
    return out.str();
  }
  return "";
}

} // namespace dhs::runtime
