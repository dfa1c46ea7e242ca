//===- CudaAccept.cpp - The compiled accept kernel on a CUDA device -------===//

#include "runtime/cuda/CudaAccept.h"

#include "runtime/core/Error.h"
#include "runtime/cuda/CudaResources.h"

#include <algorithm>
#include <cstring>

namespace dhs::runtime::cuda_detail {

CudaAccept::CudaAccept(const Manifest &manifest, std::shared_ptr<CudaQueue> queue)
    : queue_(std::move(queue)), manifest_(manifest) {
  const CudaDriver &cuda = driver();
  const Argument &draft = manifest.argument(ArgumentRole::DraftTokens);
  const Argument &target = manifest.argument(ArgumentRole::TargetProbs);
  batch_ = draft.shape[0];
  gamma_ = draft.shape[1];
  vocab_ = target.shape[2];
  rule_ = std::any_of(manifest.arguments.begin(), manifest.arguments.end(),
                      [](const Argument &a) { return a.role == ArgumentRole::DraftProbs; })
              ? AcceptRule::RejectionSampling
              : AcceptRule::Greedy;
  step_ = std::make_unique<CudaStep>(manifest, queue_->device().ordinal);
  queue_->makeCurrent();
  launch_.arguments.assign(manifest.arguments.size(), 0);
  for (const Argument &arg : manifest.arguments) {
    const std::size_t bytes = arg.bytes();
    buffers_.push_back(std::make_unique<DeviceBuffer>(
        std::max<std::size_t>(bytes, 16), "accept step argument " + std::to_string(arg.index)));
    cuda.check(cuda.memsetD32(buffers_.back()->get(), 0, std::max<std::size_t>(bytes, 16) / 4),
               "clearing an accept step argument");
    launch_.arguments[static_cast<std::size_t>(arg.index)] = buffers_.back()->get();
  }
  arena_ = std::make_unique<DeviceBuffer>(
      static_cast<std::size_t>(std::max<std::int64_t>(manifest.arenaBytes, 16)),
      "the accept step's arena");
  status_ = std::make_unique<DeviceBuffer>(sizeof(std::uint32_t), "the accept status word");
  launch_.arena = arena_->get();
  launch_.status = status_->get();
}

CudaAccept::~CudaAccept() { queue_->drain(); }

CUdeviceptr CudaAccept::argument(ArgumentRole role) const {
  return launch_.arguments[static_cast<std::size_t>(manifest_.argument(role).index)];
}

bool CudaAccept::fits(const AcceptProblem &problem) const {
  return problem.rule == rule_ && problem.gamma == gamma_ && problem.vocab == vocab_ &&
         problem.batch <= batch_;
}

void CudaAccept::run(const AcceptProblem &problem, std::int32_t *accepted, std::int32_t *next) {
  const CudaDriver &cuda = driver();
  queue_->makeCurrent();
  queue_->quiesce();
  CUstream stream = queue_->stream();
  const std::size_t n = static_cast<std::size_t>(problem.batch);
  const std::size_t V = static_cast<std::size_t>(vocab_), G = static_cast<std::size_t>(gamma_);
  // Lanes past the batch: no drafts (-1), zero distributions.
  std::vector<std::int32_t> drafts(static_cast<std::size_t>(batch_) * G, -1);
  std::copy_n(problem.drafts, n * G, drafts.begin());
  std::vector<std::int64_t> seeds(static_cast<std::size_t>(batch_), 0);
  for (std::size_t b = 0; b < n; ++b)
    seeds[b] = static_cast<std::int64_t>(problem.seeds[b]);
  const std::int64_t counter = static_cast<std::int64_t>(problem.step);
  auto upload = [&](ArgumentRole role, const void *data, std::size_t bytes, std::size_t total) {
    const CUdeviceptr at = argument(role);
    cuda.check(cuda.memcpyHtoDAsync(at, data, bytes, stream), "uploading accept inputs");
    if (total > bytes)
      cuda.check(cuda.memsetD32Async(at + bytes, 0, (total - bytes) / 4, stream),
                 "clearing accept inputs");
  };
  upload(ArgumentRole::DraftTokens, drafts.data(), drafts.size() * 4, drafts.size() * 4);
  upload(ArgumentRole::TargetProbs, problem.target, n * (G + 1) * V * 4,
         static_cast<std::size_t>(batch_) * (G + 1) * V * 4);
  if (rule_ == AcceptRule::RejectionSampling)
    upload(ArgumentRole::DraftProbs, problem.draftProbs, n * G * V * 4,
           static_cast<std::size_t>(batch_) * G * V * 4);
  upload(ArgumentRole::Seeds, seeds.data(), seeds.size() * 8, seeds.size() * 8);
  upload(ArgumentRole::StepCounter, &counter, 8, 8);
  step_->runAndWait(launch_, *queue_,
                    {{accepted, argument(ArgumentRole::Accepted), n * 4, "accepted counts"},
                     {next, argument(ArgumentRole::NextToken), n * 4, "next tokens"}},
                    "accept");
}

} // namespace dhs::runtime::cuda_detail
