//===- Runtime.cpp - Requests, steps and the KV hierarchy -----------------===//

#include "runtime/Runtime.h"

#include "runtime/core/Checked.h"
#include "runtime/core/Error.h"
#include "runtime/core/HostMemory.h"
#include "runtime/cuda/CudaDriver.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <thread>

namespace dhs::runtime {

namespace {

/// "request 7" for messages (engine ids).
std::string requestName(std::uint64_t id) { return "request " + std::to_string(id); }

} // namespace

Runtime::Runtime(const RuntimeConfig &config) : config_(config) {
  auto atLeast = [](const char *name, std::int64_t value, std::int64_t min) {
    if (value < min)
      throw Error(std::string("runtime config: ") + name + " is " + std::to_string(value) +
                  ", it must be at least " + std::to_string(min));
  };
  atLeast("layers", config.layers, 1);
  atLeast("layers_per_group", config.layersPerGroup, 1);
  atLeast("hbm_slots", config.hbmSlots, -1);
  atLeast("host_rows", config.hostRows, 1);
  atLeast("max_requests", config.maxRequests, 1);
  atLeast("newest_window", config.newestWindow, 0);
  atLeast("draft_window", config.draftWindow, 0);
  atLeast("hot_floor", config.hotFloor, 0);
  atLeast("max_promotions_per_step", config.maxPromotionsPerStep, -1);
  atLeast("full_check_interval", config.fullCheckInterval, 0);
  if (config.layersPerGroup > config.layers)
    throw Error("runtime config: layers_per_group " + std::to_string(config.layersPerGroup) +
                " exceeds the " + std::to_string(config.layers) + " layers");
}

Runtime::~Runtime() = default;

void Runtime::requireStep(const char *what) const {
  if (!tiers_.storage)
    throw StateError(std::string(what) + ": no step is loaded (load a compiled step first)");
}

const ProblemShape &Runtime::shape() const {
  requireStep("shape");
  return shape_;
}

std::int64_t Runtime::rowBytes() const {
  requireStep("row size");
  return layout_.rowBytes;
}

std::int32_t Runtime::groups() const {
  return (config_.layers + config_.layersPerGroup - 1) / config_.layersPerGroup;
}

std::string Runtime::backendDescription() const {
  return tiers_.storage ? tiers_.storage->describe() : "none (no step loaded)";
}

const DeviceInfo *Runtime::device() const {
  requireStep("device");
  return tiers_.runner->device();
}

std::vector<KernelInfo> Runtime::kernels() const {
  requireStep("kernels");
  return tiers_.runner->kernels();
}

std::int64_t Runtime::fetchedRows() {
  requireStep("fetched rows");
  if (inStep_)
    throw StateError("fetched rows: a step is in progress");
  return tiers_.runner->fetchedRows();
}

const ResidencyController &Runtime::controller() const {
  requireStep("controller");
  return *controller_;
}

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

/// Throws unless `other` takes exactly the arguments of `first` (the steps
/// of a layer group share every buffer).
void requireSameArguments(const Manifest &first, const Manifest &other) {
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
        std::string("argument ") + std::to_string(i) + " (" + roleName(a.role) + ")";
    if (a.role != b.role || a.isPool != b.isPool)
      fail(name + "'s role or kind");
    if (!a.isPool && (a.dtype != b.dtype || a.shape != b.shape))
      fail(name + "'s type or shape");
    if (a.isPool && (a.pool.format != b.pool.format || a.pool.layers != b.pool.layers ||
                     a.pool.rowBytes != b.pool.rowBytes || a.pool.hbmSlots != b.pool.hbmSlots ||
                     a.pool.hostRows != b.pool.hostRows))
      fail(name + "'s row format, layers or tier sizes");
  }
}

} // namespace

std::vector<std::pair<std::string, std::uint64_t>>
Runtime::hostMemoryParts(const TierLayout &layout, const ProblemShape &shape,
                         const ResidencyConfig &residency, bool cuda) const {
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
  const std::int64_t token = layout.tokenBytes(), pools = layout.pools(), groups = layout.groups(),
                     layers = layout.layers;
  const std::int64_t live = residency.maxLiveRequests();
  std::vector<std::pair<std::string, std::uint64_t>> parts;
  // The host store: pinned and mapped on CUDA, a vector on the CPU.
  parts.push_back({"host store", bytes({pools, layout.hostRows, token})});
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
  parts.push_back({"HBM tier (CPU)", bytes({pools, layout.hbmSlots, token})});
  parts.push_back(
      {"draft rings (CPU)", bytes({live, groups, layout.draftWindow, layout.draftTokenBytes()})});
  parts.push_back({"window rings (CPU)", bytes({live, pools, layout.windowRing, token})});
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
            bytes({B, layout.windowRing, token}), bytes({B, Q, H, shape.vDim, 4 + 2}),
            // (K and the window are below 2^31 each: their sum fits.)
            bytes({threads, kvHeads, K + shape.windowSize, shape.qkDim + shape.vDim, 4})})});
  return parts;
}

