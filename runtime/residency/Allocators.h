//===- Allocators.h - HBM slots and host-store row ranges -------*- C++ -*-===//
//
// Two allocators behind the KV tiers, both flat and deterministic:
//
// - SlotAllocator hands out single HBM slots (no contiguity is needed: the
//   kernels read slots through a slot map). A stack of free slots plus a
//   free bitmap, so that both allocation and release are O(1) and a double
//   release is caught. Slots come out lowest first from a fresh allocator.
// - HostRowAllocator reserves contiguous row ranges of the pinned host
//   store, one per admitted request ([history_start, history_start +
//   max_context)), so that the kernel ABI's host row = history_start + row
//   holds. First fit at the lowest address; freed ranges coalesce with
//   their free neighbours, so a store that is empty again is one range.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_RESIDENCY_ALLOCATORS_H
#define DHS_RUNTIME_RESIDENCY_ALLOCATORS_H

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace dhs::runtime {

/// Allocates single slots out of [0, capacity).
class SlotAllocator {
public:
  /// An allocator with every slot of [0, capacity) free. Throws Error for a
  /// negative capacity.
  explicit SlotAllocator(std::int32_t capacity = 0);
  /// Copies keep room for every slot on their stack, as the original: a
  /// release never allocates.
  SlotAllocator(const SlotAllocator &other);
  SlotAllocator &operator=(const SlotAllocator &other);
  SlotAllocator(SlotAllocator &&) noexcept = default;
  SlotAllocator &operator=(SlotAllocator &&) noexcept = default;

  /// Number of slots managed.
  std::int32_t capacity() const { return static_cast<std::int32_t>(free_.size()); }
  /// Number of free slots.
  std::int32_t freeCount() const { return static_cast<std::int32_t>(stack_.size()); }
  /// Number of allocated slots.
  std::int32_t usedCount() const { return capacity() - freeCount(); }
  /// The free slots in the order allocate hands them out, the next last.
  const std::vector<std::int32_t> &freeStack() const { return stack_; }

  /// Takes a free slot. Throws CapacityError when none is free.
  std::int32_t allocate();
  /// Takes a free slot, or returns -1 when none is free.
  std::int32_t tryAllocate();
  /// Returns an allocated slot. Throws Error for a slot outside the
  /// allocator or one that is already free.
  void release(std::int32_t slot);
  /// True if `slot` is free. Throws Error for a slot outside the allocator.
  bool isFree(std::int32_t slot) const;
  /// Asks the cache for what isFree(slot) reads (no effect otherwise).
  void prefetch(std::int32_t slot) const {
    if (slot >= 0 && static_cast<std::size_t>(slot) < free_.size())
      __builtin_prefetch(&free_[static_cast<std::size_t>(slot)]);
  }
  /// Makes exactly the slots of `stack` free, handed out last first (the
  /// state of another allocator, freeStack()). Throws Error for a slot
  /// outside the allocator or listed twice; nothing changes then.
  void assign(const std::vector<std::int32_t> &stack);

private:
  std::vector<std::int32_t> stack_; // free slots, next to hand out last
  std::vector<std::uint8_t> free_;  // 1 = free
};

/// A range of host-store rows.
struct HostRange {
  std::int64_t start = 0;  ///< first row
  std::int64_t length = 0; ///< rows
  bool operator==(const HostRange &other) const {
    return start == other.start && length == other.length;
  }
};

/// Allocates contiguous row ranges out of [0, capacity).
class HostRowAllocator {
public:
  /// An allocator with [0, capacity) free. Throws Error for a negative
  /// capacity.
  explicit HostRowAllocator(std::int64_t capacity = 0);

  /// Rows managed.
  std::int64_t capacity() const { return capacity_; }
  /// Rows in free ranges.
  std::int64_t freeRows() const { return freeRows_; }
  /// Rows in allocated ranges.
  std::int64_t usedRows() const { return capacity_ - freeRows_; }
  /// The longest free range (0 when full).
  std::int64_t largestFreeRange() const;
  /// Free ranges, by address (adjacent free ranges never appear: they
  /// coalesce).
  std::vector<HostRange> freeRanges() const;
  /// Allocated ranges, by address.
  std::vector<HostRange> usedRanges() const;

  /// Reserves `length` contiguous rows at the lowest address where they fit
  /// and returns the first row. Throws Error for length <= 0 and
  /// CapacityError when no free range is long enough (the message gives the
  /// free rows, the number of free ranges and the longest), std::bad_alloc
  /// when the range's map node cannot be allocated; nothing changes then.
  std::int64_t allocate(std::int64_t length);
  /// As allocate, but returns std::nullopt instead of throwing CapacityError.
  std::optional<std::int64_t> tryAllocate(std::int64_t length);
  /// Frees the range that starts at `start`; it merges with free neighbours.
  /// Allocates nothing (its map node moves). Throws Error if no allocated
  /// range starts there.
  void release(std::int64_t start);
  /// The length of the allocated range starting at `start`, or 0.
  std::int64_t allocatedLength(std::int64_t start) const;

private:
  std::int64_t capacity_ = 0;
  std::int64_t freeRows_ = 0;
  std::map<std::int64_t, std::int64_t> free_; // start -> length
  std::map<std::int64_t, std::int64_t> used_; // start -> length
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_RESIDENCY_ALLOCATORS_H
