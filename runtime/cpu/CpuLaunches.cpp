//===- CpuLaunches.cpp - A compiled step's launches on the host -----------===//

#include "runtime/cpu/CpuLaunches.h"

#include "runtime/core/LaunchForms.h"

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/RowFormat.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>

namespace dhs::runtime {

namespace {

using Role = abi::ParamRole;

/// A launch's parameter of `role`, or nullptr.
const LaunchParam *paramOf(const Launch &launch, Role role) {
  for (const LaunchParam &param : launch.params)
    if (param.role == role)
      return &param;
  return nullptr;
}

/// The memory of a memref parameter (an argument, a scratch buffer or the
/// status word).
std::uint8_t *bufferOf(const LaunchParam &param, CpuStepMemory &memory) {
  switch (param.source) {
  case ParamSource::Argument:
    return memory.arguments.at(static_cast<std::size_t>(param.argumentIndex));
  case ParamSource::Scratch:
    return memory.arena + param.offset;
  case ParamSource::Status:
    return reinterpret_cast<std::uint8_t *>(&memory.status);
  default:
    throw Error(std::string("a ") + abi::name(param.role) + " parameter is not a buffer");
  }
}

template <typename T> T *typed(const LaunchParam &param, CpuStepMemory &memory) {
  return reinterpret_cast<T *>(bufferOf(param, memory));
}

/// The parameter of `role` a launch of `kind` must have.
const LaunchParam &required(const Launch &launch, Role role) {
  const LaunchParam *param = paramOf(launch, role);
  if (!param)
    throw Error(std::string("a ") + abi::name(launch.kind) + " launch without its " +
                abi::name(role) + " parameter");
  return *param;
}

/// The tiers of the pool a launch views.
const CpuStepMemory::Pool &poolOf(const Launch &launch, const CpuStepMemory &memory) {
  for (const LaunchParam &param : launch.params)
    if (param.source == ParamSource::PoolHbm || param.source == ParamSource::PoolHost)
      return memory.pools.at(static_cast<std::size_t>(param.argumentIndex));
  throw Error(std::string("a ") + abi::name(launch.kind) + " launch that views no pool");
}

/// union_missing: per request, the first selection of each missing row owns
/// it; `missing` lists each distinct missing row at its owner's position
/// (-1 elsewhere, and in the room past the selections), `remap` gives every
/// missing selection its owner's position (-1 for the others).
void unionMissing(const Launch &launch, CpuStepMemory &memory) {
  const LaunchParam &rowsParam = required(launch, Role::RowIds);
  const LaunchParam &missingParam = required(launch, Role::Missing);
  const std::int32_t *rows = typed<std::int32_t>(rowsParam, memory);
  const std::int32_t *slots = typed<std::int32_t>(required(launch, Role::Slots), memory);
  std::int32_t *missing = typed<std::int32_t>(missingParam, memory);
  std::int32_t *remap = typed<std::int32_t>(required(launch, Role::Remap), memory);
  const std::int64_t batch = rowsParam.shape[0];
  const std::int64_t entries = static_cast<std::int64_t>(rowsParam.elements()) / batch;
  const std::int64_t room = missingParam.shape[1];
  std::unordered_map<std::int32_t, std::int32_t> owners;
  for (std::int64_t b = 0; b < batch; ++b) {
    owners.clear();
    for (std::int64_t i = 0; i < room; ++i)
      missing[b * room + i] = -1;
    for (std::int64_t i = 0; i < entries; ++i) {
      const std::int64_t e = b * entries + i;
      remap[e] = -1;
      if (rows[e] == -1 || slots[e] != -1)
        continue;
      auto [owner, first] = owners.emplace(rows[e], static_cast<std::int32_t>(i));
      remap[e] = owner->second;
      if (first)
        missing[b * room + i] = rows[e];
    }
  }
}

/// An attention launch whose query positions share their selections'
/// prefix (shared_tiles): every request's count is in [0, K / 64] and its
/// positions' first 64 x count row ids are the same (a row's slots, if they
/// differ, hold the same bytes); else InputError with BadSharedRows's
/// message, as the kernel reports.
void checkSharedPrefix(const Launch &launch, CpuStepMemory &memory) {
  const LaunchParam *sharedTiles = paramOf(launch, Role::SharedTiles);
  if (!sharedTiles)
    return;
  const LaunchParam &rowIds = required(launch, Role::RowIds);
  const std::int64_t batch = rowIds.shape[0], positions = rowIds.shape[1],
                     selected = rowIds.shape[2];
  const auto *tiles = typed<const std::int32_t>(*sharedTiles, memory);
  const auto *ids = typed<const std::int32_t>(rowIds, memory);
  const std::string bad = describeStatus(abi::kStatusBadSharedRows);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t count = tiles[b];
    if (count < 0 || 64 * count > selected)
      throw InputError(bad + ": request " + std::to_string(b) + " shares " + std::to_string(count) +
                       " tiles of 64 of its " + std::to_string(selected) + " selections");
    const std::int64_t lane = b * positions * selected;
    for (std::int64_t q = 1; q < positions; ++q)
      for (std::int64_t k = 0; k < 64 * count; ++k) {
        const std::int64_t first = lane + k, here = lane + q * selected + k;
        if (ids[here] != ids[first])
          throw InputError(bad + ": request " + std::to_string(b) + ", position " +
                           std::to_string(q) + ", selection " + std::to_string(k) +
                           " differs from position 0's in the shared prefix");
      }
  }
}

/// share_rows: per request, the rows every query position lists (ids >= 0,
/// each once, in the order of their first occurrence in position 0); the
/// first T x tile of them (T = their count / tile) lead every position's
/// list, each with the slot of its first occurrence there, then the
/// position's other entries in order; tiles[b] = T when at least the
/// launch's minMissing of the prefix rows have a negative slot in position
/// 0 (read from the host), else 0 (the lists stay the same).
void shareRows(const Launch &launch, CpuStepMemory &memory) {
  const LaunchParam &rowsParam = required(launch, Role::RowIds);
  const std::int32_t *rows = typed<std::int32_t>(rowsParam, memory);
  const std::int32_t *slots = typed<std::int32_t>(required(launch, Role::Slots), memory);
  std::int32_t *sharedRows = typed<std::int32_t>(required(launch, Role::SharedRows), memory);
  std::int32_t *sharedSlots = typed<std::int32_t>(required(launch, Role::SharedSlots), memory);
  std::int32_t *tiles = typed<std::int32_t>(required(launch, Role::SharedTiles), memory);
  if (rowsParam.shape.size() != 3 || launch.tile <= 0)
    throw Error("a share_rows launch needs rows [B, Q, K] and a positive tile");
  const std::int64_t batch = rowsParam.shape[0], positions = rowsParam.shape[1],
                     selected = rowsParam.shape[2];
  // first[q]: a row's first k in position q.
  std::vector<std::unordered_map<std::int32_t, std::int64_t>> first(
      static_cast<std::size_t>(positions));
  std::vector<std::int32_t> prefix;
  std::vector<char> taken(static_cast<std::size_t>(selected));
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t lane = b * positions * selected;
    for (std::int64_t q = 0; q < positions; ++q) {
      first[q].clear();
      for (std::int64_t k = 0; k < selected; ++k)
        first[q].emplace(rows[lane + q * selected + k], k);
    }
    prefix.clear();
    for (std::int64_t k = 0; k < selected; ++k) {
      const std::int32_t row = rows[lane + k];
      if (row < 0 || first[0].at(row) != k)
        continue;
      bool everywhere = true;
      for (std::int64_t q = 1; q < positions && everywhere; ++q)
        everywhere = first[q].count(row) != 0;
      if (everywhere)
        prefix.push_back(row);
    }
    const std::int64_t count = static_cast<std::int64_t>(prefix.size()) / launch.tile;
    prefix.resize(static_cast<std::size_t>(count * launch.tile));
    std::int64_t missing = 0;
    for (std::int32_t row : prefix)
      missing += slots[lane + first[0].at(row)] < 0;
    tiles[b] = missing >= launch.minMissing ? static_cast<std::int32_t>(count) : 0;
    for (std::int64_t q = 0; q < positions; ++q) {
      const std::int64_t list = lane + q * selected;
      std::fill(taken.begin(), taken.end(), 0);
      std::int64_t out = 0;
      for (std::int32_t row : prefix) {
        const std::int64_t k = first[q].at(row);
        taken[static_cast<std::size_t>(k)] = 1;
        sharedRows[list + out] = row;
        sharedSlots[list + out] = slots[list + k];
        ++out;
      }
      for (std::int64_t k = 0; k < selected; ++k)
        if (!taken[static_cast<std::size_t>(k)]) {
          sharedRows[list + out] = rows[list + k];
          sharedSlots[list + out] = slots[list + k];
          ++out;
        }
    }
  }
}

