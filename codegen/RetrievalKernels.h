//===- RetrievalKernels.h - fetch and union-of-missing-rows kernels -*- C++ -*-===//

#ifndef DHS_CODEGEN_RETRIEVALKERNELS_H
#define DHS_CODEGEN_RETRIEVALKERNELS_H

#include "dialects/DhsOps.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <array>
#include <string>

namespace mlir::dhs {

/// A kernel to launch: its grid, block and dynamic shared memory.
struct KernelGeometry {
  std::array<int64_t, 3> grid{1, 1, 1};
  std::array<int64_t, 3> block{1, 1, 1};
  int64_t dynamicSharedBytes = 0;
};

/// Builds the kernel of a `dhs.fetch` (arguments: rows, [slots],
/// history_start, history_len, host tier, staging, step status) at the
/// builder's insertion point inside a gpu.module; returns it and sets
/// `geometry`. Emits an error on `op` for shapes it cannot handle.
FailureOr<gpu::GPUFuncOp> buildFetchKernel(OpBuilder &builder, FetchOp op, StringRef name,
                                           KernelGeometry &geometry);

/// Builds the kernel of a `dhs.union_missing` (arguments: rows, slots,
/// missing, remap): one CTA per request inserts its missing rows into an
/// open-addressing table in shared memory, so each distinct row gets one
/// owner (the selection that claimed it first); `missing` lists each row at
/// its owner's position, and `remap` points every missing selection there.
FailureOr<gpu::GPUFuncOp> buildUnionMissingKernel(OpBuilder &builder, UnionMissingOp op,
                                                  StringRef name, KernelGeometry &geometry);

/// Builds the kernel of a `dhs.resolve` (arguments: rows, the pool's
/// residency map, history_start, history_len, slots, the pool's replacement
/// state and step log, step status): a thread per selection looks its host
/// row up in the map; row ids outside the history (or host rows outside the
/// map) are reported (status bit 1) and resolve to -1. With a non-empty log,
/// hits stamp the replacement state (an atomic exchange each) and each
/// block appends its first hits and misses to the log at bases one thread
/// reserves (shared-memory counters, one global atomic per list and block).
FailureOr<gpu::GPUFuncOp> buildResolveKernel(OpBuilder &builder, ResolveOp op, StringRef name,
                                             KernelGeometry &geometry);

/// Builds the kernel of a `dhs.place_rows` (arguments: the HBM tier, the
/// host tier, the residency map, rows, slots, the replacement state, the
/// step log, step status): threads copy the placed rows 16 bytes at a time
/// from the mapped host store into their slots, and each row's first chunk
/// records its slot (or -1) in the map and stamps a filled slot's
/// replacement state with the log's step.
FailureOr<gpu::GPUFuncOp> buildPlaceRowsKernel(OpBuilder &builder, PlaceRowsOp op, StringRef name,
                                               KernelGeometry &geometry);

} // namespace mlir::dhs

#endif // DHS_CODEGEN_RETRIEVALKERNELS_H
