//===- ResidencySteps.cpp - Resolving, booking and promoting a step -------===//

#include "runtime/residency/Residency.h"
#include "runtime/residency/ResidencyState.h"

#include "runtime/core/Error.h"
#include "runtime/core/Reserve.h"

#include <algorithm>
#include <limits>
#include <string>

namespace dhs::runtime {

//===----------------------------------------------------------------------===//
// Steps
//===----------------------------------------------------------------------===//

void ResidencyController::beginStep() {
  if (inStep_)
    throw StateError("a step is already in progress");
  ++step_;
  inStep_ = true;
  std::fill(resolved_.begin(), resolved_.end(), 0);
  for (Group &g : groups_)
    g.usesBefore.clear();
  lastCompleted_ = last_;
  last_ = {};
  last_.evicted = pendingEvictions_; // since the previous step ended
  pendingEvictions_ = 0;
}

namespace {

/// "[lane 1, query 0, k 17]"
std::string where(std::int64_t b, std::int64_t q, std::int64_t k) {
  return "[lane " + std::to_string(b) + ", query " + std::to_string(q) + ", k " +
         std::to_string(k) + "]";
}

} // namespace

void ResidencyController::beginResolve(std::int32_t gi, std::int64_t batch, std::int64_t queries,
                                       std::int64_t topk) {
  if (!inStep_)
    throw StateError("resolve outside a step (call beginStep first)");
  if (gi < 0 || gi >= config_.groups)
    throw OutOfRangeError("layer group " + std::to_string(gi) + " does not exist (" +
                          std::to_string(config_.groups) + " groups)");
  if (resolved_[static_cast<std::size_t>(gi)])
    throw StateError("layer group " + std::to_string(gi) + " was already resolved in this step");
  if (groups_[static_cast<std::size_t>(gi)].deviceOwned)
    throw StateError("layer group " + std::to_string(gi) +
                     " is device-owned: its step is booked by applyDeviceCounts");
  if (batch < 0 || queries <= 0 || topk <= 0)
    throw InputError("selection shape [" + std::to_string(batch) + ", " + std::to_string(queries) +
                     ", " + std::to_string(topk) + "] is invalid");
}

void ResidencyController::touchSlot(Group &g, std::int32_t slot) {
  // (A new last use also sets the CLOCK reference: see SlotRecord::cleared.)
  SlotUses &uses = g.uses[static_cast<std::size_t>(slot)];
  if (uses.lastUse != step_) {
    g.usesBefore.emplace_back(slot, uses);
    uses.prevUse = uses.lastUse;
    uses.lastUse = step_;
  }
}

void ResidencyController::resolve(std::int32_t gi, const std::int32_t *requests, std::int64_t batch,
                                  const std::int32_t *rowIds, std::int64_t queries,
                                  std::int64_t topk, std::int32_t *slots) {
  beginResolve(gi, batch, queries, topk);
  if (batch > 0 && (!requests || !rowIds || !slots))
    throw InputError("resolve: null request, row id or slot array");
  const std::int64_t perLane = queries * topk;

  // Pass 1: validate everything before changing anything.
  const std::uint32_t mark = ++markSerial_;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int32_t request = requests[b];
    const std::int32_t *ids = rowIds + b * perLane;
    if (request == -1) {
      for (std::int64_t i = 0; i < perLane; ++i)
        if (ids[i] != -1)
          throw InputError("row id " + std::to_string(ids[i]) + " at " +
                           where(b, i / topk, i % topk) + " selects a row for an empty batch lane");
      continue;
    }
    Request &r = liveRequest(request, "resolve");
    if (r.batchMark == mark)
      throw InputError("request " + std::to_string(request) + " appears twice in the batch (lane " +
                       std::to_string(b) + ")");
    r.batchMark = mark;
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::int32_t id = ids[i];
      if (id < -1)
        throw InputError("row id " + std::to_string(id) + " at " + where(b, i / topk, i % topk) +
                         " is invalid (only -1 marks an unused selection)");
      if (id >= r.len)
        throw OutOfRangeError("row id " + std::to_string(id) + " at " +
                              where(b, i / topk, i % topk) + " is outside request " +
                              std::to_string(request) + "'s history (length " +
                              std::to_string(r.len) + ")");
    }
  }

  // Room for all pass 2 records (the slots' uses before the step, each
  // lane's rows to fetch, at most its selections or its history, and the
  // requests with some), so that it allocates nothing: a resolve that fails
  // changes nothing, and may be repeated.
  Group &g = groups_[static_cast<std::size_t>(gi)];
  g.usesBefore.reserve(static_cast<std::size_t>(config_.hbmSlots));
  reserveRoom(g.touched, static_cast<std::size_t>(batch));
  for (std::int64_t b = 0; b < batch; ++b)
    if (requests[b] != -1) {
      Request &r = requests_[static_cast<std::size_t>(requests[b])];
      reserveRoom(r.fetch[static_cast<std::size_t>(gi)],
                  static_cast<std::size_t>(std::min(perLane, r.len)));
    }

  // Pass 2: the slot map, hits, and the distinct rows to fetch.
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int32_t request = requests[b];
    const std::int32_t *ids = rowIds + b * perLane;
    std::int32_t *out = slots + b * perLane;
    if (request == -1) {
      std::fill(out, out + perLane, -1);
      continue;
    }
    Request &r = requests_[static_cast<std::size_t>(request)];
    // A fresh serial per lane: a row counts once per request and group.
    if (++seenSerial_ == 0) {
      for (Group &each : groups_)
        std::fill(each.seen.begin(), each.seen.end(), 0);
      seenSerial_ = 1;
    }
    const std::uint32_t seenSerial = seenSerial_;
    std::vector<std::int32_t> &fetch = r.fetch[static_cast<std::size_t>(gi)];
    const bool hadFetch = !fetch.empty();
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::int32_t id = ids[i];
      if (id == -1) {
        out[i] = -1;
        continue;
      }
      ++last_.entries;
      const std::size_t hostRow = static_cast<std::size_t>(r.start + id);
      const std::int32_t s = g.slotOfHostRow[hostRow];
      out[i] = s;
      if (s >= 0)
        touchSlot(g, s);
      if (g.seen[hostRow] == seenSerial)
        continue;
      g.seen[hostRow] = seenSerial;
      ++last_.selected;
      if (s >= 0) {
        ++last_.resident;
      } else {
        ++last_.fetched;
        fetch.push_back(id);
      }
    }
    if (!hadFetch && !fetch.empty())
      g.touched.push_back(request);
  }
  resolved_[static_cast<std::size_t>(gi)] = 1;
}

