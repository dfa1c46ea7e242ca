//===- TopK.cpp - The top-k kernel's selection on the host ----------------===//

#include "runtime/core/TopK.h"

#include "runtime/abi/Contract.h"
#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

namespace dhs::runtime {

TopKShape topKShapeOf(const Manifest &manifest) {
  if (manifest.launches.size() != 1 || manifest.launches[0].kind != abi::LaunchKind::TopK)
    throw Error("the step " + manifest.directory + " is not a top-k step (one dhs.topk launch)");
  manifest.requireArgumentRoles(
      "the top-k step", {ArgumentRole::Scores, ArgumentRole::HistoryLen, ArgumentRole::RowIds});
  const Argument &scores = manifest.argument(ArgumentRole::Scores);
  const Argument &history = manifest.argument(ArgumentRole::HistoryLen);
  const Argument &rows = manifest.argument(ArgumentRole::RowIds);
  if (scores.shape.size() != 3 || history.shape.size() != 1 || rows.shape.size() != 3 ||
      history.shape[0] != scores.shape[0] || rows.shape[0] != scores.shape[0] ||
      rows.shape[1] != scores.shape[1])
    throw Error("the top-k step " + manifest.directory +
                " does not take scores [B, Q, N], history_len [B] and rows [B, Q, K]");
  TopKShape shape;
  shape.batch = scores.shape[0];
  shape.positions = scores.shape[1];
  shape.scored = scores.shape[2];
  shape.k = rows.shape[2];
  return shape;
}

std::uint64_t topKKey(float score, std::int32_t id) {
  std::uint32_t bits;
  std::memcpy(&bits, &score, sizeof bits);
  const std::uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<std::uint64_t>(ordered) << 32) | static_cast<std::uint32_t>(~id);
}

std::uint32_t selectTopK(const TopKShape &shape, std::int64_t batch, const float *scores,
                         const std::int32_t *historyLen, std::int32_t *rows) {
  const std::int64_t Q = shape.positions, N = shape.scored, K = shape.k;
  std::uint32_t status = 0;
  std::vector<std::uint64_t> keys;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t length = historyLen[b];
    if (length > N || length < 0)
      status |= abi::kStatusHistoryBeyondScores;
    for (std::int64_t q = 0; q < Q; ++q) {
      const float *row = scores + (b * Q + q) * N;
      const std::int64_t visible = std::clamp<std::int64_t>(length - (Q - 1 - q), 0, N);
      keys.resize(static_cast<std::size_t>(visible));
      for (std::int64_t i = 0; i < visible; ++i)
        keys[static_cast<std::size_t>(i)] = topKKey(row[i], static_cast<std::int32_t>(i));
      // Keys are distinct: the K largest in descending order.
      const std::int64_t taken = std::min(K, visible);
      std::partial_sort(keys.begin(), keys.begin() + taken, keys.end(),
                        std::greater<std::uint64_t>());
      std::int32_t *out = rows + (b * Q + q) * K;
      for (std::int64_t k = 0; k < K; ++k)
        out[k] = k < taken ? static_cast<std::int32_t>(
                                 ~static_cast<std::uint32_t>(keys[static_cast<std::size_t>(k)]))
                           : -1;
    }
  }
  return status;
}

} // namespace dhs::runtime
