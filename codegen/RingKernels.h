//===- RingKernels.h - draft ring index and row-copy kernels ----*- C++ -*-===//

#ifndef DHS_CODEGEN_RINGKERNELS_H
#define DHS_CODEGEN_RINGKERNELS_H

#include "codegen/RetrievalKernels.h"

namespace mlir::dhs {

/// Builds the kernel of a `dhs.ring_index` (arguments: positions, slots):
/// one CTA per request writes (positions[b] + offset + i) mod window.
FailureOr<gpu::GPUFuncOp> buildRingIndexKernel(OpBuilder &builder, RingIndexOp op, StringRef name,
                                               KernelGeometry &geometry);

/// Builds the kernel of a `dhs.copy_rows` (arguments: src, dst, index,
/// step status): rows of [layers, row bytes] moved 16 bytes per thread and
/// load, scattered through the destination index or gathered through the
/// source index. An index outside its buffer is reported (status bit 8) and
/// its row skipped.
FailureOr<gpu::GPUFuncOp> buildCopyRowsKernel(OpBuilder &builder, CopyRowsOp op, StringRef name,
                                              KernelGeometry &geometry);

} // namespace mlir::dhs

#endif // DHS_CODEGEN_RINGKERNELS_H
