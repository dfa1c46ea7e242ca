//===- CudaAccept.h - The compiled accept kernel on a CUDA device -*- C++ -*-===//
//
// Internal to the CUDA tiers: a loaded accept step (one dhs.accept launch,
// examples/accept_step.mlir or accept_sampling_step.mlir) with its argument
// buffers; a verify step's acceptance uploads the drafts, distributions and
// seeds, launches the kernel on the tiers' stream and downloads the results.
// Lanes past the batch get drafts of -1 and zero distributions. Untested on
// a GPU so far (the CPU mirror, core/Accept.h, is what the tests check).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDAACCEPT_H
#define DHS_RUNTIME_CUDA_CUDAACCEPT_H

#include "runtime/core/Accept.h"
#include "runtime/core/Manifest.h"
#include "runtime/cuda/CudaQueue.h"
#include "runtime/cuda/CudaStep.h"

#include <memory>
#include <vector>

namespace dhs::runtime::cuda_detail {

/// A loaded accept step.
class CudaAccept {
public:
  CudaAccept(const Manifest &manifest, std::shared_ptr<CudaQueue> queue);
  ~CudaAccept();

  /// True when the kernel takes `problem` (its rule, gamma and vocabulary;
  /// at most its batch).
  bool fits(const AcceptProblem &problem) const;
  /// Runs the kernel and waits for accepted[batch] and next[batch]. Throws
  /// Error when a copy, the launch or the status word fails.
  void run(const AcceptProblem &problem, std::int32_t *accepted, std::int32_t *next);

private:
  CUdeviceptr argument(ArgumentRole role) const;

  std::shared_ptr<CudaQueue> queue_;
  Manifest manifest_;
  std::unique_ptr<CudaStep> step_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  std::unique_ptr<DeviceBuffer> arena_, status_;
  CudaStepBuffers launch_;
  AcceptRule rule_ = AcceptRule::Greedy;
  std::int64_t batch_ = 0, gamma_ = 0, vocab_ = 0;
};

} // namespace dhs::runtime::cuda_detail

#endif // DHS_RUNTIME_CUDA_CUDAACCEPT_H
