//===- RowWrites.cpp - Rows written into the host store -------------------===//

#include "runtime/core/RowWrites.h"

#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace dhs::runtime {

namespace {

/// Rows prefetched ahead of the one being written: enough to overlap a
/// token's page walks (one row per layer), few enough to stay within the
/// core's outstanding misses.
constexpr std::size_t kRowsAhead = 16;

/// Writes one row; non-temporal where the row and both ends are 16-byte
/// aligned (every row format's size is a multiple of 16 bytes).
void writeRow(std::uint8_t *target, const std::uint8_t *source, std::size_t bytes) {
#if defined(__SSE2__)
  if ((reinterpret_cast<std::uintptr_t>(target) | bytes) % 16 == 0) {
    for (std::size_t at = 0; at < bytes; at += 16)
      _mm_stream_si128(reinterpret_cast<__m128i *>(target + at),
                       _mm_loadu_si128(reinterpret_cast<const __m128i *>(source + at)));
    return;
  }
#endif
  std::memcpy(target, source, bytes);
}

} // namespace

void writeRows(const std::vector<RowWrite> &writes, std::size_t bytes) {
  const std::size_t count = writes.size();
  for (std::size_t i = 0; i < std::min(kRowsAhead, count); ++i)
    __builtin_prefetch(writes[i].target, /*rw=*/1, /*locality=*/0);
  for (std::size_t i = 0; i < count; ++i) {
    if (i + kRowsAhead < count)
      __builtin_prefetch(writes[i + kRowsAhead].target, 1, 0);
    writeRow(writes[i].target, writes[i].source, bytes);
  }
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

} // namespace dhs::runtime
