//===- CpuAttention.cpp - The CPU reference of sparse_attention -----------===//

#include "runtime/cpu/CpuAttention.h"

#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"
#include "runtime/core/RowFormat.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <new>
#include <thread>

namespace dhs::runtime {

namespace {

/// Computes the unrounded output of the (b, q) pairs [begin, end) in Acc.
template <typename Acc>
void attendPairs(const SparseAttentionProblem &p, std::int64_t begin, std::int64_t end, Acc *out) {
  const ProblemShape &s = p.shape;
  const std::size_t qkDim = static_cast<std::size_t>(s.qkDim);
  const std::size_t vDim = static_cast<std::size_t>(s.vDim);
  const bool gqa = s.format == RowFormat::Gqa;
  // MLA rows hold one KV head whose values are the keys' leading dims.
  const std::int64_t kvHeads = gqa ? s.gqa.kvHeads : 1;
  const std::int64_t groupHeads = s.heads / kvHeads;
  const Acc scale = static_cast<Acc>(s.softmaxScale);
  std::vector<const std::uint8_t *> selected;
  std::vector<Acc> keys, values; // [kv head][valid][dim], decoded exactly
  std::vector<double> key(qkDim), value(vDim);
  std::vector<Acc> query(qkDim);
  std::vector<Acc> weights; // scores, then exp(score - max)
  std::vector<Acc> acc(vDim);
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
    keys.resize(static_cast<std::size_t>(kvHeads) * valid * qkDim);
    values.resize(static_cast<std::size_t>(kvHeads) * valid * vDim);
    for (std::int64_t kvh = 0; kvh < kvHeads; ++kvh)
      for (std::size_t k = 0; k < valid; ++k) {
        if (gqa)
          decodeGqa(s.gqa, selected[k], kvh, key.data(), value.data());
        else
          decodeKey(s.format, selected[k], key.data());
        Acc *keyOut = &keys[(static_cast<std::size_t>(kvh) * valid + k) * qkDim];
        Acc *valueOut = &values[(static_cast<std::size_t>(kvh) * valid + k) * vDim];
        for (std::size_t d = 0; d < qkDim; ++d)
          keyOut[d] = static_cast<Acc>(key[d]);
        for (std::size_t d = 0; d < vDim; ++d)
          valueOut[d] = static_cast<Acc>(gqa ? value[d] : key[d]);
      }
    weights.resize(valid);

    for (std::int64_t h = 0; h < s.heads; ++h) {
      Acc *result = out + ((pair * s.heads + h) * s.vDim);
      if (valid == 0) {
        std::fill(result, result + vDim, Acc(0));
        continue;
      }
      const std::size_t kvh = static_cast<std::size_t>(h / groupHeads);
      const bf16_t *qRow =
          p.queries.data() + static_cast<std::size_t>((pair * s.heads + h) * s.qkDim);
      for (std::size_t d = 0; d < qkDim; ++d)
        query[d] = static_cast<Acc>(bf16ToFloat(qRow[d]));

      Acc maxScore = -std::numeric_limits<Acc>::infinity();
      for (std::size_t k = 0; k < valid; ++k) {
        const Acc *row = &keys[(kvh * valid + k) * qkDim];
        Acc dot = 0;
        for (std::size_t d = 0; d < qkDim; ++d)
          dot += query[d] * row[d];
        weights[k] = scale * dot;
        maxScore = std::max(maxScore, weights[k]);
      }
      Acc sum = 0;
      for (std::size_t k = 0; k < valid; ++k) {
        weights[k] = std::exp(weights[k] - maxScore);
        sum += weights[k];
      }
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (std::size_t k = 0; k < valid; ++k) {
        const Acc *row = &values[(kvh * valid + k) * vDim];
        const Acc w = weights[k];
        for (std::size_t v = 0; v < vDim; ++v)
          acc[v] += w * row[v];
      }
      for (std::size_t v = 0; v < vDim; ++v)
        result[v] = acc[v] / sum;
    }
  }
}

/// Runs attendPairs over all (b, q) pairs on up to `threads` threads. The
/// first exception a worker throws stops the others and is rethrown here, on
/// the calling thread, once all have joined.
template <typename Acc> std::vector<Acc> attend(const SparseAttentionProblem &p, unsigned threads) {
  const ProblemShape &s = p.shape;
  std::vector<Acc> out(static_cast<std::size_t>(s.outputCount()));
  const std::int64_t pairs = s.batch * s.queries;
  if (threads == 0)
    threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::int64_t>(std::min<unsigned>(threads, 64), pairs));
  if (threads <= 1) {
    attendPairs<Acc>(p, 0, pairs, out.data());
    return out;
  }
  // Small chunks handed out dynamically balance uneven selections.
  std::atomic<std::int64_t> next{0};
  std::mutex failureMutex;
  std::exception_ptr failure;
  auto worker = [&] {
    try {
      for (;;) {
        std::int64_t begin = next.fetch_add(1);
        if (begin >= pairs)
          return;
        attendPairs<Acc>(p, begin, begin + 1, out.data());
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(failureMutex);
      if (!failure)
        failure = std::current_exception();
      // The other workers take no further pair.
      next.store(pairs);
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads);
  try {
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back(worker);
  } catch (...) {
    // Could not start every thread: the started ones finish the work.
  }
  if (pool.empty())
    worker();
  for (std::thread &thread : pool)
    thread.join();
  if (failure)
    std::rethrow_exception(failure);
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