void ResidencyController::book(std::int32_t gi, const std::int32_t *requests, std::int64_t batch,
                               const std::int32_t *hitSlots, std::int64_t hits,
                               const std::int32_t *misses, std::int64_t missCount,
                               std::int64_t entries) {
  beginResolve(gi, batch, 1, 1);
  if (hits < 0 || missCount < 0 || entries < hits + missCount)
    throw InputError("step log of layer group " + std::to_string(gi) + ": " + std::to_string(hits) +
                     " hits and " + std::to_string(missCount) + " misses do not fit " +
                     std::to_string(entries) + " valid selections");
  if ((batch > 0 && !requests) || (hits > 0 && !hitSlots) || (missCount > 0 && !misses))
    throw InputError("book: null request, hit or miss array");
  Group &g = groups_[static_cast<std::size_t>(gi)];
  const std::string where = "the step log of layer group " + std::to_string(gi);

  // Pass 1: validate everything before changing anything.
  const std::uint32_t mark = ++markSerial_;
  for (std::int64_t b = 0; b < batch; ++b) {
    if (requests[b] == -1)
      continue;
    Request &r = liveRequest(requests[b], "book");
    if (r.batchMark == mark)
      throw InputError("request " + std::to_string(requests[b]) +
                       " appears twice in the batch (lane " + std::to_string(b) + ")");
    r.batchMark = mark;
  }
  if (++seenSerial_ == 0) {
    for (Group &each : groups_)
      std::fill(each.seen.begin(), each.seen.end(), 0);
    seenSerial_ = 1;
  }
  const std::uint32_t serial = seenSerial_;
  for (std::int64_t i = 0; i < hits; ++i) {
    const std::int32_t s = hitSlots[i];
    if (s < 0 || s >= config_.hbmSlots)
      throw InputError(where + " lists slot " + std::to_string(s) + " of " +
                       std::to_string(config_.hbmSlots));
    const std::size_t si = static_cast<std::size_t>(s);
    const SlotRecord &record = g.slots[si];
    const SlotKind kind = static_cast<SlotKind>(record.kind);
    if (kind != SlotKind::Newest && kind != SlotKind::Hot)
      throw InputError(where + " lists slot " + std::to_string(s) + ", which holds no history row");
    const Request &r = requests_[static_cast<std::size_t>(record.owner)];
    if (r.batchMark != mark)
      throw InputError(where + " lists slot " + std::to_string(s) + " of request " +
                       std::to_string(record.owner) + ", which is not in the batch");
    std::uint32_t &seen = g.seen[static_cast<std::size_t>(r.start + record.row)];
    if (seen == serial || g.uses[si].lastUse == step_)
      throw InputError(where + " lists slot " + std::to_string(s) + " twice");
    seen = serial;
  }
  // The distinct misses (the seen marks are scratch, not state).
  std::vector<std::int64_t> &distinct = bookScratch_;
  distinct.clear();
  for (std::int64_t i = 0; i < missCount; ++i) {
    const std::int32_t lane = misses[2 * i], id = misses[2 * i + 1];
    if (lane < 0 || lane >= batch || requests[lane] == -1)
      throw InputError(where + " lists a miss of lane " + std::to_string(lane) +
                       ", which holds no request");
    const Request &r = requests_[static_cast<std::size_t>(requests[lane])];
    if (id < 0 || id >= r.len)
      throw OutOfRangeError("row id " + std::to_string(id) + " in " + where +
                            " is outside request " + std::to_string(requests[lane]) +
                            "'s history (length " + std::to_string(r.len) + ")");
    const std::size_t hostRow = static_cast<std::size_t>(r.start + id);
    if (g.slotOfHostRow[hostRow] >= 0)
      throw InputError(where + " lists row " + std::to_string(id) + " of request " +
                       std::to_string(requests[lane]) + " as missing, but it is resident");
    if (g.seen[hostRow] == serial)
      continue; // selected by several queries
    g.seen[hostRow] = serial;
    distinct.push_back(static_cast<std::int64_t>(requests[lane]) << 32 |
                       static_cast<std::uint32_t>(id));
  }

  // Room for all pass 2 records (the slots' uses before the step, each
  // request's rows to fetch, the requests with some) and the lanes'
  // requests, so that it allocates nothing: a booking that fails changes
  // nothing. (The misses by request: the log's order does not matter, as
  // promote takes each request's rows in ascending order, and the requests
  // in lane order, as resolve finds them.)
  std::sort(distinct.begin(), distinct.end());
  g.usesBefore.reserve(static_cast<std::size_t>(config_.hbmSlots));
  reserveRoom(g.touched, static_cast<std::size_t>(batch));
  for (std::size_t i = 0, end = 0; i < distinct.size(); i = end) {
    for (end = i; end < distinct.size() && distinct[end] >> 32 == distinct[i] >> 32;)
      ++end;
    reserveRoom(
        requests_[static_cast<std::size_t>(distinct[i] >> 32)].fetch[static_cast<std::size_t>(gi)],
        end - i);
  }
  std::vector<std::int32_t> laneOf(requests_.size(), 0);
  for (std::int64_t b = 0; b < batch; ++b)
    if (requests[b] != -1)
      laneOf[static_cast<std::size_t>(requests[b])] = static_cast<std::int32_t>(b);

  // Pass 2: hits, the distinct rows to fetch, the counts.
  for (std::int64_t i = 0; i < hits; ++i)
    touchSlot(g, hitSlots[i]);
  last_.entries += entries;
  last_.selected += hits;
  last_.resident += hits;
  for (std::int64_t key : distinct) {
    const std::int32_t request = static_cast<std::int32_t>(key >> 32);
    std::vector<std::int32_t> &fetch =
        requests_[static_cast<std::size_t>(request)].fetch[static_cast<std::size_t>(gi)];
    if (fetch.empty())
      g.touched.push_back(request);
    fetch.push_back(static_cast<std::int32_t>(key & 0xffffffff));
  }
  last_.selected += static_cast<std::int64_t>(distinct.size());
  last_.fetched += static_cast<std::int64_t>(distinct.size());
  std::sort(g.touched.begin(), g.touched.end(), [&](std::int32_t x, std::int32_t y) {
    return laneOf[static_cast<std::size_t>(x)] < laneOf[static_cast<std::size_t>(y)];
  });
  resolved_[static_cast<std::size_t>(gi)] = 1;
}

