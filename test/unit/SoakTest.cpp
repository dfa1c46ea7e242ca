//===- SoakTest.cpp - A timed soak on the CPU or a GPU --------------------===//
//
// Random arrivals, appends, steps, verify steps and departures for
// DHS_SOAK_SECONDS (default 600) on DHS_SOAK_BACKEND (cpu or cuda; default
// cuda when a GPU is usable), at high HBM occupancy (arrivals keep the
// request table nearly full; the protected working sets reserve about 3/4 of
// the slots and optional residency takes the rest), with the invariant
// checker on. Every step's output is checked against the CPU oracle over the
// rows the engine wrote (bit for bit on the CPU, within bf16 tolerance on
// CUDA). Four sessions share the time:
//  - per-layer pools, the unit tests' naive step, selections in host memory;
//  - layer-group pools (4 FP8 layers per token, the fp8_g4_resolved steps
//    compiled by the build) with a placement step: on CUDA the residency
//    maps live on the device and half the steps give their selections in
//    device memory, resolved by the steps' kernels (needs the compiler's
//    steps; said and skipped otherwise);
//  - a layer group's forms (the unit tests' tensor-core group of 2 FP8
//    layers, resolving on the device, compiled with --overlap-retrieval):
//    histories about the size of HBM, so that the misses cross the forms'
//    lines and the steps switch between the resident, fused and staged
//    forms (on CUDA half the selections in device memory);
//  - verify steps (examples/verify_step.mlir: Q = 5, a shared fetch of each
//    request's missing rows): plain steps and verify steps of random blocks
//    (selections of the history and of the block's positions up to each
//    one's own, rows given at begin or layer by layer, greedy or rejection
//    sampling on the host rule) whose accepted KV is committed to the test's
//    copy of the history, which every later step's oracle reads; two in
//    eight verify steps fail on purpose (a row id past its position's
//    bound, or a negative probability) and must change nothing. The
//    speculation statistics (blocks, drafts, acceptances, host rows read =
//    the union of each request's missing rows) are checked after every
//    verify step (needs the compiler's step; said and skipped otherwise).
// Hidden from the default run and from ctest: tools/gpu-soak.sh runs it on a
// GPU (`DHS_SOAK_BACKEND=cpu DHS_SOAK_SECONDS=20 dhs-unittests "[soak-timed]"`
// runs it on the CPU).
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtil.h"

#include "runtime/Runtime.h"
#include "runtime/core/Accept.h"
#include "runtime/core/Error.h"
#include "runtime/core/RowFormat.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaResources.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

using namespace dhs::runtime;

namespace {

struct SoakTotals {
  std::int64_t admits = 0, refused = 0, appends = 0, steps = 0, deviceSteps = 0, departures = 0,
               fullChecks = 0;
  std::int64_t verifySteps = 0, verifyFailed = 0, drafted = 0, accepted = 0;
  double occupancySum = 0.0; // HBM used / capacity, summed over steps
  double worstError = 0.0;
  std::map<double, std::int64_t> forms; // plain steps by the form share they ran at
  ResidencyStepStats residency;
};

/// What a soak session does besides plain steps.
struct SoakOptions {
  bool deviceSelections = false;      ///< half the steps' selections in device memory (CUDA)
  bool verifySteps = true;            ///< a step of several positions also runs verify steps
  std::int64_t longestPrefill = 4000; ///< arrivals bring 100 .. this many rows
};

/// One soak session on `rt` (loaded) for `seconds`.
class Soak {
public:
  Soak(Runtime &rt, RowFormat format, std::uint64_t seed, const SoakOptions &options = {})
      : rt_(rt), format_(format), rowBytes_(rowFormatInfo(format).rowBytes), rng_(seed),
        options_(options) {}

