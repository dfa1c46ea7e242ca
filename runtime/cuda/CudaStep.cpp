//===- CudaStep.cpp - Run a compiled step on a GPU ------------------------===//

#include "runtime/cuda/CudaStep.h"

#include "runtime/core/Error.h"
#include "runtime/core/Parallel.h"
#include "runtime/core/StepPlan.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaQueue.h"
#include "runtime/cuda/CudaResources.h"
#include "runtime/cuda/JitLink.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

namespace dhs::runtime {

std::string archForDevice(int major, int minor) {
  return "sm_" + std::to_string(major) + std::to_string(minor) + (major == 9 ? "a" : "");
}

namespace {

using namespace cuda_detail;

/// Position of flat output element `index` as "[b, q, h, v]".
std::string outputPosition(const ProblemShape &s, std::size_t index) {
  std::int64_t i = static_cast<std::int64_t>(index);
  std::int64_t v = i % s.vDim;
  i /= s.vDim;
  std::int64_t h = i % s.heads;
  i /= s.heads;
  std::int64_t q = i % s.queries;
  std::int64_t b = i / s.queries;
  return "[request " + std::to_string(b) + ", query " + std::to_string(q) + ", head " +
         std::to_string(h) + ", v " + std::to_string(v) + "]";
}

/// Throws unless kernel `name`, as PTX `ptx` declares it, takes the `count`
/// 8-byte parameters its launch flattens to (the memref descriptors, as the
/// manifest lists them): the driver reads as many as the kernel declares,
/// so a shorter list would be read past its end and another one would hand
/// the kernel a size as an address. (The PTX the module is loaded from, not
/// the driver: cuFuncGetParamInfo says there is no next parameter only by
/// failing, which compute-sanitizer reports as an API error.)
void requireParameterList(const std::string &ptx, const std::string &ptxPath,
                          const std::string &name, std::size_t count) {
  const std::optional<std::vector<std::size_t>> sizes = ptxEntryParamSizes(ptx, name);
  if (!sizes)
    throw Error("kernel '" + name + "' has no parameter list that can be read in " + ptxPath);
  std::size_t bytes = 0;
  bool words = true;
  for (std::size_t size : *sizes) {
    bytes += size;
    words = words && size == 8;
  }
  if (sizes->size() != count || !words)
    throw Error("kernel '" + name + "' takes " + std::to_string(sizes->size()) + " parameters (" +
                std::to_string(bytes) + " bytes); its launch in the manifest passes " +
                std::to_string(count) +
                " of 8 bytes (its memref descriptors, flattened): the "
                "manifest does not describe this PTX");
}

/// The device address of scratch parameter `param` (in the arena).
CUdeviceptr scratchAddress(const LaunchParam &param, const CudaStepBuffers &buffers,
                           const std::string &step) {
  if (param.source != ParamSource::Scratch)
    throw Error("step '" + step + "': " + abi::name(param.role) + " must be a scratch buffer");
  if (!buffers.arena)
    throw Error("step '" + step + "' needs a staging arena but none was given");
  return buffers.arena + static_cast<CUdeviceptr>(param.offset);
}

/// Where parameter `param` of `launch` lies over `buffers`: its address
/// and sizes (`step` names the step in errors; `noGroups`: the one-row
/// table of zeros a grouped launch of one group takes).
std::pair<CUdeviceptr, std::vector<std::int64_t>>
bindParam(const Launch &launch, const LaunchParam &param, const CudaStepBuffers &buffers,
          const std::string &step, CUdeviceptr noGroups) {
  std::vector<std::int64_t> sizes = param.shape;
  switch (param.source) {
  case ParamSource::Argument:
    return {buffers.arguments.at(static_cast<std::size_t>(param.argumentIndex)), sizes};
  case ParamSource::PoolHbm:
    sizes[0] = buffers.hbmSlots;
    return {buffers.hbm, sizes};
  case ParamSource::PoolHost:
    sizes[0] = buffers.hostRows;
    return {buffers.host, sizes};
  case ParamSource::PoolMap:
    if (!buffers.map)
      throw Error("step '" + step + "' needs the pool's residency map but none was given");
    sizes[0] = buffers.hostRows;
    return {buffers.map, sizes};
  case ParamSource::PoolRecency:
    if (!buffers.recency)
      throw Error("step '" + step + "' needs the pool's replacement state but none was given");
    sizes[0] = buffers.hbmSlots;
    return {buffers.recency, sizes};
  case ParamSource::PoolLog:
    // An empty log (no address needed) records nothing.
    if (!buffers.log && buffers.logWords > 0)
      throw Error("step '" + step + "' was given a step log without memory");
    sizes[0] = buffers.logWords;
    return {buffers.log, sizes};
  case ParamSource::PoolWriteBack:
    // An empty ring (no address needed) keeps nothing.
    if (!buffers.writeBack && buffers.writeBackRows > 0)
      throw Error("step '" + step + "' was given a write-back ring without memory");
    sizes[0] = buffers.writeBackRows;
    return {buffers.writeBack, sizes};
  case ParamSource::Status:
    return {buffers.status, sizes};
  case ParamSource::Scratch:
    return {scratchAddress(param, buffers, step), sizes};
  case ParamSource::GroupBindings: {
    const std::int64_t columns = static_cast<std::int64_t>(launch.params.size());
    if (!buffers.groupBindings)
      return {noGroups, {1, columns}};
    if (buffers.groups < 1 || buffers.groups > 65535)
      throw Error("step '" + step + "': a grouped launch of " + std::to_string(buffers.groups) +
                  " groups (1 to 65535)");
    return {buffers.groupBindings, {buffers.groups, columns}};
  }
  }
  throw Error("step '" + step + "': a parameter of unknown source");
}

/// The flattened memref descriptors of `launch` over `buffers` (`step`
/// names the step in errors).
KernelParams kernelParams(const Launch &launch, const CudaStepBuffers &buffers,
                          const std::string &step, CUdeviceptr noGroups) {
  KernelParams params;
  for (const LaunchParam &param : launch.params) {
    auto [address, sizes] = bindParam(launch, param, buffers, step, noGroups);
    params.addMemref(address, sizes);
  }
  params.finish();
  return params;
}

/// Enqueues `launch` of `function` with `params` on `stream`: clears a
/// fetch's ready flags first, and starts a launch that waits for the one
/// before it itself (Launch::dependentLaunch: an attention on a fetch's ready
/// flags, a combine on its attention) as a programmatic dependent launch.
void enqueueLaunch(const Launch &launch, CUfunction function, KernelParams &params,
                   const CudaStepBuffers &buffers, const std::string &step, CUstream stream) {
  const CudaDriver &cuda = driver();
  // Overlapped staging: the fetch's ready flags start cleared, and the
  // attention that waits for them starts while the fetch runs.
  const LaunchParam *ready = nullptr;
  for (const LaunchParam &param : launch.params)
    ready = param.role == abi::ParamRole::ReadyFlags ? &param : ready;
  if (ready && launch.kind == abi::LaunchKind::Fetch)
    cuda.check(
        cuda.memsetD32Async(scratchAddress(*ready, buffers, step), 0, ready->elements(), stream),
        "clearing the ready flags of " + launch.kernel);
  // A grouped launch runs its groups along the grid's z.
  const unsigned gridZ = launch.isGrouped() && buffers.groupBindings
                             ? static_cast<unsigned>(buffers.groups)
                             : launch.grid[2];
  const bool dependent = launch.dependentLaunch && cuda.launchKernelEx;
  const bool injected = DHS_FAULT(Launch);
  CUresult result = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  if (!injected && dependent) {
    CUlaunchAttribute attribute{};
    attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = launch.grid[0];
    config.gridDimY = launch.grid[1];
    config.gridDimZ = gridZ;
    config.blockDimX = launch.block[0];
    config.blockDimY = launch.block[1];
    config.blockDimZ = launch.block[2];
    config.sharedMemBytes = launch.dynamicSharedBytes;
    config.hStream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    result = cuda.launchKernelEx(&config, function, params.pointers.data(), nullptr);
  } else if (!injected) {
    result = cuda.launchKernel(function, launch.grid[0], launch.grid[1], gridZ, launch.block[0],
                               launch.block[1], launch.block[2], launch.dynamicSharedBytes, stream,
                               params.pointers.data(), nullptr);
  }
  cuda.check(result,
             std::string(dependent ? "cuLaunchKernelEx(" : "cuLaunchKernel(") + launch.kernel +
                 ", grid " + formatDims({launch.grid[0], launch.grid[1], gridZ}) + ", block " +
                 formatDims(launch.block) + ", " + std::to_string(launch.dynamicSharedBytes) +
                 " bytes dynamic shared)" + (injected ? " (injected fault)" : ""));
}

} // namespace

/// Everything the backend holds; members are destroyed in reverse order, so
/// modules go before the context.
struct CudaStep::State {
  Manifest manifest;
  DeviceInfo device;
  std::unique_ptr<PrimaryContext> context;
  std::vector<std::unique_ptr<Module>> modules;
  std::vector<CUfunction> functions; // per launch
  // Per launch, its resident form (Launch::residentKernel; null: none).
  std::vector<CUfunction> residentFunctions;
  std::vector<KernelInfo> kernels; // per launch
  // The table of zeros a grouped launch of its own group alone takes
  // (a row of the most parameters).
  std::unique_ptr<DeviceBuffer> noGroups;

