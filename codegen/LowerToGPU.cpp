//===- LowerToGPU.cpp - dhs ops to GPU kernels and their launches ---------===//
//
// One lowering pattern per dhs op with a kernel: the op's kernel builder
// declares the kernel (KernelSpec), and LaunchBuilder generates it once per
// configuration and replaces the op by its launch. docs/compiler.md has the
// design.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"
#include "codegen/Kernels.h"
#include "codegen/Passes.h"
#include "dialects/DhsOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Rewrite/FrozenRewritePatternSet.h"
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

#include <map>
#include <optional>

namespace mlir::dhs {
#define GEN_PASS_DEF_DHSLOWERTOGPU
#include "codegen/Passes.h.inc"
} // namespace mlir::dhs

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;

namespace {

/// An op's operands by the role of the kernel parameter that takes them.
using OperandsByRole = SmallVector<std::pair<Role, Value>, 8>;

//===----------------------------------------------------------------------===//
// Launches
//===----------------------------------------------------------------------===//

/// Generates kernels and their launches for the patterns of one module, and
/// the values their launches share: each kernel once per configuration, in
/// a gpu.module of its own (one PTX file each), and per step function its
/// status, pool views and arena buffers. Pools, selections and buffers are
/// kernel arguments, so the layers of a model share a handful of kernels.
class LaunchBuilder {
public:
  explicit LaunchBuilder(ModuleOp module) : module(module), symbols(module) {}

  /// Launches the kernel of `spec` before `op`, generating it on first use.
  /// `operands` are the op's values by role (the pool for its views); the
  /// status, pool views and partials are the step's.
  /// `attributes` go on the launch for the runtime.
  LogicalResult launch(RewriterBase &rewriter, Operation *op, const KernelSpec &spec,
                       const OperandsByRole &operands, ArrayRef<NamedAttribute> attributes = {});

  /// Returns a buffer of `type` in the staging arena of the function around
  /// `op`, placed after everything dhs-plan-staging laid out. Buffers of one
  /// type are shared by the function's launches (they run one after
  /// another).
  Value getArenaBuffer(OpBuilder &builder, Operation *op, MemRefType type);

  /// Records that a pattern failed (its error is emitted): later patterns
  /// do nothing, as the first error ends the pass.
  LogicalResult fail() {
    failedPattern = true;
    return failure();
  }
  bool hasFailed() const { return failedPattern; }

  unsigned numKernels = 0, numLaunches = 0;

private:
  /// A generated kernel and how to launch it.
  struct Kernel {
    gpu::GPUFuncOp func;
    KernelGeometry geometry;
    /// The name of its resident form (KernelSpec::emitResidentBody), if any.
    StringAttr residentName;
  };

  /// The kernel of `spec`, generated in a new gpu.module on first use.
  FailureOr<Kernel> getOrCreateKernel(OpBuilder &builder, Location loc, const KernelSpec &spec);
  /// The launch operand of `param`.
  Value getOperand(OpBuilder &builder, Operation *op, const KernelParam &param,
                   const OperandsByRole &operands);
  /// The view of `tier` of `pool`, made once right after the pool's
  /// definition, with a dynamic row count.
  Value getTierView(OpBuilder &builder, Value pool, Tier tier);
  /// The runtime-owned view `ViewOp` of `pool` of `type`, made once right
  /// after the pool's definition.
  template <typename ViewOp>
  Value getPoolView(OpBuilder &builder, Value pool, MemRefType type, DenseMap<Value, Value> &cache);
  /// A value of `type` made by `create` once, at the entry of the function
  /// around `op` (`cache`: by function): the step status, the table of
  /// grouped launches.
  Value getEntryValue(OpBuilder &builder, Operation *op, MemRefType type,
                      DenseMap<Operation *, Value> &cache,
                      function_ref<Value(OpBuilder &, Location, MemRefType)> create);

  ModuleOp module;
  SymbolTable symbols;
  bool failedPattern = false;
  /// Kernels generated so far, by kind and key.
  std::map<std::pair<abi::LaunchKind, std::string>, Kernel> kernels;
  DenseMap<std::pair<Value, unsigned>, Value> tierViews;
  DenseMap<Value, Value> maps, recencies, logs, writeBackRings;
  DenseMap<Operation *, Value> statuses, groupBindings;
  DenseMap<std::pair<Operation *, Type>, Value> arenaBuffers;
};

} // namespace

Value LaunchBuilder::getTierView(OpBuilder &builder, Value pool, Tier tier) {
  Value &view = tierViews[{pool, static_cast<unsigned>(tier)}];
  if (view)
    return view;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointAfterValue(pool);
  auto poolType = cast<KVPoolType>(pool.getType());
  Location loc = pool.getLoc();
  view = PoolTierOp::create(builder, loc, poolType.getTierMemRefType(tier), tier, pool);
  MemRefType dynamicType = getTierType(poolType);
  if (view.getType() != dynamicType)
    view = memref::CastOp::create(builder, loc, dynamicType, view);
  return view;
}