  SoakTotals run(double seconds, std::int32_t maxRequests, std::int64_t hostRows) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    maxRequests_ = maxRequests;
    hostRows_ = hostRows;
    while (std::chrono::steady_clock::now() < end) {
      for (int i = 0; i < 50; ++i)
        operation();
      if ((totals_.steps + totals_.verifySteps) / 200 != lastFullCheck_) {
        lastFullCheck_ = (totals_.steps + totals_.verifySteps) / 200;
        rt_.checkInvariants();
        ++totals_.fullChecks;
      }
    }
    rt_.checkInvariants();
    for (auto it = rows_.begin(); it != rows_.end();) {
      rt_.finish(it->first);
      it = rows_.erase(it);
    }
    if (rt_.shape().queries > 1) {
      // The speculation statistics counted every block and no failed step.
      const SpecStats &spec = rt_.specStats();
      CHECK(spec.verifySteps == static_cast<std::uint64_t>(totals_.verifySteps));
      CHECK(spec.blocks == expectedSpec_.blocks);
      CHECK(spec.drafted == expectedSpec_.drafted);
      CHECK(spec.accepted == expectedSpec_.accepted);
      CHECK(spec.emitted == expectedSpec_.emitted);
      CHECK(spec.draftedAt == expectedSpec_.draftedAt);
      CHECK(spec.acceptedAt == expectedSpec_.acceptedAt);
      CHECK(spec.hostRowsRead == expectedSpec_.hostRowsRead);
    }
    const RuntimeStats s = rt_.stats();
    CHECK(s.admittedRequests == 0);
    CHECK(s.hbmBytesUsed == 0);
    CHECK(s.hostBytesUsed == 0);
    totals_.residency = s.totals;
    return totals_;
  }

private:
  std::int64_t len(std::uint64_t id) const {
    return static_cast<std::int64_t>(rows_.at(id)[0].size()) / rowBytes_;
  }

  std::vector<std::uint8_t> randomRows(std::int64_t count) {
    std::vector<std::uint8_t> data(static_cast<std::size_t>(count * rowBytes_));
    if (format_ == RowFormat::MlaBf16)
      dhs::test::fillRandom(rng_, reinterpret_cast<bf16_t *>(data.data()), data.size() / 2);
    else
      for (std::int64_t i = 0; i < count; ++i)
        fillRandomRow(format_, data.data() + i * rowBytes_, rng_);
    return data;
  }

  void operation() {
    const int kind = static_cast<int>(rng_() % 100);
    const std::int32_t live = static_cast<std::int32_t>(rows_.size());
    // Arrivals keep the table nearly full: high occupancy.
    if (live == 0 || (kind < 10 && live < maxRequests_) || live < maxRequests_ / 2)
      return arrive();
    if (kind < 16)
      return depart();
    if (kind < 50)
      return appendSome();
    if (kind >= 75 && options_.verifySteps && rt_.shape().queries > 1)
      return verifyStep();
    return step();
  }

  void arrive() {
    const std::uint64_t id = nextId_++;
    const std::int64_t n =
        100 + static_cast<std::int64_t>(rng_() %
                                        static_cast<std::uint64_t>(options_.longestPrefill - 100));
    const std::int64_t max = n + 500 + static_cast<std::int64_t>(rng_() % 1500);
    const std::int32_t L = rt_.layers();
    std::vector<std::uint8_t> prefill = randomRows(L * n);
    ++totals_.admits;
    try {
      rt_.admit(id, n, max, prefill.data());
    } catch (const CapacityError &) {
      ++totals_.refused; // no protected set, or no host range: refused whole
      REQUIRE_FALSE(rt_.admitted(id));
      return;
    }
    auto &layers = rows_[id];
    layers.resize(static_cast<std::size_t>(L));
    for (std::int32_t l = 0; l < L; ++l)
      layers[static_cast<std::size_t>(l)].assign(prefill.begin() + l * n * rowBytes_,
                                                 prefill.begin() + (l + 1) * n * rowBytes_);
    maxContext_[id] = max;
    hot_[id] = {};
  }

  void depart() {
    auto it = rows_.begin();
    std::advance(it, static_cast<long>(rng_() % rows_.size()));
    rt_.finish(it->first);
    maxContext_.erase(it->first);
    hot_.erase(it->first);
    rows_.erase(it);
    ++totals_.departures;
  }

  void appendSome() {
    const std::int32_t L = rt_.layers();
    for (auto &[id, layers] : rows_) {
      if (rng_() % 2)
        continue;
      std::vector<std::uint8_t> token = randomRows(L);
      if (len(id) >= maxContext_.at(id)) {
        REQUIRE_THROWS_AS(rt_.append(id, token.data()), CapacityError);
        continue;
      }
      rt_.append(id, token.data());
      for (std::int32_t l = 0; l < L; ++l)
        layers[static_cast<std::size_t>(l)].insert(layers[static_cast<std::size_t>(l)].end(),
                                                   token.begin() + l * rowBytes_,
                                                   token.begin() + (l + 1) * rowBytes_);
      ++totals_.appends;
    }
  }

  /// A selection with locality: a per-request set of rows that drifts
  /// (recurring selections hit), the newest rows, rows anywhere, unused.
  std::int32_t select(std::uint64_t id) {
    const std::int64_t n = len(id);
    std::vector<std::int32_t> &hot = hot_.at(id);
    const int how = static_cast<int>(rng_() % 10);
    if (how == 0)
      return -1;
    if (how < 6 && !hot.empty())
      return hot[rng_() % hot.size()];
    std::int32_t row =
        how < 8 ? static_cast<std::int32_t>(
                      n - 1 - static_cast<std::int64_t>(rng_() % std::min<std::int64_t>(n, 64)))
                : static_cast<std::int32_t>(rng_() % static_cast<std::uint64_t>(n));
    if (hot.size() < 512)
      hot.push_back(row);
    else
      hot[rng_() % hot.size()] = row;
    return row;
  }

