//===- AcceptTest.cpp - The generated acceptance kernels on a GPU ---------===//
//
// examples/accept_step.mlir, compiled at build time: 8 requests, gamma = 4,
// a 32000-token vocabulary. On a GPU the accepted counts and next tokens must
// equal a CPU replay (argmax with ties to the lower token) on fresh random
// distributions whose drafts match the target for a random prefix, including
// exact ties, full acceptance and immediate rejection. The rejection-sampling
// kernel (examples/accept_sampling_step.mlir) must follow the host rule bit
// for bit, and over 10^6 blocks of a fixed problem (AcceptLossless.h) its
// first emitted token must follow p (a chi-square test, as for the host).
//
//===----------------------------------------------------------------------===//

#include "AcceptLossless.h"
#include "KernelTestUtil.h"

#include "runtime/core/Accept.h"
#include "runtime/core/Manifest.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>

using namespace dhs::runtime;

TEST_CASE("the generated greedy acceptance kernel accepts matching drafts", "[cuda][gpu][accept]") {
  DHS_GPU_KERNEL_STEP(manifest, "accept", abi::LaunchKind::Accept);
  DHS_SEEDED_RNG(rng, 1700);
  const std::size_t B = 8, G = 4, V = 32000;

  std::vector<float> target(B * (G + 1) * V);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (float &p : target)
    p = uniform(rng);
  // The argmax of each position, ties to the lower token.
  auto argmax = [&](std::size_t b, std::size_t i) {
    const float *p = &target[(b * (G + 1) + i) * V];
    std::size_t best = 0;
    for (std::size_t t = 1; t < V; ++t)
      if (p[t] > p[best])
        best = t;
    return static_cast<std::int32_t>(best);
  };
  std::vector<std::int32_t> draft(B * G), wantAccepted(B), wantNext(B);
  for (std::size_t b = 0; b < B; ++b) {
    // Request b matches a prefix of b % (G + 1) drafts; request 0 also gets
    // an exact tie at a lower token than the first maximum.
    if (b == 0) {
      float *p = &target[0];
      std::size_t top = static_cast<std::size_t>(argmax(0, 0));
      std::size_t lower = top / 2;
      p[top] = 2.0f;
      p[lower] = 2.0f;
    }
    std::size_t prefix = b % (G + 1);
    for (std::size_t i = 0; i < G; ++i) {
      std::int32_t best = argmax(b, i);
      draft[b * G + i] = i < prefix ? best : (best + 1) % static_cast<std::int32_t>(V);
    }
    wantAccepted[b] = static_cast<std::int32_t>(prefix);
    wantNext[b] = argmax(b, prefix);
  }

  dhs::test::KernelRun run(manifest);
  const std::vector<std::int32_t> poison(B, -7);
  run.argument(draft, "draft");
  run.argument(target, "target");
  run.argument(std::vector<std::int64_t>(B, 7), "seeds");
  run.argument(std::vector<std::int64_t>{3}, "counter");
  const CUdeviceptr accepted = run.argument(poison, "accepted"),
                    next = run.argument(poison, "next");
  run.launch("accept");
  CHECK(run.download<std::int32_t>(accepted, B, "accepted") == wantAccepted);
  CHECK(run.download<std::int32_t>(next, B, "next") == wantNext);
}

