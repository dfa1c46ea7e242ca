//===- Manifest.cpp - extract manifest and PTX from a compiled module -----===//

#include "codegen/Manifest.h"
#include "dialects/DhsOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <map>

using namespace mlir;
using namespace mlir::dhs;

/// The name a PTX `.extern .func` declaration (`declaration` starts with it)
/// declares: after its return parameter, `(.param ...)`, where it has one.
static StringRef getExternFunctionName(StringRef declaration) {
  StringRef rest = declaration.drop_front(StringRef(".extern .func").size()).ltrim();
  if (rest.starts_with("("))
    rest = rest.drop_until([](char c) { return c == ')'; }).drop_front().ltrim();
  return rest.take_until([](char c) { return c == '(' || c == ';' || llvm::isSpace(c); });
}

/// The contract's element type of `type`, if the runtime takes it.
static std::optional<abi::DType> getDType(Type type) {
  if (type.isBF16())
    return abi::DType::BF16;
  if (type.isF32())
    return abi::DType::F32;
  if (type.isInteger(32))
    return abi::DType::I32;
  if (type.isInteger(64))
    return abi::DType::I64;
  if (type.isInteger(8))
    return abi::DType::I8;
  return std::nullopt;
}

// The dialect's residency hints count as the contract's do, so that a cast
// gives the name the runtime reads.
static_assert(static_cast<int>(ResidencyPolicy::adaptive) ==
                      static_cast<int>(abi::ResidencyPolicy::Adaptive) &&
                  static_cast<int>(ResidencyPolicy::fixed) ==
                      static_cast<int>(abi::ResidencyPolicy::Fixed) &&
                  abi::count<abi::ResidencyPolicy>() == 2,
              "the dialect's residency policies are the contract's");
static_assert(static_cast<int>(Replacement::clock) == static_cast<int>(abi::Replacement::Clock) &&
                  static_cast<int>(Replacement::lru) == static_cast<int>(abi::Replacement::Lru) &&
                  static_cast<int>(Replacement::lru2) == static_cast<int>(abi::Replacement::Lru2) &&
                  abi::count<abi::Replacement>() == 3,
              "the dialect's replacements are the contract's");

/// A shape with -1 for dynamic dimensions.
static llvm::json::Array getShape(MemRefType type) {
  llvm::json::Array shape;
  for (int64_t dim : type.getShape())
    shape.push_back(ShapedType::isDynamic(dim) ? int64_t(-1) : dim);
  return shape;
}

/// The roles of `launch`'s kernel parameters (dhs.roles, which
/// dhs-lower-to-gpu sets from the kernel's signature), or an error.
static FailureOr<SmallVector<abi::ParamRole>> getParamRoles(gpu::LaunchFuncOp launch,
                                                            DhsDialect &dhs) {
  ArrayAttr names = dhs.getRolesAttrHelper().getAttr(launch);
  if (!names || names.size() != launch.getNumKernelOperands())
    return launch.emitOpError() << "needs " << DhsDialect::RolesAttrHelper::getNameStr()
                                << ", one role per kernel operand";
  SmallVector<abi::ParamRole> roles;
  for (Attribute name : names) {
    auto text = dyn_cast<StringAttr>(name);
    std::optional<abi::ParamRole> role =
        text ? abi::parse<abi::ParamRole>(text.getValue()) : std::nullopt;
    if (!role)
      return launch.emitOpError() << "has an unknown kernel parameter role " << name
                                  << " (known: " << abi::knownNames<abi::ParamRole>() << ")";
    roles.push_back(*role);
  }
  return roles;
}

/// Checks that the kernel parameter of `role` may be passed from `source`
/// and returns the role a step argument passed that way gets.
static FailureOr<abi::ArgumentRole> getArgumentRole(gpu::LaunchFuncOp launch, unsigned position,
                                                    abi::ParamRole role, abi::ParamSource source) {
  std::optional<abi::ArgumentRole> argumentRole = abi::argumentRole(role);
  std::optional<abi::ParamSource> view = abi::poolViewSource(role);
  if (!argumentRole || (view ? *view != source : source != abi::ParamSource::Argument))
    return launch.emitOpError() << "operand #" << position << " comes from source "
                                << abi::name(source) << ", which the kernel's " << abi::name(role)
                                << " parameter does not take";
  return *argumentRole;
}