template <typename ViewOp>
Value LaunchBuilder::getPoolView(OpBuilder &builder, Value pool, MemRefType type,
                                 DenseMap<Value, Value> &cache) {
  Value &view = cache[pool];
  if (view)
    return view;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointAfterValue(pool);
  view = ViewOp::create(builder, pool.getLoc(), type, pool);
  return view;
}

Value LaunchBuilder::getArenaBuffer(OpBuilder &builder, Operation *op, MemRefType type) {
  auto func = op->getParentOfType<func::FuncOp>();
  Value &buffer = arenaBuffers[{func, type}];
  if (buffer)
    return buffer;
  constexpr int64_t kAlignment = 256;
  int64_t bytes = type.getNumElements() * type.getElementTypeBitWidth() / 8;
  DhsDialect::StagingPlanAttrHelper stagingPlan =
      cast<DhsDialect>(op->getDialect())->getStagingPlanAttrHelper();
  NamedAttrList plan;
  if (DictionaryAttr existing = stagingPlan.getAttr(func))
    plan = NamedAttrList(existing);
  int64_t arena = 0;
  if (auto size = dyn_cast_or_null<IntegerAttr>(plan.get("arena_bytes")))
    arena = size.getInt();
  int64_t offset = llvm::alignTo(arena, kAlignment);
  plan.set("arena_bytes", builder.getI64IntegerAttr(offset + bytes));
  stagingPlan.setAttr(func, plan.getDictionary(func.getContext()));
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(&func.getBody().front());
  buffer = ScratchOp::create(builder, func.getLoc(), type, builder.getI64IntegerAttr(offset),
                             IntegerAttr());
  return buffer;
}

Value LaunchBuilder::getEntryValue(OpBuilder &builder, Operation *op, MemRefType type,
                                   DenseMap<Operation *, Value> &cache,
                                   function_ref<Value(OpBuilder &, Location, MemRefType)> create) {
  auto func = op->getParentOfType<FunctionOpInterface>();
  Value &value = cache[func];
  if (!value) {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&func.getFunctionBody().front());
    value = create(builder, func.getLoc(), type);
  }
  return value;
}

/// The buffers of the CTA's group in a grouped kernel (one that takes
/// group_bindings), one value per parameter, made at the kernel's entry:
/// memref parameter p of CTA z is rebased by table[z, p] bytes (a
/// reinterpret_cast with a dynamic offset); the others, and the table, as
/// they are.
static SmallVector<Value> getGroupBuffers(ImplicitLocOpBuilder &b, gpu::GPUFuncOp func,
                                          unsigned tablePosition) {
  KernelBuilder kb{b};
  Value table = func.getArgument(tablePosition);
  Value group = kb.blockId(gpu::Dimension::z);
  SmallVector<Value> buffers;
  for (auto [p, argument] : llvm::enumerate(func.getArguments())) {
    auto type = dyn_cast<MemRefType>(argument.getType());
    if (p == tablePosition || !type) {
      buffers.push_back(argument);
      continue;
    }
    // (Kernel parameters are dense: identity layouts, offset 0.)
    auto [strides, offset] = type.getStridesAndOffset();
    assert(offset == 0 && "a kernel parameter with an offset");
    Value bytes = memref::LoadOp::create(b, table, ValueRange{group, kb.index(p)});
    Value shift =
        kb.toIndex(arith::DivSIOp::create(b, bytes, kb.i64(type.getElementTypeBitWidth() / 8)));
    SmallVector<OpFoldResult> sizes, staticStrides;
    for (auto [d, size] : llvm::enumerate(type.getShape()))
      sizes.push_back(ShapedType::isDynamic(size)
                          ? OpFoldResult(memref::DimOp::create(b, argument, kb.index(d)))
                          : OpFoldResult(b.getIndexAttr(size)));
    for (int64_t stride : strides)
      staticStrides.push_back(b.getIndexAttr(stride));
    auto groupType =
        MemRefType::get(type.getShape(), type.getElementType(),
                        StridedLayoutAttr::get(b.getContext(), ShapedType::kDynamic, strides),
                        type.getMemorySpace());
    buffers.push_back(memref::ReinterpretCastOp::create(b, groupType, argument, OpFoldResult(shift),
                                                        sizes, staticStrides));
  }
  return buffers;
}