TEST_CASE("the generated rejection-sampling kernel follows the drafter's rule",
          "[cuda][gpu][accept]") {
  DHS_GPU_KERNEL_STEP(manifest, "accept_sampling", abi::LaunchKind::Accept);
  DHS_SEEDED_RNG(rng, 2100);
  const std::size_t B = 8, G = 4, V = 4096;
  // Normalized random distributions; drafts drawn from q.
  auto normalized = [&](float *p) {
    double sum = 0;
    for (std::size_t t = 0; t < V; ++t)
      sum += p[t] = static_cast<float>(-std::log((rng() >> 11) * 0x1.0p-53 + 1e-12));
    for (std::size_t t = 0; t < V; ++t)
      p[t] = static_cast<float>(p[t] / sum);
  };
  std::vector<float> target(B * (G + 1) * V), q(B * G * V);
  for (std::size_t i = 0; i < B * (G + 1); ++i)
    normalized(&target[i * V]);
  for (std::size_t i = 0; i < B * G; ++i)
    normalized(&q[i * V]);
  // Make some requests' drafts likelier to pass: request b's q equals p on
  // its first b % 3 positions (then every draft there is accepted).
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < b % 3; ++i)
      std::copy_n(&target[(b * (G + 1) + i) * V], V, &q[(b * G + i) * V]);
  std::vector<std::int32_t> draft(B * G);
  for (auto &x : draft)
    x = static_cast<std::int32_t>(rng() % V);
  std::vector<std::int64_t> seeds(B);
  for (auto &s : seeds)
    s = static_cast<std::int64_t>(rng());
  std::vector<std::int64_t> counter{static_cast<std::int64_t>(rng() % 1000)};

  dhs::test::KernelRun run(manifest);
  const std::vector<std::int32_t> poison(B, -7);
  run.argument(draft, "draft");
  run.argument(target, "target");
  run.argument(q, "draft_probs");
  run.argument(seeds, "seeds");
  run.argument(counter, "counter");
  const CUdeviceptr acceptedBuffer = run.argument(poison, "accepted");
  const CUdeviceptr nextBuffer = run.argument(poison, "next");
  run.launch("accept");
  const std::vector<std::int32_t> accepted =
      run.download<std::int32_t>(acceptedBuffer, B, "accepted");
  const std::vector<std::int32_t> next = run.download<std::int32_t>(nextBuffer, B, "next");

  const auto step = static_cast<std::uint64_t>(counter[0]);
  for (std::size_t b = 0; b < B; ++b) {
    INFO("request " << b);
    const auto s = static_cast<std::uint64_t>(seeds[b]);
    // The same decisions, in f32 as the kernel makes them.
    std::size_t n = 0;
    while (n < G) {
      std::size_t x = static_cast<std::size_t>(draft[b * G + n]);
      float p = target[(b * (G + 1) + n) * V + x], qx = q[(b * G + n) * V + x];
      if (!(acceptUniform(s, step, n) * qx < p))
        break;
      ++n;
    }
    CHECK(accepted[b] == static_cast<std::int32_t>(n));
    // The sampled token: where u * S falls in the running sum (double here;
    // the kernel sums in another order, so allow rounding at a boundary).
    std::vector<double> w(V);
    double total = 0;
    for (std::size_t t = 0; t < V; ++t) {
      double pt = target[(b * (G + 1) + n) * V + t];
      w[t] = n == G ? pt : std::max(0.0, pt - static_cast<double>(q[(b * G + n) * V + t]));
      total += w[t];
    }
    REQUIRE(next[b] >= 0);
    REQUIRE(next[b] < static_cast<std::int32_t>(V));
    double threshold = acceptUniform(s, step, G + n) * total;
    double before = 0;
    for (std::int32_t t = 0; t < next[b]; ++t)
      before += w[static_cast<std::size_t>(t)];
    CHECK(w[static_cast<std::size_t>(next[b])] > 0.0);
    CHECK(before <= threshold + 1e-5 * total);
    CHECK(before + w[static_cast<std::size_t>(next[b])] >= threshold - 1e-5 * total);
  }
}

