//===- SparseAttentionProblem.cpp - Step inputs, generator, validation ----===//

#include "runtime/core/SparseAttentionProblem.h"
#include "runtime/core/StepPlan.h"

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>

namespace dhs::runtime {

void checkProblemMatchesManifest(const SparseAttentionProblem &problem, const Manifest &manifest) {
  ProblemShape expected = problemShapeFromManifest(manifest);
  const ProblemShape &actual = problem.shape;
  auto same = [&](const char *what, std::int64_t have, std::int64_t want) {
    if (have != want)
      throw InputError(std::string("the problem's ") + what + " is " + std::to_string(have) +
                       ", the step " + manifest.directory + " needs " + std::to_string(want));
  };
  same("batch B", actual.batch, expected.batch);
  same("query count Q", actual.queries, expected.queries);
  same("head count H", actual.heads, expected.heads);
  same("selection count K", actual.topk, expected.topk);
  same("row size", actual.rowElems, expected.rowElems);
  same("row format", static_cast<std::int64_t>(actual.format),
       static_cast<std::int64_t>(expected.format));
  // A step of several layers (one group's, say) is checked at any of them,
  // with that layer's softmax scale.
  if (manifest.hasAttention())
    for (const StepLayerPlan &layer : planStep(manifest).layers)
      if (layer.poolLayer == actual.layer) {
        expected.layer = layer.poolLayer;
        expected.softmaxScale = layer.softmaxScale;
      }
  same("layer", actual.layer, expected.layer);
  same("qk_dim", actual.qkDim, expected.qkDim);
  same("v_dim", actual.vDim, expected.vDim);
  same("sliding window", actual.windowSize, expected.windowSize);
  same("window ring", actual.windowRing, expected.windowRing);
  if (expected.hbmSlots >= 0)
    same("HBM slot count", actual.hbmSlots, expected.hbmSlots);
  if (expected.hostRows >= 0)
    same("host row count", actual.hostRows, expected.hostRows);
  if (actual.softmaxScale != expected.softmaxScale)
    throw InputError("the problem's softmax_scale " + std::to_string(actual.softmaxScale) +
                     " differs from the "
                     "step's " +
                     std::to_string(expected.softmaxScale));
}

namespace {

/// "[request 1, query 0, k 17]"
std::string where(std::int64_t b, std::int64_t q, std::int64_t k) {
  return "[request " + std::to_string(b) + ", query " + std::to_string(q) + ", k " +
         std::to_string(k) + "]";
}

/// Checks shape fields and array sizes.
void checkLayout(const SparseAttentionProblem &p) {
  const ProblemShape &s = p.shape;
  checkProblemShape(s);
  if (s.hbmSlots < 0 || s.hostRows < 0)
    throw InputError("problem has no concrete pool size (hbm_slots " + std::to_string(s.hbmSlots) +
                     ", host_rows " + std::to_string(s.hostRows) + ")");
  auto expect = [](const char *name, std::size_t actual, std::int64_t wanted) {
    if (static_cast<std::int64_t>(actual) != wanted)
      throw InputError(std::string(name) + " holds " + std::to_string(actual) +
                       " elements, the shape needs " + std::to_string(wanted));
  };
  expect("queries", p.queries.size(), s.queryCount());
  expect("row_ids", p.rowIds.size(), s.selectionCount());
  expect("slots", p.slots.size(), s.selectionCount());
  expect("history_start", p.historyStart.size(), s.batch);
  expect("history_len", p.historyLen.size(), s.batch);
  if (p.hostStoreView) {
    if (!p.hostStore.empty())
      throw InputError("the problem has both a host store and a host store view");
  } else {
    expect("host store", p.hostStore.size(), s.hostRows * s.rowElems);
  }
  if (p.hbmPoolView) {
    if (!p.hbmPool.empty())
      throw InputError("the problem has both an HBM pool and an HBM pool view");
  } else {
    expect("HBM pool", p.hbmPool.size(), s.hbmSlots * s.rowElems);
  }
  if (s.windowSize < 0 || (s.windowSize > 0 && s.windowRing < s.windowSize + s.queries - 1))
    throw InputError("a window ring of " + std::to_string(s.windowRing) + " tokens cannot hold a " +
                     std::to_string(s.windowSize) + "-token window for " +
                     std::to_string(s.queries) + " query positions");
  expect("window ring", p.windowRing.size(),
         s.windowSize > 0 ? s.batch * s.windowRing * s.rowElems : 0);
  expect("window tokens", p.windowTokens.size(), s.windowSize > 0 ? s.batch : 0);
  for (std::int64_t b = 0; b < s.batch; ++b) {
    if (s.windowSize > 0 && p.windowTokens[b] < 0)
      throw InputError("window token count " + std::to_string(p.windowTokens[b]) + " of request " +
                       std::to_string(b) + " is negative");
    if (p.historyLen[b] < 0)
      throw InputError("history length " + std::to_string(p.historyLen[b]) + " of request " +
                       std::to_string(b) + " is negative");
    if (p.historyStart[b] < 0)
      throw InputError("history start " + std::to_string(p.historyStart[b]) + " of request " +
                       std::to_string(b) + " is negative");
  }
}

/// Checks one valid row id against its history; throws InputError.
void checkRowId(const SparseAttentionProblem &p, std::int64_t b, std::int64_t q, std::int64_t k,
                std::int32_t r) {
  if (r < -1)
    throw InputError("row id " + std::to_string(r) + " at " + where(b, q, k) +
                     " is invalid (only -1 marks an unused selection)");
  if (r >= p.historyLen[b])
    throw InputError("row id " + std::to_string(r) + " at " + where(b, q, k) +
                     " is outside the request's history (length " +
                     std::to_string(p.historyLen[b]) + ")");
}

/// Checks that the host row of a valid selection exists; throws InputError.
void checkHostRow(const SparseAttentionProblem &p, std::int64_t b, std::int64_t q, std::int64_t k,
                  std::int32_t r) {
  std::int64_t start = p.historyStart[b];
  // start >= 0 and r >= 0 were checked; compare without overflow.
  if (start >= p.shape.hostRows || r >= p.shape.hostRows - start)
    throw InputError("host row " + std::to_string(start + r) + " (history start " +
                     std::to_string(start) + " + row id " + std::to_string(r) + ") for " +
                     where(b, q, k) + " is outside the host store (" +
                     std::to_string(p.shape.hostRows) + " rows)");
}

} // namespace

//===----------------------------------------------------------------------===//
// SparseAttentionProblem
//===----------------------------------------------------------------------===//

void SparseAttentionProblem::validate() const {
  checkLayout(*this);
  const ProblemShape &s = shape;
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t q = 0; q < s.queries; ++q)
      for (std::int64_t k = 0; k < s.topk; ++k) {
        std::size_t i = selectionIndex(b, q, k);
        std::int32_t r = rowIds[i];
        if (r == -1)
          continue; // unused: its slot is ignored
        checkRowId(*this, b, q, k, r);
        std::int32_t slot = slots[i];
        if (slot < -1)
          throw InputError("slot " + std::to_string(slot) + " at " + where(b, q, k) +
                           " is invalid (-1 means the row is read from the "
                           "host store)");
        if (slot >= s.hbmSlots)
          throw InputError("slot " + std::to_string(slot) + " at " + where(b, q, k) +
                           " is outside the HBM pool (" + std::to_string(s.hbmSlots) + " slots)");
        if (slot == -1 && stagingView) {
          const std::int64_t j = stagingIndex(b, q, k);
          if (j < 0 || j >= stagingRows)
            throw InputError("staging position " + std::to_string(j) + " of the row at " +
                             where(b, q, k) + " is outside the staging buffer (" +
                             std::to_string(stagingRows) + " rows per request)");
        } else if (slot == -1) {
          checkHostRow(*this, b, q, k, r);
        }
      }
}

