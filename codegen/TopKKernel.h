//===- TopKKernel.h - top-k selection kernel --------------------*- C++ -*-===//

#ifndef DHS_CODEGEN_TOPKKERNEL_H
#define DHS_CODEGEN_TOPKKERNEL_H

#include "codegen/RetrievalKernels.h"

namespace mlir::dhs {

/// Builds the kernel of a `dhs.topk` (arguments: scores, history_len, rows,
/// status):
/// one CTA per (request, query position). Each visible row gets a 64-bit key
/// (its score's bits made order-preserving, then the complement of its id,
/// so equal scores rank the lower id first); radix passes over 8-bit digits
/// with a shared-memory histogram find the k-th largest key (at most eight;
/// the search ends at the first pass whose chosen bin holds exactly the
/// keys still wanted, so distinct scores rarely need the id bits), the rows
/// at or above it are gathered, sorted (bitonic, descending) and written;
/// slots past the visible rows hold -1. A history longer than the scores
/// sets status bit 16.
FailureOr<gpu::GPUFuncOp> buildTopKKernel(OpBuilder &builder, TopKOp op, StringRef name,
                                          KernelGeometry &geometry);

} // namespace mlir::dhs

#endif // DHS_CODEGEN_TOPKKERNEL_H