/// fetch: every listed row (not -1, and not resident when the list comes
/// with slots) is copied whole from the host store into its staging row.
std::int64_t fetch(const Launch &launch, CpuStepMemory &memory) {
  const LaunchParam &listParam = required(launch, Role::RowIds);
  const LaunchParam &stagingParam = required(launch, Role::Staging);
  const std::int32_t *list = typed<std::int32_t>(listParam, memory);
  const LaunchParam *slotsParam = paramOf(launch, Role::Slots);
  const std::int32_t *slots = slotsParam ? typed<std::int32_t>(*slotsParam, memory) : nullptr;
  const std::int64_t *start = typed<std::int64_t>(required(launch, Role::HistoryStart), memory);
  const std::int32_t *length = typed<std::int32_t>(required(launch, Role::HistoryLen), memory);
  std::uint8_t *staging = bufferOf(stagingParam, memory);
  const CpuStepMemory::Pool &pool = poolOf(launch, memory);
  const std::int64_t batch = listParam.shape[0];
  const std::int64_t listed = static_cast<std::int64_t>(listParam.elements()) / batch;
  const std::size_t token = static_cast<std::size_t>(stagingParam.shape[2] * stagingParam.shape[3]);
  const std::int64_t stagingRows = stagingParam.shape[1];
  if (static_cast<std::int64_t>(token) > pool.tokenBytes || stagingRows < listed)
    throw Error("a fetch into staging of " + std::to_string(stagingRows) + " rows of " +
                std::to_string(token) + " bytes for " + std::to_string(listed) +
                " listed rows of tokens of " + std::to_string(pool.tokenBytes) + " bytes");
  std::int64_t copied = 0;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < listed; ++i) {
      const std::int64_t e = b * listed + i;
      const std::int32_t id = list[e];
      if (id == -1 || (slots && slots[e] != -1))
        continue;
      std::uint32_t bits = 0;
      if (id < 0 || id >= length[b])
        bits |= abi::kStatusBadRowId;
      const std::int64_t hostRow = start[b] + id;
      if (hostRow < 0 || hostRow >= pool.hostRows)
        bits |= abi::kStatusBadHostRow;
      if (bits) {
        memory.status |= bits;
        continue;
      }
      std::memcpy(staging + static_cast<std::size_t>(b * stagingRows + i) * token,
                  pool.host + static_cast<std::size_t>(hostRow) * pool.tokenBytes, token);
      ++copied;
    }
  return copied;
}

} // namespace

