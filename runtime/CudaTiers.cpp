//===- CudaTiers.cpp - The KV tiers on a CUDA device ----------------------===//

#include "runtime/Error.h"
#include "runtime/Tiers.h"

namespace dhs::runtime {

std::unique_ptr<TierBackend> makeCudaTiers(const TierLayout &layout, const Manifest &manifest,
                                           int ordinal) {
  throw Error("the CUDA backend of the step executor is not built yet");
}

} // namespace dhs::runtime
