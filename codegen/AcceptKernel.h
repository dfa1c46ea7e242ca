//===- AcceptKernel.h - speculative acceptance kernel -----------*- C++ -*-===//

#ifndef DHS_CODEGEN_ACCEPTKERNEL_H
#define DHS_CODEGEN_ACCEPTKERNEL_H

#include "codegen/RetrievalKernels.h"

namespace mlir::dhs {

/// Builds the kernel of a greedy `dhs.accept` (arguments: draft, target,
/// seeds, step, accepted, next_token): one CTA per request finds the
/// target's argmax at each of the gamma + 1 positions (ties to the lower
/// token id), accepts drafts while they match, and writes the count and the
/// target's token at the first mismatch (or the bonus token). Rejection
/// sampling is refused with an error until it has a kernel.
FailureOr<gpu::GPUFuncOp> buildAcceptKernel(OpBuilder &builder, AcceptOp op,
                                            StringRef name,
                                            KernelGeometry &geometry);

} // namespace mlir::dhs

#endif // DHS_CODEGEN_ACCEPTKERNEL_H