void Runtime::loadStepManifests(const std::vector<Manifest> &manifests) {
  if (tiers_.storage)
    throw StateError("a step is already loaded");
  if (manifests.empty())
    throw InputError("no step to load (an empty set of steps)");
  const Manifest &manifest = manifests.front();
  ProblemShape shape = problemShapeFromManifest(manifest);
  const KvPoolInfo &pool = manifest.argument(ArgumentRole::KvPool).pool;
  // The steps by the pool layer their kernels read.
  std::vector<const Manifest *> byLayer(
      static_cast<std::size_t>(std::max<std::int64_t>(pool.layers, 1)), nullptr);
  for (const Manifest &m : manifests) {
    requireSameArguments(manifest, m);
    const std::int64_t layer = problemShapeFromManifest(m).layer;
    if (layer < 0 || layer >= pool.layers)
      throw Error("the step " + m.directory + " reads layer " + std::to_string(layer) +
                  " of a pool of " + std::to_string(pool.layers) + " layers");
    const Manifest *&slot = byLayer[static_cast<std::size_t>(layer)];
    if (slot)
      throw Error("two steps read layer " + std::to_string(layer) + " of the group's pool (" +
                  slot->directory + " and " + m.directory + "): give one step per layer index");
    slot = &m;
  }
  std::vector<std::int64_t> missing;
  for (std::size_t l = 0; l < byLayer.size(); ++l)
    if (!byLayer[l])
      missing.push_back(static_cast<std::int64_t>(l));
  // Pools of one layer: the one step runs every layer. Group pools: on CUDA
  // one step per layer index (the kernels read a fixed layer of the token).
  const std::string missingReason =
      pool.layers > 1 && !missing.empty()
          ? "the step's pool holds " + std::to_string(pool.layers) +
                " layers per token and its kernels read one of them; the CUDA executor needs "
                "one step per layer index (compile it with layer = 0.." +
                std::to_string(pool.layers - 1) + "), missing layer " + joinLayers(missing)
          : std::string();

  std::int64_t slots = config_.hbmSlots;
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
  std::int64_t hostRows = config_.hostRows;
  if (pool.hostRows >= 0 && pool.hostRows != hostRows)
    throw Error("the runtime is configured for " + std::to_string(hostRows) +
                " host rows per layer, the step " + manifest.directory + " fixes " +
                std::to_string(pool.hostRows));

  // The step's pool holds one layer per token, or a whole layer group.
  if (pool.layers != 1 && pool.layers != config_.layersPerGroup)
    throw Error("the step " + manifest.directory + "'s pool holds " + std::to_string(pool.layers) +
                " layers per token; the runtime's layer groups have " +
                std::to_string(config_.layersPerGroup) + " (a pool holds 1 layer or a group)");

  TierLayout layout;
  layout.layers = config_.layers;
  layout.layersPerGroup = config_.layersPerGroup;
  layout.layersPerPool = static_cast<std::int32_t>(pool.layers);
  layout.hbmSlots = static_cast<std::int32_t>(slots);
  layout.hostRows = hostRows;
  layout.rowBytes = pool.rowBytes;
  layout.draftWindow = config_.draftWindow;
  layout.windowRing = static_cast<std::int32_t>(shape.windowRing);

  ResidencyConfig residency;
  residency.groups = layout.groups();
  residency.hbmSlots = layout.hbmSlots;
  residency.hostRows = hostRows;
  residency.maxRequests = config_.maxRequests;
  residency.newestWindow = config_.newestWindow;
  // Draft rings live in memory of their own (RingStore), not in the pools:
  // no pool slots are reserved for them.
  residency.draftWindow = 0;
  residency.hotFloor = config_.hotFloor;
  residency.policy = config_.policy;
  residency.replacement = config_.replacement;
  residency.maxPromotionsPerStep = config_.maxPromotionsPerStep;
  // A step that carries a residency spec (dhs.residency) decides the
  // working set and the hints; all its pools and layer steps must agree.
  const ResidencySpec *spec = nullptr;
  for (const Manifest &m : manifests)
    for (const ResidencySpec &s : m.residency) {
      if (spec && !(*spec == s))
        throw Error("the step " + m.directory +
                    " gives its pools different residency specs "
                    "(newest " +
                    std::to_string(spec->newest) + " vs " + std::to_string(s.newest) + ", floor " +
                    std::to_string(spec->floor) + " vs " + std::to_string(s.floor) + ", " +
                    spec->policy + "/" + spec->replacement + " vs " + s.policy + "/" +
                    s.replacement + "): the runtime keeps one policy for all layer groups");
      spec = &s;
    }
  if (spec) {
    residency.newestWindow = spec->newest;
    residency.hotFloor = spec->floor;
    residency.policy = spec->policy == "fixed" ? ResidencyPolicy::Fixed : ResidencyPolicy::Adaptive;
    residency.replacement = spec->replacement == "lru"    ? Replacement::Lru
                            : spec->replacement == "lru2" ? Replacement::Lru2
                                                          : Replacement::Clock;
    residency.maxPromotionsPerStep = spec->maxPromotions;
  }
  // The backend.
  bool useCuda = config_.backend == BackendKind::Cuda;
  if (useCuda && !missingReason.empty())
    throw Error(missingReason);
  fallbackReason_.clear();
  if (config_.backend == BackendKind::Auto) {
    const CudaDriver &driver = CudaDriver::instance();
    bool ptx = std::all_of(manifests.begin(), manifests.end(), [](const Manifest &m) {
      return std::all_of(m.launches.begin(), m.launches.end(),
                         [](const Launch &launch) { return launch.ptxPresent; });
    });
    if (!driver.available())
      fallbackReason_ = driver.unavailableReason();
    else if (!ptx)
      fallbackReason_ = "the step has no PTX for every kernel";
    else if (!missingReason.empty())
      fallbackReason_ = missingReason;
    else
      useCuda = true;
  }
  // Everything this session allocates in host memory in proportion to the
  // step's and the config's sizes, against what this process may use, before
  // any of it is allocated.
  requireHostMemory("loading the step " + manifest.directory,
                    hostMemoryParts(layout, shape, residency, useCuda));
  auto controller = std::make_unique<ResidencyController>(residency);

  std::vector<const Manifest *> cudaSteps = byLayer;
  if (pool.layers <= 1 || !missing.empty())
    cudaSteps.assign(1, &manifest);
  Tiers tiers = useCuda ? makeCudaTiers(layout, cudaSteps, config_.device)
                        : makeCpuTiers(layout, config_.cpuThreads);
  if (config_.cudaGraphs)
    tiers.runner->setGraphs(true);

  manifest_ = std::make_unique<Manifest>(manifest);
  shape_ = shape;
  shape_.hbmSlots = layout.hbmSlots;
  shape_.hostRows = hostRows;
  layout_ = layout;
  controller_ = std::move(controller);
  tiers_ = std::move(tiers);
  if (config_.checkInvariants)
    hashes_.assign(static_cast<std::size_t>(layout.layers * hostRows), 0);
  const std::size_t B = static_cast<std::size_t>(shape_.batch);
  const std::size_t selections = static_cast<std::size_t>(shape_.selectionCount());
  lanes_.assign(B, -1);
  windowTokensLane_.assign(B, 0);
  historyStart_.assign(B, 0);
  historyLen_.assign(B, 0);
  rowIds_.assign(static_cast<std::size_t>(layout.groups()),
                 std::vector<std::int32_t>(selections, -1));
  slots_.assign(static_cast<std::size_t>(layout.groups()),
                std::vector<std::int32_t>(selections, -1));
  selected_.assign(static_cast<std::size_t>(layout.groups()), 0);
  deviceSelected_.assign(static_cast<std::size_t>(layout.groups()), 0);
  attended_.assign(static_cast<std::size_t>(layout.layers), 0);
}

//===----------------------------------------------------------------------===//
// Requests
//===----------------------------------------------------------------------===//

std::int32_t Runtime::indexOf(std::uint64_t id, const char *what) const {
  auto it = index_.find(id);
  if (it == index_.end())
    throw UnknownRequestError(std::string(what) + ": " + requestName(id) + " is not admitted");
  return it->second;
}