void ResidencyController::promote(std::int32_t gi, std::vector<RowCopy> &copies) {
  Group &g = groups_[static_cast<std::size_t>(gi)];
  for (std::int32_t request : g.touched) {
    Request &r = requests_[static_cast<std::size_t>(request)];
    std::vector<std::int32_t> &rows = r.fetch[static_cast<std::size_t>(gi)];
    std::size_t limit = rows.size();
    if (config_.maxPromotionsPerStep >= 0)
      limit = std::min(limit, static_cast<std::size_t>(config_.maxPromotionsPerStep));
    // Ascending rows, one order whichever way the step was booked (resolve,
    // book), sorted lazily in growing chunks: a step that can promote few of
    // many fetched rows does not sort them all.
    std::size_t done = 0, sorted = 0;
    for (; done < limit; ++done) {
      if (done == sorted) {
        const std::size_t end = std::min(rows.size(), sorted + std::max<std::size_t>(64, sorted));
        const auto first = rows.begin() + static_cast<std::ptrdiff_t>(sorted);
        const auto last = rows.begin() + static_cast<std::ptrdiff_t>(end);
        if (end < rows.size())
          std::nth_element(first, last, rows.end());
        std::sort(first, last);
        sorted = end;
      }
      const std::int32_t slot = hotSlotFor(g, gi, request, false);
      if (slot < 0)
        break;
      place(g, gi, slot, request, rows[done], SlotKind::Hot, &copies);
    }
    last_.promoted += static_cast<std::int64_t>(done);
    last_.notPromoted += static_cast<std::int64_t>(rows.size() - done);
    rows.clear();
  }
  g.touched.clear();
}

