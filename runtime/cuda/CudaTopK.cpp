//===- CudaTopK.cpp - The compiled top-k kernel on a CUDA device ----------===//

#include "runtime/cuda/CudaTopK.h"

#include "runtime/core/Error.h"
#include "runtime/cuda/CudaResources.h"

#include <algorithm>
#include <vector>

namespace dhs::runtime::cuda_detail {

CudaTopK::CudaTopK(const Manifest &manifest, std::shared_ptr<CudaQueue> queue)
    : queue_(std::move(queue)), shape_(topKShapeOf(manifest)) {
  step_ = std::make_unique<CudaStep>(manifest, queue_->device().ordinal);
  queue_->makeCurrent();
  const std::size_t positions = static_cast<std::size_t>(shape_.batch * shape_.positions);
  scores_ = std::make_unique<DeviceBuffer>(positions * static_cast<std::size_t>(shape_.scored) * 4,
                                           "the top-k step's scores");
  lengths_ = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(shape_.batch) * 4,
                                            "the top-k step's history lengths");
  rows_ = std::make_unique<DeviceBuffer>(positions * static_cast<std::size_t>(shape_.k) * 4,
                                         "the top-k step's rows");
  status_ = std::make_unique<DeviceBuffer>(sizeof(std::uint32_t), "the top-k status word");
  launch_.arguments.assign(manifest.arguments.size(), 0);
  launch_.arguments[static_cast<std::size_t>(manifest.argument(ArgumentRole::Scores).index)] =
      scores_->get();
  launch_.arguments[static_cast<std::size_t>(manifest.argument(ArgumentRole::HistoryLen).index)] =
      lengths_->get();
  launch_.arguments[static_cast<std::size_t>(manifest.argument(ArgumentRole::RowIds).index)] =
      rows_->get();
  launch_.status = status_->get();
}

CudaTopK::~CudaTopK() { queue_->drain(); }

void CudaTopK::run(std::int64_t batch, const float *scores, const std::int32_t *historyLen,
                   std::int32_t *rows) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce();
  CUstream stream = queue_->stream();
  const std::size_t lanes = static_cast<std::size_t>(batch);
  const std::size_t perLane = static_cast<std::size_t>(shape_.positions);
  // Lanes past the batch: no history, nothing selected (their scores are
  // never read).
  std::vector<std::int32_t> lengths(static_cast<std::size_t>(shape_.batch), 0);
  std::copy_n(historyLen, lanes, lengths.begin());
  cuda.check(cuda.memcpyHtoDAsync(scores_->get(), scores,
                                  lanes * perLane * static_cast<std::size_t>(shape_.scored) * 4,
                                  stream),
             "uploading top-k scores");
  cuda.check(cuda.memcpyHtoDAsync(lengths_->get(), lengths.data(), lengths.size() * 4, stream),
             "uploading top-k history lengths");
  step_->runAndWait(launch_, *queue_,
                    {{rows, rows_->get(), lanes * perLane * static_cast<std::size_t>(shape_.k) * 4,
                      "top-k rows"}},
                    "top-k");
}

} // namespace dhs::runtime::cuda_detail