  /// The kernel launch `i` runs over `buffers`: its resident form where it
  /// has one and the buffers' form takes it.
  CUfunction functionOf(std::size_t i, const CudaStepBuffers &buffers) const {
    return runsResidentAt(manifest.launches[i], buffers.formShare) ? residentFunctions[i]
                                                                   : functions[i];
  }
};

CudaStep::CudaStep(const Manifest &manifest, int ordinal) : state_(std::make_unique<State>()) {
  const CudaDriver &cuda = driver();
  cuda.requireAvailable();
  if (ordinal < 0 || ordinal >= cuda.deviceCount())
    throw Error("CUDA device " + std::to_string(ordinal) + " does not exist (" +
                std::to_string(cuda.deviceCount()) + " devices)");
  State &st = *state_;
  st.manifest = manifest;

  // The device.
  CUdevice device;
  cuda.check(cuda.deviceGet(&device, ordinal), "cuDeviceGet");
  char name[256] = {};
  cuda.check(cuda.deviceGetName(name, sizeof(name) - 1, device), "cuDeviceGetName");
  DeviceInfo &info = st.device;
  info.ordinal = ordinal;
  info.name = name;
  auto attribute = [&](CUdevice_attribute which, const char *what) {
    int value = 0;
    cuda.check(cuda.deviceGetAttribute(&value, which, device),
               std::string("cuDeviceGetAttribute(") + what + ")");
    return value;
  };
  info.major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "major");
  info.minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "minor");
  info.multiprocessors = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessors");
  info.maxSharedPerBlockOptin = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                          "max shared memory per block opt-in");
  if (!attribute(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, "can map host memory"))
    throw Error("CUDA device " + info.name +
                " cannot map host memory (needed for the host KV store)");
  cuda.check(cuda.deviceTotalMem(&info.totalMemory, device), "cuDeviceTotalMem");
  info.arch = archForDevice(info.major, info.minor);

  st.context = std::make_unique<PrimaryContext>(device);

  // Link each distinct PTX file once, load it, find the launches' kernels.
  const JitLink &jitLink = JitLink::instance();
  if (!jitLink.available())
    throw Error("cannot link the step's PTX: " + jitLink.unavailableReason());
  struct LoadedPtx {
    std::string text;
    Module *module;
    LinkedCubin linked;
  };
  std::map<std::string, LoadedPtx> loaded;
  for (std::size_t i = 0; i < manifest.launches.size(); ++i) {
    const Launch &launch = manifest.launches[i];
    auto it = loaded.find(launch.ptxPath);
    if (it == loaded.end()) {
      std::string ptx = readPtxFile(launch.ptxPath);
      LinkedCubin linked = jitLink.linkPtx(ptx, info.arch, launch.ptxPath);
      // nvJitLink compiles PTX as relocatable code, which ignores setmaxnreg
      // (C7504) and serializes every wgmma (C7509): the module is loaded
      // from the PTX through the driver's whole-program JIT instead.
      st.modules.push_back(std::make_unique<Module>(ptx, launch.ptxPath));
      it = loaded
               .emplace(launch.ptxPath,
                        LoadedPtx{std::move(ptx), st.modules.back().get(), std::move(linked)})
               .first;
    }
    const std::string &ptx = it->second.text;
    const Module &module = *it->second.module;
    const std::vector<std::uint8_t> &cubin = it->second.linked.cubin;

    CUfunction function = nullptr;
    CUresult result = cuda.moduleGetFunction(&function, module.get(), launch.kernel.c_str());
    if (result == CUDA_ERROR_NOT_FOUND) {
      std::string known;
      try {
        for (const std::string &entry : cubinFunctionNames(cubin))
          known += (known.empty() ? "" : ", ") + entry;
      } catch (const Error &) {
        known = "unknown";
      }
      throw Error("kernel '" + launch.kernel + "' of launches[" + std::to_string(i) +
                  "] is not in " + launch.ptxPath +
                  " (its kernels: " + (known.empty() ? "none" : known) + ")");
    }
    cuda.check(result, "cuModuleGetFunction(" + launch.kernel + ")");
    requireParameterList(ptx, launch.ptxPath, launch.kernel, launch.flattenedParamCount());

    KernelInfo kernel;
    kernel.kernel = launch.kernel;
    kernel.ptxPath = launch.ptxPath;
    kernel.cubinBytes = cubin.size();
    auto functionAttribute = [&](CUfunction_attribute which, const char *what) {
      int value = 0;
      cuda.check(cuda.funcGetAttribute(&value, which, function),
                 std::string("cuFuncGetAttribute(") + launch.kernel + ", " + what + ")");
      return value;
    };
    kernel.registers = functionAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS, "registers");
    kernel.maxThreadsPerBlock =
        functionAttribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max threads");
    kernel.staticSharedBytes =
        functionAttribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "shared bytes");
    kernel.localBytes = functionAttribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "local bytes");

    // The launch configuration must fit the kernel and the device.
    const unsigned threads = launch.block[0] * launch.block[1] * launch.block[2];
    if (static_cast<int>(threads) > kernel.maxThreadsPerBlock)
      throw Error("kernel '" + launch.kernel + "' can run at most " +
                  std::to_string(kernel.maxThreadsPerBlock) + " threads per block (" +
                  std::to_string(kernel.registers) + " registers each), the manifest asks for " +
                  std::to_string(threads));
    const long long shared =
        static_cast<long long>(launch.dynamicSharedBytes) + kernel.staticSharedBytes;
    if (shared > info.maxSharedPerBlockOptin)
      throw Error("kernel '" + launch.kernel + "' needs " + std::to_string(shared) +
                  " bytes of shared memory per block (" +
                  std::to_string(launch.dynamicSharedBytes) + " dynamic), " + info.name +
                  " allows " + std::to_string(info.maxSharedPerBlockOptin));
    if (launch.dynamicSharedBytes > 48 * 1024)
      cuda.check(cuda.funcSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       static_cast<int>(launch.dynamicSharedBytes)),
                 "cuFuncSetAttribute(" + launch.kernel + ", MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    // The resident form: the same signature and launch configuration.
    CUfunction resident = nullptr;
    if (!launch.residentKernel.empty()) {
      const std::string &name = launch.residentKernel;
      result = cuda.moduleGetFunction(&resident, module.get(), name.c_str());
      if (result == CUDA_ERROR_NOT_FOUND)
        throw Error("resident kernel '" + name + "' of launches[" + std::to_string(i) +
                    "] is not in " + launch.ptxPath);
      cuda.check(result, "cuModuleGetFunction(" + name + ")");
      requireParameterList(ptx, launch.ptxPath, name, launch.flattenedParamCount());
      if (launch.dynamicSharedBytes > 48 * 1024)
        cuda.check(cuda.funcSetAttribute(resident, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         static_cast<int>(launch.dynamicSharedBytes)),
                   "cuFuncSetAttribute(" + name + ", MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    }
    st.functions.push_back(function);
    st.residentFunctions.push_back(resident);
    st.kernels.push_back(kernel);
  }
  std::size_t columns = 0;
  for (const Launch &launch : manifest.launches)
    if (launch.isGrouped())
      columns = std::max(columns, launch.params.size());
  if (columns > 0) {
    st.noGroups = std::make_unique<DeviceBuffer>(columns * 8, "a grouped launch's table of zeros");
    cuda.check(cuda.memsetD32(st.noGroups->get(), 0, columns * 2), "clearing a table of zeros");
  }
}

