//===- ProblemGenerator.cpp - Seeded sparse-attention problems ------------===//

#include "runtime/testing/ProblemGenerator.h"

#include "runtime/core/Error.h"
#include "runtime/core/Parallel.h"
#include "runtime/core/RandomStream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace dhs::runtime {

namespace {

//===----------------------------------------------------------------------===//
// Deterministic random numbers (std::mt19937_64 is exactly specified; the
// standard distributions are not, so they are written out here).
//===----------------------------------------------------------------------===//

/// Uniform integer in [0, n), n > 0, without modulo bias.
std::uint64_t uniformBelow(std::mt19937_64 &rng, std::uint64_t n) {
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t limit = max - (max % n + 1) % n;
  std::uint64_t x;
  do {
    x = rng();
  } while (x > limit);
  return x % n;
}

/// The keys of the generator's counter-based streams (RandomStream.h), one
/// family per kind of data, so that adding one leaves the others' bits.
enum class Stream : std::uint64_t {
  Queries = 0x5155455249455300ull,    // "QUERIES"
  HostRows = 0x484f5354524f5753ull,   // "HOSTROWS"
  WindowRows = 0x57494e44524f5753ull, // "WINDROWS"
};

std::uint64_t streamKey(std::uint64_t seed, Stream stream) {
  return mix64(seed ^ mix64(static_cast<std::uint64_t>(stream)));
}

/// Fills `rows` rows of the shape's format at `bytes`, row i from stream i of
/// `key`, on `threads` threads (the same bits for any number).
void fillRows(const ProblemShape &shape, std::uint8_t *bytes, std::int64_t rows, std::uint64_t key,
              unsigned threads) {
  parallelFor(rows, 1024, threads, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      RandomStream rng(key, static_cast<std::uint64_t>(row));
      if (shape.format == RowFormat::Gqa)
        fillRandomGqaRow(shape.gqa, bytes + row * shape.rowBytes, rng);
      else
        fillRandomRow(shape.format, bytes + row * shape.rowBytes, rng);
    }
  });
}

} // namespace