bool Runtime::admitted(std::uint64_t id) const { return index_.count(id) != 0; }

std::int32_t Runtime::requestIndex(std::uint64_t id) const { return indexOf(id, "request index"); }

std::int64_t Runtime::historyLen(std::uint64_t id) const {
  return controller_->historyLen(indexOf(id, "history length"));
}

std::uint64_t Runtime::rowHash(const std::uint8_t *row) const {
  // 64-bit words through a multiply-xorshift mix; the tail byte by byte.
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(layout_.rowBytes);
  const std::size_t n = static_cast<std::size_t>(layout_.rowBytes);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t word;
    std::memcpy(&word, row + i, 8);
    h = (h ^ word) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  for (; i < n; ++i)
    h = (h ^ row[i]) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

void Runtime::recordHash(std::int32_t layer, std::int64_t hostRow) {
  if (hashes_.empty())
    return;
  hashes_[static_cast<std::size_t>(layer * layout_.hostRows + hostRow)] =
      rowHash(tiers_.storage->hostRow(layer, hostRow));
}

void Runtime::admit(std::uint64_t id, std::int64_t historyLen, std::int64_t maxContext,
                    const void *prefill) {
  requireStep("admit");
  if (inStep_)
    throw StateError("cannot admit " + requestName(id) + " during a step");
  if (index_.count(id))
    throw InputError(requestName(id) + " is already admitted");
  if (historyLen < 0)
    throw InputError("admit " + requestName(id) + ": negative history length " +
                     std::to_string(historyLen));
  if (maxContext < 1 || maxContext < historyLen ||
      maxContext > std::numeric_limits<std::int32_t>::max())
    throw InputError("admit " + requestName(id) + ": maximum context " +
                     std::to_string(maxContext) + " must lie in [max(1, history length " +
                     std::to_string(historyLen) + "), 2^31)");
  if (historyLen > 0 && !prefill)
    throw InputError("admit " + requestName(id) + ": null prefill rows for a history of " +
                     std::to_string(historyLen));
  std::vector<RowCopy> copies;
  const std::int32_t index = controller_->admit(historyLen, maxContext, copies);
  if (layout_.draftWindow > 0 || layout_.windowRing > 0) {
    try {
      if (layout_.draftWindow > 0) {
        tiers_.rings->allocateDraftRings(index);
        draftPositions_[index].assign(static_cast<std::size_t>(layout_.draftWindow), -1);
      }
      if (layout_.windowRing > 0) {
        tiers_.rings->allocateWindowRings(index);
        windowPositions_[index].assign(static_cast<std::size_t>(layout_.windowRing), -1);
        windowTokens_[index] = 0;
      }
    } catch (...) {
      tiers_.rings->freeDraftRings(index);
      tiers_.rings->freeWindowRings(index);
      draftPositions_.erase(index);
      windowPositions_.erase(index);
      windowTokens_.erase(index);
      controller_->finish(index); // nothing changed
      releases_.clear();          // its rows never reached the device
      throw;
    }
  }
  const std::int64_t start = controller_->historyStart(index);
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  const auto *source = static_cast<const std::uint8_t *>(prefill);
  for (std::int32_t l = 0; l < layout_.layers; ++l)
    for (std::int64_t row = 0; row < historyLen; ++row) {
      std::memcpy(tiers_.storage->hostRow(l, start + row),
                  source + (static_cast<std::size_t>(l * historyLen + row)) * rowBytes, rowBytes);
      recordHash(l, start + row);
    }
  applyCopies(copies);
  index_.emplace(id, index);
  if (config_.checkInvariants && hbmCoherent())
    checkCopies(copies);
}

void Runtime::append(std::uint64_t id, const void *rows) {
  requireStep("append");
  if (inStep_)
    throw StateError("cannot append to " + requestName(id) + " during a step");
  const std::int32_t index = indexOf(id, "append");
  if (!rows)
    throw InputError("append to " + requestName(id) + ": null rows");
  const std::int64_t maxContext = controller_->maxContext(index);
  if (controller_->historyLen(index) >= maxContext)
    throw CapacityError("append to " + requestName(id) + ": it reached its maximum context of " +
                        std::to_string(maxContext) + " rows");
  std::vector<RowCopy> copies;
  controller_->append(index, copies);
  const std::int64_t hostRow =
      controller_->historyStart(index) + controller_->historyLen(index) - 1;
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  const auto *source = static_cast<const std::uint8_t *>(rows);
  for (std::int32_t l = 0; l < layout_.layers; ++l) {
    std::memcpy(tiers_.storage->hostRow(l, hostRow),
                source + static_cast<std::size_t>(l) * rowBytes, rowBytes);
    recordHash(l, hostRow);
  }
  applyCopies(copies);
  if (config_.checkInvariants && hbmCoherent())
    checkCopies(copies);
}

void Runtime::finish(std::uint64_t id) {
  requireStep("finish");
  if (inStep_)
    throw StateError("cannot finish " + requestName(id) + " during a step");
  const std::int32_t index = indexOf(id, "finish");
  if (config_.checkInvariants && repairHbm())
    checkRequestRows(index, "finishing");
  controller_->finish(index);
  applyCopies({}); // its rows leave the device residency maps
  index_.erase(id);
  if (layout_.draftWindow > 0) {
    tiers_.rings->freeDraftRings(index);
    draftPositions_.erase(index);
  }
  if (layout_.windowRing > 0) {
    tiers_.rings->freeWindowRings(index);
    windowPositions_.erase(index);
    windowTokens_.erase(index);
  }
}

std::vector<std::uint8_t> Runtime::hostRow(std::uint64_t id, std::int32_t layer, std::int64_t row) {
  requireStep("host row");
  const std::int32_t index = indexOf(id, "host row");
  if (layer < 0 || layer >= layout_.layers || row < 0 || row >= controller_->historyLen(index))
    throw OutOfRangeError("host row: layer " + std::to_string(layer) + ", row " +
                          std::to_string(row) + " is outside " + requestName(id) + "'s history");
  const std::uint8_t *data = tiers_.storage->hostRow(layer, controller_->historyStart(index) + row);
  return std::vector<std::uint8_t>(data, data + layout_.rowBytes);
}

//===----------------------------------------------------------------------===//
// Draft rings
//===----------------------------------------------------------------------===//

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
  requireStep("load draft step");
  if (inStep_)
    throw StateError("cannot load a draft-ring step during a step");
  if (draftStepLoaded_)
    throw StateError("a draft-ring step is already loaded");
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

void Runtime::writeWindow(std::uint64_t id, std::int64_t position, std::int64_t count,
                          const void *rows) {
  requireStep("write window");
  if (inStep_)
    throw StateError("cannot write the window of " + requestName(id) + " during a step");
  const std::int32_t index = indexOf(id, "write window");
  const std::int64_t R = layout_.windowRing;
  if (R <= 0)
    throw InputError("write window: the step has no sliding window");
  if (count < 1 || count > R)
    throw InputError("write window of " + requestName(id) + ": " + std::to_string(count) +
                     " tokens; a window ring holds 1 to " + std::to_string(R));
  if (!rows)
    throw InputError("write window of " + requestName(id) + ": null rows");
  if (position < 0 || position > std::numeric_limits<std::int32_t>::max() - count)
    throw InputError("write window of " + requestName(id) + ": position " +
                     std::to_string(position) + " is outside [0, 2^31 - count)");
  tiers_.rings->writeWindow(index, position, count, static_cast<const std::uint8_t *>(rows));
  std::vector<std::int64_t> &held = windowPositions_.at(index);
  for (std::int64_t t = 0; t < count; ++t)
    held[static_cast<std::size_t>(floorMod(position + t, R))] = position + t;
  // The newest token written is the request's last raw token.
  windowTokens_.at(index) = position + count;
}

std::int32_t Runtime::requireDraft(std::uint64_t id, std::int64_t count, const void *rows,
                                   const char *what) {
  requireStep(what);
  if (inStep_)
    throw StateError(std::string(what) + " of " + requestName(id) + " during a step");
  const std::int32_t index = indexOf(id, what);
  if (layout_.draftWindow <= 0)
    throw InputError(std::string(what) + ": the runtime has no draft rings (draft_window is 0)");
  if (count < 1 || count > layout_.draftWindow)
    throw InputError(std::string(what) + " of " + requestName(id) + ": " + std::to_string(count) +
                     " tokens; a draft ring holds 1 to " + std::to_string(layout_.draftWindow) +
                     " (draft_window)");
  if (!rows)
    throw InputError(std::string(what) + " of " + requestName(id) +
                     (std::string(what) == "draft read" ? ": null output" : ": null rows"));
  if (tiers_.runner->acceptsDevicePointers() && !draftStepLoaded_)
    throw StateError(std::string(what) +
                     ": the CUDA tiers run the draft rings with the "
                     "compiler's ring kernels; load a compiled draft-ring step first "
                     "(loadDraftStep; e.g. dhs-compile examples/draft_ring_step.mlir)");
  return index;
}

void Runtime::appendDraft(std::uint64_t id, std::int64_t position, std::int64_t count,
                          const void *rows) {
  const std::int32_t index = requireDraft(id, count, rows, "draft append");
  if (position < 0)
    throw InputError("draft append of " + requestName(id) + ": negative position " +
                     std::to_string(position));
  // Positions position .. position+count-1 must exist: the last one, and
  // the request's next position after it, fit an int64.
  if (!tryAdd(position, count))
    throw InputError("draft append of " + requestName(id) + ": " + std::to_string(count) +
                     " tokens at position " + std::to_string(position) +
                     " run past the largest position (2^63 - 1)");
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  const std::size_t token = static_cast<std::size_t>(layout_.draftTokenBytes());
  const auto *source = static_cast<const std::uint8_t *>(rows);
  draftScratch_.assign(static_cast<std::size_t>(count) * token, 0);
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    // [count][L][row] -> [count][G][row] (the last group's tail stays zero).
    const std::int32_t first = layout_.firstLayer(g), layers = layout_.endLayer(g) - first;
    for (std::int64_t t = 0; t < count; ++t)
      std::memcpy(draftScratch_.data() + static_cast<std::size_t>(t) * token,
                  source + (static_cast<std::size_t>(t) * layout_.layers + first) * rowBytes,
                  static_cast<std::size_t>(layers) * rowBytes);
    tiers_.rings->writeDraft(index, g, position, count, draftScratch_.data());
  }
  std::vector<std::int64_t> &slots = draftPositions_.at(index);
  for (std::int64_t t = 0; t < count; ++t)
    slots[static_cast<std::size_t>(floorMod(position + t, layout_.draftWindow))] = position + t;
}