std::vector<std::int64_t>
CudaStep::groupBindings(std::size_t index, const std::vector<CudaStepBuffers> &groups) const {
  const State &st = *state_;
  if (index >= st.manifest.launches.size() || !st.manifest.launches[index].isGrouped())
    throw Error("launch " + std::to_string(index) + " of step '" + st.manifest.step +
                "' does not run groups (it takes no group_bindings table)");
  if (groups.empty())
    throw Error("a grouped launch of no groups");
  const Launch &launch = st.manifest.launches[index];
  const std::size_t columns = launch.params.size();
  std::vector<std::int64_t> table(groups.size() * columns, 0);
  for (std::size_t p = 0; p + 1 < columns; ++p) {
    const LaunchParam &param = launch.params[p];
    const auto [base, sizes] = bindParam(launch, param, groups[0], st.manifest.step, 0);
    for (std::size_t g = 1; g < groups.size(); ++g) {
      const auto [address, groupSizes] = bindParam(launch, param, groups[g], st.manifest.step, 0);
      const std::int64_t distance =
          static_cast<std::int64_t>(address) - static_cast<std::int64_t>(base);
      if (groupSizes != sizes || distance % static_cast<std::int64_t>(abi::bytes(param.dtype)))
        throw Error("step '" + st.manifest.step + "': group " + std::to_string(g) + "'s " +
                    abi::name(param.role) + " (" + std::to_string(groupSizes.size()) + "-d, " +
                    std::to_string(distance) +
                    " bytes away) differs from group 0's in its shape or alignment: the groups "
                    "cannot share one launch");
      table[g * columns + p] = distance;
    }
  }
  return table;
}

