//===- CpuAttention.cpp - The CPU reference of sparse_attention -----------===//

#include "runtime/cpu/CpuAttention.h"

#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"
#include "runtime/core/Parallel.h"
#include "runtime/core/RowFormat.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

namespace dhs::runtime {

namespace {

/// Heads whose scores are computed together (independent sums, one per
/// head, that the processor overlaps), and rows per block (a block's keys and
/// values stay in cache while every head reads them).
constexpr std::size_t kHeadBlock = 8;
constexpr std::size_t kRowBlock = 32;

/// 16 bytes of accumulators (GCC/Clang vector extensions; on any target each
/// lane is an ordinary Acc multiply, then add).
template <typename Acc> struct Vector16;
template <> struct Vector16<double> {
  typedef double type __attribute__((vector_size(16)));
};
template <> struct Vector16<float> {
  typedef float type __attribute__((vector_size(16)));
};

/// x in every lane.
template <typename V, typename Acc> V splat(Acc x) {
  V v;
  for (std::size_t i = 0; i < sizeof(V) / sizeof(Acc); ++i)
    v[i] = x;
  return v;
}

/// The scores of rows [kBegin, kEnd) for one block of heads: queries
/// [qkDim][kHeadBlock] (head-minor), keys [row][qkDim], scores [head][row]
/// (`stride` apart) for the first `width` heads. Each head's sum runs over d
/// in order, as a plain dot product would; two rows at a time, each in
/// kHeadBlock independent lanes.
template <typename Acc>
void blockScores(const Acc *queries, const Acc *keys, std::size_t qkDim, std::size_t kBegin,
                 std::size_t kEnd, std::size_t width, Acc scale, Acc *scores, std::size_t stride) {
  using V = typename Vector16<Acc>::type;
  constexpr std::size_t kLanes = sizeof(V) / sizeof(Acc);
  constexpr std::size_t kVectors = kHeadBlock / kLanes;
  static_assert(kHeadBlock % kLanes == 0);
  auto store = [&](const V *dot, std::size_t k) {
    Acc lanes[kHeadBlock];
    std::memcpy(lanes, dot, sizeof lanes);
    for (std::size_t j = 0; j < width; ++j)
      scores[j * stride + k] = scale * lanes[j];
  };
  std::size_t k = kBegin;
  for (; k + 2 <= kEnd; k += 2) {
    const Acc *row0 = keys + k * qkDim, *row1 = row0 + qkDim;
    V dot0[kVectors] = {}, dot1[kVectors] = {};
    for (std::size_t d = 0; d < qkDim; ++d) {
      const V r0 = splat<V>(row0[d]), r1 = splat<V>(row1[d]);
      for (std::size_t n = 0; n < kVectors; ++n) {
        V q;
        std::memcpy(&q, queries + d * kHeadBlock + n * kLanes, sizeof q);
        dot0[n] += q * r0;
        dot1[n] += q * r1;
      }
    }
    store(dot0, k);
    store(dot1, k + 1);
  }
  for (; k < kEnd; ++k) {
    const Acc *row = keys + k * qkDim;
    V dot[kVectors] = {};
    for (std::size_t d = 0; d < qkDim; ++d) {
      const V r = splat<V>(row[d]);
      for (std::size_t n = 0; n < kVectors; ++n) {
        V q;
        std::memcpy(&q, queries + d * kHeadBlock + n * kLanes, sizeof q);
        dot[n] += q * r;
      }
    }
    store(dot, k);
  }
}

/// acc[v] += w[k] * values[k][v] for rows [kBegin, kEnd), in row order, for
/// two heads (weights and acc of the second `second` after the first's),
/// which share the loads of the rows.
template <typename Acc>
void accumulateRows2(const Acc *weights, std::size_t secondWeights, const Acc *values,
                     std::size_t vDim, std::size_t kBegin, std::size_t kEnd, Acc *acc,
                     std::size_t secondAcc) {
  const Acc *weights1 = weights + secondWeights;
  Acc *acc1 = acc + secondAcc;
  std::size_t k = kBegin;
  for (; k + 4 <= kEnd; k += 4) {
    const Acc *r0 = values + k * vDim, *r1 = r0 + vDim, *r2 = r1 + vDim, *r3 = r2 + vDim;
    const Acc a0 = weights[k], a1 = weights[k + 1], a2 = weights[k + 2], a3 = weights[k + 3];
    const Acc b0 = weights1[k], b1 = weights1[k + 1], b2 = weights1[k + 2], b3 = weights1[k + 3];
    for (std::size_t v = 0; v < vDim; ++v) {
      Acc x = acc[v], y = acc1[v];
      x += a0 * r0[v];
      y += b0 * r0[v];
      x += a1 * r1[v];
      y += b1 * r1[v];
      x += a2 * r2[v];
      y += b2 * r2[v];
      x += a3 * r3[v];
      y += b3 * r3[v];
      acc[v] = x;
      acc1[v] = y;
    }
  }
  for (; k < kEnd; ++k) {
    const Acc *row = values + k * vDim;
    const Acc a = weights[k], b = weights1[k];
    for (std::size_t v = 0; v < vDim; ++v) {
      acc[v] += a * row[v];
      acc1[v] += b * row[v];
    }
  }
}

/// The same for one head.
template <typename Acc>
void accumulateRows(const Acc *weights, const Acc *values, std::size_t vDim, std::size_t kBegin,
                    std::size_t kEnd, Acc *acc) {
  std::size_t k = kBegin;
  for (; k + 4 <= kEnd; k += 4) {
    const Acc *r0 = values + k * vDim, *r1 = r0 + vDim, *r2 = r1 + vDim, *r3 = r2 + vDim;
    const Acc w0 = weights[k], w1 = weights[k + 1], w2 = weights[k + 2], w3 = weights[k + 3];
    for (std::size_t v = 0; v < vDim; ++v) {
      Acc a = acc[v];
      a += w0 * r0[v];
      a += w1 * r1[v];
      a += w2 * r2[v];
      a += w3 * r3[v];
      acc[v] = a;
    }
  }
  for (; k < kEnd; ++k) {
    const Acc *row = values + k * vDim;
    const Acc w = weights[k];
    for (std::size_t v = 0; v < vDim; ++v)
      acc[v] += w * row[v];
  }
}

/// Computes the unrounded output of the (b, q) pairs [begin, end) in Acc.
/// Per head: s_k = scale * sum_d q[d] row_k[d] (d in order), p_k =
/// exp(s_k - max s), out[v] = (sum_k p_k row_k[v]) / (sum_k p_k) (k in
/// order); the loops are blocked over heads and rows, which changes no sum's
/// order.
template <typename Acc>
void attendPairs(const SparseAttentionProblem &p, std::int64_t begin, std::int64_t end, Acc *out) {
  const ProblemShape &s = p.shape;
  const std::size_t qkDim = static_cast<std::size_t>(s.qkDim);
  const std::size_t vDim = static_cast<std::size_t>(s.vDim);
  const bool gqa = s.format == RowFormat::Gqa;
  // MLA rows hold one KV head whose values are the keys' leading dims.
  const std::size_t kvHeads = static_cast<std::size_t>(gqa ? s.gqa.kvHeads : 1);
  const std::size_t heads = static_cast<std::size_t>(s.heads);
  const std::size_t groupHeads = heads / kvHeads;
  const std::size_t blocksPerGroup = (groupHeads + kHeadBlock - 1) / kHeadBlock;
  const Acc scale = static_cast<Acc>(s.softmaxScale);
  std::vector<const std::uint8_t *> selected;
  std::vector<Acc> keys, values; // [kv head][valid][dim], decoded exactly
  std::vector<double> key(qkDim), value(vDim);
  // Each KV head's heads in blocks of kHeadBlock (the last padded with zero
  // queries): [kv head][block][qkDim][kHeadBlock].
  std::vector<Acc> queries(kvHeads * blocksPerGroup * qkDim * kHeadBlock);
  std::vector<Acc> weights; // [head][valid]: scores, then exp(score - max)
  std::vector<Acc> acc(heads * vDim), sums(groupHeads);
  // (Tests make this scratch's allocation fail in a worker.)
  if (DHS_FAULT(HostAlloc))
    throw std::bad_alloc();

  for (std::int64_t pair = begin; pair < end; ++pair) {
    const std::int64_t b = pair / s.queries, q = pair % s.queries;
    // Gather and decode the valid rows once for all heads: the layer's row
    // within each token's group.
    selected.clear();
    for (std::int64_t k = 0; k < s.topk; ++k)
      if (const bf16_t *token = p.row(b, q, k))
        selected.push_back(reinterpret_cast<const std::uint8_t *>(token) + s.layer * s.rowBytes);
    // Then the sliding window's tokens, in the same softmax.
    for (std::int64_t j = 0; j < s.windowSize; ++j)
      if (const bf16_t *token = p.windowRow(b, q, j))
        selected.push_back(reinterpret_cast<const std::uint8_t *>(token) + s.layer * s.rowBytes);
    const std::size_t valid = selected.size();
    Acc *result = out + static_cast<std::size_t>(pair) * heads * vDim;
    if (valid == 0) {
      std::fill(result, result + heads * vDim, Acc(0));
      continue;
    }
    keys.resize(kvHeads * valid * qkDim);
    values.resize(kvHeads * valid * vDim);
    for (std::size_t kvh = 0; kvh < kvHeads; ++kvh)
      for (std::size_t k = 0; k < valid; ++k) {
        if (gqa)
          decodeGqa(s.gqa, selected[k], static_cast<std::int64_t>(kvh), key.data(), value.data());
        else
          decodeKey(s.format, selected[k], key.data());
        Acc *keyOut = &keys[(kvh * valid + k) * qkDim];
        Acc *valueOut = &values[(kvh * valid + k) * vDim];
        for (std::size_t d = 0; d < qkDim; ++d)
          keyOut[d] = static_cast<Acc>(key[d]);
        for (std::size_t d = 0; d < vDim; ++d)
          valueOut[d] = static_cast<Acc>(gqa ? value[d] : key[d]);
      }
    std::fill(queries.begin(), queries.end(), Acc(0));
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t kvh = h / groupHeads, inGroup = h % groupHeads;
      Acc *block = &queries[(kvh * blocksPerGroup + inGroup / kHeadBlock) * qkDim * kHeadBlock];
      const bf16_t *qRow = p.queries.data() + (static_cast<std::size_t>(pair) * heads + h) * qkDim;
      for (std::size_t d = 0; d < qkDim; ++d)
        block[d * kHeadBlock + inGroup % kHeadBlock] = static_cast<Acc>(bf16ToFloat(qRow[d]));
    }
    weights.resize(heads * valid);
    std::fill(acc.begin(), acc.end(), Acc(0));

    for (std::size_t kvh = 0; kvh < kvHeads; ++kvh) {
      const Acc *groupKeys = &keys[kvh * valid * qkDim];
      const Acc *groupValues = &values[kvh * valid * vDim];
      const std::size_t firstHead = kvh * groupHeads;
      // Scores, a block of rows at a time for every head.
      for (std::size_t k0 = 0; k0 < valid; k0 += kRowBlock) {
        const std::size_t k1 = std::min(valid, k0 + kRowBlock);
        for (std::size_t blk = 0; blk < blocksPerGroup; ++blk) {
          const std::size_t h0 = blk * kHeadBlock;
          blockScores(&queries[(kvh * blocksPerGroup + blk) * qkDim * kHeadBlock], groupKeys, qkDim,
                      k0, k1, std::min(kHeadBlock, groupHeads - h0), scale,
                      &weights[(firstHead + h0) * valid], valid);
        }
      }
      // Softmax weights and their sums.
      for (std::size_t h = 0; h < groupHeads; ++h) {
        Acc *w = &weights[(firstHead + h) * valid];
        Acc maxScore = -std::numeric_limits<Acc>::infinity();
        for (std::size_t k = 0; k < valid; ++k)
          maxScore = std::max(maxScore, w[k]);
        Acc sum = 0;
        for (std::size_t k = 0; k < valid; ++k) {
          w[k] = std::exp(w[k] - maxScore);
          sum += w[k];
        }
        sums[h] = sum;
      }
      // Weighted values, a block of rows at a time for every head.
      for (std::size_t k0 = 0; k0 < valid; k0 += kRowBlock) {
        const std::size_t k1 = std::min(valid, k0 + kRowBlock);
        std::size_t h = 0;
        for (; h + 2 <= groupHeads; h += 2)
          accumulateRows2(&weights[(firstHead + h) * valid], valid, groupValues, vDim, k0, k1,
                          &acc[(firstHead + h) * vDim], vDim);
        if (h < groupHeads)
          accumulateRows(&weights[(firstHead + h) * valid], groupValues, vDim, k0, k1,
                         &acc[(firstHead + h) * vDim]);
      }
      for (std::size_t h = 0; h < groupHeads; ++h)
        for (std::size_t v = 0; v < vDim; ++v)
          result[(firstHead + h) * vDim + v] = acc[(firstHead + h) * vDim + v] / sums[h];
    }
  }
}

/// Runs attendPairs over all (b, q) pairs on up to `threads` threads, one
/// pair at a time (handed out dynamically, which balances uneven
/// selections). The first exception a worker throws stops the others and is
/// rethrown here, on the calling thread, once all have finished.
template <typename Acc> std::vector<Acc> attend(const SparseAttentionProblem &p, unsigned threads) {
  const ProblemShape &s = p.shape;
  std::vector<Acc> out(static_cast<std::size_t>(s.outputCount()));
  if (threads == 0)
    threads = hardwareThreads();
  parallelFor(
      s.batch * s.queries, 1, std::min(threads, 64u),
      [&](std::int64_t begin, std::int64_t end) { attendPairs<Acc>(p, begin, end, out.data()); });
  return out;
}

} // namespace