SparseAttentionProblem generateProblem(const ProblemShape &shape, const GeneratorOptions &options) {
  if (!(options.positionOverlap >= 0.0 && options.positionOverlap <= 1.0))
    throw Error("the position overlap must lie in [0, 1]");
  if (!(options.unusedFraction >= 0.0 && options.unusedFraction <= 1.0))
    throw Error("the unused fraction must lie in [0, 1]");
  if (!(options.residency >= 0.0 && options.residency <= 1.0))
    throw Error("the residency fraction must lie in [0, 1]");
  if (shape.batch <= 0 || shape.queries <= 0 || shape.heads <= 0 || shape.topk <= 0)
    throw Error("cannot generate a problem with an empty dimension");

  SparseAttentionProblem p;
  p.shape = shape;
  const std::int64_t B = shape.batch, Q = shape.queries, K = shape.topk;
  std::mt19937_64 rng(options.seed);

  // History lengths, laid out contiguously in the host store.
  p.historyLen.resize(static_cast<std::size_t>(B));
  p.historyStart.resize(static_cast<std::size_t>(B));
  std::int64_t totalHistory = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    std::int64_t len = options.historyRows;
    if (len <= 0) {
      if (options.minHistoryRows <= 0 || options.maxHistoryRows < options.minHistoryRows)
        throw Error("invalid random history range [" + std::to_string(options.minHistoryRows) +
                    ", " + std::to_string(options.maxHistoryRows) + "]");
      len = options.minHistoryRows +
            static_cast<std::int64_t>(uniformBelow(
                rng,
                static_cast<std::uint64_t>(options.maxHistoryRows - options.minHistoryRows + 1)));
    }
    if (len < K)
      throw Error("a history of " + std::to_string(len) +
                  " rows cannot provide K = " + std::to_string(K) + " distinct selections");
    if (len > std::numeric_limits<std::int32_t>::max())
      throw Error("a history of " + std::to_string(len) + " rows does not fit i32 row ids");
    p.historyLen[b] = static_cast<std::int32_t>(len);
    p.historyStart[b] = totalHistory;
    totalHistory += len;
  }
  std::int64_t hostRows = shape.hostRows >= 0     ? shape.hostRows
                          : options.hostRows >= 0 ? options.hostRows
                                                  : totalHistory;
  if (hostRows < totalHistory)
    throw Error("the host store has " + std::to_string(hostRows) +
                " rows, but the requests' histories need " + std::to_string(totalHistory));
  p.shape.hostRows = hostRows;

  // Values, each query vector and each row from a stream of its own (on
  // every thread, the same bits for any number of threads): the queries,
  // then every layer of every token of the host store, random rows of the
  // pool's format.
  p.queries.resize(static_cast<std::size_t>(shape.queryCount()));
  const std::uint64_t queryKey = streamKey(options.seed, Stream::Queries);
  const std::int64_t qkDim = shape.qkDim;
  parallelFor(
      shape.queryCount() / qkDim, 256, options.threads, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t vector = begin; vector < end; ++vector) {
          RandomStream stream(queryKey, static_cast<std::uint64_t>(vector));
          normalsBf16(stream, p.queries.data() + vector * qkDim, static_cast<std::size_t>(qkDim));
        }
      });
  p.hostStore.resize(static_cast<std::size_t>(hostRows * shape.rowElems));
  fillRows(shape, reinterpret_cast<std::uint8_t *>(p.hostStore.data()), hostRows * shape.layers,
           streamKey(options.seed, Stream::HostRows), options.threads);

  // Selections: K distinct rows per query by a partial Fisher-Yates shuffle
  // of the request's rows (any permutation is a valid start, so the vector
  // is not reset between queries), then the unused entries.
  p.rowIds.resize(static_cast<std::size_t>(shape.selectionCount()));
  p.slots.assign(p.rowIds.size(), -1);
  const std::int64_t unused = std::llround(options.unusedFraction * static_cast<double>(K));
  std::vector<std::int32_t> permutation;
  std::vector<std::int64_t> positions(static_cast<std::size_t>(K));
  for (std::int64_t b = 0; b < B; ++b) {
    std::int32_t len = p.historyLen[b];
    permutation.resize(static_cast<std::size_t>(len));
    for (std::int32_t r = 0; r < len; ++r)
      permutation[r] = r;
    // Overlapping positions: the first `kept` rows of the permutation stay
    // (selected again by the next position), the rest are redrawn from the
    // rows after them; every query's K rows stay distinct.
    const std::int64_t kept = std::llround(options.positionOverlap * static_cast<double>(K));
    for (std::int64_t q = 0; q < Q; ++q) {
      if (q > 0 && kept > 0) {
        // Keep a random `kept` of the previous position's rows in front.
        for (std::int64_t k = 0; k < kept; ++k) {
          std::int64_t j =
              k + static_cast<std::int64_t>(uniformBelow(rng, static_cast<std::uint64_t>(K - k)));
          std::swap(permutation[k], permutation[j]);
        }
      }
      for (std::int64_t k = q > 0 ? kept : 0; k < K; ++k) {
        // Fresh rows for this position come from beyond the previous K.
        std::int64_t from = q > 0 ? std::max(k, K) : k;
        if (from >= len)
          from = k;
        std::int64_t j = from + static_cast<std::int64_t>(
                                    uniformBelow(rng, static_cast<std::uint64_t>(len - from)));
        std::swap(permutation[k], permutation[j]);
      }
      for (std::int64_t k = 0; k < K; ++k)
        p.rowIds[p.selectionIndex(b, q, k)] = permutation[k];
      for (std::int64_t k = 0; k < K; ++k)
        positions[k] = k;
      for (std::int64_t u = 0; u < unused; ++u) {
        std::int64_t j =
            u + static_cast<std::int64_t>(uniformBelow(rng, static_cast<std::uint64_t>(K - u)));
        std::swap(positions[u], positions[j]);
        p.rowIds[p.selectionIndex(b, q, positions[u])] = -1;
      }
    }
  }

  // HBM pool size: fixed, requested, or enough for every distinct selected
  // row to be resident.
  std::int64_t hbmSlots = shape.hbmSlots >= 0 ? shape.hbmSlots : options.hbmSlots;
  if (hbmSlots < 0) {
    hbmSlots = 0;
    std::vector<std::int32_t> rows;
    for (std::int64_t b = 0; b < B; ++b) {
      rows.clear();
      for (std::int64_t i = b * Q * K; i < (b + 1) * Q * K; ++i)
        if (p.rowIds[i] != -1)
          rows.push_back(p.rowIds[i]);
      std::sort(rows.begin(), rows.end());
      hbmSlots += std::unique(rows.begin(), rows.end()) - rows.begin();
    }
    hbmSlots = std::max<std::int64_t>(hbmSlots, 1);
  }
  if (hbmSlots > std::numeric_limits<std::int32_t>::max())
    throw Error("the HBM pool cannot have " + std::to_string(hbmSlots) + " slots (i32 slot ids)");
  p.shape.hbmSlots = hbmSlots;
  p.hbmPool.assign(static_cast<std::size_t>(hbmSlots * shape.rowElems), 0);

  // The sliding window, from a stream of its own (problems without one keep
  // their bits): request 0 sees fewer raw tokens than the window, the others
  // have wrapped their rings.
  if (shape.windowSize > 0) {
    if (shape.windowRing < shape.windowSize + Q - 1)
      throw Error("a window ring of " + std::to_string(shape.windowRing) +
                  " tokens cannot hold a " + std::to_string(shape.windowSize) +
                  "-token window for " + std::to_string(Q) + " query positions");
    std::mt19937_64 windowRng(mix64(options.seed ^ 0x57494e444f57ull));
    p.windowTokens.resize(static_cast<std::size_t>(B));
    for (std::int64_t b = 0; b < B; ++b) {
      std::int64_t tokens =
          b == 0 ? static_cast<std::int64_t>(
                       uniformBelow(windowRng, static_cast<std::uint64_t>(shape.windowSize)))
                 : shape.windowRing +
                       static_cast<std::int64_t>(uniformBelow(
                           windowRng, static_cast<std::uint64_t>(4 * shape.windowRing)));
      p.windowTokens[b] = static_cast<std::int32_t>(tokens);
    }
    p.windowRing.resize(static_cast<std::size_t>(B * shape.windowRing * shape.rowElems));
    fillRows(shape, reinterpret_cast<std::uint8_t *>(p.windowRing.data()),
             B * shape.windowRing * shape.layers, streamKey(options.seed, Stream::WindowRows),
             options.threads);
  }
  applyResidency(p, options.residency, options.seed, options.threads);
  return p;
}

