//===- AcceptKernel.h - speculative acceptance kernel -----------*- C++ -*-===//

#ifndef DHS_CODEGEN_ACCEPTKERNEL_H
#define DHS_CODEGEN_ACCEPTKERNEL_H

#include "codegen/RetrievalKernels.h"

namespace mlir::dhs {

/// Builds the kernel of a greedy `dhs.accept` (arguments: draft, target,
/// seeds, step, accepted, next_token): one CTA per request finds the
/// target's argmax at each of the gamma + 1 positions (ties to the lower
/// token id), accepts drafts while they match, and writes the count and the
/// target's token at the first mismatch (or the bonus token). With
/// rejection sampling (arguments: draft, target, draft_probs, seeds, step,
/// accepted, next_token) thread 0 accepts draft i when u q(x) < p(x), u a
/// uniform from a counter-based generator keyed by (seed, step, i), and the
/// block samples the next token from norm(max(0, p - q)) at the first
/// rejection, or from p after gamma acceptances (u from counter gamma + n).
FailureOr<gpu::GPUFuncOp> buildAcceptKernel(OpBuilder &builder, AcceptOp op, StringRef name,
                                            KernelGeometry &geometry);

} // namespace mlir::dhs

#endif // DHS_CODEGEN_ACCEPTKERNEL_H