Value LaunchBuilder::getOperand(OpBuilder &builder, Operation *op, const KernelParam &param,
                                const OperandsByRole &operands) {
  MLIRContext *context = builder.getContext();
  auto getOpOperand = [&](Role role) {
    for (auto [known, value] : operands)
      if (known == role)
        return value;
    return Value();
  };
  switch (param.role) {
  case Role::HbmTier:
    return getTierView(builder, getOpOperand(Role::KvPool), Tier::hbm);
  case Role::HostTier:
    return getTierView(builder, getOpOperand(Role::KvPool), Tier::host);
  case Role::ResidencyMap:
    return getPoolView<PoolMapOp>(builder, getOpOperand(Role::KvPool), getResidencyMapType(context),
                                  maps);
  case Role::ReplacementState:
    return getPoolView<PoolRecencyOp>(builder, getOpOperand(Role::KvPool),
                                      getReplacementStateType(context), recencies);
  case Role::StepLog:
    return getPoolView<PoolLogOp>(builder, getOpOperand(Role::KvPool), getStepLogType(context),
                                  logs);
  case Role::WriteBackRing: {
    Value pool = getOpOperand(Role::KvPool);
    return getPoolView<PoolWriteBackOp>(
        builder, pool, getTierType(cast<KVPoolType>(pool.getType())), writeBackRings);
  }
  case Role::Status:
    return getEntryValue(builder, op, getStatusType(context), statuses,
                         [](OpBuilder &b, Location loc, MemRefType type) -> Value {
                           return StepStatusOp::create(b, loc, type);
                         });
  case Role::Partials:
  case Role::HostRowRing:
    return getArenaBuffer(builder, op, cast<MemRefType>(param.type));
  case Role::GroupBindings:
    return getEntryValue(builder, op, getGroupBindingsType(context), groupBindings,
                         [](OpBuilder &b, Location loc, MemRefType type) -> Value {
                           return GroupBindingsOp::create(b, loc, type);
                         });
  default:
    return getOpOperand(param.role);
  }
}

FailureOr<LaunchBuilder::Kernel> LaunchBuilder::getOrCreateKernel(OpBuilder &builder, Location loc,
                                                                  const KernelSpec &spec) {
  Kernel &kernel = kernels[{spec.kind, spec.key}];
  if (kernel.func)
    return kernel;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(module.getBody());
  auto gpuModule = gpu::GPUModuleOp::create(builder, loc, abi::name(spec.kind));
  symbols.insert(gpuModule);
  builder.setInsertionPointToStart(gpuModule.getBody());
  // The kernel, and its resident form where the spec has one, named after
  // the module.
  auto emitKernel = [&](StringRef name, const auto &emitBody) -> FailureOr<gpu::GPUFuncOp> {
    gpu::GPUFuncOp func = createKernel(builder, loc, name, spec.signature.getTypes(),
                                       spec.geometry.block[0], spec.workgroup);
    if (spec.minBlocksPerSM > 0)
      func->setAttr("nvvm.minctasm", builder.getI32IntegerAttr(spec.minBlocksPerSM));
    if (spec.cluster != std::array<int64_t, 3>{1, 1, 1})
      func->setAttr("nvvm.cluster_dim",
                    builder.getDenseI32ArrayAttr({static_cast<int32_t>(spec.cluster[0]),
                                                  static_cast<int32_t>(spec.cluster[1]),
                                                  static_cast<int32_t>(spec.cluster[2])}));
    ImplicitLocOpBuilder body(loc, builder);
    body.setInsertionPointToStart(&func.getBody().front());
    SmallVector<Value> groupBuffers;
    if (std::optional<unsigned> table = spec.signature.find(Role::GroupBindings)) {
      if (spec.geometry.grid[2] != 1)
        return emitError(loc) << "a grouped kernel (" << abi::name(spec.kind)
                              << ") runs its groups along the grid's z, whose size must be 1";
      groupBuffers = getGroupBuffers(body, func, *table);
    }
    emitBody(body, KernelArguments(func, spec.signature, std::move(groupBuffers)));
    // Shared buffers 16-byte aligned: LLVM vectorizes accesses to them.
    for (unsigned i = 0, e = func.getNumWorkgroupAttributions(); i < e; ++i)
      func.setWorkgroupAttributionAttr(i,
                                       builder.getStringAttr(LLVM::LLVMDialect::getAlignAttrName()),
                                       builder.getI64IntegerAttr(16));
    builder.setInsertionPointAfter(func);
    return func;
  };
  FailureOr<gpu::GPUFuncOp> func = emitKernel(gpuModule.getName(), spec.emitBody);
  if (failed(func))
    return failure();
  if (spec.emitResidentBody) {
    std::string name = (gpuModule.getName() + "_resident").str();
    if (failed(emitKernel(name, spec.emitResidentBody)))
      return failure();
    kernel.residentName = builder.getStringAttr(name);
  }
  kernel.func = *func;
  kernel.geometry = spec.geometry;
  ++numKernels;
  return kernel;
}