/// Describes where launch operand `value` comes from (`source`), or emits an
/// error.
static FailureOr<llvm::json::Object> describeParameter(gpu::LaunchFuncOp launch, unsigned position,
                                                       Value value, func::FuncOp step,
                                                       abi::ParamSource &source) {
  llvm::json::Object param;
  // Casts only change static knowledge of the shape.
  while (auto cast = value.getDefiningOp<memref::CastOp>())
    value = cast.getSource();
  auto describe = [&](abi::ParamSource from, std::optional<unsigned> index) {
    source = from;
    param["source"] = abi::name(from);
    if (index)
      param["index"] = static_cast<int64_t>(*index);
  };
  if (auto arg = dyn_cast<BlockArgument>(value); arg && arg.getOwner()->getParentOp() == step) {
    describe(abi::ParamSource::Argument, arg.getArgNumber());
  } else if (auto tier = value.getDefiningOp<PoolTierOp>()) {
    auto poolArg = dyn_cast<BlockArgument>(tier.getPool());
    if (!poolArg || poolArg.getOwner()->getParentOp() != step)
      return launch.emitOpError() << "operand #" << position
                                  << " views a pool that is not an argument of the step";
    describe(tier.getTier() == Tier::hbm ? abi::ParamSource::PoolHbm : abi::ParamSource::PoolHost,
             poolArg.getArgNumber());
  } else if (auto map = value.getDefiningOp<PoolMapOp>()) {
    auto poolArg = dyn_cast<BlockArgument>(map.getPool());
    if (!poolArg || poolArg.getOwner()->getParentOp() != step)
      return launch.emitOpError() << "operand #" << position
                                  << " is the map of a pool that is not an argument of the step";
    describe(abi::ParamSource::PoolMap, poolArg.getArgNumber());
  } else if (isa_and_nonnull<PoolRecencyOp, PoolLogOp, PoolWriteBackOp>(value.getDefiningOp())) {
    Operation *view = value.getDefiningOp();
    auto poolArg = dyn_cast<BlockArgument>(view->getOperand(0));
    if (!poolArg || poolArg.getOwner()->getParentOp() != step)
      return launch.emitOpError() << "operand #" << position
                                  << " is the state of a pool that is not an argument of the step";
    describe(isa<PoolRecencyOp>(view) ? abi::ParamSource::PoolRecency
             : isa<PoolLogOp>(view)   ? abi::ParamSource::PoolLog
                                      : abi::ParamSource::PoolWriteBack,
             poolArg.getArgNumber());
  } else if (value.getDefiningOp<StepStatusOp>()) {
    describe(abi::ParamSource::Status, std::nullopt);
  } else if (value.getDefiningOp<GroupBindingsOp>()) {
    describe(abi::ParamSource::GroupBindings, std::nullopt);
  } else if (auto scratch = value.getDefiningOp<ScratchOp>()) {
    if (!scratch.getOffset())
      return launch.emitOpError() << "operand #" << position
                                  << " is a scratch buffer without an arena offset; run "
                                     "dhs-plan-staging before code generation";
    describe(abi::ParamSource::Scratch, std::nullopt);
    param["offset"] = static_cast<int64_t>(*scratch.getOffset());
  } else {
    return launch.emitOpError() << "operand #" << position
                                << " is computed in host code, which the runtime does not run; "
                                   "kernel operands must be step arguments, pool tiers or the "
                                   "step status";
  }
  auto type = cast<MemRefType>(launch.getKernelOperands()[position].getType());
  std::optional<abi::DType> dtype = getDType(type.getElementType());
  if (!dtype)
    return launch.emitOpError() << "operand #" << position
                                << " has an element type the runtime does "
                                   "not know: "
                                << type.getElementType();
  param["dtype"] = abi::name(*dtype);
  param["shape"] = getShape(type);
  return param;
}

/// Returns the constant launch dimensions, or fails.
static FailureOr<llvm::json::Array> getDims(gpu::LaunchFuncOp launch, gpu::KernelDim3 dims,
                                            StringRef what) {
  llvm::json::Array result;
  for (Value v : {dims.x, dims.y, dims.z}) {
    std::optional<int64_t> c = getConstantIntValue(v);
    if (!c || *c <= 0)
      return launch.emitOpError() << what
                                  << " size must be a positive "
                                     "constant";
    result.push_back(*c);
  }
  return result;
}

