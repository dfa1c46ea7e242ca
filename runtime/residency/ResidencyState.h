//===- ResidencyState.h - The residency controller's tables -----*- C++ -*-===//
//
// Internal to the residency controller's files (Residency.cpp,
// ResidencySteps.cpp, Replacement.cpp, ResidencyCheck.cpp): its flat per-group
// and per-request state.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_RESIDENCY_RESIDENCYSTATE_H
#define DHS_RUNTIME_RESIDENCY_RESIDENCYSTATE_H

#include "runtime/residency/Residency.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dhs::runtime {

/// Victims in LRU order, sorted lazily in chunks (a selection, then a sort of
/// the chunk), so that taking a few victims out of many candidates costs
/// O(candidates), not a full sort.
struct LruCursor {
  std::vector<std::int32_t> order;
  std::size_t next = 0;
  std::size_t sorted = 0;
  bool valid = false;
  bool forced = false;
  std::uint32_t stamp = 0;

  void invalidate() { valid = false; }

  /// Sorts the next chunk of at least `chunk` entries into place.
  template <typename Less> bool extend(std::size_t chunk, Less less) {
    if (sorted >= order.size())
      return false;
    std::size_t end = std::min(order.size(), sorted + std::max<std::size_t>(chunk, 64));
    if (end < order.size())
      std::nth_element(order.begin() + static_cast<std::ptrdiff_t>(sorted),
                       order.begin() + static_cast<std::ptrdiff_t>(end), order.end(), less);
    std::sort(order.begin() + static_cast<std::ptrdiff_t>(sorted),
              order.begin() + static_cast<std::ptrdiff_t>(end), less);
    sorted = end;
    return true;
  }
};

/// The first set bit of `words` at or after `from`, or `end` (the bit
/// count) when none is; `summary` has a bit per word that is not 0.
inline std::int32_t nextSetBit(const std::vector<std::uint64_t> &words,
                               const std::vector<std::uint64_t> &summary, std::int32_t from,
                               std::int32_t end) {
  if (from >= end)
    return end;
  std::size_t w = static_cast<std::size_t>(from) >> 6;
  std::uint64_t bits = words[w] & (~0ull << (from & 63));
  const std::size_t wordCount = words.size();
  while (!bits) {
    // The next word that is not 0, 64 words at a time.
    if (++w >= wordCount)
      return end;
    std::uint64_t more = summary[w >> 6] & (~0ull << (w & 63));
    while (!more) {
      w = ((w >> 6) + 1) << 6;
      if (w >= wordCount)
        return end;
      more = summary[w >> 6];
    }
    w = (w & ~std::size_t{63}) + static_cast<std::size_t>(__builtin_ctzll(more));
    if (w >= wordCount)
      return end;
    bits = words[w];
  }
  const std::int32_t s =
      static_cast<std::int32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits)));
  return s < end ? s : end;
}

/// A slot's entry in its group's tables: one record a slot, so that placing,
/// aging or evicting a slot touches a line or two, not a line per field.
struct SlotRecord {
  std::int32_t owner = -1;   ///< request or -1
  std::int32_t row = -1;     ///< history row or -1
  std::int32_t listPos = -1; ///< position in the owner's hot list
  /// The last use when the CLOCK hand (or an eviction) last took the slot's
  /// reference away; a slot is referenced while its last use differs, so
  /// every use (a kernel's stamp) sets the reference.
  std::uint32_t cleared = 0;
  std::uint8_t kind = static_cast<std::uint8_t>(SlotKind::Free);
};

/// A slot's last two uses, kept apart from its record: resolving stamps only
/// these, so their table stays small (8 bytes a slot) and in cache.
struct SlotUses {
  std::uint32_t lastUse = 0; ///< step of the last selection
  std::uint32_t prevUse = 0; ///< step of the one before (0: none)
};

