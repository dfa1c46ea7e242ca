//===- RowWrites.h - Rows written into the host store -----------*- C++ -*-===//
//
// An append writes a token's rows (one per layer) into the host store: rows
// of a few hundred bytes at scattered places of a store of many GB, each
// behind its own 4 KB page, which this thread never reads again (the GPU
// reads them). Written with memcpy, each row costs a page walk and a read
// of every line it covers before the write (read for ownership), one row
// after the other. writeRows prefetches the targets a few rows ahead, so
// that their page walks overlap, and writes the rows with non-temporal
// stores, which skip the reads. For 128 tokens x 20 layers of 656-byte
// rows: half of memcpy's time over a 3.9 GB store on the build machine;
// dhs-decision-bench's appends on the H200's host 0.60-0.62 ms a step
// against memcpy's 0.70-0.85 (bench/NOTES.md, 2026-12-03, twenty-first
// session).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_ROWWRITES_H
#define DHS_RUNTIME_CORE_ROWWRITES_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dhs::runtime {

/// One row to write: where, and from where.
struct RowWrite {
  std::uint8_t *target;
  const std::uint8_t *source;
};

/// Writes `bytes` from each write's source to its target, in order, and
/// makes them visible to other agents (a store fence) before returning.
/// Targets must not overlap sources or each other.
void writeRows(const std::vector<RowWrite> &writes, std::size_t bytes);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_ROWWRITES_H