TEST_CASE("the accept kernels accept exactly what the host rules do, shorter blocks included",
          "[cuda][gpu][accept]") {
  // The CPU backend runs core/Accept.h instead of the kernel: the two must
  // give the same tokens for the same seeds, bit for bit.
  for (const char *name : {"accept", "accept_sampling"}) {
    INFO(name);
    DHS_GPU_KERNEL_STEP(manifest, name, abi::LaunchKind::Accept);
    DHS_SEEDED_RNG(rng, 2300);
    const bool sampling = std::string(name) == "accept_sampling";
    const std::size_t B = 8, G = 4, V = sampling ? 4096 : 32000;
    std::vector<float> target(B * (G + 1) * V), q(B * G * V);
    auto normalized = [&](float *p) {
      double sum = 0;
      for (std::size_t t = 0; t < V; ++t)
        sum += p[t] = static_cast<float>((rng() >> 11) * 0x1.0p-53);
      for (std::size_t t = 0; t < V; ++t)
        p[t] = static_cast<float>(p[t] / sum);
    };
    for (std::size_t i = 0; i < B * (G + 1); ++i)
      normalized(&target[i * V]);
    for (std::size_t i = 0; i < B * G; ++i)
      normalized(&q[i * V]);
    // Drafts: lane b's block holds b % (G + 1) drafts (-1 after), the
    // target's argmax or q's likeliest tokens half the time.
    std::vector<std::int32_t> draft(B * G, -1);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < b % (G + 1); ++i) {
        const float *row = sampling ? &q[(b * G + i) * V] : &target[(b * (G + 1) + i) * V];
        draft[b * G + i] = rng() % 2
                               ? static_cast<std::int32_t>(std::max_element(row, row + V) - row)
                               : static_cast<std::int32_t>(rng() % V);
      }
    std::vector<std::int64_t> seeds(B);
    for (auto &s : seeds)
      s = static_cast<std::int64_t>(rng());
    const std::vector<std::int64_t> counter{static_cast<std::int64_t>(rng() % 1000)};
    dhs::test::KernelRun run(manifest);
    const std::vector<std::int32_t> poison(B, -7);
    run.argument(draft, "draft");
    run.argument(target, "target");
    if (sampling)
      run.argument(q, "draft_probs");
    run.argument(seeds, "seeds");
    run.argument(counter, "counter");
    const CUdeviceptr acceptedBuffer = run.argument(poison, "accepted");
    const CUdeviceptr nextBuffer = run.argument(poison, "next");
    run.launch("accept");
    std::vector<std::uint64_t> hostSeeds(seeds.begin(), seeds.end());
    AcceptProblem problem;
    problem.rule = sampling ? AcceptRule::RejectionSampling : AcceptRule::Greedy;
    problem.batch = static_cast<std::int64_t>(B);
    problem.gamma = static_cast<std::int64_t>(G);
    problem.vocab = static_cast<std::int64_t>(V);
    problem.drafts = draft.data();
    problem.target = target.data();
    problem.draftProbs = sampling ? q.data() : nullptr;
    problem.seeds = hostSeeds.data();
    problem.step = static_cast<std::uint64_t>(counter[0]);
    std::vector<std::int32_t> accepted(B), next(B);
    acceptOnHost(problem, accepted.data(), next.data());
    CHECK(run.download<std::int32_t>(acceptedBuffer, B, "accepted") == accepted);
    CHECK(run.download<std::int32_t>(nextBuffer, B, "next") == next);
  }
}