void ResidencyController::endStep(std::vector<RowCopy> &copies) {
  if (!inStep_)
    throw StateError("endStep without a step in progress");
  // Room for all the promotions add (per row a copy, a hot-list entry and at
  // most one eviction), before the first: a step end that fails changes
  // nothing, and may be repeated (or the step aborted).
  std::size_t promotions = 0;
  for (std::int32_t gi = 0; gi < config_.groups; ++gi) {
    if (!resolved_[static_cast<std::size_t>(gi)])
      continue;
    for (std::int32_t request : groups_[static_cast<std::size_t>(gi)].touched) {
      Request &r = requests_[static_cast<std::size_t>(request)];
      const std::size_t rows = promotionsDue(r, static_cast<std::size_t>(gi));
      reserveHotRows(r, static_cast<std::size_t>(gi), rows);
      promotions += rows;
    }
  }
  reserveVictimSearches();
  reserveChanges(copies, promotions, promotions);
  for (std::int32_t gi = 0; gi < config_.groups; ++gi)
    if (resolved_[static_cast<std::size_t>(gi)])
      promote(gi, copies);
  inStep_ = false;
  totals_ += last_;
}

void ResidencyController::abortStep() {
  if (!inStep_)
    throw StateError("abortStep without a step in progress");
  for (Group &g : groups_) {
    for (std::int32_t request : g.touched)
      requests_[static_cast<std::size_t>(request)]
          .fetch[static_cast<std::size_t>(&g - groups_.data())]
          .clear();
    g.touched.clear();
    // The step's selections leave no trace in the slots' uses (LRU and
    // LRU-2 order by them, CLOCK's reference follows the last use).
    for (auto it = g.usesBefore.rbegin(); it != g.usesBefore.rend(); ++it)
      g.uses[static_cast<std::size_t>(it->first)] = it->second;
    g.usesBefore.clear();
  }
  // The evictions since the last step that ended are still to be reported;
  // the last step's counts are the last completed step's again.
  pendingEvictions_ += last_.evicted;
  last_ = lastCompleted_;
  inStep_ = false;
}

} // namespace dhs::runtime