void Runtime::readDraft(std::uint64_t id, std::int64_t end, std::int64_t count, void *out) {
  const std::int32_t index = requireDraft(id, count, out, "draft read");
  const std::vector<std::int64_t> &slots = draftPositions_.at(index);
  // The first position, end - count, is negative or does not exist.
  const std::optional<std::int64_t> first = trySub(end, count);
  if (!first || *first < 0)
    throw OutOfRangeError("draft read of " + requestName(id) + ": " + std::to_string(count) +
                          " tokens ending at " + std::to_string(end) +
                          " start at a negative position");
  for (std::int64_t p = *first; p < end; ++p) {
    const std::int64_t held = slots[static_cast<std::size_t>(floorMod(p, layout_.draftWindow))];
    if (held != p)
      throw OutOfRangeError("draft read of " + requestName(id) + ": position " + std::to_string(p) +
                            (held < 0 ? std::string(" was never written")
                                      : " is not in the draft ring (its slot " +
                                            std::to_string(p % layout_.draftWindow) +
                                            " now holds position " + std::to_string(held) + ")"));
  }
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  const std::size_t token = static_cast<std::size_t>(layout_.draftTokenBytes());
  auto *target = static_cast<std::uint8_t *>(out);
  draftScratch_.assign(static_cast<std::size_t>(count) * token, 0);
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    tiers_.rings->readDraft(index, g, end, count, draftScratch_.data());
    const std::int32_t first = layout_.firstLayer(g), layers = layout_.endLayer(g) - first;
    for (std::int64_t t = 0; t < count; ++t)
      std::memcpy(target + (static_cast<std::size_t>(t) * layout_.layers + first) * rowBytes,
                  draftScratch_.data() + static_cast<std::size_t>(t) * token,
                  static_cast<std::size_t>(layers) * rowBytes);
  }
}

//===----------------------------------------------------------------------===//
// Steps
//===----------------------------------------------------------------------===//