TEST_CASE("the generated rejection-sampling kernel is lossless (chi-square over 10^6 blocks)",
          "[cuda][gpu][accept][chi-square]") {
  // The host rule's test (AcceptRuleTest, AcceptLossless.h) through the
  // kernel: the same p, q, drafts and seeds, in launches of the step's B
  // blocks (test/unit/steps/accept_lossless_step.mlir). Every block must also
  // match the host rule bit for bit, so the p-values equal the host test's.
  DHS_GPU_KERNEL_STEP(manifest, "accept_lossless", abi::LaunchKind::Accept);
  using dhs::test::LosslessProblem;
  const LosslessProblem problem;
  const std::int64_t G = LosslessProblem::gamma, V = LosslessProblem::vocab;
  const std::int64_t B = manifest.arguments.at(0).shape.at(0);
  REQUIRE(manifest.arguments.at(0).shape == std::vector<std::int64_t>{B, G});
  REQUIRE(manifest.arguments.at(1).shape == std::vector<std::int64_t>{B, G + 1, V});
  REQUIRE(LosslessProblem::blocks % B == 0);
  REQUIRE(LosslessProblem::emptyBlocks % B == 0);
  const auto batch = static_cast<std::size_t>(B);

  // Every block has the problem's p and q.
  std::vector<float> target, q;
  const std::vector<float> targetRows = problem.targetRows(), draftRows = problem.draftRows();
  for (std::size_t b = 0; b < batch; ++b) {
    target.insert(target.end(), targetRows.begin(), targetRows.end());
    q.insert(q.end(), draftRows.begin(), draftRows.end());
  }
  std::vector<std::int32_t> drafts(batch * G);
  std::vector<std::int64_t> seeds(batch);
  std::vector<std::uint64_t> hostSeeds(batch);
  dhs::test::KernelRun run(manifest);
  const CUdeviceptr draftBuffer = run.argument(drafts, "draft");
  run.argument(target, "target");
  run.argument(q, "draft_probs");
  const CUdeviceptr seedBuffer = run.argument(seeds, "seeds");
  run.argument(std::vector<std::int64_t>{static_cast<std::int64_t>(LosslessProblem::step)},
               "counter");
  const std::vector<std::int32_t> poison(batch, -7);
  const CUdeviceptr acceptedBuffer = run.argument(poison, "accepted");
  const CUdeviceptr nextBuffer = run.argument(poison, "next");

  AcceptProblem host;
  host.rule = AcceptRule::RejectionSampling;
  host.batch = B;
  host.gamma = G;
  host.vocab = V;
  host.drafts = drafts.data();
  host.target = target.data();
  host.draftProbs = q.data();
  host.seeds = hostSeeds.data();
  host.step = LosslessProblem::step;
  std::vector<std::int32_t> hostAccepted(batch), hostNext(batch);

  dhs::test::LosslessDrafts draws(problem);
  dhs::test::LosslessTally tally;
  std::int64_t differing = 0;
  std::string firstDifference;
  // One launch over blocks [first, first + B) of the problem (or of its
  // empty blocks), checked against the host rule, then counted.
  auto runBatch = [&](std::int64_t first, bool empty) {
    for (std::size_t b = 0; b < batch; ++b) {
      const std::int64_t block = first + static_cast<std::int64_t>(b);
      if (empty)
        std::fill_n(&drafts[b * G], G, -1);
      else
        draws.next(&drafts[b * G]);
      hostSeeds[b] = empty ? LosslessProblem::emptySeed(block) : LosslessProblem::seed(block);
      seeds[b] = static_cast<std::int64_t>(hostSeeds[b]);
    }
    run.write(draftBuffer, drafts, "draft");
    run.write(seedBuffer, seeds, "seeds");
    run.write(acceptedBuffer, poison, "accepted");
    run.write(nextBuffer, poison, "next");
    run.launch("accept");
    const std::vector<std::int32_t> accepted =
        run.download<std::int32_t>(acceptedBuffer, batch, "accepted");
    const std::vector<std::int32_t> next = run.download<std::int32_t>(nextBuffer, batch, "next");
    acceptOnHost(host, hostAccepted.data(), hostNext.data());
    for (std::size_t b = 0; b < batch; ++b) {
      auto block = [&] {
        return "block " + std::to_string(first + static_cast<std::int64_t>(b)) +
               (empty ? " (empty)" : "");
      };
      if (accepted[b] < 0 || accepted[b] > (empty ? 0 : G) || next[b] < 0 || next[b] >= V)
        FAIL(block() << ": the kernel wrote " << accepted[b] << " accepted, next " << next[b]);
      if (accepted[b] != hostAccepted[b] || next[b] != hostNext[b]) {
        if (differing++ == 0)
          firstDifference = block() + ": kernel " + std::to_string(accepted[b]) +
                            " accepted, next " + std::to_string(next[b]) + "; host " +
                            std::to_string(hostAccepted[b]) + ", " + std::to_string(hostNext[b]);
      }
      if (empty)
        tally.addEmpty(next[b]);
      else
        tally.addBlock(&drafts[b * G], accepted[b], next[b]);
    }
  };
  for (std::int64_t first = 0; first < LosslessProblem::blocks; first += B)
    runBatch(first, false);
  for (std::int64_t first = 0; first < LosslessProblem::emptyBlocks; first += B)
    runBatch(first, true);
  INFO("first difference from the host rule: " << firstDifference);
  CHECK(differing == 0);
  dhs::test::checkLossless(problem, tally, "generated kernel");
}