  void step() {
    const ProblemShape &s = rt_.shape();
    std::vector<std::uint64_t> batch;
    for (auto &entry : rows_)
      batch.push_back(entry.first);
    std::shuffle(batch.begin(), batch.end(), rng_);
    batch.resize(std::min<std::size_t>(batch.size(), static_cast<std::size_t>(s.batch)));
    const std::int64_t lanes = static_cast<std::int64_t>(batch.size());
    const std::int32_t L = rt_.layers(), G = rt_.groups();
    const std::int64_t perLane = s.queries * s.topk;
    std::vector<std::int32_t> sel(static_cast<std::size_t>(G * lanes * perLane));
    for (std::int32_t g = 0; g < G; ++g)
      for (std::int64_t b = 0; b < lanes; ++b)
        for (std::int64_t i = 0; i < perLane; ++i)
          sel[static_cast<std::size_t>((g * lanes + b) * perLane + i)] =
              select(batch[static_cast<std::size_t>(b)]);
    const std::int64_t qPerLayer = lanes * s.queries * s.heads * s.qkDim;
    const std::int64_t oPerLayer = lanes * s.queries * s.heads * s.vDim;
    std::vector<bf16_t> q(static_cast<std::size_t>(L * qPerLayer)),
        out(static_cast<std::size_t>(L * oPerLayer), kBf16Poison);
    dhs::test::fillRandom(rng_, q.data(), q.size());
    const bool onDevice = options_.deviceSelections && rng_() % 2;
    if (onDevice) {
      const CudaDriver &cuda = CudaDriver::instance();
      cuda_detail::DeviceBuffer device(std::max<std::size_t>(sel.size(), 1) * 4, "selections");
      cuda.check(cuda.memcpyHtoD(device.get(), sel.data(), sel.size() * 4), "selections");
      rt_.step(batch.data(), lanes, reinterpret_cast<const std::int32_t *>(device.get()), q.data(),
               out.data(), MemorySpace::Host, MemorySpace::Device);
      ++totals_.deviceSteps;
    } else {
      rt_.step(batch.data(), lanes, sel.data(), q.data(), out.data());
    }
    ++totals_.steps;
    ++totals_.forms[rt_.formShare(0)];
    const RuntimeStats stats = rt_.stats();
    totals_.occupancySum +=
        static_cast<double>(stats.hbmBytesUsed) / static_cast<double>(stats.hbmBytesCapacity);
    const std::int32_t perGroup = (L + G - 1) / G;
    for (std::int32_t l = 0; l < L && lanes > 0; ++l) {
      std::vector<bf16_t> expected = dhs::test::oracleLayer(
          s, lanes, sel.data() + (l / perGroup) * lanes * perLane, q.data() + l * qPerLayer,
          [&](std::int64_t b, std::int32_t r) {
            return reinterpret_cast<const bf16_t *>(
                rows_.at(batch[static_cast<std::size_t>(b)])[static_cast<std::size_t>(l)].data() +
                static_cast<std::size_t>(r) * static_cast<std::size_t>(rowBytes_));
          });
      std::vector<bf16_t> actual(out.begin() + l * oPerLayer, out.begin() + (l + 1) * oPerLayer);
      if (rt_.backendDescription() == "cpu") {
        REQUIRE(actual == expected);
      } else {
        Comparison c = compareOutputs(actual, expected);
        REQUIRE(c.nonFinite == 0);
        REQUIRE(c.relativeError < 1e-2);
        totals_.worstError = std::max(totals_.worstError, c.relativeError);
      }
    }
  }

  /// Compares a layer's outputs with the oracle's: bit for bit on the CPU,
  /// within bf16 tolerance on CUDA.
  void compare(const std::vector<bf16_t> &actual, const std::vector<bf16_t> &expected) {
    if (rt_.backendDescription() == "cpu") {
      REQUIRE(actual == expected);
      return;
    }
    Comparison c = compareOutputs(actual, expected);
    REQUIRE(c.nonFinite == 0);
    REQUIRE(c.relativeError < 1e-2);
    totals_.worstError = std::max(totals_.worstError, c.relativeError);
  }