void Runtime::beginStep(const std::uint64_t *ids, std::int64_t batch) {
  requireStep("step");
  if (inStep_)
    throw StateError("a step is already in progress");
  if (batch < 0 || batch > shape_.batch)
    throw InputError("a batch of " + std::to_string(batch) + " requests: the step takes 0 to " +
                     std::to_string(shape_.batch));
  if (batch > 0 && !ids)
    throw InputError("null request ids for a batch of " + std::to_string(batch));
  // Every slot the step may read must hold what the controller says.
  requireHbmCoherent("step");
  std::vector<std::int32_t> lanes(static_cast<std::size_t>(shape_.batch), -1);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int32_t index = indexOf(ids[b], "step");
    if (std::find(lanes.begin(), lanes.begin() + b, index) != lanes.begin() + b)
      throw InputError(requestName(ids[b]) + " appears twice in the batch (lane " +
                       std::to_string(b) + ")");
    lanes[static_cast<std::size_t>(b)] = index;
  }
  // Every lane's window ring must hold the raw tokens its queries see.
  std::vector<std::int32_t> windowTokens(static_cast<std::size_t>(shape_.batch), 0);
  if (layout_.windowRing > 0)
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int32_t index = lanes[static_cast<std::size_t>(b)];
      const std::int64_t tokens = windowTokens_.at(index);
      const std::vector<std::int64_t> &held = windowPositions_.at(index);
      const std::int64_t first =
          std::max<std::int64_t>(0, tokens - (shape_.queries - 1) - shape_.windowSize);
      for (std::int64_t p = first; p < tokens; ++p)
        if (held[static_cast<std::size_t>(floorMod(p, layout_.windowRing))] != p)
          throw InputError(requestName(ids[b]) + "'s sliding window lacks raw token " +
                           std::to_string(p) + " (of " + std::to_string(tokens) +
                           "): write it with writeWindow before the step");
      windowTokens[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(tokens);
    }
  controller_->beginStep();
  tiers_.runner->beginStep(controller_->stepCount());
  windowTokensLane_ = windowTokens;
  lanes_ = lanes;
  batchIds_.assign(ids, ids + batch);
  for (std::size_t b = 0; b < lanes_.size(); ++b) {
    historyStart_[b] = lanes_[b] >= 0 ? controller_->historyStart(lanes_[b]) : 0;
    historyLen_[b] =
        lanes_[b] >= 0 ? static_cast<std::int32_t>(controller_->historyLen(lanes_[b])) : 0;
  }
  batch_ = batch;
  std::fill(selected_.begin(), selected_.end(), 0);
  std::fill(deviceSelected_.begin(), deviceSelected_.end(), 0);
  std::fill(attended_.begin(), attended_.end(), 0);
  inStep_ = true;
}

void Runtime::selectGroup(std::int32_t group, const std::int32_t *rowIds, MemorySpace memory) {
  if (!inStep_)
    throw StateError("selections outside a step (begin a step first)");
  if (group < 0 || group >= layout_.groups())
    throw OutOfRangeError("layer group " + std::to_string(group) + " does not exist (" +
                          std::to_string(layout_.groups()) + " groups)");
  const std::size_t g = static_cast<std::size_t>(group);
  if (selected_[g])
    throw StateError("layer group " + std::to_string(group) + " already has its selections");
  if (batch_ > 0 && !rowIds)
    throw InputError("null row ids for layer group " + std::to_string(group));
  const std::int64_t perLane = shape_.queries * shape_.topk;
  if (memory == MemorySpace::Device) {
    // The step's dhs.resolve maps them to slots on the device; they are
    // checked and booked by the controller after the step, from a copy.
    if (!tiers_.runner->acceptsDevicePointers())
      throw InputError("the " + tiers_.storage->describe() + " backend takes host pointers only");
    tiers_.runner->takeSelections(group, rowIds, batch_ * perLane);
    selected_[g] = 1;
    deviceSelected_[g] = 1;
    return;
  }
  checkSelections(group, rowIds);
  std::vector<std::int32_t> &padded = rowIds_[g];
  std::fill(padded.begin(), padded.end(), -1);
  if (batch_ > 0)
    std::copy(rowIds, rowIds + batch_ * perLane, padded.begin());
  controller_->resolve(group, lanes_.data(), shape_.batch, padded.data(), shape_.queries,
                       shape_.topk, slots_[g].data());
  selected_[g] = 1;
}

void Runtime::checkSelections(std::int32_t group, const std::int32_t *rowIds) const {
  const std::int64_t perLane = shape_.queries * shape_.topk;
  // Checked here too (the controller checks again) so that messages name
  // the engine's request ids.
  for (std::int64_t b = 0; b < batch_; ++b)
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::int32_t id = rowIds[b * perLane + i];
      if (id == -1 || (id >= 0 && id < historyLen_[static_cast<std::size_t>(b)]))
        continue;
      // (The message is built only for a bad id.)
      std::string where = "row id " + std::to_string(id) + " at [lane " + std::to_string(b) +
                          ", query " + std::to_string(i / shape_.topk) + ", k " +
                          std::to_string(i % shape_.topk) + "] of layer group " +
                          std::to_string(group);
      if (id < -1)
        throw InputError(where + " is invalid (only -1 marks an unused selection)");
      if (id >= historyLen_[static_cast<std::size_t>(b)])
        throw OutOfRangeError(
            where + " is outside " + requestName(batchIds_[static_cast<std::size_t>(b)]) +
            "'s history (length " + std::to_string(historyLen_[static_cast<std::size_t>(b)]) + ")");
    }
}

void Runtime::attendLayer(std::int32_t layer, const bf16_t *queries, bf16_t *output,
                          MemorySpace memory) {
  if (!inStep_)
    throw StateError("attention outside a step (begin a step first)");
  if (layer < 0 || layer >= layout_.layers)
    throw OutOfRangeError("layer " + std::to_string(layer) + " does not exist (" +
                          std::to_string(layout_.layers) + " layers)");
  const std::int32_t group = layer / layout_.layersPerGroup;
  if (!selected_[static_cast<std::size_t>(group)])
    throw StateError("layer " + std::to_string(layer) + ": its group " + std::to_string(group) +
                     " has no selections yet");
  if (attended_[static_cast<std::size_t>(layer)])
    throw StateError("layer " + std::to_string(layer) + " already ran in this step");
  if (batch_ > 0 && (!queries || !output))
    throw InputError("null queries or output for layer " + std::to_string(layer));
  if (memory == MemorySpace::Device && !tiers_.runner->acceptsDevicePointers())
    throw InputError("the " + tiers_.storage->describe() + " backend takes host pointers only");
  LayerStep step;
  step.shape = &shape_;
  step.lanes = batch_;
  step.queries = queries;
  step.memory = memory;
  step.rowIds = rowIds_[static_cast<std::size_t>(group)].data();
  step.slots = slots_[static_cast<std::size_t>(group)].data();
  step.historyStart = historyStart_.data();
  step.historyLen = historyLen_.data();
  step.output = output;
  step.selectionsOnDevice = deviceSelected_[static_cast<std::size_t>(group)] != 0;
  step.windowTokens = windowTokensLane_.data();
  step.laneRequests = lanes_.data();
  tiers_.runner->attend(layer, step);
  attended_[static_cast<std::size_t>(layer)] = 1;
  // (Reads of device selections are checked once they are booked.)
  if (config_.checkInvariants && !step.selectionsOnDevice)
    checkReads(layer);
}

