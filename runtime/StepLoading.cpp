//===- StepLoading.cpp - Loading a session's compiled steps ---------------===//
//
// Runtime::loadStep and its kin: a layer group's attention steps indexed by
// the pool layer they read, the tiers' layout, the residency controller's
// config, the backend, the host-memory check, the steps the tiers run
// beside them (draft rings, placement), and the top-k step.
//
//===----------------------------------------------------------------------===//

#include "runtime/Runtime.h"

#include "runtime/core/Checked.h"
#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"
#include "runtime/core/HostMemory.h"
#include "runtime/core/StepPlan.h"
#include "runtime/cuda/CudaDriver.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <thread>

namespace dhs::runtime {

void Runtime::loadStep(const std::string &stepDirectory) {
  loadSteps(std::vector<std::string>{stepDirectory});
}

void Runtime::loadStep(const Manifest &manifest) {
  loadStepManifests(std::vector<Manifest>{manifest});
}

void Runtime::loadSteps(const std::vector<std::string> &stepDirectories) {
  if (tiers_.storage)
    throw StateError("a step is already loaded");
  ManifestLoadOptions options;
  options.requirePtx = config_.backend == BackendKind::Cuda;
  std::vector<Manifest> manifests;
  for (const std::string &directory : stepDirectories)
    manifests.push_back(Manifest::load(directory, options));
  loadStepManifests(manifests);
}

namespace {

/// "0, 1, 3"
std::string joinLayers(const std::vector<std::int64_t> &layers) {
  std::string text;
  for (std::int64_t l : layers)
    text += (text.empty() ? "" : ", ") + std::to_string(l);
  return text;
}

/// Throws unless `other` is `first` compiled for another layer index: the
/// same arguments (the steps of a layer group share every buffer) and the
/// same launches but for the layer they read (a CUDA runner enqueues every
/// layer's launches by the first step's plan and sizes its buffers by it).
void requireSameStep(const Manifest &first, const Manifest &other) {
  auto fail = [&](const std::string &what) {
    throw Error("the step " + other.directory + " differs from the step " + first.directory +
                " in " + what +
                ": a layer group's steps must be one step compiled for each "
                "layer index (only `layer` may differ)");
  };
  if (first.arguments.size() != other.arguments.size())
    fail("its number of arguments");
  for (std::size_t i = 0; i < first.arguments.size(); ++i) {
    const Argument &a = first.arguments[i], &b = other.arguments[i];
    const std::string name =
        std::string("argument ") + std::to_string(i) + " (" + abi::name(a.role) + ")";
    if (a.role != b.role || a.isPool != b.isPool)
      fail(name + "'s role or kind");
    if (!a.isPool && (a.dtype != b.dtype || a.shape != b.shape))
      fail(name + "'s type or shape");
    if (a.isPool && (a.pool.format != b.pool.format || a.pool.layers != b.pool.layers ||
                     a.pool.rowBytes != b.pool.rowBytes || a.pool.hbmSlots != b.pool.hbmSlots ||
                     a.pool.hostRows != b.pool.hostRows))
      fail(name + "'s row format, layers or tier sizes");
  }
  if (first.arenaBytes != other.arenaBytes)
    fail("its staging arena's size");
  if (first.launches.size() != other.launches.size())
    fail("its number of launches");
  for (std::size_t i = 0; i < first.launches.size(); ++i) {
    const Launch &a = first.launches[i], &b = other.launches[i];
    const std::string name = std::string("launch ") + std::to_string(i) + " (" + a.kernel + ")";
    if (a.kind != b.kind || a.direction != b.direction || a.kernel != b.kernel ||
        a.residentKernel != b.residentKernel)
      fail(name + "'s op or kernels");
    if (a.grid != b.grid || a.block != b.block || a.dynamicSharedBytes != b.dynamicSharedBytes)
      fail(name + "'s grid, block or shared memory");
    if (a.softmaxScale != b.softmaxScale || a.windowSize != b.windowSize || a.tile != b.tile ||
        a.unsharedRequests != b.unsharedRequests || a.dependentLaunch != b.dependentLaunch ||
        a.minMissing != b.minMissing || a.missingAbove != b.missingAbove ||
        a.missingUpTo != b.missingUpTo)
      fail(name + "'s attributes");
    if (a.params.size() != b.params.size())
      fail(name + "'s number of parameters");
    for (std::size_t p = 0; p < a.params.size(); ++p) {
      const LaunchParam &x = a.params[p], &y = b.params[p];
      if (x.source != y.source || x.role != y.role || x.argumentIndex != y.argumentIndex ||
          x.offset != y.offset || x.dtype != y.dtype || x.shape != y.shape)
        fail(name + "'s parameter " + std::to_string(p) + " (" + abi::name(x.role) + ")");
    }
  }
}

/// The steps of a layer group by the pool layer their kernels read, and why
/// CUDA cannot run them ("" when it can).
struct StepsByLayer {
  std::vector<const Manifest *> steps; ///< [pool layer], null where none was given
  std::string cudaRefusal;
  /// The steps the CUDA tiers load: one per layer index of a group's pool,
  /// else the first step.
  std::vector<const Manifest *> cudaSteps(const Manifest &first) const {
    if (steps.size() <= 1 || !cudaRefusal.empty())
      return {&first};
    return steps;
  }
  /// The steps the CPU tiers load: those given, by layer index (any of
  /// them runs any layer), or a whole-model step.
  std::vector<const Manifest *> allSteps(const std::vector<Manifest> &manifests) const {
    std::vector<const Manifest *> given;
    for (const Manifest *step : steps)
      if (step)
        given.push_back(step);
    if (given.empty())
      given.push_back(&manifests.front());
    return given;
  }
};

/// Throws unless a whole-model step is the model of the config: its layers
/// in its groups, each group's pool holding the group's layers (a smaller
/// last group's pool only its own).
void requireModelOfConfig(const RuntimeConfig &config, const std::vector<Manifest> &manifests,
                          const StepPlan &plan) {
  const Manifest &manifest = manifests.front();
  if (manifests.size() != 1)
    throw Error("the step " + manifest.directory + " runs " + std::to_string(plan.layers.size()) +
                " layers: a whole-model step is loaded alone");
  const std::int32_t G = config.layersPerGroup;
  const std::int64_t groups = (config.layers + G - 1) / G;
  if (static_cast<std::int64_t>(plan.layers.size()) != config.layers ||
      static_cast<std::int64_t>(plan.groups.size()) != groups)
    throw Error("the step " + manifest.directory + " runs " + std::to_string(plan.layers.size()) +
                " layers in " + std::to_string(plan.groups.size()) +
                " layer groups; the runtime is configured for " + std::to_string(config.layers) +
                " layers in groups of " + std::to_string(G) + " (" + std::to_string(groups) +
                " groups)");
  for (std::size_t g = 0; g < plan.groups.size(); ++g) {
    const StepGroupPlan &group = plan.groups[g];
    const std::int32_t first = static_cast<std::int32_t>(g) * G;
    const std::int32_t layers = std::min(G, config.layers - first);
    if (group.layers != layers || group.poolLayers != layers)
      throw Error("layer group " + std::to_string(g) + " of the step " + manifest.directory +
                  " has " + std::to_string(group.layers) + " layers over a pool of " +
                  std::to_string(group.poolLayers) + " layers per token; the runtime's group " +
                  std::to_string(g) + " has " + std::to_string(layers) +
                  " layers (declare its pool with layers = " + std::to_string(layers) + ")");
  }
}

StepsByLayer indexByLayer(const std::vector<Manifest> &manifests, const KvPoolInfo &pool) {
  const Manifest &manifest = manifests.front();
  StepsByLayer result;
  result.steps.assign(static_cast<std::size_t>(std::max<std::int64_t>(pool.layers, 1)), nullptr);
  for (const Manifest &m : manifests) {
    requireSameStep(manifest, m);
    const std::int64_t layer = problemShapeFromManifest(m).layer;
    if (layer < 0 || layer >= pool.layers)
      throw Error("the step " + m.directory + " reads layer " + std::to_string(layer) +
                  " of a pool of " + std::to_string(pool.layers) + " layers");
    const Manifest *&slot = result.steps[static_cast<std::size_t>(layer)];
    if (slot)
      throw Error("two steps read layer " + std::to_string(layer) + " of the group's pool (" +
                  slot->directory + " and " + m.directory + "): give one step per layer index");
    slot = &m;
  }
  std::vector<std::int64_t> missing;
  for (std::size_t l = 0; l < result.steps.size(); ++l)
    if (!result.steps[l])
      missing.push_back(static_cast<std::int64_t>(l));
  // Pools of one layer: the one step runs every layer. Group pools: on CUDA
  // one step per layer index (the kernels read a fixed layer of the token).
  if (pool.layers > 1 && !missing.empty())
    result.cudaRefusal = "the step's pool holds " + std::to_string(pool.layers) +
                         " layers per token and its kernels read one of them; the CUDA executor "
                         "needs one step per layer index (compile it with layer = 0.." +
                         std::to_string(pool.layers - 1) + "), missing layer " +
                         joinLayers(missing);
  return result;
}

/// The tiers' sizes: the config's, where the step leaves them to run time.
/// A whole-model step's pools hold their groups' layers; one layer's steps
/// read tokens of their pool's layers, so every pool holds that many (a
/// smaller last group's pool padded).
TierLayout tierLayout(const RuntimeConfig &config, const Manifest &manifest,
                      const ProblemShape &shape, const StepPlan &plan) {
  const KvPoolInfo &pool = manifest.argument(ArgumentRole::KvPool).pool;
  std::int64_t slots = config.hbmSlots;
  if (pool.hbmSlots >= 0) {
    if (slots >= 0 && slots != pool.hbmSlots)
      throw Error("the runtime is configured for " + std::to_string(slots) +
                  " HBM slots per layer, the step " + manifest.directory + " fixes " +
                  std::to_string(pool.hbmSlots));
    slots = pool.hbmSlots;
  }
  if (slots < 0)
    throw Error("the step " + manifest.directory +
                " leaves the HBM slot count to run time: configure hbm_slots");
  if (slots > std::numeric_limits<std::int32_t>::max())
    throw Error("HBM slot count " + std::to_string(slots) + " is too large");
  if (pool.hostRows >= 0 && pool.hostRows != config.hostRows)
    throw Error("the runtime is configured for " + std::to_string(config.hostRows) +
                " host rows per layer, the step " + manifest.directory + " fixes " +
                std::to_string(pool.hostRows));
  // A one-layer step's pool holds one layer per token, or a whole layer
  // group (requireModelOfConfig checks a whole-model step's pools).
  if (!plan.wholeModel() && pool.layers != 1 && pool.layers != config.layersPerGroup)
    throw Error("the step " + manifest.directory + "'s pool holds " + std::to_string(pool.layers) +
                " layers per token; the runtime's layer groups have " +
                std::to_string(config.layersPerGroup) + " (a pool holds 1 layer or a group)");
  TierLayout layout;
  layout.layers = config.layers;
  layout.layersPerGroup = config.layersPerGroup;
  // (A whole-model step's first group holds whole groups, whichever pool
  // argument comes first.)
  layout.layersPerPool =
      static_cast<std::int32_t>(plan.wholeModel() ? plan.groups.front().poolLayers : pool.layers);
  layout.lastPoolLayers =
      static_cast<std::int32_t>(plan.wholeModel() ? plan.groups.back().poolLayers : pool.layers);
  layout.hbmSlots = static_cast<std::int32_t>(slots);
  layout.hostRows = config.hostRows;
  layout.rowBytes = pool.rowBytes;
  layout.draftWindow = config.draftWindow;
  layout.windowRing = static_cast<std::int32_t>(shape.windowRing);
  if (config.writeBackRows < 0)
    throw InputError("writeBackRows must be >= 0, got " + std::to_string(config.writeBackRows));
  layout.writeBackRows = config.writeBackRows;
  return layout;
}

/// The residency controller's config: the steps' residency spec
/// (dhs.residency) where they carry one, else the runtime config's.
ResidencyConfig residencyConfig(const RuntimeConfig &config, const TierLayout &layout,
                                const ProblemShape &shape, const std::vector<Manifest> &manifests) {
  ResidencyConfig residency;
  residency.groups = layout.groups();
  residency.hbmSlots = layout.hbmSlots;
  residency.hostRows = layout.hostRows;
  residency.maxRequests = config.maxRequests;
  residency.newestWindow = config.newestWindow;
  // Draft rings live in memory of their own (RingStore), not in the pools.
  // The controller's ring slots hold a verify step's pending rows instead:
  // Q per request and group for a step of Q > 1 positions (Runtime::
  // verifyBegin), reserved at admission like any protected slot.
  residency.draftWindow = shape.queries > 1 ? static_cast<std::int32_t>(shape.queries) : 0;
  residency.hotFloor = config.hotFloor;
  residency.policy = config.policy;
  residency.replacement = config.replacement;
  residency.maxPromotionsPerStep = config.maxPromotionsPerStep;
  // A step that carries a residency spec decides the working set and the
  // hints; all its pools and layer steps must agree.
  const ResidencySpec *spec = nullptr;
  for (const Manifest &m : manifests)
    for (const ResidencySpec &s : m.residency) {
      if (spec && !(*spec == s))
        throw Error("the step " + m.directory +
                    " gives its pools different residency specs "
                    "(newest " +
                    std::to_string(spec->newest) + " vs " + std::to_string(s.newest) + ", floor " +
                    std::to_string(spec->floor) + " vs " + std::to_string(s.floor) + ", " +
                    abi::name(spec->policy) + "/" + abi::name(spec->replacement) + " vs " +
                    abi::name(s.policy) + "/" + abi::name(s.replacement) +
                    "): the runtime keeps one policy for all layer groups");
      spec = &s;
    }
  if (spec) {
    residency.newestWindow = spec->newest;
    residency.hotFloor = spec->floor;
    residency.policy = spec->policy;
    residency.replacement = spec->replacement;
    residency.maxPromotionsPerStep = spec->maxPromotions;
  }
  return residency;
}

} // namespace

bool Runtime::chooseCuda(const std::vector<Manifest> &manifests, const std::string &cudaRefusal) {
  fallbackReason_.clear();
  if (config_.backend == BackendKind::Cuda) {
    if (!cudaRefusal.empty())
      throw Error(cudaRefusal);
    return true;
  }
  if (config_.backend != BackendKind::Auto)
    return false;
  const CudaDriver &driver = CudaDriver::instance();
  const bool ptx = std::all_of(manifests.begin(), manifests.end(), [](const Manifest &m) {
    return std::all_of(m.launches.begin(), m.launches.end(),
                       [](const Launch &launch) { return launch.ptxPresent; });
  });
  if (!driver.available())
    fallbackReason_ = driver.unavailableReason();
  else if (!ptx)
    fallbackReason_ = "the step has no PTX for every kernel";
  else if (!cudaRefusal.empty())
    fallbackReason_ = cudaRefusal;
  return fallbackReason_.empty();
}

void Runtime::loadStepManifests(const std::vector<Manifest> &manifests) {
  if (tiers_.storage)
    throw StateError("a step is already loaded");
  if (manifests.empty())
    throw InputError("no step to load (an empty set of steps)");
  const Manifest &manifest = manifests.front();
  ProblemShape shape = problemShapeFromManifest(manifest);
  StepPlan plan = planStep(manifest);
  // A whole-model step runs as it is; one layer's steps (one per layer index
  // of a group pool) are replayed for every layer.
  StepsByLayer byLayer;
  if (plan.wholeModel())
    requireModelOfConfig(config_, manifests, plan);
  else
    byLayer = indexByLayer(manifests, manifest.argument(ArgumentRole::KvPool).pool);
  const TierLayout layout = tierLayout(config_, manifest, shape, plan);
  const ResidencyConfig residency = residencyConfig(config_, layout, shape, manifests);
  const bool useCuda = chooseCuda(manifests, byLayer.cudaRefusal);
  // Everything this session allocates in host memory in proportion to the
  // step's and the config's sizes, against what this process may use, before
  // any of it is allocated.
  requireHostMemory("loading the step " + manifest.directory,
                    hostMemoryParts(layout, shape, residency, useCuda, manifests));
  auto controller = std::make_unique<ResidencyController>(residency);
  const std::vector<const Manifest *> steps =
      plan.wholeModel() ? std::vector<const Manifest *>{&manifest} : byLayer.cudaSteps(manifest);
  Tiers tiers = useCuda ? makeCudaTiers(layout, steps, config_.device)
                        : makeCpuTiers(layout, byLayer.allSteps(manifests), config_.cpuThreads);
  giveTopKStep(*tiers.runner);
  if (config_.cudaGraphs)
    tiers.runner->setGraphs(true);
  if (config_.checkInvariants)
    tiers.runner->setCountFetches(true);
  // Which groups share retrieval (a union_missing among their launches).
  sharedRetrieval_.assign(static_cast<std::size_t>(layout.groups()), 0);
  for (std::int32_t g = 0; g < layout.groups(); ++g) {
    const StepLayerPlan &first =
        plan.layers[plan.wholeModel() ? static_cast<std::size_t>(layout.firstLayer(g)) : 0];
    for (std::size_t i = first.firstLaunch; i < first.endLaunch; ++i)
      sharedRetrieval_[static_cast<std::size_t>(g)] |=
          manifest.launches[i].kind == abi::LaunchKind::UnionMissing;
  }

  manifest_ = std::make_unique<Manifest>(manifest);
  plan_ = std::move(plan);
  shape_ = shape;
  shape_.hbmSlots = layout.hbmSlots;
  shape_.hostRows = layout.hostRows;
  layout_ = layout;
  controller_ = std::move(controller);
  tiers_ = std::move(tiers);
  try {
    checker_ = std::make_unique<InvariantChecker>(layout_, shape_, *tiers_.storage, *controller_,
                                                  config_.checkInvariants);
    rings_ = std::make_unique<RequestRings>(layout_, *tiers_.rings);
    allocateStepTables();
  } catch (...) {
    // Half loaded, the runtime would pass requireStep (its storage is in)
    // with no rings or tables, and crash at the next call: no step instead.
    rings_.reset();
    checker_.reset();
    tiers_ = Tiers{};
    controller_.reset();
    manifest_.reset();
    throw;
  }
}

void Runtime::allocateStepTables() {
  // (Tests make this, the load's last allocation, fail: the load is undone.)
  if (DHS_FAULT(HostAlloc))
    throw std::bad_alloc();
  const std::size_t B = static_cast<std::size_t>(shape_.batch);
  const std::size_t selections = static_cast<std::size_t>(shape_.selectionCount());
  const std::size_t groups = static_cast<std::size_t>(layout_.groups());
  lanes_.assign(B, -1);
  windowTokensLane_.assign(B, 0);
  historyStart_.assign(B, 0);
  historyLen_.assign(B, 0);
  rowIds_.assign(groups, std::vector<std::int32_t>(selections, -1));
  slots_.assign(groups, std::vector<std::int32_t>(selections, -1));
  hostReads_.assign(groups, {-1, -1});
  selected_.assign(groups, 0);
  deviceSelected_.assign(groups, 0);
  attended_.assign(static_cast<std::size_t>(layout_.layers), 0);
}

std::vector<std::pair<std::string, std::uint64_t>>
Runtime::hostMemoryParts(const TierLayout &layout, const ProblemShape &shape,
                         const ResidencyConfig &residency, bool cuda,
                         const std::vector<Manifest> &manifests) const {
  // Products saturate: a part that does not fit 64 bits is refused as such.
  auto bytes = [](std::initializer_list<std::int64_t> factors) -> std::uint64_t {
    std::optional<std::int64_t> product = tryProduct(factors);
    return product ? static_cast<std::uint64_t>(*product) : UINT64_MAX;
  };
  auto sum = [](std::initializer_list<std::uint64_t> terms) {
    std::uint64_t total = 0;
    for (std::uint64_t term : terms)
      if (__builtin_add_overflow(total, term, &total))
        return UINT64_MAX;
    return total;
  };
  const std::int64_t B = shape.batch, Q = shape.queries, H = shape.heads, K = shape.topk;
  const std::int64_t token = layout.storedTokenBytes(), groups = layout.groups(),
                     layers = layout.layers;
  const std::int64_t live = residency.maxLiveRequests();
  std::vector<std::pair<std::string, std::uint64_t>> parts;
  // The host store: pinned and mapped on CUDA, a vector on the CPU.
  parts.push_back({"host store", bytes({layout.hostRows, token})});
  parts.push_back({"residency tables", ResidencyController::hostBytes(residency)});
  if (config_.checkInvariants)
    parts.push_back({"row hashes (invariant checks)", bytes({layers, layout.hostRows, 8})});
  // Per lane: request index, window tokens, history start and length, id
  // (and a copy while a step begins); per group and selection: row id and
  // slot, and the step log's check.
  parts.push_back({"per-lane and selection tables",
                   sum({bytes({B, 4 * 4 + 8 + 8 + 8}), bytes({groups, B, Q, K, 4 + 4 + 12})})});
  // Draft-ring positions per admitted request, and on the CPU the rings
  // themselves (on CUDA they are device memory).
  parts.push_back({"draft-ring positions", bytes({live, layout.draftWindow, 8})});
  parts.push_back({"window-ring positions", bytes({live, layout.windowRing, 8})});
  if (cuda) {
    // Pinned staging for every layer's queries, selections and outputs.
    // (Dimensions are below 2^31 and dims below 2^13: the per-position sum fits.)
    parts.push_back(
        {"pinned step staging", bytes({layers, B, Q, H * (shape.qkDim + shape.vDim) * 2 + K * 8})});
    return parts;
  }
  parts.push_back({"HBM tier (CPU)", bytes({layout.hbmSlots, token})});
  // The step's argument buffers and its staging arena (a whole-model step
  // has every layer's queries and outputs).
  std::uint64_t stepBytes = 0;
  std::int64_t arenaBytes = 0;
  for (const Argument &arg : manifests.front().arguments)
    if (!arg.isPool)
      stepBytes = sum({stepBytes, arg.bytes()});
  for (const Manifest &m : manifests)
    arenaBytes = std::max(arenaBytes, m.arenaBytes);
  parts.push_back({"step arguments and staging arena (CPU)",
                   sum({stepBytes, static_cast<std::uint64_t>(arenaBytes)})});
  parts.push_back(
      {"draft rings (CPU)", bytes({live, groups, layout.draftWindow, layout.draftTokenBytes()})});
  parts.push_back({"window rings (CPU)", bytes({live, layout.windowRing, token})});
  // One layer's attention on the CPU: queries, selections, history bounds,
  // the lanes' window rings, the float and bf16 outputs, and per thread the
  // decoded keys and values of one query's rows (at most 64 threads).
  const std::int64_t kvHeads = shape.format == RowFormat::Gqa ? shape.gqa.kvHeads : 1;
  const std::int64_t threads = std::min<std::int64_t>(
      64, config_.cpuThreads ? config_.cpuThreads
                             : std::max<unsigned>(1, std::thread::hardware_concurrency()));
  parts.push_back(
      {"CPU attention scratch",
       sum({bytes({B, Q, H, shape.qkDim, 2}), bytes({B, Q, K, 8}), bytes({B, 12}),
            bytes({B, layout.windowRing, layout.tokenBytes(0)}),
            bytes({B, Q, H, shape.vDim, 4 + 2}),
            // (K and the window are below 2^31 each: their sum fits.)
            bytes({threads, kvHeads, K + shape.windowSize, shape.qkDim + shape.vDim, 4})})});
  return parts;
}

void Runtime::requireAuxiliaryLoad(const char *what, const char *kind, bool loaded) const {
  requireStep(what);
  if (inStep_)
    throw StateError(std::string("cannot load a ") + kind + " during a step");
  if (loaded)
    throw StateError(std::string("a ") + kind + " is already loaded");
}

void Runtime::requireSessionPool(const Manifest &manifest, const char *kind) const {
  const KvPoolInfo &pool = manifest.argument(ArgumentRole::KvPool).pool;
  if (pool.layers != layout_.layersPerPool || pool.rowBytes != layout_.rowBytes)
    throw Error(std::string("the ") + kind + " " + manifest.directory + " places tokens of " +
                std::to_string(pool.layers) + " layers x " + std::to_string(pool.rowBytes) +
                " bytes (" + pool.format + "); this session's pools hold " +
                std::to_string(layout_.layersPerPool) + " layers x " +
                std::to_string(layout_.rowBytes) + " bytes");
  // (Tier sizes the step fixes are the session's too: its kernels may index
  // by them.)
  if ((pool.hbmSlots >= 0 && pool.hbmSlots != layout_.hbmSlots) ||
      (pool.hostRows >= 0 && pool.hostRows != layout_.hostRows))
    throw Error(std::string("the ") + kind + " " + manifest.directory + " was compiled for " +
                std::to_string(pool.hbmSlots) + " HBM slots and " + std::to_string(pool.hostRows) +
                " host rows (-1: any); this session's pools have " +
                std::to_string(layout_.hbmSlots) + " and " + std::to_string(layout_.hostRows) +
                " (dhs-compile --hbm-slots; host rows as the step declares them)");
}

Manifest Runtime::loadAuxiliaryStep(const std::string &stepDirectory, const char *what) const {
  requireStep(what);
  ManifestLoadOptions options;
  options.requirePtx = tiers_.runner->acceptsDevicePointers(); // CUDA tiers run its kernels
  return Manifest::load(stepDirectory, options);
}

void Runtime::loadDraftStep(const std::string &stepDirectory) {
  loadDraftStep(loadAuxiliaryStep(stepDirectory, "load draft step"));
}

void Runtime::loadDraftStep(const Manifest &manifest) {
  requireAuxiliaryLoad("load draft step", "draft-ring step", draftStepLoaded_);
  if (layout_.draftWindow <= 0)
    throw Error("the runtime has no draft rings (draft_window is 0): configure draft_window "
                "to use the draft-ring step " +
                manifest.directory);
  const DraftStepInfo info = draftStepInfo(manifest);
  if (info.window != layout_.draftWindow || info.tokenBytes != layout_.draftTokenBytes())
    throw Error(
        "the draft-ring step " + manifest.directory + " has rings of " +
        std::to_string(info.window) + " tokens x " + std::to_string(info.tokenBytes) +
        " bytes; this session's draft rings are " + std::to_string(layout_.draftWindow) +
        " tokens (draft_window) x " + std::to_string(layout_.layersPerGroup) + " layers x " +
        std::to_string(layout_.rowBytes) + " bytes = " + std::to_string(layout_.draftTokenBytes()) +
        " bytes: compile the ring with memref<Bx" + std::to_string(layout_.draftWindow) + "x" +
        std::to_string(layout_.layersPerGroup) + "x" + std::to_string(layout_.rowBytes) + "xi8>");
  if (info.block > info.window || info.block - 1 > info.readRows)
    throw Error("the draft-ring step " + manifest.directory + " appends blocks of " +
                std::to_string(info.block) + " rows and reads " + std::to_string(info.readRows) +
                " into rings of " + std::to_string(info.window) +
                ": the runtime needs block <= window and block - 1 <= rows read");
  tiers_.rings->setDraftStep(manifest);
  draftStepLoaded_ = true;
}

void Runtime::loadPlacementStep(const std::string &stepDirectory) {
  loadPlacementStep(loadAuxiliaryStep(stepDirectory, "load placement step"));
}

void Runtime::loadPlacementStep(const Manifest &manifest) {
  requireAuxiliaryLoad("load placement step", "placement step", placementStepLoaded_);
  if (manifest.launches.size() != 1 || manifest.launches[0].kind != abi::LaunchKind::PlaceRows)
    throw Error("the step " + manifest.directory +
                " is not a placement step (one dhs.place_rows launch)");
  manifest.requireArgumentRoles(
      "the placement step",
      {ArgumentRole::KvPool, ArgumentRole::PlaceRows, ArgumentRole::PlaceSlots});
  requireSessionPool(manifest, "placement step");
  const KvPoolInfo &pool = manifest.argument(ArgumentRole::KvPool).pool;
  // (Its kernel copies tokens of one size: a smaller last pool would need a
  // second placement step.)
  if (layout_.lastPoolLayers != layout_.layersPerPool)
    throw Error("the placement step " + manifest.directory + " places tokens of " +
                std::to_string(pool.layers) + " layers; this session's last pool holds " +
                std::to_string(layout_.lastPoolLayers) +
                " (its layer group's own): placement steps need pools of one size");
  tiers_.storage->setPlacementStep(manifest, *controller_);
  controller_->setReleaseLog(&changes_);
  placementStepLoaded_ = true;
}

void Runtime::loadDecisionStep(const std::string &stepDirectory) {
  loadDecisionStep(loadAuxiliaryStep(stepDirectory, "load decision step"));
}

void Runtime::loadDecisionStep(const Manifest &manifest) {
  requireAuxiliaryLoad("load decision step", "decision step", decisionStepLoaded_);
  if (!placementStepLoaded_)
    throw StateError("load a placement step before the decision step " + manifest.directory +
                     ": its place_rows carries out the decisions");
  requireSessionPool(manifest, "decision step");
  const ResidencyConfig &config = controller_->config();
  if (config.policy != ResidencyPolicy::Adaptive || config.replacement != Replacement::Clock ||
      config.hotFloor != 0)
    throw InputError("the decision step " + manifest.directory +
                     " decides with the adaptive policy, CLOCK and hot floor 0; this session "
                     "is configured otherwise (its hot floor is " +
                     std::to_string(config.hotFloor) + ")");
  for (const ResidencySpec &spec : manifest.residency)
    if (spec.floor != 0 || spec.policy != abi::ResidencyPolicy::Adaptive ||
        spec.replacement != abi::Replacement::Clock ||
        spec.maxPromotions != config.maxPromotionsPerStep)
      throw InputError(
          "the decision step " + manifest.directory + " promotes " +
          (spec.maxPromotions < 0 ? std::string("every fetched row")
                                  : std::to_string(spec.maxPromotions) + " rows per request") +
          " a step (its dhs.residency); this session's cap is " +
          (config.maxPromotionsPerStep < 0 ? std::string("none")
                                           : std::to_string(config.maxPromotionsPerStep)) +
          ": compile it with the same `promotions`, floor 0, policy adaptive, "
          "replacement clock");
  if (manifest.residency.empty())
    throw InputError("the decision step " + manifest.directory +
                     " has no dhs.residency spec: its promotion cap must be stated");
  tiers_.runner->setDecisionStep(manifest, config_.checkInvariants);
  deviceExcess_.assign(static_cast<std::size_t>(layout_.groups()), 0);
  agingPending_.assign(static_cast<std::size_t>(layout_.groups()), 0);
  decisionStepLoaded_ = true;
}

void Runtime::loadAgingStep(const std::string &stepDirectory) {
  loadAgingStep(loadAuxiliaryStep(stepDirectory, "load aging step"));
}

void Runtime::loadAgingStep(const Manifest &manifest) {
  requireAuxiliaryLoad("load aging step", "aging step", agingStepLoaded_);
  if (!decisionStepLoaded_)
    throw StateError("load the decision step before the aging step " + manifest.directory);
  requireSessionPool(manifest, "aging step");
  manifest.requireArgumentRoles("the aging step",
                                {ArgumentRole::KvPool, ArgumentRole::AgeList, ArgumentRole::HotRows,
                                 ArgumentRole::ClockCleared, ArgumentRole::FreeStack,
                                 ArgumentRole::PromotionControl, ArgumentRole::PlaceRows,
                                 ArgumentRole::PlaceSlots});
  takeStateFromDevice(); // (no appends are pending on the device)
  tiers_.runner->setAgingStep(manifest);
  agingStepLoaded_ = true;
}

void Runtime::loadTopKStep(const std::string &stepDirectory) {
  if (topK_)
    throw StateError("a top-k step is already loaded");
  // (Without its PTX the host selects: the CPU needs none.)
  ManifestLoadOptions options;
  options.requirePtx = false;
  loadTopKStep(Manifest::load(stepDirectory, options));
}

void Runtime::loadTopKStep(const Manifest &manifest) {
  if (topK_)
    throw StateError("a top-k step is already loaded");
  const TopKShape shape = topKShapeOf(manifest);
  topKManifest_ = std::make_unique<Manifest>(manifest);
  if (tiers_.runner) {
    try {
      giveTopKStep(*tiers_.runner);
    } catch (...) {
      topKManifest_.reset();
      throw;
    }
  }
  topK_ = shape;
}

void Runtime::giveTopKStep(StepRunner &runner) const {
  // The tiers run its kernel where they can (CUDA, its PTX there); a step
  // loaded before the attention step reaches them when they are made.
  if (topKManifest_ && std::all_of(topKManifest_->launches.begin(), topKManifest_->launches.end(),
                                   [](const Launch &launch) { return launch.ptxPresent; }))
    runner.setTopKStep(*topKManifest_);
}

void Runtime::topK(const float *scores, const std::int32_t *historyLen, std::int64_t batch,
                   std::int32_t *rows) {
  if (!topK_)
    throw StateError("no top-k step is loaded");
  if (!scores || !historyLen || !rows)
    throw InputError("null scores, history lengths or rows");
  if (batch < 1 || batch > topK_->batch)
    throw InputError("a top-k batch of " + std::to_string(batch) +
                     " lanes; the top-k step takes 1 .. " + std::to_string(topK_->batch));
  for (std::int64_t b = 0; b < batch; ++b)
    if (historyLen[b] < 0 || historyLen[b] > topK_->scored)
      throw InputError("history length " + std::to_string(historyLen[b]) + " of lane " +
                       std::to_string(b) + " is outside 0 .. " + std::to_string(topK_->scored) +
                       " (the rows the top-k step scores)");
  if (!tiers_.runner || !tiers_.runner->topK(batch, scores, historyLen, rows))
    selectTopK(*topK_, batch, scores, historyLen, rows);
}

} // namespace dhs::runtime
