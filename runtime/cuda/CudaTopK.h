//===- CudaTopK.h - The compiled top-k kernel on a CUDA device --*- C++ -*-===//
//
// Internal to the CUDA tiers: a loaded top-k step (one dhs.topk launch,
// examples/topk_step.mlir) with its argument buffers; Runtime::topK uploads
// the scores and history lengths, launches the kernel on the tiers' stream
// and downloads the selected rows. Lanes past the batch get a history of 0
// (they select nothing). Untested on a GPU so far (the kernel test checks
// the kernel against the host selection, core/TopK.h).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDATOPK_H
#define DHS_RUNTIME_CUDA_CUDATOPK_H

#include "runtime/core/Manifest.h"
#include "runtime/core/TopK.h"
#include "runtime/cuda/CudaQueue.h"
#include "runtime/cuda/CudaResources.h"
#include "runtime/cuda/CudaStep.h"

#include <memory>

namespace dhs::runtime::cuda_detail {

/// A loaded top-k step.
class CudaTopK {
public:
  CudaTopK(const Manifest &manifest, std::shared_ptr<CudaQueue> queue);
  ~CudaTopK();

  /// Runs the kernel for `batch` lanes (1 .. B, history lengths in 0 .. N:
  /// the Runtime checked them): scores [batch][Q][N] in, rows
  /// [batch][Q][K] out, waiting for them. Throws Error when a copy, the
  /// launch or the status word fails.
  void run(std::int64_t batch, const float *scores, const std::int32_t *historyLen,
           std::int32_t *rows);

private:
  std::shared_ptr<CudaQueue> queue_;
  TopKShape shape_;
  std::unique_ptr<CudaStep> step_;
  std::unique_ptr<DeviceBuffer> scores_, lengths_, rows_, status_;
  CudaStepBuffers launch_;
};

} // namespace dhs::runtime::cuda_detail

#endif // DHS_RUNTIME_CUDA_CUDATOPK_H