void Runtime::endStep() {
  if (!inStep_)
    throw StateError("no step is in progress");
  for (std::int32_t g = 0; g < layout_.groups(); ++g)
    if (!selected_[static_cast<std::size_t>(g)])
      throw StateError("cannot end the step: layer group " + std::to_string(g) +
                       " has no selections");
  for (std::int32_t l = 0; l < layout_.layers; ++l)
    if (!attended_[static_cast<std::size_t>(l)])
      throw StateError("cannot end the step: layer " + std::to_string(l) + " did not run");
  // Device selections are booked from what the resolve kernels logged, as
  // host ones were at select time (nothing changes the residency in
  // between); the host never reads the selections themselves. Where the
  // tiers hand a group's log over early, the controller books the group
  // while the GPU still runs the later layers.
  std::vector<std::uint8_t> booked(static_cast<std::size_t>(layout_.groups()), 0);
  auto bookGroup = [&](std::int32_t g) {
    try {
      const StepLog &log = tiers_.runner->stepLog(g);
      if (config_.checkInvariants)
        checkStepLog(g, log);
      controller_->book(g, lanes_.data(), shape_.batch, log.hitSlots.data(),
                        static_cast<std::int64_t>(log.hitSlots.size()), log.misses.data(),
                        static_cast<std::int64_t>(log.misses.size() / 2), log.entries);
    } catch (...) {
      abortStep();
      tiers_.storage->restoreRecency(*controller_);
      throw;
    }
    booked[static_cast<std::size_t>(g)] = 1;
  };
  if (tiers_.runner->stepLogsEarly())
    for (std::int32_t g = 0; g < layout_.groups(); ++g)
      if (deviceSelected_[static_cast<std::size_t>(g)])
        bookGroup(g);
  try {
    tiers_.runner->finishStep();
  } catch (const Error &) {
    // Device selections the kernels rejected: name the first bad one from
    // a download of them. The kernels stamped the hits of the valid ones,
    // which the controller booked only for groups whose log came early: the
    // device replacement state goes back to the controller's.
    std::exception_ptr precise;
    bool anyOnDevice = false;
    for (std::int32_t g = 0; g < layout_.groups(); ++g)
      if (deviceSelected_[static_cast<std::size_t>(g)]) {
        anyOnDevice = true;
        if (!precise)
          try {
            checkSelections(g, tiers_.runner->selectionsOnHost(g));
          } catch (const Error &) {
            precise = std::current_exception();
          }
      }
    abortStep();
    if (anyOnDevice)
      tiers_.storage->restoreRecency(*controller_);
    if (precise)
      std::rethrow_exception(precise);
    throw;
  }
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    const std::size_t gi = static_cast<std::size_t>(g);
    if (!deviceSelected_[gi])
      continue;
    if (!booked[gi])
      bookGroup(g);
    if (config_.checkInvariants)
      for (std::int32_t l = layout_.firstLayer(g); l < layout_.endLayer(g); ++l)
        checkReads(l);
  }
  std::vector<RowCopy> copies;
  controller_->endStep(copies);
  applyCopies(copies);
  inStep_ = false;
  ++steps_;
  if (config_.checkInvariants) {
    if (hbmCoherent())
      checkCopies(copies);
    controller_->checkConsistency();
    // (Not while copies into HBM fail: the step itself succeeded, and the
    // next one reports them.)
    if (config_.fullCheckInterval > 0 &&
        steps_ % static_cast<std::uint64_t>(config_.fullCheckInterval) == 0 && repairHbm())
      checkInvariants();
  }
}

void Runtime::abortStep() {
  if (!inStep_)
    throw StateError("no step is in progress");
  inStep_ = false;
  controller_->abortStep();
  try {
    tiers_.runner->finishStep();
  } catch (const Error &) {
    // The step is abandoned either way.
  }
}

void Runtime::step(const std::uint64_t *ids, std::int64_t batch, const std::int32_t *rowIds,
                   const bf16_t *queries, bf16_t *output, MemorySpace memory,
                   MemorySpace selectionMemory) {
  beginStep(ids, batch);
  try {
    const std::int64_t selections = batch * shape_.queries * shape_.topk;
    const std::int64_t queryElems = batch * shape_.queries * shape_.heads * shape_.qkDim;
    const std::int64_t outputElems = batch * shape_.queries * shape_.heads * shape_.vDim;
    if (batch > 0 && (!rowIds || !queries || !output))
      throw InputError("null row ids, queries or output for a step of " + std::to_string(batch) +
                       " requests");
    for (std::int32_t g = 0; g < layout_.groups(); ++g)
      selectGroup(g, batch > 0 ? rowIds + g * selections : nullptr, selectionMemory);
    for (std::int32_t l = 0; l < layout_.layers; ++l)
      attendLayer(l, batch > 0 ? queries + l * queryElems : nullptr,
                  batch > 0 ? output + l * outputElems : nullptr, memory);
    endStep();
  } catch (...) {
    if (inStep_)
      abortStep();
    throw;
  }
}

//===----------------------------------------------------------------------===//
// Statistics and checks
//===----------------------------------------------------------------------===//

RuntimeStats Runtime::stats() const {
  RuntimeStats s;
  s.steps = steps_;
  if (!tiers_.storage)
    return s;
  s.lastStep = controller_->lastStep();
  s.totals = controller_->totals();
  s.admittedRequests = controller_->liveCount();
  // Bytes as stored: a slot of group g spans every pool of the group.
  const std::int32_t P = layout_.layersPerPool;
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    GroupOccupancy o = controller_->occupancy(g);
    const std::int64_t pools = (layout_.endLayer(g) - layout_.firstLayer(g) + P - 1) / P;
    s.hbmBytesUsed += static_cast<std::int64_t>(o.used) * pools * layout_.tokenBytes();
    s.optionalUsedSlots += o.optionalUsed;
  }
  const std::int64_t poolBytes = layout_.pools() * layout_.tokenBytes();
  s.hbmBytesCapacity = static_cast<std::int64_t>(layout_.hbmSlots) * poolBytes;
  s.hostBytesUsed = controller_->hostAllocator().usedRows() * poolBytes;
  s.hostBytesCapacity = layout_.hostRows * poolBytes;
  s.optionalBudgetSlots = controller_->optionalBudget();
  const TierGraphStats graphs = tiers_.runner->graphStats();
  s.graphCaptures = graphs.captures;
  s.graphReplays = graphs.replays;
  return s;
}