struct ResidencyController::Group {
  std::vector<SlotRecord> slots;           // [slots]
  std::vector<SlotUses> uses;              // [slots]
  std::vector<std::int32_t> slotOfHostRow; // [host rows] slot or -1
  std::vector<std::uint32_t> seen;         // [host rows] resolve serial of last count
  SlotAllocator free;
  std::int32_t hand = 0; // CLOCK hand (Adaptive)
  // CLOCK (Adaptive), non-forced searches: a bit per slot, set for every
  // slot that is hot with a last use before candidateStamp (and maybe for
  // some that no longer are: the hand tests each slot it stops at), so the
  // hand skips the slots that cannot be victims a word at a time. Built
  // when a search finds it invalid or of an older step.
  std::vector<std::uint64_t> candidates;
  std::vector<std::uint64_t> candidateWords; // a bit per word of candidates: not 0
  std::uint32_t candidateStamp = 0;
  bool candidatesValid = false;
  std::int64_t excess = 0; // hot rows beyond their request's floor
  std::int32_t newest = 0, ring = 0, hot = 0;
  std::uint32_t noVictimStep = 0;    // a non-forced search failed in this step
  LruCursor lru;                     // global LRU order (Adaptive + Lru)
  std::vector<std::int32_t> touched; // requests with rows to fetch this step
  // Slots first used in the step in progress, with their uses before it
  // (abortStep restores them: an aborted step leaves the LRU order alone).
  // Reserved for every slot, so resolving allocates nothing here.
  std::vector<std::pair<std::int32_t, SlotUses>> usesBefore;
  // While the device decides (markDeviceOwned .. adoptDeviceState) the
  // per-slot tables above stay as at the handover; the host keeps, besides
  // counts and the free stack:
  // - appendsFrom: the group's first entry of the controller's append
  //   record not applied yet (its list is the record from there on), and
  //   appendPopped, for those of its entries within the budget, the free
  //   slot the host took for the new row (over the budget the device picks
  //   the slot: nothing is recorded per group);
  // - deviceFrom: each request's history length at the handover ([request
  //   index]; rows from there on were placed by the device);
  // - newestRing: the slot of each request's newest rows placed by the
  //   device, row ringBase_ + k of request r at [(k mod W) x requests + r]
  //   (requests that append together write side by side).
  // Always kept: ringSlotBits, a bit per slot, set for the ring slots.
  bool deviceOwned = false;
  std::size_t appendsFrom = 0;
  struct PoppedSlot {
    std::size_t entry = 0; // in the append record
    std::int32_t slot = 0;
  };
  std::vector<PoppedSlot> appendPopped;
  std::vector<std::int64_t> deviceFrom;
  std::vector<std::int32_t> newestRing;
  std::vector<std::uint64_t> ringSlotBits;

  /// Returns `slot` to the allocator: no owner, row or list position, and
  /// its reference cleared. (The caller unmaps its host row.)
  void freeSlot(std::int32_t slot) {
    SlotRecord &record = slots[static_cast<std::size_t>(slot)];
    record.owner = -1;
    record.row = -1;
    record.listPos = -1;
    record.kind = static_cast<std::uint8_t>(SlotKind::Free);
    record.cleared = uses[static_cast<std::size_t>(slot)].lastUse;
    dropCandidate(slot);
    free.release(slot);
  }

  /// The candidate bits (see candidates).
  void addCandidate(std::int32_t slot) {
    if (!candidatesValid)
      return;
    const std::size_t w = static_cast<std::size_t>(slot) >> 6;
    candidates[w] |= 1ull << (slot & 63);
    candidateWords[w >> 6] |= 1ull << (w & 63);
  }
  void dropCandidate(std::int32_t slot) {
    if (!candidatesValid)
      return;
    const std::size_t w = static_cast<std::size_t>(slot) >> 6;
    candidates[w] &= ~(1ull << (slot & 63));
    if (!candidates[w])
      candidateWords[w >> 6] &= ~(1ull << (w & 63));
  }
};

/// A placed slot's reference, before any hand passed: no last use equals it.
inline constexpr std::uint32_t kNeverCleared = ~0u;
inline bool ResidencyController::referenced(const Group &g, std::int32_t slot) {
  const std::size_t s = static_cast<std::size_t>(slot);
  return g.uses[s].lastUse != g.slots[s].cleared;
}

inline void ResidencyController::clearReference(Group &g, std::int32_t slot) {
  const std::size_t s = static_cast<std::size_t>(slot);
  g.slots[s].cleared = g.uses[s].lastUse;
}

/// append's part in a device-owned group (append records the entry, once
/// for every such group): the counts, and the free slot the host takes for
/// the new row within the budget. The row leaving the newest window (when
/// `aged`) becomes hot; over the budget (optional budget `budget`) one hot
/// row leaves, a victim or the aged row itself (the device decides which),
/// and the new row takes its slot: nothing changes but the eviction count.
/// Returns the evictions (0 or 1).
inline std::int64_t ResidencyController::appendOnDevice(Group &g, bool aged, std::int64_t budget,
                                                        std::size_t entry) {
  if (aged && g.excess + 1 > budget)
    return 1;
  if (aged) {
    ++g.hot;
    ++g.excess;
  } else {
    ++g.newest;
  }
  g.appendPopped.push_back({entry, g.free.allocate()});
  return 0;
}

struct ResidencyController::Request {
  bool live = false;
  std::int64_t start = 0, len = 0, maxContext = 0;
  std::vector<std::vector<std::int32_t>> hot;   // [group] hot slots
  std::vector<std::vector<std::int32_t>> ring;  // [group] ring slots
  std::vector<std::vector<std::int32_t>> fetch; // [group] rows fetched this step
  std::vector<std::int32_t> hand;               // [group] CLOCK hand (Fixed)
  std::vector<std::uint32_t> noVictimStep;      // [group]
  std::vector<LruCursor> lru;                   // [group] own LRU order (Fixed)
  std::uint32_t batchMark = 0;                  // resolve serial (duplicates)
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_RESIDENCY_RESIDENCYSTATE_H
