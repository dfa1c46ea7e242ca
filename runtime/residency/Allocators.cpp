//===- Allocators.cpp - HBM slots and host-store row ranges ---------------===//

#include "runtime/residency/Allocators.h"

#include "runtime/core/Error.h"

#include <algorithm>
#include <string>

namespace dhs::runtime {

//===----------------------------------------------------------------------===//
// SlotAllocator
//===----------------------------------------------------------------------===//

SlotAllocator::SlotAllocator(std::int32_t capacity) {
  if (capacity < 0)
    throw Error("a slot allocator cannot have " + std::to_string(capacity) + " slots");
  free_.assign(static_cast<std::size_t>(capacity), 1);
  stack_.resize(static_cast<std::size_t>(capacity));
  // Highest first on the stack, so that slot 0 comes out first.
  for (std::int32_t i = 0; i < capacity; ++i)
    stack_[static_cast<std::size_t>(i)] = capacity - 1 - i;
}

SlotAllocator::SlotAllocator(const SlotAllocator &other) : free_(other.free_) {
  stack_.reserve(free_.size());
  stack_ = other.stack_;
}

SlotAllocator &SlotAllocator::operator=(const SlotAllocator &other) {
  if (this != &other)
    *this = SlotAllocator(other);
  return *this;
}

std::int32_t SlotAllocator::tryAllocate() {
  if (stack_.empty())
    return -1;
  std::int32_t slot = stack_.back();
  stack_.pop_back();
  free_[static_cast<std::size_t>(slot)] = 0;
  return slot;
}

std::int32_t SlotAllocator::allocate() {
  std::int32_t slot = tryAllocate();
  if (slot < 0)
    throw CapacityError("no free HBM slot (all " + std::to_string(capacity()) +
                        " slots are in use)");
  return slot;
}

bool SlotAllocator::isFree(std::int32_t slot) const {
  if (slot < 0 || slot >= capacity())
    throw Error("slot " + std::to_string(slot) + " is outside the slot pool (" +
                std::to_string(capacity()) + " slots)");
  return free_[static_cast<std::size_t>(slot)] != 0;
}

void SlotAllocator::release(std::int32_t slot) {
  if (isFree(slot))
    throw Error("slot " + std::to_string(slot) + " is released twice");
  free_[static_cast<std::size_t>(slot)] = 1;
  stack_.push_back(slot);
}

void SlotAllocator::assign(const std::vector<std::int32_t> &stack) {
  std::vector<std::uint8_t> free(free_.size(), 0);
  for (std::int32_t slot : stack) {
    if (slot < 0 || slot >= capacity())
      throw Error("slot " + std::to_string(slot) + " is outside the slot pool (" +
                  std::to_string(capacity()) + " slots)");
    if (free[static_cast<std::size_t>(slot)])
      throw Error("slot " + std::to_string(slot) + " is listed twice in a free stack");
    free[static_cast<std::size_t>(slot)] = 1;
  }
  stack_.reserve(free.size()); // (room for every slot: release allocates nothing)
  free_ = std::move(free);
  stack_ = stack;
}

//===----------------------------------------------------------------------===//
// HostRowAllocator
//===----------------------------------------------------------------------===//

HostRowAllocator::HostRowAllocator(std::int64_t capacity)
    : capacity_(capacity), freeRows_(capacity) {
  if (capacity < 0)
    throw Error("a host store cannot have " + std::to_string(capacity) + " rows");
  if (capacity > 0)
    free_.emplace(0, capacity);
}

std::int64_t HostRowAllocator::largestFreeRange() const {
  std::int64_t largest = 0;
  for (const auto &[start, length] : free_)
    largest = std::max(largest, length);
  return largest;
}

std::vector<HostRange> HostRowAllocator::freeRanges() const {
  std::vector<HostRange> ranges;
  for (const auto &[start, length] : free_)
    ranges.push_back({start, length});
  return ranges;
}

std::vector<HostRange> HostRowAllocator::usedRanges() const {
  std::vector<HostRange> ranges;
  for (const auto &[start, length] : used_)
    ranges.push_back({start, length});
  return ranges;
}

std::optional<std::int64_t> HostRowAllocator::tryAllocate(std::int64_t length) {
  if (length <= 0)
    throw Error("cannot reserve " + std::to_string(length) + " host rows");
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < length)
      continue;
    const std::int64_t start = it->first, rest = it->second - length;
    if (rest == 0) {
      // The free range's node becomes the used range's: nothing allocated.
      used_.insert(free_.extract(it));
    } else {
      // The used range's node first (the one allocation: if it fails,
      // nothing has changed), then the free range's node moves past it.
      used_.emplace(start, length);
      auto node = free_.extract(it);
      node.key() = start + length;
      node.mapped() = rest;
      free_.insert(std::move(node));
    }
    freeRows_ -= length;
    return start;
  }
  return std::nullopt;
}

std::int64_t HostRowAllocator::allocate(std::int64_t length) {
  if (std::optional<std::int64_t> start = tryAllocate(length))
    return *start;
  throw CapacityError("the host store has no free range of " + std::to_string(length) + " rows (" +
                      std::to_string(freeRows_) + " of " + std::to_string(capacity_) +
                      " rows free in " + std::to_string(free_.size()) + " ranges, the longest " +
                      std::to_string(largestFreeRange()) + ")");
}

std::int64_t HostRowAllocator::allocatedLength(std::int64_t start) const {
  auto it = used_.find(start);
  return it == used_.end() ? 0 : it->second;
}

void HostRowAllocator::release(std::int64_t start) {
  auto used = used_.find(start);
  if (used == used_.end())
    throw Error("no reserved host range starts at row " + std::to_string(start));
  // The used range's node becomes the free range's (or goes, when the range
  // joins the free one before it): nothing allocated.
  auto node = used_.extract(used);
  std::int64_t length = node.mapped();
  freeRows_ += length;
  // Coalesce with the free range after and the one before.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + length) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      prev->second += length;
      return;
    }
  }
  node.mapped() = length;
  free_.insert(next, std::move(node));
}

} // namespace dhs::runtime