void CpuLaunches::stageMissingRows(const CpuStepMemory::Pool &pool) {
  // Fused retrieval reads missing rows where they are; the CPU reads each
  // distinct one of a lane once, into staging that becomes the problem's
  // host store (staged row i at history start 0 + i).
  const ProblemShape &s = problem_.shape;
  const std::int64_t perLane = s.queries * s.topk;
  const std::size_t units = static_cast<std::size_t>(pool.tokenBytes / 2);
  const auto *host = reinterpret_cast<const bf16_t *>(pool.host);
  staging_.clear();
  std::int32_t staged = 0;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    stagedIndex_.clear();
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::size_t e = static_cast<std::size_t>(b * perLane + i);
      const std::int32_t row = problem_.rowIds[e];
      if (row < 0 || problem_.slots[e] >= 0)
        continue;
      auto [at, added] = stagedIndex_.emplace(row, staged);
      if (added) {
        const bf16_t *token = host + static_cast<std::size_t>(
                                         problem_.historyStart[static_cast<std::size_t>(b)] + row) *
                                         units;
        staging_.insert(staging_.end(), token, token + units);
        ++staged;
      }
      problem_.rowIds[e] = at->second;
    }
  }
  problem_.historyStart.assign(static_cast<std::size_t>(s.batch), 0);
  for (std::int32_t &len : problem_.historyLen)
    len = std::max(len, staged);
  problem_.shape.hostRows = staged;
  problem_.hostStoreView = staged > 0 ? staging_.data() : nullptr;
  hostRowsRead_ += staged;
}