LogicalResult LaunchBuilder::launch(RewriterBase &rewriter, Operation *op, const KernelSpec &spec,
                                    const OperandsByRole &opOperands,
                                    ArrayRef<NamedAttribute> attributes) {
  Location loc = op->getLoc();
  rewriter.setInsertionPoint(op);
  SmallVector<Value> operands;
  for (const KernelParam &param : spec.signature.getParams()) {
    Value operand = getOperand(rewriter, op, param, opOperands);
    if (!operand)
      return op->emitOpError() << "has no operand for its kernel's " << abi::name(param.role)
                               << " parameter";
    operands.push_back(operand);
  }
  FailureOr<Kernel> kernel = getOrCreateKernel(rewriter, loc, spec);
  if (failed(kernel))
    return failure();
  auto dim3 = [&](std::array<int64_t, 3> sizes) {
    return gpu::KernelDim3{arith::ConstantIndexOp::create(rewriter, loc, sizes[0]),
                           arith::ConstantIndexOp::create(rewriter, loc, sizes[1]),
                           arith::ConstantIndexOp::create(rewriter, loc, sizes[2])};
  };
  Value sharedBytes;
  if (kernel->geometry.dynamicSharedBytes > 0)
    sharedBytes =
        arith::ConstantIntOp::create(rewriter, loc, kernel->geometry.dynamicSharedBytes, 32);
  auto launch = gpu::LaunchFuncOp::create(rewriter, loc, kernel->func, dim3(kernel->geometry.grid),
                                          dim3(kernel->geometry.block), sharedBytes, operands);
  // What the runtime needs to replay the launch and check it.
  auto *dhs = cast<DhsDialect>(op->getDialect());
  dhs->getOpAttrHelper().setAttr(launch, rewriter.getStringAttr(abi::name(spec.kind)));
  dhs->getRolesAttrHelper().setAttr(launch, spec.signature.getRolesAttr(rewriter.getContext()));
  if (kernel->residentName)
    dhs->getResidentKernelAttrHelper().setAttr(launch, kernel->residentName);
  if (spec.dependentLaunch)
    dhs->getDependentLaunchAttrHelper().setAttr(launch, rewriter.getUnitAttr());
  // The op's form band (stageMissingRows), on each of its launches.
  for (StringAttr band :
       {dhs->getMissingAboveAttrHelper().getName(), dhs->getMissingUpToAttrHelper().getName()})
    if (Attribute share = op->getAttr(band))
      launch->setAttr(band, share);
  for (NamedAttribute attribute : attributes)
    launch->setAttr(attribute.getName(), attribute.getValue());
  ++numLaunches;
  return success();
}

