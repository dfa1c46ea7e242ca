//===- InvariantChecker.cpp - The runtime's invariant checks --------------===//

#include "runtime/InvariantChecker.h"

#include "runtime/core/Error.h"

#include <algorithm>
#include <cstring>

namespace dhs::runtime {

InvariantChecker::InvariantChecker(const TierLayout &layout, const ProblemShape &shape,
                                   TierStorage &storage, const ResidencyController &controller,
                                   bool hashRows)
    : layout_(layout), shape_(shape), storage_(storage), controller_(controller) {
  if (hashRows)
    hashes_.assign(static_cast<std::size_t>(layout.layers * layout.hostRows), 0);
}

std::uint64_t InvariantChecker::rowHash(const std::uint8_t *row) const {
  // 64-bit words through a multiply-xorshift mix; the tail byte by byte.
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(layout_.rowBytes);
  const std::size_t n = static_cast<std::size_t>(layout_.rowBytes);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t word;
    std::memcpy(&word, row + i, 8);
    h = (h ^ word) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  for (; i < n; ++i)
    h = (h ^ row[i]) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

void InvariantChecker::recordHash(std::int32_t layer, std::int64_t hostRow) {
  if (hashes_.empty())
    return;
  hashes_[static_cast<std::size_t>(layer * layout_.hostRows + hostRow)] =
      rowHash(storage_.hostRow(layer, hostRow));
}

bool InvariantChecker::changedSinceWritten(std::int32_t layer, std::int64_t hostRow,
                                           const std::uint8_t *row) const {
  return !hashes_.empty() &&
         rowHash(row) != hashes_[static_cast<std::size_t>(layer * layout_.hostRows + hostRow)];
}

void InvariantChecker::checkReads(std::int32_t layer, const std::int32_t *lanes,
                                  const std::int64_t *historyStart, const std::int32_t *rows,
                                  const std::int32_t *slots) const {
  const std::uint8_t *pool = storage_.hbmSnapshot(layer);
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  const std::int64_t perLane = shape_.queries * shape_.topk;
  for (std::int64_t b = 0; b < shape_.batch; ++b) {
    if (lanes[b] < 0)
      continue;
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::size_t e = static_cast<std::size_t>(b * perLane + i);
      if (rows[e] < 0)
        continue;
      const std::int64_t hostRow = historyStart[b] + rows[e];
      const std::uint8_t *host = storage_.hostRow(layer, hostRow);
      if (changedSinceWritten(layer, hostRow, host))
        throw InvariantError("invariant violated: host row " + std::to_string(hostRow) +
                             " of layer " + std::to_string(layer) + " (lane " + std::to_string(b) +
                             ", row " + std::to_string(rows[e]) + ") changed since it was written");
      if (slots[e] >= 0 &&
          std::memcmp(pool + layout_.rowOffset(layer, slots[e]), host, rowBytes) != 0)
        throw InvariantError("invariant violated: layer " + std::to_string(layer) +
                             " read HBM slot " + std::to_string(slots[e]) + " for lane " +
                             std::to_string(b) + ", row " + std::to_string(rows[e]) +
                             ", and it differs from the host copy");
    }
  }
}

void InvariantChecker::checkStepLog(std::int32_t group, const StepLog &log,
                                    const std::int64_t *historyStart, const std::int32_t *rowIds,
                                    std::int32_t *slots) const {
  // What the log must say: the slots the controller's table gives (as the
  // kernels read them), each hit slot once, each miss, the valid count.
  const std::vector<std::int32_t> &table = controller_.residencyTable(group);
  const std::int64_t perLane = shape_.queries * shape_.topk;
  std::vector<std::int32_t> hits;
  std::vector<std::int64_t> misses;
  std::int64_t entries = 0;
  for (std::int64_t b = 0; b < shape_.batch; ++b)
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::size_t e = static_cast<std::size_t>(b * perLane + i);
      const std::int32_t id = rowIds[e];
      slots[e] = -1;
      if (id < 0)
        continue;
      ++entries;
      slots[e] = table[static_cast<std::size_t>(historyStart[b] + id)];
      if (slots[e] >= 0)
        hits.push_back(slots[e]);
      else
        misses.push_back(b << 32 | id);
    }
  auto distinct = [](auto &v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  distinct(hits);
  distinct(misses);
  std::vector<std::int32_t> loggedHits = log.hitSlots;
  std::sort(loggedHits.begin(), loggedHits.end());
  std::vector<std::int64_t> loggedMisses;
  for (std::size_t i = 0; i + 1 < log.misses.size(); i += 2)
    loggedMisses.push_back(static_cast<std::int64_t>(log.misses[i]) << 32 | log.misses[i + 1]);
  const std::size_t missEntries = loggedMisses.size();
  distinct(loggedMisses);
  const std::int64_t hitEntries = entries - static_cast<std::int64_t>(missEntries);
  if (loggedHits != hits || loggedMisses != misses || log.entries != entries || hitEntries < 0)
    throw InvariantError("invariant violated: the step log of layer group " +
                         std::to_string(group) + " lists " + std::to_string(loggedHits.size()) +
                         " slots hit, " + std::to_string(missEntries) + " misses (" +
                         std::to_string(loggedMisses.size()) + " distinct) and " +
                         std::to_string(log.entries) + " valid selections; the selections give " +
                         std::to_string(hits.size()) + " slots, " + std::to_string(misses.size()) +
                         " distinct misses and " + std::to_string(entries) + " valid selections" +
                         (loggedHits == hits && loggedMisses == misses ? "" : ", other rows"));
}

void InvariantChecker::checkCopies(const std::vector<RowCopy> &copies) const {
  if (copies.empty())
    return;
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  for (std::int32_t l = 0; l < layout_.layers; ++l) {
    const std::int32_t group = l / layout_.layersPerGroup;
    const std::uint8_t *pool = nullptr;
    for (const RowCopy &copy : copies) {
      if (copy.group != group || copy.slot < 0) // (a release)
        continue;
      if (!pool)
        pool = storage_.hbmSnapshot(l);
      if (std::memcmp(pool + layout_.rowOffset(l, copy.slot), storage_.hostRow(l, copy.hostRow),
                      rowBytes) != 0)
        throw InvariantError("invariant violated: layer " + std::to_string(l) + " slot " +
                             std::to_string(copy.slot) + " differs from host row " +
                             std::to_string(copy.hostRow) + " after it was copied there");
    }
  }
}

void InvariantChecker::checkRequestRows(std::int32_t index, const char *when) const {
  const std::int64_t start = controller_.historyStart(index);
  const std::int64_t len = controller_.historyLen(index);
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  for (std::int32_t l = 0; l < layout_.layers; ++l) {
    const std::int32_t group = l / layout_.layersPerGroup;
    const std::uint8_t *pool = storage_.hbmSnapshot(l);
    for (std::int64_t row = 0; row < len; ++row) {
      const std::uint8_t *host = storage_.hostRow(l, start + row);
      if (changedSinceWritten(l, start + row, host))
        throw InvariantError(std::string("invariant violated (") + when + "): row " +
                             std::to_string(row) + " of request index " + std::to_string(index) +
                             ", layer " + std::to_string(l) + ", is not what was written");
      const std::int32_t slot = controller_.slotOf(group, index, row);
      if (slot >= 0 && std::memcmp(pool + layout_.rowOffset(l, slot), host, rowBytes) != 0)
        throw InvariantError(std::string("invariant violated (") + when + "): resident row " +
                             std::to_string(row) + " of request index " + std::to_string(index) +
                             ", layer " + std::to_string(l) + " (slot " + std::to_string(slot) +
                             ") differs from its host copy");
    }
  }
}

void InvariantChecker::checkDeviceState(bool resolvesOnDevice) const {
  // The device residency maps (with a placement step) mirror the controller.
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    const std::int32_t *map = storage_.residencyMapSnapshot(g);
    if (!map)
      break;
    const std::vector<std::int32_t> &table = controller_.residencyTable(g);
    for (std::size_t row = 0; row < table.size(); ++row)
      if (map[row] != table[row])
        throw Error("invariant: the device residency map of layer group " + std::to_string(g) +
                    " gives host row " + std::to_string(row) + " slot " + std::to_string(map[row]) +
                    ", the controller " + std::to_string(table[row]));
  }
  // So does the device replacement state, where kernels stamp the hits: for
  // every slot that holds a history row.
  if (!resolvesOnDevice)
    return;
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    const std::int32_t *recency = storage_.recencySnapshot(g);
    for (std::int32_t s = 0; s < layout_.hbmSlots; ++s) {
      const SlotKind kind = controller_.slotKind(g, s);
      if (kind != SlotKind::Newest && kind != SlotKind::Hot)
        continue;
      const auto [last, previous] = controller_.slotRecency(g, s);
      const auto deviceLast = static_cast<std::uint32_t>(recency[2 * s]);
      const auto devicePrevious = static_cast<std::uint32_t>(recency[2 * s + 1]);
      if (deviceLast != last || devicePrevious != previous)
        throw Error("invariant: the device replacement state of layer group " + std::to_string(g) +
                    " gives slot " + std::to_string(s) + " uses {" + std::to_string(deviceLast) +
                    ", " + std::to_string(devicePrevious) + "}, the controller {" +
                    std::to_string(last) + ", " + std::to_string(previous) + "}");
    }
  }
}

void InvariantChecker::checkDistinctChanges(const std::vector<RowCopy> &changes) const {
  std::vector<std::int64_t> keys;
  keys.reserve(changes.size());
  for (const RowCopy &change : changes)
    keys.push_back(change.hostRow * layout_.groups() + change.group);
  std::sort(keys.begin(), keys.end());
  auto twice = std::adjacent_find(keys.begin(), keys.end());
  if (twice != keys.end())
    throw InvariantError("invariant violated: host row " +
                         std::to_string(*twice / layout_.groups()) + " of layer group " +
                         std::to_string(*twice % layout_.groups()) +
                         " is released and placed in one call");
}

} // namespace dhs::runtime