CudaStep::~CudaStep() {
  // Unload modules with the context current; errors cannot be reported here.
  if (state_ && state_->context) {
    try {
      state_->context->makeCurrent();
    } catch (const Error &) {
    }
  }
}

const DeviceInfo &CudaStep::device() const { return state_->device; }

const Manifest &CudaStep::manifest() const { return state_->manifest; }

void CudaStep::makeCurrent() const { state_->context->makeCurrent(); }

void CudaStep::launchAsync(const CudaStepBuffers &buffers, CUstream stream) const {
  launchAsync(buffers, stream, 0, state_->manifest.launches.size());
}

void CudaStep::launchAsync(const CudaStepBuffers &buffers, CUstream stream, std::size_t first,
                           std::size_t count) const {
  const State &st = *state_;
  if (first > st.manifest.launches.size() || count > st.manifest.launches.size() - first)
    throw Error("launches " + std::to_string(first) + " .. " + std::to_string(first + count) +
                " of step '" + st.manifest.step + "', which has " +
                std::to_string(st.manifest.launches.size()));
  for (std::size_t i = first; i < first + count; ++i) {
    const Launch &launch = st.manifest.launches[i];
    if (!runsAt(launch, buffers.formShare))
      continue;
    KernelParams params =
        kernelParams(launch, buffers, st.manifest.step, st.noGroups ? st.noGroups->get() : 0);
    enqueueLaunch(launch, st.functionOf(i, buffers), params, buffers, st.manifest.step, stream);
  }
}