  /// A verify step over up to B requests with room for a block: random
  /// draft blocks, selections of the history and of the block's positions
  /// up to each one's own, outputs against the oracle, acceptance, and the
  /// commit checked (accepted KV appended to the history, the host rows past
  /// it untouched). Two in eight fail on purpose and must change nothing.
  void verifyStep() {
    const ProblemShape &s = rt_.shape();
    const std::int64_t Q = s.queries, K = s.topk, perLane = Q * K;
    const std::int32_t L = rt_.layers(), G = rt_.groups();
    const std::int32_t perGroup = (L + G - 1) / G, V = 64;
    std::vector<std::uint64_t> batch;
    for (auto &entry : rows_)
      if (len(entry.first) + Q <= maxContext_.at(entry.first))
        batch.push_back(entry.first);
    std::shuffle(batch.begin(), batch.end(), rng_);
    batch.resize(std::min<std::size_t>(batch.size(), static_cast<std::size_t>(s.batch)));
    const std::int64_t lanes = static_cast<std::int64_t>(batch.size());
    if (lanes == 0)
      return;
    auto at = [](std::int64_t i) { return static_cast<std::size_t>(i); };
    std::vector<std::int32_t> lens(at(lanes)), drafts(at(lanes * (Q - 1)), -1);
    std::vector<std::int64_t> before(at(lanes));
    for (std::int64_t b = 0; b < lanes; ++b) {
      lens[at(b)] = static_cast<std::int32_t>(rng_() % static_cast<std::uint64_t>(Q));
      for (std::int32_t i = 0; i < lens[at(b)]; ++i)
        drafts[at(b * (Q - 1) + i)] = static_cast<std::int32_t>(rng_() % V);
      before[at(b)] = len(batch[at(b)]);
    }
    const std::int64_t rowBytes = rowBytes_;
    std::vector<std::uint8_t> pending = randomRows(lanes * Q * L); // [b][Q][L]
    auto pendingRow = [&](std::int64_t b, std::int64_t j, std::int32_t l) {
      return pending.data() + ((b * Q + j) * L + l) * rowBytes;
    };
    // The host rows just past each history (a rejected position must never
    // reach them).
    std::vector<std::vector<std::uint8_t>> past(at(lanes));
    for (std::int64_t b = 0; b < lanes; ++b) {
      const std::int64_t first =
          rt_.controller().historyStart(rt_.requestIndex(batch[at(b)])) + before[at(b)];
      for (std::int64_t j = 0; j < Q; ++j)
        for (std::int32_t l = 0; l < L; ++l) {
          const std::uint8_t *raw = rt_.storageForTesting().hostRow(l, first + j);
          past[at(b)].insert(past[at(b)].end(), raw, raw + rowBytes);
        }
    }
    // 0: a row id past its position's bound; 1: a bad probability or score.
    // The second and third of every eight verify steps (so that a short run
    // has both).
    const std::int64_t attempt = verifyAttempts_++;
    const int failure = attempt % 8 == 1 ? 0 : attempt % 8 == 2 ? 1 : -1;
    const std::int32_t failingGroup = static_cast<std::int32_t>(rng_() % G);
    const bool perLayer = rng_() % 2;
    rt_.verifyBegin(batch.data(), lanes, lens.data(), drafts.data(),
                    perLayer ? nullptr : pending.data());
    auto unchanged = [&] {
      REQUIRE_FALSE(rt_.verifying());
      REQUIRE_FALSE(rt_.inStep());
      for (std::int64_t b = 0; b < lanes; ++b)
        REQUIRE(rt_.historyLen(batch[at(b)]) == before[at(b)]);
      ++totals_.verifyFailed;
    };
    // Selections per group (what the oracle reads: -1 past each block) and
    // the union of each lane's missing history rows.
    std::vector<std::int32_t> sel(at(G * lanes * perLane), -1);
    std::uint64_t unionRows = 0;
    for (std::int32_t g = 0; g < G; ++g) {
      std::int32_t *groupSel = sel.data() + g * lanes * perLane;
      std::vector<std::int32_t> given(at(lanes * perLane));
      const std::int32_t groupLayers = std::min(L, (g + 1) * perGroup) - g * perGroup;
      for (std::int64_t b = 0; b < lanes; ++b) {
        const std::int32_t index = rt_.requestIndex(batch[at(b)]);
        std::set<std::int32_t> missing;
        for (std::int64_t q = 0; q < Q; ++q)
          for (std::int64_t k = 0; k < K; ++k) {
            const std::size_t e = at(b * perLane + q * K + k);
            if (q > lens[at(b)]) {
              given[e] = 1 << 30; // past the block: ignored by the runtime
              continue;
            }
            // A block position up to this one's own, or a history row.
            const std::int32_t id =
                rng_() % 8 == 0
                    ? static_cast<std::int32_t>(
                          before[at(b)] +
                          static_cast<std::int64_t>(rng_() % static_cast<std::uint64_t>(q + 1)))
                    : select(batch[at(b)]);
            given[e] = groupSel[e] = id;
            if (id >= 0 && id < before[at(b)] && rt_.controller().slotOf(g, index, id) < 0)
              missing.insert(id);
          }
        unionRows += missing.size() * static_cast<std::uint64_t>(groupLayers);
      }
      if (failure == 0 && g == failingGroup) {
        // Lane 0's last block position selects the row after its own.
        given[at(lens[0] * K)] = static_cast<std::int32_t>(before[0] + lens[0] + 1);
        REQUIRE_THROWS_AS(rt_.selectGroup(g, given.data()), OutOfRangeError);
        return unchanged();
      }
      rt_.selectGroup(g, given.data());
    }
    const std::int64_t qPerLayer = lanes * Q * s.heads * s.qkDim;
    const std::int64_t oPerLayer = lanes * Q * s.heads * s.vDim;
    const std::int64_t perPosition = s.heads * s.vDim;
    std::vector<bf16_t> queries(at(L * qPerLayer)), out(at(L * oPerLayer), kBf16Poison);
    dhs::test::fillRandom(rng_, queries.data(), queries.size());
    for (std::int32_t l = 0; l < L; ++l) {
      if (perLayer) {
        std::vector<std::uint8_t> layerRows(at(lanes * Q * rowBytes));
        for (std::int64_t p = 0; p < lanes * Q; ++p)
          std::memcpy(layerRows.data() + p * rowBytes, pendingRow(p / Q, p % Q, l), at(rowBytes));
        rt_.verifyWriteRows(l, layerRows.data());
      }
      rt_.attendLayer(l, queries.data() + l * qPerLayer, out.data() + l * oPerLayer);
      const std::vector<bf16_t> expected = dhs::test::oracleLayer(
          s, lanes, sel.data() + (l / perGroup) * lanes * perLane, queries.data() + l * qPerLayer,
          [&](std::int64_t b, std::int32_t r) -> const void * {
            return r < before[at(b)] ? rows_.at(batch[at(b)])[at(l)].data() + at(r * rowBytes)
                                     : pendingRow(b, r - before[at(b)], l);
          });
      // The block's positions only (the others' outputs are unspecified).
      std::vector<bf16_t> actual, want;
      for (std::int64_t b = 0; b < lanes; ++b) {
        const std::int64_t from = b * Q * perPosition, to = from + (lens[at(b)] + 1) * perPosition;
        actual.insert(actual.end(), out.begin() + l * oPerLayer + from,
                      out.begin() + l * oPerLayer + to);
        want.insert(want.end(), expected.begin() + from, expected.begin() + to);
      }
      compare(actual, want);
    }
    // Acceptance: greedy scores where the target mostly agrees with the
    // drafts, or rejection sampling over random p and q (q = p half the
    // time: every draft accepted).
    const bool sampling = rng_() % 2;
    std::vector<float> target(at(lanes * Q * V)), draftProbs(at(lanes * (Q - 1) * V));
    auto distribution = [&](float *p) {
      double sum = 0;
      for (std::int32_t t = 0; t < V; ++t)
        sum += p[t] = static_cast<float>(1 + rng_() % 100);
      for (std::int32_t t = 0; t < V; ++t)
        p[t] = static_cast<float>(p[t] / sum);
    };
    for (std::int64_t b = 0; b < lanes; ++b)
      for (std::int64_t j = 0; j < Q; ++j) {
        float *row = target.data() + (b * Q + j) * V;
        if (sampling) {
          distribution(row);
          if (j < Q - 1) {
            float *q = draftProbs.data() + (b * (Q - 1) + j) * V;
            if (rng_() % 2)
              std::copy_n(row, V, q);
            else
              distribution(q);
          }
        } else {
          for (std::int32_t t = 0; t < V; ++t)
            row[t] = static_cast<float>(rng_() % 1000);
          if (j < lens[at(b)] && rng_() % 10 < 8)
            row[drafts[at(b * (Q - 1) + j)]] = 1000.0f;
        }
      }
    const std::uint64_t seed = rng_();
    std::vector<std::int32_t> accepted(at(lanes), -5), tokens(at(lanes * Q), -5);
    const AcceptRule rule = sampling ? AcceptRule::RejectionSampling : AcceptRule::Greedy;
    if (failure == 1) {
      // Lane 0's last block position: a negative probability, or a NaN score.
      target[at(lens[0] * V + 3)] = sampling ? -0.5f : std::nanf("");
      REQUIRE_THROWS_AS(rt_.verifyAccept(rule, V, target.data(), draftProbs.data(), seed,
                                         accepted.data(), tokens.data()),
                        InputError);
      return unchanged();
    }
    // The host rule with the runtime's seeds (what the kernel gives too).
    std::vector<std::uint64_t> seeds(at(lanes));
    for (std::int64_t b = 0; b < lanes; ++b)
      seeds[at(b)] = acceptSeed(seed, batch[at(b)], before[at(b)]);
    AcceptProblem problem;
    problem.rule = rule;
    problem.batch = lanes;
    problem.gamma = Q - 1;
    problem.vocab = V;
    problem.drafts = drafts.data();
    problem.target = target.data();
    problem.draftProbs = sampling ? draftProbs.data() : nullptr;
    problem.seeds = seeds.data();
    std::vector<std::int32_t> wantAccepted(at(lanes)), wantNext(at(lanes));
    acceptOnHost(problem, wantAccepted.data(), wantNext.data());
    rt_.verifyAccept(rule, V, target.data(), sampling ? draftProbs.data() : nullptr, seed,
                     accepted.data(), tokens.data());
    REQUIRE_FALSE(rt_.verifying());
    REQUIRE(accepted == wantAccepted);
    ++totals_.verifySteps;
    for (std::int64_t b = 0; b < lanes; ++b) {
      const std::int32_t n = accepted[at(b)];
      if (!sampling) {
        // Greedy's own reference: the longest prefix of drafts that are the
        // argmax, then the argmax after it.
        auto argmax = [&](std::int64_t j) {
          const float *row = target.data() + (b * Q + j) * V;
          return static_cast<std::int32_t>(std::max_element(row, row + V) - row);
        };
        std::int32_t m = 0;
        while (m < lens[at(b)] && argmax(m) == drafts[at(b * (Q - 1) + m)])
          ++m;
        REQUIRE(n == m);
        REQUIRE(tokens[at(b * Q + n)] == argmax(n));
      }
      REQUIRE(tokens[at(b * Q + n)] == wantNext[at(b)]);
      for (std::int64_t i = 0; i < Q; ++i)
        if (i != n)
          REQUIRE(tokens[at(b * Q + i)] == (i < n ? drafts[at(b * (Q - 1) + i)] : -1));
      // The commit: positions 0 .. n join the history (which later steps'
      // oracles read); the rest never reached the host store.
      auto &layers = rows_.at(batch[at(b)]);
      for (std::int32_t j = 0; j <= n; ++j)
        for (std::int32_t l = 0; l < L; ++l)
          layers[at(l)].insert(layers[at(l)].end(), pendingRow(b, j, l),
                               pendingRow(b, j, l) + rowBytes);
      REQUIRE(rt_.historyLen(batch[at(b)]) == before[at(b)] + n + 1);
      const std::int64_t first =
          rt_.controller().historyStart(rt_.requestIndex(batch[at(b)])) + before[at(b)];
      for (std::int64_t j = n + 1; j < Q; ++j)
        for (std::int32_t l = 0; l < L; ++l)
          REQUIRE(std::memcmp(rt_.storageForTesting().hostRow(l, first + j),
                              past[at(b)].data() + (j * L + l) * rowBytes, at(rowBytes)) == 0);
      totals_.drafted += lens[at(b)];
      totals_.accepted += n;
      expectedSpec_.blocks += 1;
      expectedSpec_.drafted += static_cast<std::uint64_t>(lens[at(b)]);
      expectedSpec_.accepted += static_cast<std::uint64_t>(n);
      expectedSpec_.emitted += static_cast<std::uint64_t>(n) + 1;
      for (std::int32_t i = 0; i < lens[at(b)]; ++i) {
        ++expectedSpec_.draftedAt[at(i)];
        expectedSpec_.acceptedAt[at(i)] += i < n;
      }
    }
    expectedSpec_.hostRowsRead += unionRows;
    // Checked every verify step: the blocks counted, and the host rows the
    // shared retrieval read equal the union of each request's missing rows.
    const SpecStats &spec = rt_.specStats();
    REQUIRE(spec.blocks == expectedSpec_.blocks);
    REQUIRE(spec.accepted == expectedSpec_.accepted);
    REQUIRE(spec.hostRowsRead == expectedSpec_.hostRowsRead);
    const RuntimeStats stats = rt_.stats();
    totals_.occupancySum +=
        static_cast<double>(stats.hbmBytesUsed) / static_cast<double>(stats.hbmBytesCapacity);
  }