namespace {

//===----------------------------------------------------------------------===//
// Patterns
//===----------------------------------------------------------------------===//

/// The share of a layer group's selected rows missing above which its
/// staged form (one fetch of whole tokens, then staged attentions) runs
/// rather than its fused attentions (B=128 x 64 heads, four FP8 layers):
/// on the H200 the fused group is 17% faster at 5% missing, the staged one
/// 9% faster at 10%, 5% at 14%, 42% at 30% (twenty-ninth session); on an
/// H100 the two tie at 8-10%, the staged one is 11% faster at 14% and 15%
/// at 18% (bench/NOTES.md, thirty-second session).
constexpr double kStagedGroupMissing = 0.08;

/// The share of a one-layer step's selected rows missing up to which a
/// tensor-core query whose heads span several CTAs runs its fused attention
/// (each CTA reads the step's few host rows itself) rather than the fetch
/// and the staged attention: a step with every row in HBM then launches no
/// fetch, and its attention runs the fused kernel's resident form.
constexpr double kStagedHeadBlocksMissing = 0.02;

/// The operands of each op with a kernel, by the role of the kernel
/// parameter that takes them (the pool for KvPool, whose views its launch
/// passes).
static OperandsByRole getOperands(FetchOp op) {
  return {{Role::RowIds, op.getRows()},           {Role::Slots, op.getSlots()},
          {Role::WriteBack, op.getWriteBack()},   {Role::HistoryStart, op.getHistoryStart()},
          {Role::HistoryLen, op.getHistoryLen()}, {Role::KvPool, op.getPool()},
          {Role::Staging, op.getStaging()},       {Role::ReadyFlags, op.getReady()}};
}

static OperandsByRole getOperands(UnionMissingOp op) {
  return {{Role::RowIds, op.getRows()},         {Role::Slots, op.getSlots()},
          {Role::Missing, op.getMissing()},     {Role::Remap, op.getRemap()},
          {Role::WriteBack, op.getWriteBack()}, {Role::MissingSources, op.getSources()}};
}

static OperandsByRole getOperands(ShareRowsOp op) {
  return {{Role::RowIds, op.getRows()},
          {Role::Slots, op.getSlots()},
          {Role::SharedRows, op.getSharedRows()},
          {Role::SharedSlots, op.getSharedSlots()},
          {Role::SharedTiles, op.getTiles()}};
}

static OperandsByRole getOperands(ResolveOp op) {
  return {{Role::RowIds, op.getRows()},
          {Role::KvPool, op.getPool()},
          {Role::HistoryStart, op.getHistoryStart()},
          {Role::HistoryLen, op.getHistoryLen()},
          {Role::Slots, op.getSlots()},
          {Role::WriteBack, op.getWriteBack()}};
}

static OperandsByRole getOperands(PlaceRowsOp op) {
  return {{Role::KvPool, op.getPool()},
          {Role::PlaceRows, op.getRows()},
          {Role::PlaceSlots, op.getSlots()},
          {Role::PlaceSources, op.getSources()}};
}

static OperandsByRole getOperands(PlanPromotionsOp op) {
  return {{Role::KvPool, op.getPool()},
          {Role::FetchedRows, op.getFetched()},
          {Role::HistoryStart, op.getHistoryStart()},
          {Role::HotRows, op.getHot()},
          {Role::ClockCleared, op.getCleared()},
          {Role::FreeStack, op.getFree()},
          {Role::PromotionControl, op.getControl()},
          {Role::PlaceRows, op.getRows()},
          {Role::PlaceSlots, op.getSlots()},
          {Role::FetchedSources, op.getFetchedSources()},
          {Role::PlaceSources, op.getSources()}};
}

static OperandsByRole getOperands(SortRowsOp op) {
  return {{Role::Missing, op.getRows()},
          {Role::FetchedRows, op.getSorted()},
          {Role::MissingSources, op.getValues()},
          {Role::FetchedSources, op.getSortedValues()}};
}

static OperandsByRole getOperands(AgeRowsOp op) {
  return {{Role::KvPool, op.getPool()},    {Role::AgeList, op.getAppends()},
          {Role::HotRows, op.getHot()},    {Role::ClockCleared, op.getCleared()},
          {Role::FreeStack, op.getFree()}, {Role::PromotionControl, op.getControl()},
          {Role::PlaceRows, op.getRows()}, {Role::PlaceSlots, op.getSlots()}};
}

static OperandsByRole getOperands(RingIndexOp op) {
  return {{Role::Positions, op.getPositions()}, {Role::RingSlots, op.getSlots()}};
}

static OperandsByRole getOperands(CopyRowsOp op) {
  return {{Role::CopySource, op.getSrc()},
          {Role::CopyDestination, op.getDst()},
          {Role::RingSlots, op.getDstIndex() ? op.getDstIndex() : op.getSrcIndex()}};
}

static OperandsByRole getOperands(AcceptOp op) {
  return {{Role::DraftTokens, op.getDraft()},     {Role::TargetProbs, op.getTarget()},
          {Role::DraftProbs, op.getDraftProbs()}, {Role::Seeds, op.getSeeds()},
          {Role::StepCounter, op.getStep()},      {Role::Accepted, op.getAccepted()},
          {Role::NextToken, op.getNextToken()}};
}

static OperandsByRole getOperands(TopKOp op) {
  return {{Role::Scores, op.getScores()},
          {Role::HistoryLen, op.getHistoryLen()},
          {Role::RowIds, op.getRows()}};
}

/// Attributes of a launch for the runtime: none but a copy's direction and
/// a share's tile and least missing rows (when not 0).
static SmallVector<NamedAttribute> getLaunchAttributes(Operation *, Builder &) { return {}; }
static SmallVector<NamedAttribute> getLaunchAttributes(ShareRowsOp op, Builder &) {
  auto *dhs = cast<DhsDialect>(op->getDialect());
  SmallVector<NamedAttribute> attributes{
      NamedAttribute(dhs->getTileAttrHelper().getName(), op.getTileAttr())};
  if (op.getMinMissing() > 0)
    attributes.emplace_back(dhs->getMinMissingAttrHelper().getName(), op.getMinMissingAttr());
  return attributes;
}
static SmallVector<NamedAttribute> getLaunchAttributes(CopyRowsOp op, Builder &builder) {
  abi::CopyDirection direction =
      op.getDstIndex() ? abi::CopyDirection::Scatter : abi::CopyDirection::Gather;
  auto *dhs = cast<DhsDialect>(op->getDialect());
  return {NamedAttribute(dhs->getDirectionAttrHelper().getName(),
                         builder.getStringAttr(abi::name(direction)))};
}

/// Lowers an `OpTy` to the launch of the kernel getKernelSpec declares for
/// it, with the operands getOperands gives.
template <typename OpTy> class KernelLowering : public OpRewritePattern<OpTy> {
public:
  KernelLowering(MLIRContext *context, LaunchBuilder &launches)
      : OpRewritePattern<OpTy>(context), launches(launches) {}

  LogicalResult matchAndRewrite(OpTy op, PatternRewriter &rewriter) const final {
    if (launches.hasFailed())
      return failure();
    FailureOr<KernelSpec> spec = getKernelSpec(op);
    if (failed(spec) || failed(launches.launch(rewriter, op, *spec, getOperands(op),
                                               getLaunchAttributes(op, rewriter))))
      return launches.fail();
    rewriter.eraseOp(op);
    return success();
  }

private:
  LaunchBuilder &launches;
};

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// The tiling options of the pass that attention kernels take.
struct AttentionOptions {
  int64_t maxHeadsPerBlock, tileRows, minBlocks;
  bool tensorCores;
};

/// The kernels that compute an attention op: the attention kernel and, when
/// it splits each query's rows over CTAs, the kernel that merges the splits;
/// with a shared prefix, the clustered kernel of steps where requests share
/// and, launched before it, the unclustered one of the others (each kernel
/// skips the steps of the other).
struct AttentionKernels {
  SparseAttentionKernelConfig config;
  KernelSpec attention;
  std::optional<KernelSpec> combine;
  std::optional<KernelSpec> unshared;
};

/// Chooses the kernels of attention op `op` (dhs.sparse_attention or
/// dhs.attention): the one place where an attention op's kernel is picked.
/// Emits an error on `op` when no kernel computes it.
static FailureOr<AttentionKernels> chooseAttentionKernels(Operation *op,
                                                          const AttentionOptions &options) {
  FailureOr<SparseAttentionKernelConfig> config = getSparseAttentionKernelConfig(
      op, options.maxHeadsPerBlock, options.tileRows, options.minBlocks, options.tensorCores);
  if (failed(config))
    return failure();
  AttentionKernels kernels{*config,
                           config->tensorCores ? getTensorCoreAttentionKernel(*config)
                                               : getSparseAttentionKernel(*config),
                           /*combine=*/std::nullopt, /*unshared=*/std::nullopt};
  if (config->sharedPositions > 1) {
    // Each position alone, unsplit: the clustered kernel's tiles and order.
    SparseAttentionKernelConfig unshared = *config;
    unshared.sharedPositions = 1;
    unshared.unsharedRequests = true;
    kernels.unshared = getTensorCoreAttentionKernel(unshared);
  }
  if (config->splits > 1) {
    // A warp per head, at most 16 heads per CTA, whichever kernel split.
    SparseAttentionKernelConfig combine = *config;
    combine.tensorCores = false;
    combine.headsPerBlock = std::min<int64_t>(config->headsPerBlock, 16);
    // After a tensor-core split (sm_90a), a programmatic dependent launch.
    kernels.combine = getAttentionCombineKernel(combine, /*dependent=*/config->tensorCores);
  }
  return kernels;
}

/// Lowers an attention op to its attention launch and, for a split kernel,
/// the launch of the combine kernel.
template <typename OpTy> class AttentionLowering : public OpRewritePattern<OpTy> {
public:
  AttentionLowering(MLIRContext *context, LaunchBuilder &launches, const AttentionOptions &options)
      : OpRewritePattern<OpTy>(context), launches(launches), options(options) {}

  LogicalResult matchAndRewrite(OpTy op, PatternRewriter &rewriter) const final {
    if (launches.hasFailed())
      return failure();
    FailureOr<AttentionKernels> kernels = chooseAttentionKernels(op, options);
    if (failed(kernels))
      return launches.fail();
    OperandsByRole operands = getOperands(op);
    auto *dhs = cast<DhsDialect>(op->getDialect());
    SmallVector<NamedAttribute> attributes{
        NamedAttribute(dhs->getSoftmaxScaleAttrHelper().getName(), op.getSoftmaxScaleAttr()),
        NamedAttribute(dhs->getLayerAttrHelper().getName(), op.getLayerAttr())};
    if (IntegerAttr size = op.getWindowSizeAttr())
      attributes.emplace_back(dhs->getWindowSizeAttrHelper().getName(), size);
    if (failed(launches.launch(rewriter, op, kernels->attention, operands, attributes)))
      return launches.fail();
    if (kernels->unshared) {
      // The unclustered launch runs first (the clustered one defines the
      // layer for the runtime), its kernel generated second (the clustered
      // one keeps the op's kernel name).
      Operation *clustered = op->getPrevNode();
      SmallVector<NamedAttribute> unshared = attributes;
      unshared.emplace_back(dhs->getUnsharedRequestsAttrHelper().getName(), rewriter.getUnitAttr());
      if (failed(launches.launch(rewriter, op, *kernels->unshared, operands, unshared)))
        return launches.fail();
      rewriter.moveOpBefore(clustered, op);
    }
    if (kernels->combine && failed(launches.launch(rewriter, op, *kernels->combine, operands)))
      return launches.fail();
    rewriter.eraseOp(op);
    return success();
  }

private:
  /// The operands of `op` by role (the pool for KvPool).
  static OperandsByRole getOperands(OpTy op) {
    OperandsByRole operands{
        {Role::Queries, op.getQueries()},   {Role::RowIds, op.getRowIds()},
        {Role::Slots, op.getSlots()},       {Role::KvPool, op.getPool()},
        {Role::WindowRing, op.getWindow()}, {Role::WindowTokens, op.getWindowTokens()},
        {Role::Output, op.getOutput()},     {Role::SharedTiles, op.getSharedTiles()}};
    if constexpr (std::is_same_v<OpTy, SparseAttentionOp>)
      operands.append({{Role::HistoryStart, op.getHistoryStart()},
                       {Role::HistoryLen, op.getHistoryLen()},
                       {Role::WriteBack, op.getWriteBack()}});
    else
      operands.append({{Role::Staging, op.getStaging()},
                       {Role::Remap, op.getStagingIndex()},
                       {Role::ReadyFlags, op.getReady()},
                       {Role::HistoryStart, op.getHistoryStart()},
                       {Role::HistoryLen, op.getHistoryLen()}});
    return operands;
  }

  LaunchBuilder &launches;
  AttentionOptions options;
};

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct DhsLowerToGPU : public dhs::impl::DhsLowerToGPUBase<DhsLowerToGPU> {
  using Base::Base;
  void runOnOperation() final;
};

} // namespace

