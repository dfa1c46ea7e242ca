//===- Reserve.h - Room made before a table update --------------*- C++ -*-===//
//
// A table update (an append, a step's end, an admission) that allocates
// half-way and fails for want of memory leaves its tables half-updated. So
// each update makes room for everything it adds before its first change
// (reserveRoom), and then allocates nothing: it happens whole or not at all.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_RESERVE_H
#define DHS_RUNTIME_CORE_RESERVE_H

#include <algorithm>
#include <cstddef>
#include <vector>

namespace dhs::runtime {

/// Makes room in `v` for `extra` more elements: push_back then allocates
/// nothing until they are in. Grows geometrically, so that making room for
/// a few elements at a time costs amortized O(1) per element.
template <typename T, typename Allocator>
void reserveRoom(std::vector<T, Allocator> &v, std::size_t extra) {
  const std::size_t needed = v.size() + extra;
  if (needed > v.capacity())
    v.reserve(std::max(needed, 2 * v.capacity()));
}

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_RESERVE_H
