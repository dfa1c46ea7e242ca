//===- StepPlan.h - What a compiled attention step runs per layer -*- C++ -*-===//
//
// A compiled attention step is either one layer's step, which the runtime
// replays for every layer of the model (one step per layer index of a group
// pool on CUDA), or a whole-model step as dhs-compile makes it from
// examples/glm5.mlir: every layer group's pool, selections and slots, every
// layer's queries and output, and the launches of all layers in order over
// one staging arena planned across the groups (dhs-plan-staging), a group's
// miss plan fetched once for all its layers. The plan says, per layer group,
// which arguments are its pool, selections, slots and window ring, and, per
// layer, its group, the layer of the pool's token it reads, its queries and
// output, and the launches an engine's attend of that layer runs: the
// group's retrieval launches before its first layer's attention belong to
// that layer, a split attention's combine to its layer.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_STEPPLAN_H
#define DHS_RUNTIME_CORE_STEPPLAN_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dhs::runtime {

struct Manifest;

/// The arguments of one layer group of a step.
struct StepGroupPlan {
  int pool = -1;                ///< argument index of its kv_pool
  int rowIds = -1;              ///< its selections [B, Q, K]
  int slots = -1;               ///< their slots [B, Q, K]
  int windowRing = -1;          ///< its window ring [B, R, layers, row bytes] (-1: none)
  /// Its selections' write-back ring entries [B, Q, K], as its launches
  /// (resolve, fetch, attention) take them (-1: none does).
  int writeBack = -1;
  std::int64_t poolLayers = 1;  ///< layers per token of its pool
  std::int32_t firstLayer = 0;  ///< its first layer in the plan's layers
  std::int32_t layers = 0;      ///< its layers (attention launches on its pool)
};

/// One layer of a step: what an attend of it runs.
struct StepLayerPlan {
  std::int32_t group = 0;          ///< its group in the plan's groups
  std::int64_t poolLayer = 0;      ///< the layer of the pool's token it reads
  int queries = -1;                ///< argument index of its queries
  int output = -1;                 ///< argument index of its output
  std::size_t firstLaunch = 0;     ///< its launches: [firstLaunch, endLaunch)
  std::size_t endLaunch = 0;       ///< of the manifest's launches
  std::size_t attentionLaunch = 0; ///< its attention launch
  float softmaxScale = 0.0f;       ///< its attention's scale
};

/// The layers and groups of a compiled attention step.
struct StepPlan {
  int historyStart = -1;              ///< argument index of history_start
  int historyLen = -1;                ///< argument index of history_len
  int windowTokens = -1;              ///< argument index of window_tokens (-1: none)
  std::vector<StepGroupPlan> groups;  ///< in launch order
  std::vector<StepLayerPlan> layers;  ///< in launch order: groups one after another

  /// True for a step of several layers (a whole-model step): the runtime
  /// runs its layers as they are; a step of one layer is replayed per layer.
  bool wholeModel() const { return layers.size() > 1; }
  /// The number of launches a layer's attend runs.
  std::size_t launchCount(std::size_t layer) const {
    return layers[layer].endLaunch - layers[layer].firstLaunch;
  }
};

/// The plan of a parsed attention step (Manifest::hasAttention()). Throws
/// Error naming the manifest and the launch when its launches do not form
/// layers of groups: an attention launch without a pool, queries or output;
/// a group's layers split by another group's, or (in a step of several
/// layers) not reading its pool's layers 0, 1, ... in order; two layers
/// writing one output; a launch of a layer's segment that reads another
/// group's pool or selections; launches after the last attention.
StepPlan planStep(const Manifest &manifest);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_STEPPLAN_H
