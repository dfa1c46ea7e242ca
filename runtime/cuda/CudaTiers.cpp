//===- CudaTiers.cpp - The KV tiers on a CUDA device ----------------------===//
//
// Builds the CUDA backend's tiers from their parts, all ordered on one stream
// (CudaQueue): the pools and the device residency state (CudaStorage,
// CudaPlacement), the draft and window rings (CudaRings), and the runner of
// decode steps (CudaStepRunner, with CUDA graphs in CudaGraph.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/StepPlan.h"
#include "runtime/core/Tiers.h"
#include "runtime/cuda/CudaRings.h"
#include "runtime/cuda/CudaStepRunner.h"
#include "runtime/cuda/CudaStorage.h"

namespace dhs::runtime {

using namespace cuda_detail;

Tiers makeCudaTiers(const TierLayout &layout, const std::vector<const Manifest *> &stepsByLayer,
                    int ordinal) {
  if (stepsByLayer.empty())
    throw Error("the CUDA tiers need at least one compiled step");
  // A whole-model step, or one step per layer index of a group pool.
  const bool wholeModel = planStep(*stepsByLayer.front()).wholeModel();
  const std::size_t expected =
      layout.layersPerPool > 1 && !wholeModel ? static_cast<std::size_t>(layout.layersPerPool) : 1;
  if (stepsByLayer.size() != expected)
    throw Error("the CUDA tiers over pools of " + std::to_string(layout.layersPerPool) +
                " layers need " + std::to_string(expected) +
                " compiled steps (one per layer index), got " +
                std::to_string(stepsByLayer.size()));
  std::vector<std::unique_ptr<CudaStep>> steps;
  bool resolveLaunches = false;
  for (std::size_t i = 0; i < stepsByLayer.size(); ++i) {
    const Manifest &step = *stepsByLayer[i];
    const ProblemShape shape = problemShapeFromManifest(step);
    if (expected > 1 && shape.layer != static_cast<std::int64_t>(i))
      throw Error("the step " + step.directory + " reads layer " + std::to_string(shape.layer) +
                  " of its group's pool, expected layer " + std::to_string(i));
    steps.push_back(std::make_unique<CudaStep>(step, ordinal));
    for (const Launch &launch : step.launches)
      resolveLaunches = resolveLaunches || launch.kind == abi::LaunchKind::Resolve;
  }
  const Manifest &manifest = *stepsByLayer.front();
  auto queue = std::make_shared<CudaQueue>(steps.front()->device());
  // The step log: room for every selection of a group's step (resolving
  // steps).
  const std::size_t logWords = resolveLaunches
                                   ? StepLogLayout::words(static_cast<std::size_t>(
                                         problemShapeFromManifest(manifest).selectionCount()))
                                   : StepLogLayout::kHeader;
  auto storage = std::make_unique<CudaStorage>(layout, queue, logWords);
  auto rings = std::make_unique<CudaRings>(layout, queue);
  auto runner = std::make_unique<CudaStepRunner>(layout, queue, std::move(steps), manifest,
                                                 resolveLaunches, *storage, *rings);
  return Tiers{std::move(storage), std::move(rings), std::move(runner)};
}

} // namespace dhs::runtime