  Runtime &rt_;
  RowFormat format_;
  std::int64_t rowBytes_;
  std::mt19937_64 rng_;
  SoakOptions options_;
  std::int32_t maxRequests_ = 0;
  std::int64_t hostRows_ = 0;
  std::uint64_t nextId_ = 1;
  std::int64_t lastFullCheck_ = 0;
  SoakTotals totals_;
  SpecStats expectedSpec_; // what the verify steps that succeeded add up to
  std::int64_t verifyAttempts_ = 0;
  std::map<std::uint64_t, std::vector<std::vector<std::uint8_t>>> rows_; // id -> [layer] rows
  std::map<std::uint64_t, std::int64_t> maxContext_;
  std::map<std::uint64_t, std::vector<std::int32_t>> hot_;
};

/// A soak session's runtime: `layers` in groups of `G`, host rows for
/// `requests` requests of 6000 tokens, the newest `newest` tokens and a hot
/// floor of 64 protected, every invariant checked (all of them every 50
/// steps).
RuntimeConfig soakConfig(std::int32_t layers, std::int32_t G, std::int32_t requests,
                         std::int32_t newest, BackendKind backend) {
  RuntimeConfig config = dhs::test::testConfig(layers, G, backend, /*draftWindow=*/0,
                                               /*floor=*/64, std::int64_t{requests} * 6000);
  config.maxRequests = requests;
  config.newestWindow = newest;
  config.fullCheckInterval = 50;
  return config;
}