/// Replaces fused attention `ops` (one selection of one pool: a layer
/// group's layers, or one op) by one fetch of their missing tokens (all of
/// the pool's layers) into an arena buffer [B, Q * K, layers, row bytes]
/// before the first, and each by a staged attention over it; with `overlap`,
/// they share ready flags [B, Q * K / 64] (the fetch runs beside the
/// attentions, which take the histories too: a one-layer attention reads the
/// tiles it reaches first from the host store, a group's wait for the
/// fetch). With `aboveShare`, the fused attentions stay as the group's form
/// for steps that miss at most that share of their selected rows, and the
/// fetch and staged attentions (each right after its fused one) form the
/// group's form above it: their launches carry the bands (dhs.missing_up_to,
/// dhs.missing_above), and the runtime runs one form a step (LaunchForms.h).
static void stageMissingRows(ArrayRef<SparseAttentionOp> ops, LaunchBuilder &launches, bool overlap,
                             std::optional<double> aboveShare = std::nullopt) {
  SparseAttentionOp first = ops.front();
  auto *dhs = cast<DhsDialect>(first->getDialect());
  OpBuilder builder(first);
  MemRefType rows = first.getRowIds().getType();
  KVPoolType pool = first.getPool().getType();
  auto staging = MemRefType::get({rows.getDimSize(0), rows.getDimSize(1) * rows.getDimSize(2),
                                  pool.getLayers(), pool.getFormat().getRowBytes()},
                                 builder.getI8Type());
  Value buffer = launches.getArenaBuffer(builder, first, staging);
  Value ready;
  if (overlap)
    ready = launches.getArenaBuffer(
        builder, first,
        MemRefType::get({rows.getDimSize(0), staging.getDimSize(1) / kReadyTileRows},
                        builder.getI32Type()));
  // Writing back, the fetch writes the ring: it copies every missing row
  // (a group's staged attentions never take a tile).
  auto fetch = FetchOp::create(builder, first.getLoc(), first.getPool(), first.getRowIds(),
                               first.getSlots(), first.getWriteBack(), first.getHistoryStart(),
                               first.getHistoryLen(), buffer, ready);
  FloatAttr line = aboveShare ? builder.getF64FloatAttr(*aboveShare) : FloatAttr();
  if (line)
    dhs->getMissingAboveAttrHelper().setAttr(fetch, line);
  for (SparseAttentionOp op : ops) {
    if (line)
      builder.setInsertionPointAfter(op);
    else
      builder.setInsertionPoint(op);
    auto staged = AttentionOp::create(
        builder, op.getLoc(), op.getQueries(), op.getRowIds(), op.getSlots(), buffer,
        /*staging_index=*/Value(), op.getSharedTiles(), op.getPool(), op.getWindow(),
        op.getWindowTokens(), op.getOutput(), ready, overlap ? op.getHistoryStart() : Value(),
        overlap ? op.getHistoryLen() : Value(), op.getLayerAttr(), op.getSoftmaxScaleAttr(),
        op.getWindowSizeAttr());
    if (line) {
      dhs->getMissingUpToAttrHelper().setAttr(op, line);
      dhs->getMissingAboveAttrHelper().setAttr(staged, line);
    } else {
      op.erase();
    }
  }
}