CpuAttention::CpuAttention(CpuPrecision precision, unsigned threads)
    : precision_(precision), threads_(threads) {}

std::vector<bf16_t> CpuAttention::run(const SparseAttentionProblem &problem) const {
  problem.validate();
  std::vector<bf16_t> out(static_cast<std::size_t>(problem.shape.outputCount()));
  if (precision_ == CpuPrecision::Float) {
    std::vector<float> values = attend<float>(problem, threads_);
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = floatToBf16(values[i]);
  } else {
    std::vector<double> values = attend<double>(problem, threads_);
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = doubleToBf16(values[i]);
  }
  return out;
}

std::vector<double> CpuAttention::runUnrounded(const SparseAttentionProblem &problem) const {
  problem.validate();
  if (precision_ == CpuPrecision::Double)
    return attend<double>(problem, threads_);
  std::vector<float> values = attend<float>(problem, threads_);
  return std::vector<double>(values.begin(), values.end());
}

//===----------------------------------------------------------------------===//
// Comparisons
//===----------------------------------------------------------------------===//

namespace {

template <typename A, typename R, typename ToDouble>
Comparison compareImpl(const std::vector<A> &actual, const std::vector<R> &reference,
                       ToDouble toDoubleA, ToDouble toDoubleR) {
  if (actual.size() != reference.size())
    throw Error("cannot compare outputs of " + std::to_string(actual.size()) + " and " +
                std::to_string(reference.size()) + " elements");
  Comparison result;
  result.elements = actual.size();
  double diffSquares = 0.0, refSquares = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    double a = toDoubleA(actual[i]);
    double r = toDoubleR(reference[i]);
    if (std::isfinite(r))
      refSquares += r * r;
    if (!std::isfinite(a) || !std::isfinite(r)) {
      ++result.nonFinite;
      continue;
    }
    double diff = a - r;
    diffSquares += diff * diff;
    result.maxAbsError = std::max(result.maxAbsError, std::fabs(diff));
  }
  result.referenceNorm = std::sqrt(refSquares);
  const double inf = std::numeric_limits<double>::infinity();
  if (result.nonFinite > 0)
    result.relativeError = inf;
  else if (refSquares == 0.0)
    result.relativeError = diffSquares == 0.0 ? 0.0 : inf;
  else
    result.relativeError = std::sqrt(diffSquares) / result.referenceNorm;
  return result;
}

} // namespace

