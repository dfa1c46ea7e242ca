//===- ProblemShape.cpp - The shape of one attention step -----------------===//

#include "runtime/core/ProblemShape.h"

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/StepPlan.h"

#include <cmath>
#include <string>

namespace dhs::runtime {

ProblemShape problemShapeFromManifest(const Manifest &manifest) {
  // The first layer's arguments and attention; the other layers of a
  // whole-model step have the same shapes (the parser checked them).
  const StepPlan plan = planStep(manifest);
  const StepLayerPlan &first = plan.layers.front();
  const StepGroupPlan &group = plan.groups.front();
  auto argument = [&](int index) -> const Argument & {
    return manifest.arguments[static_cast<std::size_t>(index)];
  };
  const Argument &queries = argument(first.queries);
  const Argument &rowIds = argument(group.rowIds);
  const KvPoolInfo &pool = argument(group.pool).pool;
  ProblemShape shape;
  shape.batch = queries.shape.at(0);
  shape.queries = queries.shape.at(1);
  shape.heads = queries.shape.at(2);
  shape.topk = rowIds.shape.at(2);
  if (pool.format == "gqa") {
    shape.format = RowFormat::Gqa;
    shape.gqa = pool.gqa;
  } else {
    shape.format = rowFormatInfo(pool.format).format;
  }
  shape.rowBytes = pool.rowBytes;
  shape.layers = pool.layers;
  shape.rowElems = pool.layers * pool.rowBytes / 2;
  shape.qkDim = pool.qkDim;
  shape.vDim = pool.vDim;
  shape.hbmSlots = pool.hbmSlots;
  shape.hostRows = pool.hostRows;
  const Launch &attention = manifest.launches[first.attentionLaunch];
  shape.softmaxScale = attention.softmaxScale;
  shape.layer = attention.layer;
  shape.windowSize = attention.windowSize;
  for (const StepLayerPlan &layer : plan.layers)
    if (manifest.launches[layer.attentionLaunch].windowSize != shape.windowSize)
      throw Error("manifest " + manifest.path + ": launches disagree on the sliding window");
  if (group.windowRing >= 0)
    shape.windowRing = argument(group.windowRing).shape.at(1);
  if ((shape.windowSize > 0) != (shape.windowRing > 0))
    throw Error("manifest " + manifest.path + ": a sliding window needs its size and its ring");
  return shape;
}

void checkProblemShape(const ProblemShape &s) {
  if (s.batch <= 0 || s.queries <= 0 || s.heads <= 0 || s.topk <= 0)
    throw InputError("problem shape B=" + std::to_string(s.batch) +
                     " Q=" + std::to_string(s.queries) + " H=" + std::to_string(s.heads) +
                     " K=" + std::to_string(s.topk) + " has an empty dimension");
  if (s.format == RowFormat::Gqa && (s.gqa.kvHeads < 1 || s.heads % s.gqa.kvHeads != 0))
    throw InputError(std::to_string(s.heads) + " query heads cannot share " +
                     std::to_string(s.gqa.kvHeads) +
                     " KV heads evenly (GQA needs query heads divisible by KV heads)");
  const RowFormatInfo format =
      s.format == RowFormat::Gqa
          ? RowFormatInfo{RowFormat::Gqa, "gqa", s.gqa.rowBytes(), s.gqa.headDim, s.gqa.headDim}
          : rowFormatInfo(s.format);
  if (s.rowBytes != format.rowBytes || s.qkDim != format.qkDim || s.vDim != format.vDim ||
      s.layers < 1 || s.layer < 0 || s.layer >= s.layers || s.rowElems * 2 != s.layers * s.rowBytes)
    throw InputError(std::string("row layout (format ") + format.name + ", row_bytes " +
                     std::to_string(s.rowBytes) + ", layer " + std::to_string(s.layer) + " of " +
                     std::to_string(s.layers) + ", row_elems " + std::to_string(s.rowElems) +
                     ", qk_dim " + std::to_string(s.qkDim) + ", v_dim " + std::to_string(s.vDim) +
                     ") is inconsistent");
  if (!std::isfinite(s.softmaxScale))
    throw InputError("softmax_scale is not finite");
  if (s.windowSize < 0 || s.windowRing < 0 ||
      (s.windowSize > 0 && s.windowRing < s.windowSize + s.queries - 1))
    throw InputError("a window ring of " + std::to_string(s.windowRing) + " tokens cannot hold a " +
                     std::to_string(s.windowSize) + "-token window for " +
                     std::to_string(s.queries) + " query positions");
}

} // namespace dhs::runtime