void Runtime::checkReads(std::int32_t layer) {
  const std::int32_t group = layer / layout_.layersPerGroup;
  const std::vector<std::int32_t> &rows = rowIds_[static_cast<std::size_t>(group)];
  const std::vector<std::int32_t> &slots = slots_[static_cast<std::size_t>(group)];
  const std::uint8_t *pool = tiers_.storage->hbmSnapshot(layer);
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  const std::size_t tokenBytes = static_cast<std::size_t>(layout_.tokenBytes());
  const std::size_t layerOffset = static_cast<std::size_t>(layout_.layerOffset(layer));
  const std::int64_t perLane = shape_.queries * shape_.topk;
  for (std::int64_t b = 0; b < shape_.batch; ++b) {
    if (lanes_[static_cast<std::size_t>(b)] < 0)
      continue;
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::size_t e = static_cast<std::size_t>(b * perLane + i);
      if (rows[e] < 0)
        continue;
      const std::int64_t hostRow = historyStart_[static_cast<std::size_t>(b)] + rows[e];
      const std::uint8_t *host = tiers_.storage->hostRow(layer, hostRow);
      if (!hashes_.empty() &&
          rowHash(host) != hashes_[static_cast<std::size_t>(layer * layout_.hostRows + hostRow)])
        throw InvariantError("invariant violated: host row " + std::to_string(hostRow) +
                             " of layer " + std::to_string(layer) + " (lane " + std::to_string(b) +
                             ", row " + std::to_string(rows[e]) + ") changed since it was written");
      if (slots[e] >= 0 &&
          std::memcmp(pool + static_cast<std::size_t>(slots[e]) * tokenBytes + layerOffset, host,
                      rowBytes) != 0)
        throw InvariantError("invariant violated: layer " + std::to_string(layer) +
                             " read HBM slot " + std::to_string(slots[e]) + " for lane " +
                             std::to_string(b) + ", row " + std::to_string(rows[e]) +
                             ", and it differs from the host copy");
    }
  }
}

void Runtime::checkStepLog(std::int32_t group, const StepLog &log) {
  // The selections themselves, downloaded for the check (and for checkReads).
  const std::size_t gi = static_cast<std::size_t>(group);
  const std::int32_t *taken = tiers_.runner->selectionsOnHost(group);
  checkSelections(group, taken);
  std::copy(taken, taken + rowIds_[gi].size(), rowIds_[gi].begin());
  // What the log must say: the slots the controller's table gives (as the
  // kernels read them), each hit slot once, each miss, the valid count.
  const std::vector<std::int32_t> &table = controller_->residencyTable(group);
  const std::int64_t perLane = shape_.queries * shape_.topk;
  std::vector<std::int32_t> &slots = slots_[gi];
  std::vector<std::int32_t> hits;
  std::vector<std::int64_t> misses;
  std::int64_t entries = 0;
  for (std::int64_t b = 0; b < shape_.batch; ++b)
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::size_t e = static_cast<std::size_t>(b * perLane + i);
      const std::int32_t id = rowIds_[gi][e];
      slots[e] = -1;
      if (id < 0)
        continue;
      ++entries;
      slots[e] = table[static_cast<std::size_t>(historyStart_[static_cast<std::size_t>(b)] + id)];
      if (slots[e] >= 0)
        hits.push_back(slots[e]);
      else
        misses.push_back(b << 32 | id);
    }
  auto distinct = [](auto &v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  distinct(hits);
  distinct(misses);
  std::vector<std::int32_t> loggedHits = log.hitSlots;
  std::sort(loggedHits.begin(), loggedHits.end());
  std::vector<std::int64_t> loggedMisses;
  for (std::size_t i = 0; i + 1 < log.misses.size(); i += 2)
    loggedMisses.push_back(static_cast<std::int64_t>(log.misses[i]) << 32 | log.misses[i + 1]);
  const std::size_t missEntries = loggedMisses.size();
  distinct(loggedMisses);
  const std::int64_t hitEntries = entries - static_cast<std::int64_t>(missEntries);
  if (loggedHits != hits || loggedMisses != misses || log.entries != entries || hitEntries < 0)
    throw InvariantError("invariant violated: the step log of layer group " +
                         std::to_string(group) + " lists " + std::to_string(loggedHits.size()) +
                         " slots hit, " + std::to_string(missEntries) + " misses (" +
                         std::to_string(loggedMisses.size()) + " distinct) and " +
                         std::to_string(log.entries) + " valid selections; the selections give " +
                         std::to_string(hits.size()) + " slots, " + std::to_string(misses.size()) +
                         " distinct misses and " + std::to_string(entries) + " valid selections" +
                         (loggedHits == hits && loggedMisses == misses ? "" : ", other rows"));
}

void Runtime::checkCopies(const std::vector<RowCopy> &copies) {
  if (copies.empty())
    return;
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  for (std::int32_t l = 0; l < layout_.layers; ++l) {
    const std::int32_t group = l / layout_.layersPerGroup;
    const std::uint8_t *pool = nullptr;
    for (const RowCopy &copy : copies) {
      if (copy.group != group)
        continue;
      if (!pool)
        pool = tiers_.storage->hbmSnapshot(l);
      if (std::memcmp(pool + static_cast<std::size_t>(copy.slot) * layout_.tokenBytes() +
                          layout_.layerOffset(l),
                      tiers_.storage->hostRow(l, copy.hostRow), rowBytes) != 0)
        throw InvariantError("invariant violated: layer " + std::to_string(l) + " slot " +
                             std::to_string(copy.slot) + " differs from host row " +
                             std::to_string(copy.hostRow) + " after it was copied there");
    }
  }
}

void Runtime::checkRequestRows(std::int32_t index, const char *when) {
  const std::int64_t start = controller_->historyStart(index);
  const std::int64_t len = controller_->historyLen(index);
  const std::size_t rowBytes = static_cast<std::size_t>(layout_.rowBytes);
  for (std::int32_t l = 0; l < layout_.layers; ++l) {
    const std::int32_t group = l / layout_.layersPerGroup;
    const std::uint8_t *pool = tiers_.storage->hbmSnapshot(l);
    for (std::int64_t row = 0; row < len; ++row) {
      const std::uint8_t *host = tiers_.storage->hostRow(l, start + row);
      if (!hashes_.empty() &&
          rowHash(host) != hashes_[static_cast<std::size_t>(l * layout_.hostRows + start + row)])
        throw InvariantError(std::string("invariant violated (") + when + "): row " +
                             std::to_string(row) + " of request index " + std::to_string(index) +
                             ", layer " + std::to_string(l) + ", is not what was written");
      const std::int32_t slot = controller_->slotOf(group, index, row);
      if (slot >= 0 && std::memcmp(pool + static_cast<std::size_t>(slot) * layout_.tokenBytes() +
                                       layout_.layerOffset(l),
                                   host, rowBytes) != 0)
        throw InvariantError(std::string("invariant violated (") + when + "): resident row " +
                             std::to_string(row) + " of request index " + std::to_string(index) +
                             ", layer " + std::to_string(l) + " (slot " + std::to_string(slot) +
                             ") differs from its host copy");
    }
  }
}

