//===- ProblemGenerator.cpp - Seeded sparse-attention problems ------------===//

#include "runtime/testing/ProblemGenerator.h"

#include "runtime/core/Error.h"

#include <algorithm>
#include <cmath>
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

/// Uniform double in (0, 1].
double uniformOpen(std::mt19937_64 &rng) {
  return (static_cast<double>(rng() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

/// Standard normal samples (Box-Muller), converted to nonzero bf16.
class NormalBf16 {
public:
  explicit NormalBf16(std::mt19937_64 &rng) : rng_(rng) {}

  bf16_t next() {
    for (;;) {
      double z;
      if (havePending_) {
        z = pending_;
        havePending_ = false;
      } else {
        double radius = std::sqrt(-2.0 * std::log(uniformOpen(rng_)));
        double angle = 6.283185307179586 * uniformOpen(rng_);
        z = radius * std::cos(angle);
        pending_ = radius * std::sin(angle);
        havePending_ = true;
      }
      bf16_t value = doubleToBf16(z);
      if ((value & 0x7FFFu) != 0) // never zero
        return value;
    }
  }

private:
  std::mt19937_64 &rng_;
  double pending_ = 0.0;
  bool havePending_ = false;
};

/// splitmix64: derives independent seeds.
std::uint64_t mixSeed(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
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

  // Values: queries, then the host store.
  NormalBf16 normal(rng);
  p.queries.resize(static_cast<std::size_t>(shape.queryCount()));
  for (bf16_t &value : p.queries)
    value = normal.next();
  // Every layer of every token: random rows of the pool's format.
  p.hostStore.resize(static_cast<std::size_t>(hostRows * shape.rowElems));
  auto *bytes = reinterpret_cast<std::uint8_t *>(p.hostStore.data());
  for (std::int64_t row = 0; row < hostRows * shape.layers; ++row) {
    if (shape.format == RowFormat::Gqa)
      fillRandomGqaRow(shape.gqa, bytes + row * shape.rowBytes, rng);
    else
      fillRandomRow(shape.format, bytes + row * shape.rowBytes, rng);
  }

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
    std::mt19937_64 windowRng(mixSeed(options.seed ^ 0x57494e444f57ull));
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
    auto *ring = reinterpret_cast<std::uint8_t *>(p.windowRing.data());
    for (std::int64_t row = 0; row < B * shape.windowRing * shape.layers; ++row) {
      if (shape.format == RowFormat::Gqa)
        fillRandomGqaRow(shape.gqa, ring + row * shape.rowBytes, windowRng);
      else
        fillRandomRow(shape.format, ring + row * shape.rowBytes, windowRng);
    }
  }
  applyResidency(p, options.residency, options.seed);
  return p;
}

void applyResidency(SparseAttentionProblem &p, double fraction, std::uint64_t seed) {
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
  std::mt19937_64 rng(mixSeed(seed ^ mixSeed(fractionBits)));

  // Per request: its distinct selected rows and which become resident.
  std::vector<std::vector<std::int32_t>> distinct(static_cast<std::size_t>(B));
  std::vector<std::int64_t> residentCount(static_cast<std::size_t>(B));
  std::int64_t totalResident = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<std::int32_t> &rows = distinct[b];
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
    residentCount[b] = count;
    totalResident += count;
  }
  if (totalResident > s.hbmSlots)
    throw Error("residency " + std::to_string(fraction) + " needs " +
                std::to_string(totalResident) + " HBM slots, but the pool has " +
                std::to_string(s.hbmSlots));

  // Distinct random slots: a partial shuffle of all slot ids.
  std::vector<std::int32_t> slotIds(static_cast<std::size_t>(s.hbmSlots));
  for (std::size_t i = 0; i < slotIds.size(); ++i)
    slotIds[i] = static_cast<std::int32_t>(i);
  for (std::int64_t i = 0; i < totalResident; ++i) {
    std::int64_t j = i + static_cast<std::int64_t>(
                             uniformBelow(rng, static_cast<std::uint64_t>(s.hbmSlots - i)));
    std::swap(slotIds[i], slotIds[j]);
  }

  // Noise everywhere, then the resident rows.
  for (std::size_t i = 0; i < p.hbmPool.size();) {
    std::uint64_t bits = rng();
    for (int part = 0; part < 4 && i < p.hbmPool.size(); ++part, ++i) {
      double u = static_cast<double>((bits >> (16 * part)) & 0xFFFFu) / 65536.0;
      p.hbmPool[i] = doubleToBf16(8.0 * u - 4.0 + 1.0 / 131072.0);
    }
  }
  const std::size_t rowElems = static_cast<std::size_t>(s.rowElems);
  std::int64_t nextSlot = 0;
  std::vector<std::pair<std::int32_t, std::int32_t>> rowToSlot;
  for (std::int64_t b = 0; b < B; ++b) {
    rowToSlot.clear();
    for (std::int64_t i = 0; i < residentCount[b]; ++i) {
      std::int32_t r = distinct[b][i];
      std::int32_t slot = slotIds[nextSlot++];
      std::copy_n(p.hostStore.begin() +
                      static_cast<std::ptrdiff_t>((p.historyStart[b] + r) * s.rowElems),
                  rowElems, p.hbmPool.begin() + static_cast<std::ptrdiff_t>(slot * rowElems));
      rowToSlot.emplace_back(r, slot);
    }
    std::sort(rowToSlot.begin(), rowToSlot.end());
    for (std::int64_t i = b * Q * K; i < (b + 1) * Q * K; ++i) {
      std::int32_t r = p.rowIds[i];
      p.slots[i] = -1;
      if (r == -1)
        continue;
      auto it =
          std::lower_bound(rowToSlot.begin(), rowToSlot.end(), std::make_pair(r, std::int32_t(-1)));
      if (it != rowToSlot.end() && it->first == r)
        p.slots[i] = it->second;
    }
  }
}

} // namespace dhs::runtime