Comparison compareOutputs(const std::vector<bf16_t> &actual, const std::vector<double> &reference) {
  if (actual.size() != reference.size())
    throw Error("cannot compare outputs of " + std::to_string(actual.size()) + " and " +
                std::to_string(reference.size()) + " elements");
  // Widen the bf16 side, then compare as doubles.
  std::vector<double> widened(actual.size());
  for (std::size_t i = 0; i < actual.size(); ++i)
    widened[i] = bf16ToFloat(actual[i]);
  return compareOutputs(widened, reference);
}

Comparison compareOutputs(const std::vector<bf16_t> &actual, const std::vector<bf16_t> &reference) {
  auto widen = [](bf16_t v) { return static_cast<double>(bf16ToFloat(v)); };
  return compareImpl(actual, reference, widen, widen);
}

Comparison compareOutputs(const std::vector<double> &actual, const std::vector<double> &reference) {
  auto same = [](double v) { return v; };
  return compareImpl(actual, reference, same, same);
}

std::size_t countBitDifferences(const std::vector<bf16_t> &a, const std::vector<bf16_t> &b) {
  if (a.size() != b.size())
    throw Error("cannot compare outputs of " + std::to_string(a.size()) + " and " +
                std::to_string(b.size()) + " elements");
  std::size_t count = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    count += a[i] != b[i];
  return count;
}

} // namespace dhs::runtime
