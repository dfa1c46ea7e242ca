//===- StepPlan.cpp - What a compiled attention step runs per layer -------===//

#include "runtime/core/StepPlan.h"

#include "runtime/core/Error.h"
#include "runtime/core/LaunchForms.h"
#include "runtime/core/Manifest.h"

#include <algorithm>
#include <optional>
#include <string>

namespace dhs::runtime {

namespace {

/// The argument a launch passes with a role (-1: none); several different
/// arguments of one role are an error.
int argumentOf(const Manifest &manifest, const Launch &launch, ArgumentRole role,
               const std::string &where) {
  int found = -1;
  for (const LaunchParam &param : launch.params) {
    if (param.source != ParamSource::Argument ||
        manifest.arguments[static_cast<std::size_t>(param.argumentIndex)].role != role)
      continue;
    if (found >= 0 && found != param.argumentIndex)
      throw Error("manifest " + manifest.path + ": " + where + " takes two " + abi::name(role) +
                  " arguments (" + std::to_string(found) + " and " +
                  std::to_string(param.argumentIndex) + ")");
    found = param.argumentIndex;
  }
  return found;
}

/// The selection argument (row ids or slots: `role`) of attention launch
/// `i`: its own argument, or where it reads a list a share_rows launch
/// ordered (a scratch buffer), that launch's argument (-1: none).
int selectionOf(const Manifest &manifest, std::size_t i, ArgumentRole role,
                const std::string &where) {
  const Launch &launch = manifest.launches[i];
  int found = argumentOf(manifest, launch, role, where);
  if (found >= 0)
    return found;
  auto paramRole = role == ArgumentRole::RowIds ? abi::ParamRole::RowIds : abi::ParamRole::Slots;
  auto orderedRole =
      role == ArgumentRole::RowIds ? abi::ParamRole::SharedRows : abi::ParamRole::SharedSlots;
  for (const LaunchParam &param : launch.params) {
    if (param.role != paramRole || param.source != ParamSource::Scratch)
      continue;
    for (std::size_t j = i; j-- > 0;) {
      const Launch &earlier = manifest.launches[j];
      if (earlier.kind != abi::LaunchKind::ShareRows)
        continue;
      for (const LaunchParam &ordered : earlier.params)
        if (ordered.role == orderedRole && ordered.source == ParamSource::Scratch &&
            ordered.offset == param.offset)
          return argumentOf(manifest, earlier, role, where);
    }
  }
  return -1;
}

/// The pool argument a launch views (-1: none).
int poolOf(const Manifest &manifest, const Launch &launch, const std::string &where) {
  int found = -1;
  for (const LaunchParam &param : launch.params) {
    if (param.source == ParamSource::Argument || param.source == ParamSource::Status ||
        param.source == ParamSource::GroupBindings || param.source == ParamSource::Scratch)
      continue;
    if (found >= 0 && found != param.argumentIndex)
      throw Error("manifest " + manifest.path + ": " + where + " views two pools (arguments " +
                  std::to_string(found) + " and " + std::to_string(param.argumentIndex) + ")");
    found = param.argumentIndex;
  }
  return found;
}

/// The band of rows missing a launch runs in, in words.
std::string bandOf(const Launch &launch) {
  std::vector<double> lines;
  if (launch.missingAbove >= 0.0)
    lines.push_back(launch.missingAbove);
  if (launch.missingUpTo < 1.0)
    lines.push_back(launch.missingUpTo);
  return describeForm(lines, launch.missingUpTo);
}

/// The index of the only argument of `role`, or -1; several are an error.
int singleArgument(const Manifest &manifest, ArgumentRole role) {
  int found = -1;
  for (const Argument &arg : manifest.arguments)
    if (arg.role == role) {
      if (found >= 0)
        throw Error("manifest " + manifest.path + ": arguments " + std::to_string(found) +
                    " and " + std::to_string(arg.index) + " are both " + abi::name(role) +
                    ": a step has one");
      found = arg.index;
    }
  return found;
}

} // namespace

StepPlan planStep(const Manifest &manifest) {
  StepPlan plan;
  plan.historyStart = singleArgument(manifest, ArgumentRole::HistoryStart);
  plan.historyLen = singleArgument(manifest, ArgumentRole::HistoryLen);
  plan.windowTokens = singleArgument(manifest, ArgumentRole::WindowTokens);
  auto fail = [&](const std::string &message) -> void {
    throw Error("manifest " + manifest.path + ": " + message);
  };
  auto launchName = [](std::size_t i) { return "launches[" + std::to_string(i) + "]"; };
  // A selection's shared-prefix order is the step's own work (dhs.share_rows
  // into scratch buffers): nothing outside the step could fill it.
  for (const Argument &arg : manifest.arguments)
    if (arg.role == ArgumentRole::SharedRows || arg.role == ArgumentRole::SharedSlots ||
        arg.role == ArgumentRole::SharedTiles)
      fail("argument " + std::to_string(arg.index) + " is a " + abi::name(arg.role) +
           " list, which only the step can compute (dhs.share_rows into dhs.scratch buffers, "
           "as dhs-compile --share-tiles does)");

  const std::vector<Launch> &launches = manifest.launches;
  std::size_t segment = 0; // first launch of the next layer
  // The layer's forms so far where it has several (launches with a band of
  // missing rows, LaunchForms.h): the first, and the one its next must
  // continue.
  std::optional<std::size_t> firstForm, lastForm;
  for (std::size_t i = 0; i < launches.size(); ++i) {
    const Launch &launch = launches[i];
    // (An unclustered launch of a shared-prefix layer's requests works for
    // the clustered one after it, which defines the layer.)
    if (!launch.isAttention() || launch.unsharedRequests)
      continue;
    const std::string where = launchName(i) + " (" + abi::name(launch.kind) + ")";
    // A layer's forms: attentions of adjacent bands from 0 up to 1, the last
    // of which defines the layer; the launches between them are its.
    if (lastForm) {
      const Launch &before = launches[*lastForm];
      if (launch.missingAbove != before.missingUpTo ||
          argumentOf(manifest, launch, ArgumentRole::Output, where) !=
              argumentOf(manifest, before, ArgumentRole::Output, launchName(*lastForm)))
        fail(launchName(*lastForm) + " runs for " + bandOf(before) + ", and " + where +
             ", the next attention, is not its layer's form for the rows above (" + bandOf(launch) +
             ")");
      const Launch &first = launches[*firstForm];
      if (launch.layer != first.layer || launch.softmaxScale != first.softmaxScale ||
          argumentOf(manifest, launch, ArgumentRole::Queries, where) !=
              argumentOf(manifest, first, ArgumentRole::Queries, launchName(*firstForm)) ||
          poolOf(manifest, launch, where) != poolOf(manifest, first, launchName(*firstForm)))
        fail(where + " and " + launchName(*firstForm) +
             ", forms of one layer, differ in their layer, scale, queries or pool");
    } else if (launch.missingAbove >= 0.0) {
      fail(where + " runs for " + bandOf(launch) + " without a form of its layer below");
    }
    if (launch.missingUpTo < 1.0) {
      if (!firstForm)
        firstForm = i;
      lastForm = i;
      continue;
    }
    firstForm.reset();
    lastForm.reset();
    StepGroupPlan group;
    group.pool = poolOf(manifest, launch, where);
    group.rowIds = selectionOf(manifest, i, ArgumentRole::RowIds, where);
    group.slots = selectionOf(manifest, i, ArgumentRole::Slots, where);
    group.windowRing = argumentOf(manifest, launch, ArgumentRole::WindowRing, where);
    // The ring entries: the attention's, or a staged one's fetch's (a
    // launch of its segment before it).
    group.writeBack = argumentOf(manifest, launch, ArgumentRole::WriteBack, where);
    for (std::size_t j = segment; group.writeBack < 0 && j < i; ++j)
      group.writeBack = argumentOf(manifest, launches[j], ArgumentRole::WriteBack, launchName(j));
    StepLayerPlan layer;
    layer.queries = argumentOf(manifest, launch, ArgumentRole::Queries, where);
    layer.output = argumentOf(manifest, launch, ArgumentRole::Output, where);
    if (group.pool < 0 || group.rowIds < 0 || group.slots < 0 || layer.queries < 0 ||
        layer.output < 0)
      fail(where + " lacks its pool, selections, slots, queries or output");
    group.poolLayers = manifest.arguments[static_cast<std::size_t>(group.pool)].pool.layers;
    if (group.windowRing >= 0 &&
        manifest.arguments[static_cast<std::size_t>(group.windowRing)].shape.at(2) !=
            group.poolLayers)
      fail(where + "'s window ring holds " +
           std::to_string(manifest.arguments[static_cast<std::size_t>(group.windowRing)]
                              .shape.at(2)) +
           " layers per token, its pool " + std::to_string(group.poolLayers) +
           ": a pool's window ring holds the pool's layers");
    layer.poolLayer = launch.layer;
    layer.softmaxScale = launch.softmaxScale;
    layer.attentionLaunch = i;
    layer.firstLaunch = segment;
    if (layer.poolLayer < 0 || layer.poolLayer >= group.poolLayers)
      fail(where + " reads layer " + std::to_string(layer.poolLayer) + " of a pool of " +
           std::to_string(group.poolLayers) + " layers");

    // Its group: the current one, or a new one.
    auto same = [&](const StepGroupPlan &g) { return g.pool == group.pool; };
    auto known = std::find_if(plan.groups.begin(), plan.groups.end(), same);
    if (known == plan.groups.end()) {
      for (const StepGroupPlan &g : plan.groups)
        if (g.rowIds == group.rowIds || g.slots == group.slots)
          fail(where + " uses the selections or slots of another layer group (pool argument " +
               std::to_string(g.pool) + "): each group has its own");
      group.firstLayer = static_cast<std::int32_t>(plan.layers.size());
      plan.groups.push_back(group);
      known = plan.groups.end() - 1;
    } else if (known != plan.groups.end() - 1) {
      fail(where + " attends over the pool of layer group " +
           std::to_string(known - plan.groups.begin()) +
           " after another group's layers: a step runs its groups one after another");
    } else if (known->rowIds != group.rowIds || known->slots != group.slots ||
               known->windowRing != group.windowRing || known->writeBack != group.writeBack) {
      fail(where + " attends over pool argument " + std::to_string(group.pool) +
           " with other selections, slots, window ring or write-back ring entries than the "
           "group's earlier layers");
    }
    layer.group = static_cast<std::int32_t>(known - plan.groups.begin());
    for (const StepLayerPlan &other : plan.layers)
      if (other.output == layer.output || other.queries == layer.queries)
        fail(where + " takes the queries or output argument of an earlier layer");
    ++known->layers;

    // A split attention's combine belongs to its layer.
    std::size_t end = i + 1;
    while (end < launches.size() && launches[end].kind == abi::LaunchKind::AttentionCombine &&
           argumentOf(manifest, launches[end], ArgumentRole::Output, launchName(end)) ==
               layer.output)
      ++end;
    layer.endLaunch = end;
    // The rest of the segment works for this layer's group.
    for (std::size_t j = layer.firstLaunch; j < end; ++j) {
      if (j == i)
        continue;
      const std::string other = launchName(j) + " (" + abi::name(launches[j].kind) + ")";
      const int pool = poolOf(manifest, launches[j], other);
      const int rows = argumentOf(manifest, launches[j], ArgumentRole::RowIds, other);
      const int slots = argumentOf(manifest, launches[j], ArgumentRole::Slots, other);
      const int entries = argumentOf(manifest, launches[j], ArgumentRole::WriteBack, other);
      if ((pool >= 0 && pool != group.pool) || (rows >= 0 && rows != group.rowIds) ||
          (slots >= 0 && slots != group.slots) ||
          (entries >= 0 && group.writeBack >= 0 && entries != group.writeBack))
        fail(other + " runs before the attention of layer group " + std::to_string(layer.group) +
             " but uses another group's pool, selections or slots");
    }
    plan.layers.push_back(layer);
    segment = end;
    i = end - 1;
  }
  if (lastForm)
    fail(launchName(*lastForm) + " (" + abi::name(launches[*lastForm].kind) + ") runs for " +
         bandOf(launches[*lastForm]) + " without a form of its layer above");
  if (plan.layers.empty())
    fail("no attention launch");
  if (segment != launches.size())
    fail(launchName(segment) + " (" + abi::name(launches[segment].kind) +
         ") comes after the last attention launch: every launch must serve a layer");
  // Several layers: each group reads its pool's layers 0, 1, ... in order.
  if (plan.wholeModel())
    for (const StepGroupPlan &group : plan.groups)
      for (std::int32_t l = 0; l < group.layers; ++l) {
        const StepLayerPlan &layer = plan.layers[static_cast<std::size_t>(group.firstLayer + l)];
        if (layer.poolLayer != l)
          fail(launchName(layer.attentionLaunch) + " reads layer " +
               std::to_string(layer.poolLayer) + " of its group's pool as the group's layer " +
               std::to_string(l) + ": a group's layers read its pool's layers in order");
      }
  return plan;
}

} // namespace dhs::runtime