void SparseAttentionProblem::validateRows() const {
  checkLayout(*this);
  for (std::int64_t b = 0; b < shape.batch; ++b)
    for (std::int64_t q = 0; q < shape.queries; ++q)
      for (std::int64_t k = 0; k < shape.topk; ++k) {
        const std::int32_t r = rowIds[selectionIndex(b, q, k)];
        if (r == -1)
          continue;
        checkRowId(*this, b, q, k, r);
        checkHostRow(*this, b, q, k, r);
      }
}

const bf16_t *SparseAttentionProblem::row(std::int64_t b, std::int64_t q, std::int64_t k) const {
  std::size_t i = selectionIndex(b, q, k);
  std::int32_t r = rowIds[i];
  if (r == -1)
    return nullptr;
  std::int32_t slot = slots[i];
  std::size_t rowElems = static_cast<std::size_t>(shape.rowElems);
  if (slot >= 0)
    return hbmPoolData() + static_cast<std::size_t>(slot) * rowElems;
  if (stagingView)
    return stagingView + static_cast<std::size_t>(b * stagingRows + stagingIndex(b, q, k)) * rowElems;
  return hostStoreData() + static_cast<std::size_t>(historyStart[b] + r) * rowElems;
}

std::int64_t SparseAttentionProblem::stagingIndex(std::int64_t b, std::int64_t q,
                                                  std::int64_t k) const {
  return remapView ? remapView[selectionIndex(b, q, k)] : q * shape.topk + k;
}

const bf16_t *SparseAttentionProblem::windowRow(std::int64_t b, std::int64_t q,
                                                std::int64_t j) const {
  const std::int64_t end = windowTokens[b] - (shape.queries - 1 - q);
  const std::int64_t token = end - shape.windowSize + j;
  if (token < 0)
    return nullptr;
  return windowRing.data() +
         static_cast<std::size_t>(b * shape.windowRing + token % shape.windowRing) *
             static_cast<std::size_t>(shape.rowElems);
}

ProblemStats SparseAttentionProblem::stats() const {
  ProblemStats stats;
  // Per request: (row, resident?) pairs, sorted, give the distinct counts.
  std::vector<std::pair<std::int32_t, bool>> reads;
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    reads.clear();
    for (std::int64_t q = 0; q < shape.queries; ++q)
      for (std::int64_t k = 0; k < shape.topk; ++k) {
        std::size_t i = selectionIndex(b, q, k);
        if (rowIds[i] == -1) {
          ++stats.unusedSelections;
          continue;
        }
        bool resident = slots[i] >= 0;
        ++stats.selections;
        ++(resident ? stats.residentReads : stats.hostReads);
        reads.emplace_back(rowIds[i], resident);
      }
    std::sort(reads.begin(), reads.end());
    for (std::size_t i = 0; i < reads.size();) {
      std::size_t j = i;
      bool anyResident = false, anyHost = false;
      for (; j < reads.size() && reads[j].first == reads[i].first; ++j)
        (reads[j].second ? anyResident : anyHost) = true;
      ++stats.distinctRows;
      stats.distinctResidentRows += anyResident;
      stats.distinctHostRows += anyHost;
      i = j;
    }
  }
  return stats;
}

} // namespace dhs::runtime