namespace {

/// Which rows a residency mix makes resident, and where.
struct ResidencyPlan {
  /// Per request: its distinct selected rows, the first residentCount[b]
  /// resident.
  std::vector<std::vector<std::int32_t>> distinct;
  std::vector<std::int64_t> residentCount;
  /// The slots of the resident rows, in request order.
  std::vector<std::int32_t> slotIds;
  /// The key of the unused slots' noise.
  std::uint64_t noiseKey = 0;
};

ResidencyPlan planResidency(const SparseAttentionProblem &p, double fraction, std::uint64_t seed) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    throw Error("the residency fraction " + std::to_string(fraction) + " is outside [0, 1]");
  // Row ids and their host rows must be valid to be copied.
  p.validateRows();
  const ProblemShape &s = p.shape;
  const std::int64_t B = s.batch, Q = s.queries, K = s.topk;

  // A seed of its own per (seed, fraction), so that each mix is reproducible.
  std::uint64_t fractionBits;
  static_assert(sizeof(fractionBits) == sizeof(fraction));
  std::memcpy(&fractionBits, &fraction, sizeof(fraction));
  std::mt19937_64 rng(mix64(seed ^ mix64(fractionBits)));

  // Per request: its distinct selected rows and which become resident.
  ResidencyPlan plan;
  plan.distinct.resize(static_cast<std::size_t>(B));
  plan.residentCount.resize(static_cast<std::size_t>(B));
  std::int64_t totalResident = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<std::int32_t> &rows = plan.distinct[b];
    for (std::int64_t i = b * Q * K; i < (b + 1) * Q * K; ++i)
      if (p.rowIds[i] != -1)
        rows.push_back(p.rowIds[i]);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    // Shuffle: the first residentCount rows become resident.
    std::int64_t count = std::llround(fraction * static_cast<double>(rows.size()));
    for (std::int64_t i = 0; i < count; ++i) {
      std::int64_t j = i + static_cast<std::int64_t>(
                               uniformBelow(rng, static_cast<std::uint64_t>(rows.size() - i)));
      std::swap(rows[i], rows[j]);
    }
    plan.residentCount[b] = count;
    totalResident += count;
  }
  if (totalResident > s.hbmSlots) {
    char share[16];
    std::snprintf(share, sizeof share, "%.2f", fraction);
    throw Error(std::string("residency ") + share + " makes " + std::to_string(totalResident) +
                " distinct selected rows resident, but the pool has " + std::to_string(s.hbmSlots) +
                " HBM slots: let query positions select overlapping rows (the position "
                "overlap) or make fewer rows resident");
  }

  // Distinct random slots: a partial shuffle of all slot ids.
  std::vector<std::int32_t> &slotIds = plan.slotIds;
  slotIds.resize(static_cast<std::size_t>(s.hbmSlots));
  for (std::size_t i = 0; i < slotIds.size(); ++i)
    slotIds[i] = static_cast<std::int32_t>(i);
  for (std::int64_t i = 0; i < totalResident; ++i) {
    std::int64_t j = i + static_cast<std::int64_t>(
                             uniformBelow(rng, static_cast<std::uint64_t>(s.hbmSlots - i)));
    std::swap(slotIds[i], slotIds[j]);
  }
  slotIds.resize(static_cast<std::size_t>(totalResident));
  plan.noiseKey = rng();
  return plan;
}