/// Inlines the bodies of draft and verify phases into their parents: phases
/// scope the passes that run before code generation, kernels run in order.
static void inlinePhases(ModuleOp module) {
  SmallVector<Operation *> phases;
  module.walk([&](Operation *op) {
    if (isa<VerifyOp, DraftOp>(op))
      phases.push_back(op);
  });
  for (Operation *phase : llvm::reverse(phases)) {
    Block &body = phase->getRegion(0).front();
    phase->getBlock()->getOperations().splice(Block::iterator(phase), body.getOperations());
    phase->erase();
  }
}

void DhsLowerToGPU::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *context = &getContext();
  // A step is a function: its launches and buffers are the function's.
  WalkResult outside = module.walk([](Operation *op) {
    if (!isa<DhsDialect>(op->getDialect()) || op->getParentOfType<FunctionOpInterface>())
      return WalkResult::advance();
    op->emitOpError() << "is outside a function: a step's ops belong to its func.func";
    return WalkResult::interrupt();
  });
  if (outside.wasInterrupted())
    return signalPassFailure();
  inlinePhases(module);

  // What is left of the dhs dialect after lowering: the views, buffers and
  // residency specs the manifest carries to the runtime.
  ConversionTarget target(*context);
  target.addIllegalDialect<DhsDialect>();
  target.addLegalOp<PoolTierOp, PoolMapOp, PoolRecencyOp, PoolLogOp, PoolWriteBackOp, StepStatusOp,
                    ScratchOp, ResidencyOp>();

  LaunchBuilder launches(module);
  AttentionOptions options{maxHeadsPerBlock, tileRows, minBlocks, tensorCores};
  RewritePatternSet patternList(context);
  patternList
      .add<KernelLowering<FetchOp>, KernelLowering<UnionMissingOp>, KernelLowering<ShareRowsOp>,
           KernelLowering<ResolveOp>, KernelLowering<PlaceRowsOp>, KernelLowering<PlanPromotionsOp>,
           KernelLowering<SortRowsOp>, KernelLowering<AgeRowsOp>, KernelLowering<RingIndexOp>,
           KernelLowering<CopyRowsOp>, KernelLowering<AcceptOp>, KernelLowering<TopKOp>>(context,
                                                                                         launches);
  patternList.add<AttentionLowering<SparseAttentionOp>, AttentionLowering<AttentionOp>>(
      context, launches, options);
  FrozenRewritePatternSet patterns(std::move(patternList));

  // Ops without a kernel yet are an error, not a silent skip.
  const auto &lowered = patterns.getOpSpecificNativePatterns();
  WalkResult unsupported = module.walk([&](Operation *op) {
    if (!target.isIllegal(op) || lowered.count(op->getName()))
      return WalkResult::advance();
    InFlightDiagnostic error = op->emitOpError() << "has no GPU kernel yet; ";
    // dhs-draft-ring lowers the ring ops; no pass removes the others.
    if (isa<RingAppendOp, RingReadOp>(op))
      error << "run dhs-draft-ring, which lowers it to dhs.ring_index and "
               "dhs.copy_rows, or drop it from the step";
    else
      error << "no pass removes it: drop it from the step";
    return WalkResult::interrupt();
  });
  if (unsupported.wasInterrupted())
    return signalPassFailure();

  // A fused attention over a one-layer pool whose heads need several CTAs
  // per KV head would read each missing row over PCIe once per CTA: its
  // missing rows are fetched once into the arena (dhs.fetch), and the CTAs
  // read them from there (dhs.attention). So does tensor-core attention
  // with overlapRetrieval, its fetch running beside it; the attentions of a
  // layer group that read one selection in one block share one fetch of
  // whole tokens (before the first: its operands are defined there).
  SmallVector<SparseAttentionOp> fused;
  module.walk([&](SparseAttentionOp op) { fused.push_back(op); });
  llvm::MapVector<std::tuple<Block *, Value, Value, Value, Value, Value, Value>,
                  SmallVector<SparseAttentionOp>>
      groups;
  for (SparseAttentionOp op : fused) {
    FailureOr<SparseAttentionKernelConfig> config =
        getSparseAttentionKernelConfig(op, maxHeadsPerBlock, tileRows, minBlocks, tensorCores);
    if (failed(config))
      return signalPassFailure();
    bool overlap = overlapRetrieval && config->tensorCores && config->sharedPositions == 1;
    if (op.getPool().getType().getLayers() != 1) {
      if (overlap && !op.getWindow())
        groups[{op->getBlock(), op.getPool(), op.getRowIds(), op.getSlots(), op.getWriteBack(),
                op.getHistoryStart(), op.getHistoryLen()}]
            .push_back(op);
      continue;
    }
    // Writing back, a one-layer attention beside its fetch stays fused: it
    // would read the tiles it takes from the host store without writing
    // them (the fetch writes the ring for the rows it copies).
    if (overlap && op.getWriteBack())
      continue;
    if (overlap || config->groupHeads > config->headsPerBlock) {
      // (Not where the attention writes a ring or reads a draft window:
      // there every step fetches first.)
      std::optional<double> fusedUpTo;
      if (!overlap && config->tensorCores && config->sharedPositions == 1 && !op.getWriteBack() &&
          !op.getWindow())
        fusedUpTo = kStagedHeadBlocksMissing;
      stageMissingRows(op, launches, overlap, fusedUpTo);
    }
  }
  for (auto &group : groups) {
    // One fetch of whole tokens pays only for attentions that read every
    // layer of them: a step with some of a pool's layers would move the
    // others' rows for nothing (a one-layer step of a group of 4, four
    // times its bytes), so its attentions stay fused.
    llvm::SmallDenseSet<int64_t> layers;
    for (SparseAttentionOp op : group.second)
      layers.insert(op.getLayer());
    if (static_cast<int64_t>(layers.size()) != group.second.front().getPool().getType().getLayers())
      continue;
    stageMissingRows(group.second, launches, /*overlap=*/true, kStagedGroupMissing);
  }

  walkAndApplyPatterns(module, patterns);
  numKernels += launches.numKernels;
  numLaunches += launches.numLaunches;
  if (launches.hasFailed())
    return signalPassFailure();
  if (launches.numLaunches > 0)
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), UnitAttr::get(context));
}