const std::vector<KernelInfo> &CudaStep::kernels() const { return state_->kernels; }

std::int64_t
countFetchedRows(const Manifest &manifest, double formShare,
                 const std::function<std::vector<std::int32_t>(const LaunchParam &)> &rowList,
                 const std::function<std::vector<std::int32_t>()> &slots) {
  std::int64_t fetched = -1;
  std::vector<std::int32_t> stepSlots;
  for (const Launch &launch : manifest.launches) {
    if (launch.kind != abi::LaunchKind::Fetch || !runsAt(launch, formShare))
      continue;
    const LaunchParam *list = nullptr;
    bool withSlots = false;
    for (const LaunchParam &param : launch.params) {
      list = param.role == abi::ParamRole::RowIds ? &param : list;
      // A fetch of selections with their slots skips resident ones.
      withSlots = withSlots || param.role == abi::ParamRole::Slots;
    }
    if (!list)
      throw Error("a fetch launch of step '" + manifest.step + "' has no row list");
    const std::vector<std::int32_t> rows = rowList(*list);
    if (withSlots && stepSlots.empty())
      stepSlots = slots();
    if (fetched < 0)
      fetched = 0;
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (rows[i] != -1 && (!withSlots || stepSlots.at(i) == -1))
        ++fetched;
  }
  return fetched;
}