/// Writes the slot of every selection under `plan` into `slots` and calls
/// copy(host row, slot) for each resident row.
template <typename Copy>
void placeResidency(const SparseAttentionProblem &p, const ResidencyPlan &plan,
                    std::vector<std::int32_t> &slots, Copy copy) {
  const ProblemShape &s = p.shape;
  const std::int64_t B = s.batch, Q = s.queries, K = s.topk;
  slots.resize(p.rowIds.size());
  std::int64_t nextSlot = 0;
  std::vector<std::pair<std::int32_t, std::int32_t>> rowToSlot;
  for (std::int64_t b = 0; b < B; ++b) {
    rowToSlot.clear();
    for (std::int64_t i = 0; i < plan.residentCount[b]; ++i) {
      std::int32_t r = plan.distinct[b][i];
      std::int32_t slot = plan.slotIds[nextSlot++];
      copy(p.historyStart[b] + r, slot);
      rowToSlot.emplace_back(r, slot);
    }
    std::sort(rowToSlot.begin(), rowToSlot.end());
    for (std::int64_t i = b * Q * K; i < (b + 1) * Q * K; ++i) {
      std::int32_t r = p.rowIds[i];
      slots[i] = -1;
      if (r == -1)
        continue;
      auto it =
          std::lower_bound(rowToSlot.begin(), rowToSlot.end(), std::make_pair(r, std::int32_t(-1)));
      if (it != rowToSlot.end() && it->first == r)
        slots[i] = it->second;
    }
  }
}

} // namespace

void applyResidency(SparseAttentionProblem &p, double fraction, std::uint64_t seed,
                    unsigned threads) {
  const ResidencyPlan plan = planResidency(p, fraction, seed);
  const ProblemShape &s = p.shape;
  // Noise everywhere (each slot from a stream of its own), then the resident
  // rows.
  const std::size_t rowElems = static_cast<std::size_t>(s.rowElems);
  parallelFor(s.hbmSlots, 1024, threads, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t slot = begin; slot < end; ++slot) {
      RandomStream noise(plan.noiseKey, static_cast<std::uint64_t>(slot));
      bf16_t *out = p.hbmPool.data() + static_cast<std::size_t>(slot) * rowElems;
      for (std::size_t i = 0; i < rowElems;) {
        const std::uint64_t bits = noise();
        for (int part = 0; part < 4 && i < rowElems; ++part, ++i) {
          // 8u - 4 + 2^-17 for u = k / 2^16, exact in float.
          const auto k = static_cast<float>((bits >> (16 * part)) & 0xFFFFu);
          out[i] = floatToBf16(k / 8192.0f - 4.0f + 1.0f / 131072.0f);
        }
      }
    }
  });
  const bf16_t *host = p.hostStoreData();
  placeResidency(p, plan, p.slots, [&](std::int64_t hostRow, std::int32_t slot) {
    std::copy_n(host + static_cast<std::size_t>(hostRow) * rowElems, rowElems,
                p.hbmPool.begin() + static_cast<std::ptrdiff_t>(slot * rowElems));
  });
}

std::vector<std::int32_t> residencySlots(const SparseAttentionProblem &p, double fraction,
                                         std::uint64_t seed) {
  std::vector<std::int32_t> slots;
  placeResidency(p, planResidency(p, fraction, seed), slots, [](std::int64_t, std::int32_t) {});
  return slots;
}

} // namespace dhs::runtime
