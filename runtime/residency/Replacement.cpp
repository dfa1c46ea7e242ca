//===- Replacement.cpp - Which hot row gives up its slot ------------------===//

#include "runtime/residency/Residency.h"
#include "runtime/residency/ResidencyState.h"

#include <algorithm>

namespace dhs::runtime {

bool ResidencyController::isVictimCandidate(const Group &g, std::int32_t slot, std::int32_t owner,
                                            bool force) const {
  const std::size_t s = static_cast<std::size_t>(slot);
  const SlotRecord &record = g.slots[s];
  if (record.kind != static_cast<std::uint8_t>(SlotKind::Hot))
    return false;
  if (!force && g.uses[s].lastUse >= step_)
    return false; // selected in the current (or, between steps, the last) step
  if (owner >= 0)
    return record.owner == owner;
  const std::int32_t gi = static_cast<std::int32_t>(&g - groups_.data());
  const Request &r = requests_[static_cast<std::size_t>(record.owner)];
  return static_cast<std::int64_t>(r.hot[static_cast<std::size_t>(gi)].size()) > config_.hotFloor;
}

void ResidencyController::buildCandidates(Group &g) {
  const std::size_t n = static_cast<std::size_t>(config_.hbmSlots);
  g.candidates.assign((n + 63) / 64, 0);
  g.candidateWords.assign((n + 4095) / 4096, 0);
  const std::uint8_t hot = static_cast<std::uint8_t>(SlotKind::Hot);
  const std::uint32_t step = step_;
  for (std::size_t w = 0; w * 64 < n; ++w) {
    const std::size_t begin = w * 64, end = std::min(n, begin + 64);
    std::uint64_t bits = 0;
    for (std::size_t s = begin; s < end; ++s)
      bits |= static_cast<std::uint64_t>(g.slots[s].kind == hot && g.uses[s].lastUse < step)
              << (s - begin);
    g.candidates[w] = bits;
    if (bits)
      g.candidateWords[w >> 6] |= 1ull << (w & 63);
  }
  g.candidateStamp = step_;
  g.candidatesValid = true;
}

std::int32_t ResidencyController::clockVictim(Group &g, std::int32_t owner, bool force) {
  const std::int32_t gi = static_cast<std::int32_t>(&g - groups_.data());
  if (owner < 0 && !force && !linearClock_) {
    // The sweep below, over the candidate bits: the slots it skips without
    // a change (not hot, or used in this step) are skipped 64 (or, by the
    // summary, 4096) at a time. Same victim, same references cleared, same
    // hand.
    const std::int32_t n = config_.hbmSlots;
    if (!g.candidatesValid || g.candidateStamp != step_)
      buildCandidates(g);
    std::int64_t passed = 0; // slots the hand passed (the sweep's i)
    std::int32_t at = g.hand;
    while (passed < 2ll * n) {
      const std::int32_t s = nextSetBit(g.candidates, g.candidateWords, at, n);
      passed += s - at;
      if (s == n) {
        at = 0;
        continue;
      }
      if (passed >= 2ll * n)
        break;
      ++passed;
      at = s + 1 == n ? 0 : s + 1;
      if (!isVictimCandidate(g, s, owner, force)) {
        const std::size_t i = static_cast<std::size_t>(s);
        if (g.slots[i].kind != static_cast<std::uint8_t>(SlotKind::Hot) ||
            g.uses[i].lastUse >= step_)
          g.dropCandidate(s); // (under its floor it may be one later)
        continue;
      }
      if (referenced(g, s)) {
        clearReference(g, s); // second chance
        continue;
      }
      g.hand = at;
      return s;
    }
    return -1; // the hand went round twice: back where it started
  }
  if (owner < 0) {
    const std::int32_t n = config_.hbmSlots;
    for (std::int64_t i = 0; i < 2ll * n; ++i) {
      std::int32_t s = g.hand;
      g.hand = g.hand + 1 == n ? 0 : g.hand + 1;
      if (!isVictimCandidate(g, s, owner, force))
        continue;
      if (referenced(g, s)) {
        clearReference(g, s); // second chance
        continue;
      }
      return s;
    }
    return -1;
  }
  // Fixed: the hand runs over the owner's own hot list.
  Request &r = requests_[static_cast<std::size_t>(owner)];
  std::vector<std::int32_t> &list = r.hot[static_cast<std::size_t>(gi)];
  std::int32_t &hand = r.hand[static_cast<std::size_t>(gi)];
  const std::int64_t n = static_cast<std::int64_t>(list.size());
  for (std::int64_t i = 0; i < 2 * n; ++i) {
    if (hand >= n)
      hand = 0;
    std::int32_t s = list[static_cast<std::size_t>(hand++)];
    if (!isVictimCandidate(g, s, owner, force))
      continue;
    if (referenced(g, s)) {
      clearReference(g, s);
      continue;
    }
    return s;
  }
  return -1;
}

std::int32_t ResidencyController::lruVictim(Group &g, std::int32_t gi, std::int32_t owner,
                                            bool force) {
  LruCursor &cursor =
      owner < 0 ? g.lru
                : requests_[static_cast<std::size_t>(owner)].lru[static_cast<std::size_t>(gi)];
  // The order holds every hot row that may be a victim at this stamp (a
  // forced search, for admission, also this step's rows); the full test,
  // floors included, is made when a row is taken.
  if (!cursor.valid || cursor.stamp != step_ || cursor.forced != force) {
    cursor.order.clear();
    auto mayBeVictim = [&](std::int32_t s) {
      const std::size_t i = static_cast<std::size_t>(s);
      return g.slots[i].kind == static_cast<std::uint8_t>(SlotKind::Hot) &&
             (force || g.uses[i].lastUse < step_);
    };
    if (owner < 0) {
      for (std::int32_t s = 0; s < config_.hbmSlots; ++s)
        if (mayBeVictim(s))
          cursor.order.push_back(s);
    } else {
      for (std::int32_t s :
           requests_[static_cast<std::size_t>(owner)].hot[static_cast<std::size_t>(gi)])
        if (mayBeVictim(s))
          cursor.order.push_back(s);
    }
    cursor.next = cursor.sorted = 0;
    cursor.valid = true;
    cursor.forced = force;
    cursor.stamp = step_;
  }
  // LRU: oldest last use first. LRU-2: oldest use before the last first
  // (rows selected in a single step have none and go first), then LRU.
  const bool second = config_.replacement == Replacement::Lru2;
  auto less = [&g, second](std::int32_t a, std::int32_t b) {
    const std::size_t ia = static_cast<std::size_t>(a), ib = static_cast<std::size_t>(b);
    if (second && g.uses[ia].prevUse != g.uses[ib].prevUse)
      return g.uses[ia].prevUse < g.uses[ib].prevUse;
    std::uint32_t ua = g.uses[ia].lastUse;
    std::uint32_t ub = g.uses[ib].lastUse;
    return ua != ub ? ua < ub : a < b;
  };
  for (;;) {
    if (cursor.next == cursor.sorted && !cursor.extend(cursor.sorted, less))
      return -1;
    std::int32_t s = cursor.order[cursor.next++];
    if (isVictimCandidate(g, s, owner, force))
      return s;
  }
}

std::int32_t ResidencyController::findVictim(Group &g, std::int32_t gi, std::int32_t owner,
                                             bool force) {
  std::uint32_t &failed =
      owner < 0
          ? g.noVictimStep
          : requests_[static_cast<std::size_t>(owner)].noVictimStep[static_cast<std::size_t>(gi)];
  if (!force && failed == step_ && step_ != 0)
    return -1;
  std::int32_t victim = config_.replacement == Replacement::Clock ? clockVictim(g, owner, force)
                                                                  : lruVictim(g, gi, owner, force);
  if (victim < 0 && !force)
    failed = step_;
  return victim;
}

} // namespace dhs::runtime