void Runtime::checkInvariants() {
  requireStep("check");
  requireHbmCoherent("check");
  controller_->checkConsistency();
  for (const auto &[id, index] : index_)
    checkRequestRows(index, "full check");
  // The device residency maps (with a placement step) mirror the controller.
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    const std::int32_t *map = tiers_.storage->residencyMapSnapshot(g);
    if (!map)
      break;
    const std::vector<std::int32_t> &table = controller_->residencyTable(g);
    for (std::size_t row = 0; row < table.size(); ++row)
      if (map[row] != table[row])
        throw Error("invariant: the device residency map of layer group " + std::to_string(g) +
                    " gives host row " + std::to_string(row) + " slot " + std::to_string(map[row]) +
                    ", the controller " + std::to_string(table[row]));
  }
  // So does the device replacement state, where kernels stamp the hits: for
  // every slot that holds a history row.
  if (!tiers_.runner->resolvesOnDevice())
    return;
  for (std::int32_t g = 0; g < layout_.groups(); ++g) {
    const std::int32_t *recency = tiers_.storage->recencySnapshot(g);
    for (std::int32_t s = 0; s < layout_.hbmSlots; ++s) {
      const SlotKind kind = controller_->slotKind(g, s);
      if (kind != SlotKind::Newest && kind != SlotKind::Hot)
        continue;
      const auto [last, previous] = controller_->slotRecency(g, s);
      const auto deviceLast = static_cast<std::uint32_t>(recency[2 * s]);
      const auto devicePrevious = static_cast<std::uint32_t>(recency[2 * s + 1]);
      if (deviceLast != last || devicePrevious != previous)
        throw Error("invariant: the device replacement state of layer group " + std::to_string(g) +
                    " gives slot " + std::to_string(s) + " uses {" + std::to_string(deviceLast) +
                    ", " + std::to_string(devicePrevious) + "}, the controller {" +
                    std::to_string(last) + ", " + std::to_string(previous) + "}");
    }
  }
}

void Runtime::applyCopies(const std::vector<RowCopy> &copies) {
  // Releases, then copies. One placement launch needs distinct rows, which
  // they are: every call hands over what it changed, and the controller
  // never releases and places one row in one call. The checker verifies it.
  std::vector<RowCopy> changes = std::move(releases_);
  releases_.clear();
  changes.insert(changes.end(), copies.begin(), copies.end());
  if (changes.empty())
    return;
  if (config_.checkInvariants) {
    std::vector<std::int64_t> keys;
    keys.reserve(changes.size());
    for (const RowCopy &change : changes)
      keys.push_back(change.hostRow * layout_.groups() + change.group);
    std::sort(keys.begin(), keys.end());
    auto twice = std::adjacent_find(keys.begin(), keys.end());
    if (twice != keys.end())
      throw InvariantError("invariant violated: host row " +
                           std::to_string(*twice / layout_.groups()) + " of layer group " +
                           std::to_string(*twice % layout_.groups()) +
                           " is released and placed in one call");
  }
  // Copies that failed before go first, in their order (see repairHbm).
  if (!repairHbm()) {
    pendingCopies_.push_back(std::move(changes));
    return;
  }
  try {
    tiers_.storage->copyToHbm(changes);
  } catch (const std::exception &error) {
    pendingCopies_.push_back(std::move(changes));
    pendingError_ = error.what();
  }
}

bool Runtime::repairHbm() {
  while (!pendingCopies_.empty()) {
    try {
      tiers_.storage->copyToHbm(pendingCopies_.front());
    } catch (const std::exception &error) {
      pendingError_ = error.what();
      return false;
    }
    pendingCopies_.erase(pendingCopies_.begin());
  }
  return true;
}

void Runtime::requireHbmCoherent(const char *what) {
  if (repairHbm())
    return;
  std::size_t rows = 0;
  for (const std::vector<RowCopy> &batch : pendingCopies_)
    rows += batch.size();
  throw DeviceError(std::string(what) + ": " + std::to_string(rows) +
                    " row copies into HBM failed and still fail when retried (" + pendingError_ +
                    "); the host store holds every row, and the copies are retried before every "
                    "step");
}

void Runtime::loadPlacementStep(const std::string &stepDirectory) {
  loadPlacementStep(loadAuxiliaryStep(stepDirectory, "load placement step"));
}

void Runtime::loadPlacementStep(const Manifest &manifest) {
  requireStep("load placement step");
  if (inStep_)
    throw StateError("cannot load a placement step during a step");
  if (placementStepLoaded_)
    throw StateError("a placement step is already loaded");
  if (manifest.launches.size() != 1 || manifest.launches[0].op != "place_rows")
    throw Error("the step " + manifest.directory +
                " is not a placement step (one dhs.place_rows launch)");
  const KvPoolInfo &pool = manifest.argument(ArgumentRole::KvPool).pool;
  if (pool.layers != layout_.layersPerPool || pool.rowBytes != layout_.rowBytes)
    throw Error("the placement step " + manifest.directory + " places tokens of " +
                std::to_string(pool.layers) + " layers x " + std::to_string(pool.rowBytes) +
                " bytes (" + pool.format + "); this session's pools hold " +
                std::to_string(layout_.layersPerPool) + " layers x " +
                std::to_string(layout_.rowBytes) + " bytes");
  tiers_.storage->setPlacementStep(manifest, *controller_);
  controller_->setReleaseLog(&releases_);
  placementStepLoaded_ = true;
}

void Runtime::setCudaGraphs(bool on) {
  requireStep("CUDA graphs");
  if (inStep_)
    throw StateError("CUDA graphs can be turned on or off only between steps");
  tiers_.runner->setGraphs(on);
}

bool Runtime::cudaGraphs() const { return tiers_.runner && tiers_.runner->graphsOn(); }

TierStorage &Runtime::storageForTesting() {
  requireStep("tiers");
  return *tiers_.storage;
}

} // namespace dhs::runtime