FailureOr<CompiledStep> mlir::dhs::buildCompiledStep(ModuleOp module, StringRef stepName,
                                                     const PtxOptions &options) {
  // The dialect whose attributes the launches carry (dhs-lower-to-gpu).
  DhsDialect &dhs = *module.getContext()->getOrLoadDialect<DhsDialect>();

  // The step function.
  func::FuncOp step;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal() || (!stepName.empty() && func.getName() != stepName))
      continue;
    if (step)
      return module.emitError() << "several step functions (@" << step.getName() << ", @"
                                << func.getName() << "): name one";
    step = func;
  }
  if (!step)
    return module.emitError() << (stepName.empty() ? std::string("no step function")
                                                   : "no step function @" + stepName.str());
  if (step.getNumResults() != 0)
    return step.emitError() << "a step returns nothing: outputs are arguments";

  // Launches in program order; roles of the arguments they use.
  SmallVector<gpu::LaunchFuncOp> launches;
  SmallVector<ResidencyOp> residencySpecs;
  WalkResult walk = step.walk([&](Operation *op) {
    if (auto launch = dyn_cast<gpu::LaunchFuncOp>(op)) {
      launches.push_back(launch);
      return WalkResult::advance();
    }
    if (auto spec = dyn_cast<ResidencyOp>(op)) {
      residencySpecs.push_back(spec);
      return WalkResult::advance();
    }
    if (isa<func::ReturnOp, PoolTierOp, PoolMapOp, PoolRecencyOp, PoolLogOp, PoolWriteBackOp,
            StepStatusOp, GroupBindingsOp, ScratchOp, memref::CastOp, arith::ConstantOp,
            func::FuncOp>(op))
      return WalkResult::advance();
    op->emitOpError() << "is left in the step after code generation; the "
                         "runtime only replays kernel launches";
    return WalkResult::interrupt();
  });
  if (walk.wasInterrupted())
    return failure();
  if (launches.empty())
    return step.emitError() << "the step launches no kernel";

  std::vector<std::optional<abi::ArgumentRole>> roles(step.getNumArguments());
  llvm::json::Array launchList;
  CompiledStep compiled;
  /// A PTX file: its kernels' text and the launches of them (marker lines).
  struct PtxFile {
    std::string text;
    std::vector<std::string> launches;
  };
  llvm::MapVector<std::string, PtxFile, std::map<std::string, unsigned>> ptxFiles;
  for (gpu::LaunchFuncOp launch : launches) {
    StringAttr opName = dhs.getOpAttrHelper().getAttr(launch);
    std::optional<abi::LaunchKind> kind =
        opName ? abi::parse<abi::LaunchKind>(opName.getValue()) : std::nullopt;
    if (!kind)
      return launch.emitOpError() << "was not generated by dhs-lower-to-gpu";
    FailureOr<SmallVector<abi::ParamRole>> paramRoles = getParamRoles(launch, dhs);
    if (failed(paramRoles))
      return failure();

    llvm::json::Array params;
    for (auto [i, operand] : llvm::enumerate(launch.getKernelOperands())) {
      abi::ParamSource source;
      FailureOr<llvm::json::Object> param = describeParameter(launch, i, operand, step, source);
      if (failed(param))
        return failure();
      if (std::optional<int64_t> index = param->getInteger("index")) {
        FailureOr<abi::ArgumentRole> role = getArgumentRole(launch, i, (*paramRoles)[i], source);
        if (failed(role))
          return failure();
        std::optional<abi::ArgumentRole> &known = roles[*index];
        if (known && *known != *role)
          return launch.emitOpError() << "step argument #" << *index << " is used both as "
                                      << abi::name(*known) << " and as " << abi::name(*role);
        known = *role;
      }
      (*param)["role"] = abi::name((*paramRoles)[i]);
      params.push_back(std::move(*param));
    }

    // The PTX of the kernel's module.
    StringRef moduleName = launch.getKernelModuleName().getValue();
    auto binary =
        SymbolTable::lookupNearestSymbolFrom<gpu::BinaryOp>(launch, launch.getKernelModuleName());
    if (!binary || binary.getObjects().size() != 1)
      return launch.emitOpError() << "kernel module @" << moduleName
                                  << " was not compiled to one PTX object";
    auto object = cast<gpu::ObjectAttr>(binary.getObjects()[0]);
    if (object.getFormat() != gpu::CompilationTarget::Assembly)
      return launch.emitOpError() << "kernel module @" << moduleName
                                  << " was not compiled to PTX (format=isa)";
    StringRef ptx = object.getObject().getValue();
    // A call left unresolved (say, to libdevice) would only fail at load.
    if (size_t pos = ptx.find(".extern .func"); pos != StringRef::npos)
      return launch.emitOpError() << "kernel module @" << moduleName
                                  << " calls a function that was not linked: "
                                  << getExternFunctionName(ptx.substr(pos));
    std::string ptxFile = moduleName.str() + ".ptx";

    FailureOr<llvm::json::Array> grid = getDims(launch, launch.getGridSizeOperandValues(), "grid");
    FailureOr<llvm::json::Array> block =
        getDims(launch, launch.getBlockSizeOperandValues(), "block");
    if (failed(grid) || failed(block))
      return failure();
    int64_t dynamicShared = 0;
    if (Value smem = launch.getDynamicSharedMemorySize()) {
      std::optional<int64_t> c = getConstantIntValue(smem);
      if (auto constant = smem.getDefiningOp<arith::ConstantIntOp>())
        c = constant.value();
      if (!c)
        return launch.emitOpError() << "dynamic shared memory must be a "
                                       "constant";
      dynamicShared = *c;
    }

    // The launch as the kernel was compiled for: its file's marker lines.
    llvm::json::Array signatureParams;
    for (const llvm::json::Value &param : params) {
      llvm::json::Object copy = *param.getAsObject();
      copy.erase("index");
      copy.erase("offset");
      signatureParams.push_back(std::move(copy));
    }
    llvm::json::Object signature;
    signature["kernel"] = launch.getKernelName().getValue();
    signature["grid"] = llvm::json::Array(*grid);
    signature["block"] = llvm::json::Array(*block);
    signature["dynamic_shared_bytes"] = dynamicShared;
    signature["params"] = std::move(signatureParams);
    auto [file, fresh] = ptxFiles.try_emplace(ptxFile);
    if (fresh)
      file->second.text = ptx.str();
    std::string described = llvm::formatv("{0}", llvm::json::Value(std::move(signature))).str();
    if (!llvm::is_contained(file->second.launches, described))
      file->second.launches.push_back(std::move(described));

    llvm::json::Object entry{{"kernel", launch.getKernelName().getValue()},
                             {"ptx", ptxFile},
                             {"op", abi::name(*kind)},
                             {"grid", std::move(*grid)},
                             {"block", std::move(*block)},
                             {"dynamic_shared_bytes", dynamicShared},
                             {"params", std::move(params)}};
    if (FloatAttr scale = dhs.getSoftmaxScaleAttrHelper().getAttr(launch))
      entry["softmax_scale"] = scale.getValueAsDouble();
    if (IntegerAttr layer = dhs.getLayerAttrHelper().getAttr(launch))
      entry["layer"] = layer.getInt();
    if (IntegerAttr size = dhs.getWindowSizeAttrHelper().getAttr(launch))
      entry["window_size"] = size.getInt();
    if (StringAttr direction = dhs.getDirectionAttrHelper().getAttr(launch))
      entry["direction"] = direction.getValue();
    if (IntegerAttr tile = dhs.getTileAttrHelper().getAttr(launch))
      entry["tile"] = tile.getInt();
    if (dhs.getUnsharedRequestsAttrHelper().isAttrPresent(launch))
      entry["unshared_requests"] = true;
    if (StringAttr resident = dhs.getResidentKernelAttrHelper().getAttr(launch))
      entry["resident_kernel"] = resident.getValue();
    if (dhs.getDependentLaunchAttrHelper().isAttrPresent(launch))
      entry["dependent_launch"] = true;
    if (IntegerAttr minMissing = dhs.getMinMissingAttrHelper().getAttr(launch))
      entry["min_missing"] = minMissing.getInt();
    if (FloatAttr above = dhs.getMissingAboveAttrHelper().getAttr(launch))
      entry["missing_above"] = above.getValueAsDouble();
    if (FloatAttr upTo = dhs.getMissingUpToAttrHelper().getAttr(launch))
      entry["missing_up_to"] = upTo.getValueAsDouble();
    launchList.push_back(std::move(entry));
  }

  for (auto &[name, file] : ptxFiles) {
    std::string contents;
    for (const std::string &launch : file.launches)
      contents += abi::kPtxLaunchMarker + launch + "\n";
    compiled.ptx.push_back({name, contents + file.text});
  }

  // Step arguments with their roles.
  llvm::json::Array arguments;
  for (auto [i, arg] : llvm::enumerate(step.getArguments())) {
    llvm::json::Object entry{{"index", static_cast<int64_t>(i)},
                             {"role", roles[i] ? abi::name(*roles[i]) : "unused"}};
    if (auto pool = dyn_cast<KVPoolType>(arg.getType())) {
      auto capacity = [](int64_t c) { return ShapedType::isDynamic(c) ? int64_t(-1) : c; };
      RowFormatAttrInterface format = pool.getFormat();
      entry["kind"] = abi::kPoolKind;
      entry["format"] = format.getFormatName();
      if (auto gqa = dyn_cast<GqaAttr>(format)) {
        entry["kv_heads"] = gqa.getKvHeads();
        entry["element"] = abi::name(gqa.getRowElement());
      }
      entry["layers"] = pool.getLayers();
      entry["row_bytes"] = format.getRowBytes();
      // Elements per row, for formats of one element type (mla_bf16).
      entry["row_elems"] = format.getRowBytes() / 2;
      entry["qk_dim"] = format.getQKDim();
      entry["v_dim"] = format.getVDim();
      entry["hbm_slots"] = capacity(pool.getHbmSlots());
      entry["host_rows"] = capacity(pool.getHostRows());
    } else if (auto memref = dyn_cast<MemRefType>(arg.getType())) {
      std::optional<abi::DType> dtype = getDType(memref.getElementType());
      if (!dtype || !memref.hasStaticShape())
        return step.emitError() << "argument #" << i << " has type " << memref
                                << "; the runtime takes static memrefs of "
                                << abi::knownNames<abi::DType>();
      entry["kind"] = abi::kMemRefKind;
      entry["dtype"] = abi::name(*dtype);
      entry["shape"] = getShape(memref);
    } else {
      return step.emitError() << "argument #" << i << " has type " << arg.getType()
                              << ", which the runtime cannot pass";
    }
    arguments.push_back(std::move(entry));
  }

  // The pools' residency specs (dhs.residency), for the runtime.
  llvm::json::Array residency;
  for (ResidencyOp spec : residencySpecs) {
    auto poolArg = dyn_cast<BlockArgument>(spec.getPool());
    if (!poolArg || poolArg.getOwner()->getParentOp() != step)
      return spec.emitOpError() << "names a pool that is not an argument of "
                                   "the step";
    llvm::json::Object entry{
        {"pool", static_cast<int64_t>(poolArg.getArgNumber())},
        {"newest", static_cast<int64_t>(spec.getNewest())},
        {"floor", static_cast<int64_t>(spec.getFloor())},
        {"policy", abi::name(static_cast<abi::ResidencyPolicy>(spec.getPolicy()))},
        {"replacement", abi::name(static_cast<abi::Replacement>(spec.getEffectiveReplacement()))},
        {"max_promotions",
         spec.getPromotions() ? static_cast<int64_t>(*spec.getPromotions()) : int64_t(-1)}};
    residency.push_back(std::move(entry));
  }

  // The staging arena that dhs-plan-staging laid out (0 without one).
  int64_t arenaBytes = 0;
  if (DictionaryAttr plan = dhs.getStagingPlanAttrHelper().getAttr(step))
    if (auto bytes = plan.getAs<IntegerAttr>("arena_bytes"))
      arenaBytes = bytes.getInt();

  llvm::json::Object manifest{
      {"format", abi::kManifestFormat},
      {"arena_bytes", arenaBytes},
      {"version", abi::kManifestVersion},
      {"target", llvm::json::Object{{"chip", options.chip}, {"features", options.features}}},
      {"step", step.getName()},
      {"arguments", std::move(arguments)},
      {"launches", std::move(launchList)}};
  if (!residency.empty())
    manifest["residency"] = std::move(residency);
  llvm::raw_string_ostream os(compiled.manifest);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(manifest))) << "\n";
  return compiled;
}