CudaRunResult CudaStep::run(const SparseAttentionProblem &problem, const CudaRunOptions &options) {
  const CudaDriver &cuda = driver();
  State &st = *state_;
  const Manifest &manifest = st.manifest;
  const ProblemShape &shape = problem.shape;
  if (options.warmup < 0 || options.repeat < 0)
    throw Error("warm-up and repetition counts must not be negative");
  // One layer group's step (its layers over one pool and one selection) runs
  // here too: every layer attends the problem's queries into an output of
  // its own, and the layer the problem reads is the one checked.
  const StepPlan plan = planStep(manifest);
  if (plan.groups.size() > 1)
    throw Error("step '" + manifest.step +
                "' runs several layer groups: run a whole-model step through the Runtime");
  checkProblemMatchesManifest(problem, manifest);
  if (options.validateInputs)
    problem.validate();
  st.context->makeCurrent();

  // Memory: one device buffer per memref argument, the two pool tiers, the
  // status word.
  const std::size_t rowBytes = static_cast<std::size_t>(shape.rowElems) * sizeof(bf16_t);
  std::vector<std::unique_ptr<DeviceBuffer>> argumentBuffers(manifest.arguments.size());
  auto upload = [&](ArgumentRole role, const void *data, std::size_t bytes) {
    const Argument &arg = manifest.argument(role);
    auto buffer = std::make_unique<DeviceBuffer>(bytes, abi::name(role));
    cuda.check(cuda.memcpyHtoD(buffer->get(), data, bytes),
               std::string("cuMemcpyHtoD(") + abi::name(role) + ")");
    argumentBuffers[static_cast<std::size_t>(arg.index)] = std::move(buffer);
  };
  upload(ArgumentRole::Queries, problem.queries.data(), problem.queries.size() * sizeof(bf16_t));
  upload(ArgumentRole::RowIds, problem.rowIds.data(), problem.rowIds.size() * sizeof(std::int32_t));
  upload(ArgumentRole::Slots, problem.slots.data(), problem.slots.size() * sizeof(std::int32_t));
  upload(ArgumentRole::HistoryStart, problem.historyStart.data(),
         problem.historyStart.size() * sizeof(std::int64_t));
  upload(ArgumentRole::HistoryLen, problem.historyLen.data(),
         problem.historyLen.size() * sizeof(std::int32_t));
  if (shape.windowSize > 0) {
    upload(ArgumentRole::WindowRing, problem.windowRing.data(),
           problem.windowRing.size() * sizeof(bf16_t));
    upload(ArgumentRole::WindowTokens, problem.windowTokens.data(),
           problem.windowTokens.size() * sizeof(std::int32_t));
  }
  const std::size_t outputCount = static_cast<std::size_t>(shape.outputCount());
  const std::size_t outputBytes = outputCount * sizeof(bf16_t);
  int outputIndex = manifest.argument(ArgumentRole::Output).index;
  for (const StepLayerPlan &layer : plan.layers) {
    auto &queries = argumentBuffers[static_cast<std::size_t>(layer.queries)];
    if (!queries) {
      queries = std::make_unique<DeviceBuffer>(problem.queries.size() * sizeof(bf16_t), "queries");
      cuda.check(cuda.memcpyHtoD(queries->get(), problem.queries.data(),
                                 problem.queries.size() * sizeof(bf16_t)),
                 "cuMemcpyHtoD(queries)");
    }
    argumentBuffers[static_cast<std::size_t>(layer.output)] =
        std::make_unique<DeviceBuffer>(outputBytes, "output");
    if (layer.poolLayer == shape.layer)
      outputIndex = layer.output;
  }
  const CUdeviceptr output = argumentBuffers[static_cast<std::size_t>(outputIndex)]->get();

  DeviceBuffer hbm(static_cast<std::size_t>(shape.hbmSlots) * rowBytes,
                   "the HBM pool (" + std::to_string(shape.hbmSlots) + " slots)");
  const std::size_t hbmBytes = static_cast<std::size_t>(shape.hbmSlots) * rowBytes;
  if (hbmBytes > 0)
    cuda.check(cuda.memcpyHtoD(hbm.get(), problem.hbmPoolData(), hbmBytes),
               "cuMemcpyHtoD(HBM pool)");
  MappedHostBuffer host(static_cast<std::size_t>(shape.hostRows) * rowBytes,
                        "the host store (" + std::to_string(shape.hostRows) + " rows)");
  const std::size_t hostBytes = static_cast<std::size_t>(shape.hostRows) * rowBytes;
  if (hostBytes > 0) {
    // Gigabytes for the largest steps: copied on every core.
    constexpr std::int64_t kChunk = 64 << 20;
    auto *to = static_cast<std::uint8_t *>(host.host());
    const auto *from = reinterpret_cast<const std::uint8_t *>(problem.hostStoreData());
    parallelFor(static_cast<std::int64_t>(hostBytes), kChunk, 0,
                [&](std::int64_t begin, std::int64_t end) {
                  std::memcpy(to + begin, from + begin, static_cast<std::size_t>(end - begin));
                });
  }
  DeviceBuffer status(sizeof(std::uint32_t), "the status word");
  // The staging arena of scratch buffers (fetched rows, union lists, remaps).
  std::unique_ptr<DeviceBuffer> arena;
  if (manifest.arenaBytes > 0)
    arena = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(manifest.arenaBytes),
                                           "the staging arena");

  // Kernel parameters per launch, over this problem's buffers.
  CudaStepBuffers buffers;
  for (const std::unique_ptr<DeviceBuffer> &buffer : argumentBuffers)
    buffers.arguments.push_back(buffer ? buffer->get() : 0);
  buffers.hbm = hbm.get();
  buffers.hbmSlots = shape.hbmSlots;
  buffers.host = host.device();
  buffers.hostRows = shape.hostRows;
  buffers.status = status.get();
  buffers.arena = arena ? arena->get() : 0;
  // The problem's slots tell how many rows the step reads from the host,
  // and so its form (unless the caller chose one).
  const ProblemStats reads = problem.stats();
  buffers.formShare =
      formShare(formLines(manifest, 0, manifest.launches.size()),
                options.missingShare >= 0.0 ? options.missingShare
                                            : missingShare(reads.hostReads, reads.selections));
  CudaRunResult result;
  result.formShare = buffers.formShare;
  result.residentForm =
      std::any_of(manifest.launches.begin(), manifest.launches.end(),
                  [&](const Launch &launch) { return runsResidentAt(launch, buffers.formShare); });
  std::vector<KernelParams> params(manifest.launches.size());
  for (std::size_t i = 0; i < manifest.launches.size(); ++i) {
    for (const LaunchParam &param : manifest.launches[i].params)
      if (param.source == ParamSource::PoolMap || param.source == ParamSource::PoolRecency ||
          param.source == ParamSource::PoolLog || param.source == ParamSource::PoolWriteBack)
        throw Error("step '" + manifest.step + "' uses a pool's residency state (" +
                    abi::name(param.source) + "), which one attention problem does not have");
    params[i] = kernelParams(manifest.launches[i], buffers, manifest.step,
                             st.noGroups ? st.noGroups->get() : 0);
  }

  Stream stream;
  auto launchAll = [&](bool syncEach) {
    for (std::size_t i = 0; i < manifest.launches.size(); ++i) {
      if (!runsAt(manifest.launches[i], buffers.formShare))
        continue;
      enqueueLaunch(manifest.launches[i], st.functionOf(i, buffers), params[i], buffers,
                    manifest.step, stream.get());
      const Launch &launch = manifest.launches[i];
      if (syncEach)
        cuda.check(cuda.streamSynchronize(stream.get()), "kernel " + launch.kernel + " failed");
    }
  };
  auto checkStatus = [&]() {
    std::uint32_t word = 0;
    cuda.check(cuda.memcpyDtoHAsync(&word, status.get(), sizeof(word), stream.get()),
               "reading the status word");
    cuda.check(cuda.streamSynchronize(stream.get()), "reading the status word");
    if (word != 0)
      throw Error("the kernels of step '" + manifest.step + "' rejected their input: status " +
                  describeStatus(word));
  };
  auto download = [&]() {
    std::vector<bf16_t> out(outputCount);
    cuda.check(cuda.memcpyDtoHAsync(out.data(), output, outputBytes, stream.get()),
               "downloading the output");
    cuda.check(cuda.streamSynchronize(stream.get()), "downloading the output");
    return out;
  };
  auto clearStatus = [&]() {
    cuda.check(cuda.memsetD32Async(status.get(), 0, 1, stream.get()), "clearing the status word");
  };

  // The checked run: poisoned output, one launch at a time so that a fault
  // names its kernel.
  cuda.check(cuda.memsetD16Async(output, kBf16Poison, outputCount, stream.get()),
             "poisoning the output");
  clearStatus();
  launchAll(/*syncEach=*/true);
  checkStatus();
  result.output = download();
  std::size_t unwritten = 0, nans = 0, firstUnwritten = 0, firstNan = 0;
  for (std::size_t i = 0; i < outputCount; ++i) {
    bf16_t value = result.output[i];
    if (value == kBf16Poison) {
      if (unwritten++ == 0)
        firstUnwritten = i;
    } else if (bf16IsNan(value) || (value & 0x7FFFu) == 0x7F80u) {
      if (nans++ == 0)
        firstNan = i;
    }
  }
  if (unwritten)
    throw Error(std::to_string(unwritten) + " of " + std::to_string(outputCount) +
                " output elements were not written by the kernels (first at " +
                outputPosition(shape, firstUnwritten) + ")");
  if (nans)
    throw Error("the kernels produced " + std::to_string(nans) +
                " NaN or infinite output elements (first at " + outputPosition(shape, firstNan) +
                ")");

  // Rows the fetches copied from the host.
  result.fetchedRows = countFetchedRows(
      manifest, buffers.formShare,
      [&](const LaunchParam &list) {
        if (list.source != ParamSource::Scratch)
          return problem.rowIds;
        const std::size_t count = list.elements();
        std::vector<std::int32_t> rows(count);
        cuda.check(cuda.memcpyDtoH(rows.data(),
                                   arena->get() + static_cast<CUdeviceptr>(list.offset),
                                   count * sizeof(std::int32_t)),
                   "reading a fetch's row list");
        return rows;
      },
      [&] { return problem.slots; });

  // Timing: warm-up, then each repetition between two events.
  if (options.repeat > 0) {
    for (int i = 0; i < options.warmup; ++i) {
      clearStatus();
      launchAll(false);
    }
    cuda.check(cuda.streamSynchronize(stream.get()), "warm-up runs");
    Event start, stop;
    for (int i = 0; i < options.repeat; ++i) {
      clearStatus();
      cuda.check(cuda.eventRecord(start.get(), stream.get()), "cuEventRecord");
      launchAll(false);
      cuda.check(cuda.eventRecord(stop.get(), stream.get()), "cuEventRecord");
      cuda.check(cuda.eventSynchronize(stop.get()), "timed run");
      float ms = 0.0f;
      cuda.check(cuda.eventElapsedTime(&ms, start.get(), stop.get()), "cuEventElapsedTime");
      result.timesMs.push_back(ms);
    }
    checkStatus();
    std::vector<double> sorted = result.timesMs;
    std::sort(sorted.begin(), sorted.end());
    std::size_t n = sorted.size();
    result.medianMs = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    result.repeatsIdentical = download() == result.output;
  }
  return result;
}

void CudaStep::runAndWait(const CudaStepBuffers &buffers, cuda_detail::CudaQueue &queue,
                          std::initializer_list<Download> downloads,
                          const std::string &kernel) const {
  const CudaDriver &cuda = driver();
  CUstream stream = queue.stream();
  cuda.check(cuda.memsetD32Async(buffers.status, 0, 1, stream),
             "clearing the " + kernel + " status word");
  queue.submitted();
  launchAsync(buffers, stream);
  for (const Download &download : downloads)
    cuda.check(cuda.memcpyDtoHAsync(download.host, download.device, download.bytes, stream),
               std::string("downloading ") + download.what);
  std::uint32_t word = 0;
  cuda.check(cuda.memcpyDtoHAsync(&word, buffers.status, sizeof(word), stream),
             "reading the " + kernel + " status word");
  queue.synchronize("the " + kernel + " kernel failed");
  if (word != 0)
    throw DeviceError("the " + kernel + " kernel reported status " + describeStatus(word));
}

} // namespace dhs::runtime