void report(const char *session, const Runtime &rt, const SoakTotals &t, double seconds) {
  // (Verify steps only where the session ran some, so that the other
  // sessions' lines stay as they were.)
  std::ostringstream verify;
  if (t.verifySteps + t.verifyFailed > 0)
    verify << t.verifySteps << " verify steps (" << t.drafted << " drafts, " << t.accepted
           << " accepted; " << t.verifyFailed << " failed on purpose), ";
  // (The forms only where the step has several.)
  if (t.forms.size() > 1 || (t.forms.size() == 1 && t.forms.begin()->first != 1.0)) {
    verify << "steps by form share:";
    for (const auto &[share, steps] : t.forms)
      verify << " " << share << " x " << steps;
    verify << ", ";
  }
  WARN("soak (" << session << ", " << rt.backendDescription() << ", " << seconds
                << " s): " << t.admits << " arrivals (" << t.refused << " refused), "
                << t.departures << " departures, " << t.appends << " appends, " << t.steps
                << " steps (" << t.deviceSteps << " with device selections), " << verify.str()
                << t.fullChecks << " full checks; mean HBM occupancy "
                << (t.steps + t.verifySteps
                        ? 100.0 * t.occupancySum / static_cast<double>(t.steps + t.verifySteps)
                        : 0.0)
                << "%; selected " << t.residency.selected << ", fetched " << t.residency.fetched
                << ", promoted " << t.residency.promoted << ", evicted " << t.residency.evicted
                << "; worst relative error " << t.worstError);
}

} // namespace