void CpuLaunches::run(const Manifest &manifest, std::size_t first, std::size_t end,
                      CpuStepMemory &memory, std::int64_t poolLayer, double formShare) {
  for (std::size_t i = first; i < end; ++i) {
    const Launch &launch = manifest.launches.at(i);
    if (!runsAt(launch, formShare))
      continue;
    switch (launch.kind) {
    case abi::LaunchKind::UnionMissing:
      unionMissing(launch, memory);
      break;
    case abi::LaunchKind::ShareRows:
      shareRows(launch, memory);
      break;
    case abi::LaunchKind::Fetch: {
      const std::int64_t rows = fetch(launch, memory);
      fetchedRows_ += rows;
      hostRowsRead_ += rows;
      fetched_ = true;
      break;
    }
    case abi::LaunchKind::Attention:
    case abi::LaunchKind::SparseAttention: {
      // A shared-prefix layer's requests are split over two launches on
      // the GPU by their tile counts; here its clustered launch computes
      // them all (the same results) and the unshared one is skipped.
      if (launch.unsharedRequests)
        break;
      const LaunchParam &queries = required(launch, Role::Queries);
      const LaunchParam &rowIds = required(launch, Role::RowIds);
      const LaunchParam &output = required(launch, Role::Output);
      const LaunchParam &hbmTier = required(launch, Role::HbmTier);
      const CpuStepMemory::Pool &pool = poolOf(launch, memory);
      const Argument &poolArg =
          manifest.arguments.at(static_cast<std::size_t>(hbmTier.argumentIndex));
      ProblemShape &s = problem_.shape;
      s.batch = queries.shape[0];
      s.queries = queries.shape[1];
      s.heads = queries.shape[2];
      s.topk = rowIds.shape[2];
      s.format =
          poolArg.pool.format == "gqa" ? RowFormat::Gqa : rowFormatInfo(poolArg.pool.format).format;
      s.gqa = poolArg.pool.gqa;
      s.rowBytes = poolArg.pool.rowBytes;
      // The tiers' tokens (a group's layers, the last group's padded).
      s.layers = pool.tokenBytes / poolArg.pool.rowBytes;
      s.layer = poolLayer >= 0 ? poolLayer : launch.layer;
      s.rowElems = pool.tokenBytes / 2;
      s.qkDim = poolArg.pool.qkDim;
      s.vDim = poolArg.pool.vDim;
      s.hbmSlots = pool.hbmSlots;
      s.hostRows = pool.hostRows;
      s.softmaxScale = launch.softmaxScale;
      s.windowSize = launch.windowSize;
      const std::size_t selections = static_cast<std::size_t>(s.selectionCount());
      const auto *q = typed<const bf16_t>(queries, memory);
      problem_.queries.assign(q, q + s.queryCount());
      const auto *ids = typed<const std::int32_t>(rowIds, memory);
      problem_.rowIds.assign(ids, ids + selections);
      const auto *slots = typed<const std::int32_t>(required(launch, Role::Slots), memory);
      problem_.slots.assign(slots, slots + selections);
      problem_.hostStoreView = reinterpret_cast<const bf16_t *>(pool.host);
      problem_.hbmPoolView = reinterpret_cast<const bf16_t *>(pool.hbm);
      problem_.stagingView = nullptr;
      problem_.remapView = nullptr;
      problem_.stagingRows = 0;
      if (launch.kind == abi::LaunchKind::Attention) {
        // Missing rows come from staging; the fetch checked them against
        // the histories, which the staged kernel does not take.
        const LaunchParam &staging = required(launch, Role::Staging);
        if (staging.shape[2] * staging.shape[3] != pool.tokenBytes)
          throw Error("staging of tokens of " +
                      std::to_string(staging.shape[2] * staging.shape[3]) +
                      " bytes over a pool of " + std::to_string(pool.tokenBytes));
        problem_.stagingView = typed<const bf16_t>(staging, memory);
        problem_.stagingRows = staging.shape[1];
        if (const LaunchParam *remap = paramOf(launch, Role::Remap))
          problem_.remapView = typed<const std::int32_t>(*remap, memory);
        problem_.historyStart.assign(static_cast<std::size_t>(s.batch), 0);
        problem_.historyLen.assign(static_cast<std::size_t>(s.batch),
                                   std::numeric_limits<std::int32_t>::max());
      } else {
        const auto *start = typed<const std::int64_t>(required(launch, Role::HistoryStart), memory);
        const auto *length = typed<const std::int32_t>(required(launch, Role::HistoryLen), memory);
        problem_.historyStart.assign(start, start + s.batch);
        problem_.historyLen.assign(length, length + s.batch);
      }
      s.windowRing = 0;
      problem_.windowRing.clear();
      problem_.windowTokens.clear();
      if (s.windowSize > 0) {
        const LaunchParam &ring = required(launch, Role::WindowRing);
        s.windowRing = ring.shape[1];
        const auto *units = typed<const bf16_t>(ring, memory);
        problem_.windowRing.assign(units, units + ring.elements() / 2);
        const auto *tokens =
            typed<const std::int32_t>(required(launch, Role::WindowTokens), memory);
        problem_.windowTokens.assign(tokens, tokens + s.batch);
      }
      checkSharedPrefix(launch, memory);
      if (launch.kind == abi::LaunchKind::SparseAttention) {
        problem_.validate(); // (row ids against the histories, before staging)
        stageMissingRows(pool);
      }
      std::vector<bf16_t> out = attention_.run(problem_);
      std::memcpy(bufferOf(output, memory), out.data(), out.size() * sizeof(bf16_t));
      break;
    }
    case abi::LaunchKind::AttentionCombine:
    case abi::LaunchKind::Resolve:
      break;
    default:
      throw Error(std::string("the CPU backend does not run ") + abi::name(launch.kind) +
                  " launches in an attention step's layers");
    }
  }
}

} // namespace dhs::runtime