TEST_CASE("soak: timed random arrivals, appends, steps, verify steps and departures",
          "[.][soak-timed]") {
  const char *secondsText = std::getenv("DHS_SOAK_SECONDS");
  const double seconds = secondsText ? std::atof(secondsText) : 600.0;
  const char *backendText = std::getenv("DHS_SOAK_BACKEND");
  std::string backendName =
      backendText ? backendText : (CudaDriver::instance().available() ? "cuda" : "cpu");
  REQUIRE((backendName == "cpu" || backendName == "cuda"));
  const BackendKind backend = backendName == "cuda" ? BackendKind::Cuda : BackendKind::Cpu;
  if (backend == BackendKind::Cuda && !dhs::test::gpuOrSkip())
    return;
  const std::uint64_t seed = dhs::test::freshSeed() + 1400;
  INFO("DHS_TEST_SEED=" << seed - 1400 << ", backend " << backendName);
  const std::vector<std::string> group = dhs::test::groupSteps(4, "_resolved");
  const std::string placement = dhs::test::compiledStepsDir() + "/place_rows";
  const bool haveGroup = std::filesystem::exists(group.back() + "/manifest.json") &&
                         std::filesystem::exists(placement + "/manifest.json");
  const std::string verify = dhs::test::compiledStepsDir() + "/verify";
  const bool haveVerify = std::filesystem::exists(verify + "/manifest.json");
  const std::string forms =
      dhs::test::compiledStepsDir() + "/tensor_core_group_resolved_overlapped";
  const std::string placementL2 = dhs::test::compiledStepsDir() + "/place_rows_l2";
  const bool haveForms = std::filesystem::exists(forms + "/manifest.json") &&
                         std::filesystem::exists(placementL2 + "/manifest.json");
  const double share = seconds / (1 + haveGroup + haveVerify + haveForms);

  {
    // Per-layer pools: 4 layers in 2 groups, 2048 slots; 16 requests of
    // 96 protected slots (newest 32 + floor 64) reserve 75% of them.
    const RuntimeConfig config = soakConfig(/*layers=*/4, /*G=*/2, /*requests=*/16,
                                            /*newest=*/32, backend);
    Runtime rt(config);
    rt.loadStep(dhs::test::stepsDir() + "/naive");
    Soak soak(rt, RowFormat::MlaBf16, seed);
    SoakTotals t = soak.run(share, config.maxRequests, config.hostRows);
    report("per-layer pools", rt, t, share);
    CHECK(t.steps > 0);
    CHECK(t.residency.fetched > 0);
    CHECK(t.residency.evicted > 0);
  }
  if (!haveGroup)
    WARN("SKIPPED the layer-group session: " << group.back() << " or " << placement
                                             << " was not compiled");
  if (haveGroup) {
    // Layer-group pools: 8 FP8 layers in 2 groups of 4, 2048 slots; 20
    // requests of 80 protected slots reserve 78%.
    const RuntimeConfig config = soakConfig(/*layers=*/8, /*G=*/4, /*requests=*/20,
                                            /*newest=*/16, backend);
    Runtime rt(config);
    rt.loadSteps(group);
    rt.loadPlacementStep(placement);
    SoakOptions options;
    options.deviceSelections = backend == BackendKind::Cuda;
    Soak soak(rt, RowFormat::MlaFp8, seed + 1, options);
    SoakTotals t = soak.run(share, config.maxRequests, config.hostRows);
    report("layer-group pools, placement step", rt, t, share);
    CHECK(t.steps > 0);
    CHECK(t.residency.evicted > 0);
  }
  if (!haveForms)
    WARN("SKIPPED the layer-group forms session: " << forms << " or " << placementL2
                                                   << " was not compiled");
  if (haveForms) {
    // A layer group's forms under load: the unit tests' tensor-core group
    // (2 FP8 layers over one selection, 2 positions, 64 heads, top-256,
    // 2048 slots) resolving on the device and compiled with
    // --overlap-retrieval, so that each step runs the fused attentions (the
    // resident kernel up to 2% missing) or one fetch of whole tokens and
    // staged attentions (above 8%) by its misses; on CUDA half the steps'
    // selections in device memory (their form from the group's last log).
    // 6 requests of 80 protected slots reserve 23%, and their histories
    // (100 to 800 rows at arrival) about fit the rest, so that the misses
    // fall and rise about the lines; plain steps only.
    const RuntimeConfig config = soakConfig(/*layers=*/2, /*G=*/2, /*requests=*/6,
                                            /*newest=*/16, backend);
    Runtime rt(config);
    rt.loadStep(forms);
    rt.loadPlacementStep(placementL2);
    SoakOptions options;
    options.deviceSelections = backend == BackendKind::Cuda;
    options.verifySteps = false;
    options.longestPrefill = 800;
    Soak soak(rt, RowFormat::MlaFp8, seed + 3, options);
    SoakTotals t = soak.run(share, config.maxRequests, config.hostRows);
    report("a layer group's forms, placement step", rt, t, share);
    CHECK(t.steps > 0);
    CHECK(t.residency.fetched > 0);
    CHECK(t.residency.evicted > 0);
    CHECK(t.forms.count(1.0) == 1); // the fetch and staged attentions ran
    CHECK(t.forms.size() > 1);      // and the fused attentions
  }
  if (!haveVerify) {
    WARN("SKIPPED the verify-step session: " << verify << " was not compiled");
    return;
  }
  {
    // Verify steps (Q = 5, B = 4, 4096 slots): 4 BF16 layers in 2 groups
    // over per-layer pools; 16 requests of 197 protected slots (newest 128,
    // floor 64, the 5 a verify step's pending rows take) reserve 77%.
    const RuntimeConfig config = soakConfig(/*layers=*/4, /*G=*/2, /*requests=*/16,
                                            /*newest=*/128, backend);
    Runtime rt(config);
    rt.loadStep(verify);
    REQUIRE(rt.shape().queries == 5);
    Soak soak(rt, RowFormat::MlaBf16, seed + 2);
    SoakTotals t = soak.run(share, config.maxRequests, config.hostRows);
    report("verify steps, per-layer pools", rt, t, share);
    CHECK(t.steps > 0);
    CHECK(t.verifySteps > 0);
    CHECK(t.accepted > 0);
    CHECK(t.accepted < t.drafted);
    CHECK(t.verifyFailed > 0);
    CHECK(t.residency.fetched > 0);
    CHECK(t.residency.evicted > 0);
  }
}
