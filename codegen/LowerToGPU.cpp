//===- LowerToGPU.cpp - dhs attention ops to GPU kernels and launches -----===//

#include "codegen/AcceptKernel.h"
#include "codegen/Passes.h"
#include "codegen/RetrievalKernels.h"
#include "codegen/RingKernels.h"
#include "codegen/SparseAttentionKernel.h"
#include "codegen/TopKKernel.h"
#include "dialects/DhsOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/SymbolTable.h"

#include <functional>
#include <map>

namespace mlir::dhs {
#define GEN_PASS_DEF_DHSLOWERTOGPU
#include "codegen/Passes.h.inc"
} // namespace mlir::dhs

using namespace mlir;
using namespace mlir::dhs;

namespace {

/// A generated kernel and how to launch it.
struct KernelEntry {
  gpu::GPUFuncOp kernel;
  KernelGeometry geometry;
};

struct DhsLowerToGPU : public dhs::impl::DhsLowerToGPUBase<DhsLowerToGPU> {
  using Base::Base;
  void runOnOperation() final;

private:
  /// Values made once per step function and shared by its launches.
  struct StepValues {
    /// Tier views, keyed by (pool value, tier).
    DenseMap<std::pair<Value, unsigned>, Value> tierViews;
    /// The step status of each function.
    DenseMap<Operation *, Value> statuses;
    /// Residency-map views, by pool value.
    DenseMap<Value, Value> maps;
    /// Replacement-state and step-log views, by pool value.
    DenseMap<Value, Value> recencies, logs;
    /// Arena buffers code generation added (split attention's partials),
    /// by function and type.
    DenseMap<std::pair<Operation *, Type>, Value> arenaBuffers;
    /// Kernels generated so far, by configuration: layers of the same
    /// shape, format and layer index within their group share one kernel.
    std::map<std::string, KernelEntry> kernels;
  };

  /// Replaces `op` (an attention, fetch or union op) by the launch of a
  /// kernel generated for it.
  LogicalResult lower(Operation *op, SymbolTable &symbols, StepValues &values);
};

} // namespace

/// Returns the memref through which kernels see `tier` of `pool`, made once
/// per pool value right after its definition and cast to a dynamic row count.
static Value getTierView(OpBuilder &builder, Value pool, Tier tier,
                         DenseMap<std::pair<Value, unsigned>, Value> &cache) {
  auto key = std::make_pair(pool, static_cast<unsigned>(tier));
  if (Value cached = cache.lookup(key))
    return cached;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointAfterValue(pool);
  auto poolType = cast<KVPoolType>(pool.getType());
  Location loc = pool.getLoc();
  Value view = PoolTierOp::create(builder, loc, poolType.getTierMemRefType(tier), tier, pool);
  MemRefType staticType = poolType.getTierMemRefType(tier);
  auto dynamicType =
      MemRefType::get({ShapedType::kDynamic, staticType.getDimSize(1), staticType.getDimSize(2)},
                      staticType.getElementType());
  if (view.getType() != dynamicType)
    view = memref::CastOp::create(builder, loc, dynamicType, view);
  cache[key] = view;
  return view;
}

/// Returns the runtime-owned view `ViewOp` of `pool` (its residency map,
/// replacement state or step log) as i32 memref of `shape`, made once per
/// pool value right after its definition.
template <typename ViewOp>
static Value getPoolView(OpBuilder &builder, Value pool, ArrayRef<int64_t> shape,
                         DenseMap<Value, Value> &cache) {
  if (Value cached = cache.lookup(pool))
    return cached;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointAfterValue(pool);
  Value view =
      ViewOp::create(builder, pool.getLoc(), MemRefType::get(shape, builder.getI32Type()), pool);
  cache[pool] = view;
  return view;
}

/// The residency map of `pool`: memref<?xi32>.
static Value getPoolMap(OpBuilder &builder, Value pool, DenseMap<Value, Value> &cache) {
  return getPoolView<PoolMapOp>(builder, pool, {ShapedType::kDynamic}, cache);
}

/// The replacement state of `pool`: memref<?x2xi32>.
static Value getPoolRecency(OpBuilder &builder, Value pool, DenseMap<Value, Value> &cache) {
  return getPoolView<PoolRecencyOp>(builder, pool, {ShapedType::kDynamic, 2}, cache);
}

/// The step log of `pool`: memref<?xi32>.
static Value getPoolLog(OpBuilder &builder, Value pool, DenseMap<Value, Value> &cache) {
  return getPoolView<PoolLogOp>(builder, pool, {ShapedType::kDynamic}, cache);
}

/// Returns a buffer of `type` in the staging arena of the function around
/// `op` (made at its entry), placed after everything dhs-plan-staging laid
/// out, which the function's arena grows by. Buffers of one type are shared
/// by the function's launches (they run one after another).
static Value getArenaBuffer(OpBuilder &builder, Operation *op, MemRefType type,
                            DenseMap<std::pair<Operation *, Type>, Value> &cache) {
  auto func = op->getParentOfType<func::FuncOp>();
  Value &buffer = cache[{func, type}];
  if (buffer)
    return buffer;
  constexpr int64_t kAlignment = 256;
  int64_t bytes = type.getNumElements() * type.getElementTypeBitWidth() / 8;
  NamedAttrList plan;
  if (auto existing = func->getAttrOfType<DictionaryAttr>("dhs.staging_plan"))
    plan = NamedAttrList(existing);
  int64_t arena = 0;
  if (auto size = dyn_cast_or_null<IntegerAttr>(plan.get("arena_bytes")))
    arena = size.getInt();
  int64_t offset = llvm::alignTo(arena, kAlignment);
  plan.set("arena_bytes", builder.getI64IntegerAttr(offset + bytes));
  func->setAttr("dhs.staging_plan", plan.getDictionary(func.getContext()));
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(&func.getBody().front());
  buffer = ScratchOp::create(builder, func.getLoc(), type, builder.getI64IntegerAttr(offset),
                             IntegerAttr());
  return buffer;
}

/// Returns the step status of the function around `op`, made at its entry.
static Value getStepStatus(OpBuilder &builder, Operation *op,
                           DenseMap<Operation *, Value> &statuses) {
  auto func = op->getParentOfType<FunctionOpInterface>();
  Value &status = statuses[func];
  if (!status) {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&func.getFunctionBody().front());
    status =
        StepStatusOp::create(builder, func.getLoc(), MemRefType::get({1}, builder.getI32Type()));
  }
  return status;
}

LogicalResult DhsLowerToGPU::lower(Operation *op, SymbolTable &symbols, StepValues &values) {
  ModuleOp module = getOperation();
  OpBuilder builder(module.getContext());
  Location loc = op->getLoc();
  StringRef opName = op->getName().stripDialect();
  builder.setInsertionPoint(op);
  auto tier = [&](Value pool, Tier which) {
    return getTierView(builder, pool, which, values.tierViews);
  };

  // The kernel's configuration key, how to build it, its geometry and the
  // launch operands, by op.
  std::string key;
  KernelGeometry geometry;
  std::function<FailureOr<gpu::GPUFuncOp>(OpBuilder &, StringRef)> build;
  SmallVector<Value> operands;
  SmallVector<NamedAttribute> attributes;
  FailureOr<SparseAttentionKernelConfig> attention = failure();
  Value partials; // split attention's partial results
  if (isa<SparseAttentionOp, AttentionOp>(op)) {
    attention = getSparseAttentionKernelConfig(op, maxHeadsPerBlock, tileRows, minBlocks);
    if (failed(attention))
      return failure();
    key = attention->key();
    geometry.grid = attention->grid();
    geometry.block = attention->block();
    build = [&](OpBuilder &b, StringRef name) -> FailureOr<gpu::GPUFuncOp> {
      return buildSparseAttentionKernel(b, loc, name, *attention);
    };
    if (auto fused = dyn_cast<SparseAttentionOp>(op)) {
      operands = {fused.getQueries(),
                  fused.getRowIds(),
                  fused.getSlots(),
                  fused.getHistoryStart(),
                  fused.getHistoryLen(),
                  tier(fused.getPool(), Tier::hbm),
                  tier(fused.getPool(), Tier::host)};
      if (Value window = fused.getWindow())
        operands.append({window, fused.getWindowTokens()});
      operands.push_back(fused.getOutput());
      attributes = {builder.getNamedAttr("dhs.softmax_scale", fused.getSoftmaxScaleAttr()),
                    builder.getNamedAttr("dhs.layer", fused.getLayerAttr())};
      if (IntegerAttr size = fused.getWindowSizeAttr())
        attributes.push_back(builder.getNamedAttr("dhs.window_size", size));
    } else {
      auto staged = cast<AttentionOp>(op);
      operands = {staged.getQueries(), staged.getRowIds(), staged.getSlots(), staged.getStaging()};
      if (Value index = staged.getStagingIndex())
        operands.push_back(index);
      operands.push_back(tier(staged.getPool(), Tier::hbm));
      if (Value window = staged.getWindow())
        operands.append({window, staged.getWindowTokens()});
      operands.push_back(staged.getOutput());
      attributes = {builder.getNamedAttr("dhs.softmax_scale", staged.getSoftmaxScaleAttr()),
                    builder.getNamedAttr("dhs.layer", staged.getLayerAttr())};
      if (IntegerAttr size = staged.getWindowSizeAttr())
        attributes.push_back(builder.getNamedAttr("dhs.window_size", size));
    }
    if (attention->splits > 1) {
      partials = getArenaBuffer(builder, op, attention->partialsType(builder.getContext()),
                                values.arenaBuffers);
      operands.push_back(partials);
      attributes.push_back(
          builder.getNamedAttr("dhs.splits", builder.getI64IntegerAttr(attention->splits)));
    }
    operands.push_back(getStepStatus(builder, op, values.statuses));
  } else if (auto fetch = dyn_cast<FetchOp>(op)) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "fetch/" << fetch.getRows().getType() << '/' << static_cast<bool>(fetch.getSlots()) << '/'
       << fetch.getPool().getType() << '/' << fetch.getStaging().getType();
    key = text;
    build = [&, fetch](OpBuilder &b, StringRef name) {
      return buildFetchKernel(b, fetch, name, geometry);
    };
    operands = {fetch.getRows()};
    if (fetch.getSlots())
      operands.push_back(fetch.getSlots());
    operands.append({fetch.getHistoryStart(), fetch.getHistoryLen(),
                     tier(fetch.getPool(), Tier::host), fetch.getStaging(),
                     getStepStatus(builder, op, values.statuses)});
  } else if (auto accept = dyn_cast<AcceptOp>(op)) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "accept/" << stringifyAcceptRule(accept.getRule()) << '/' << accept.getDraft().getType()
       << '/' << accept.getTarget().getType();
    key = text;
    build = [&, accept](OpBuilder &b, StringRef name) {
      return buildAcceptKernel(b, accept, name, geometry);
    };
    operands = {accept.getDraft(), accept.getTarget()};
    if (Value q = accept.getDraftProbs())
      operands.push_back(q);
    operands.append(
        {accept.getSeeds(), accept.getStep(), accept.getAccepted(), accept.getNextToken()});
  } else if (auto topk = dyn_cast<TopKOp>(op)) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "topk/" << topk.getScores().getType() << '/' << topk.getRows().getType();
    key = text;
    build = [&, topk](OpBuilder &b, StringRef name) {
      return buildTopKKernel(b, topk, name, geometry);
    };
    operands = {topk.getScores(), topk.getHistoryLen(), topk.getRows(),
                getStepStatus(builder, op, values.statuses)};
  } else if (auto resolve = dyn_cast<ResolveOp>(op)) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "resolve/" << resolve.getRows().getType();
    key = text;
    build = [&, resolve](OpBuilder &b, StringRef name) {
      return buildResolveKernel(b, resolve, name, geometry);
    };
    operands = {resolve.getRows(),
                getPoolMap(builder, resolve.getPool(), values.maps),
                resolve.getHistoryStart(),
                resolve.getHistoryLen(),
                resolve.getSlots(),
                getPoolRecency(builder, resolve.getPool(), values.recencies),
                getPoolLog(builder, resolve.getPool(), values.logs),
                getStepStatus(builder, op, values.statuses)};
  } else if (auto place = dyn_cast<PlaceRowsOp>(op)) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "place_rows/" << place.getRows().getType() << '/' << place.getPool().getType().getFormat()
       << '/' << place.getPool().getType().getLayers();
    key = text;
    build = [&, place](OpBuilder &b, StringRef name) {
      return buildPlaceRowsKernel(b, place, name, geometry);
    };
    operands = {tier(place.getPool(), Tier::hbm),
                tier(place.getPool(), Tier::host),
                getPoolMap(builder, place.getPool(), values.maps),
                place.getRows(),
                place.getSlots(),
                getPoolRecency(builder, place.getPool(), values.recencies),
                getPoolLog(builder, place.getPool(), values.logs),
                getStepStatus(builder, op, values.statuses)};
  } else if (auto ringIndex = dyn_cast<RingIndexOp>(op)) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "ring_index/" << ringIndex.getSlots().getType() << '/' << ringIndex.getOffset() << '/'
       << ringIndex.getWindow();
    key = text;
    build = [&, ringIndex](OpBuilder &b, StringRef name) {
      return buildRingIndexKernel(b, ringIndex, name, geometry);
    };
    operands = {ringIndex.getPositions(), ringIndex.getSlots()};
  } else if (auto copy = dyn_cast<CopyRowsOp>(op)) {
    Value index = copy.getDstIndex() ? copy.getDstIndex() : copy.getSrcIndex();
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "copy_rows/" << copy.getSrc().getType() << '/' << copy.getDst().getType() << '/'
       << static_cast<bool>(copy.getDstIndex()) << '/' << index.getType();
    key = text;
    build = [&, copy](OpBuilder &b, StringRef name) {
      return buildCopyRowsKernel(b, copy, name, geometry);
    };
    operands = {copy.getSrc(), copy.getDst(), index, getStepStatus(builder, op, values.statuses)};
    attributes = {builder.getNamedAttr(
        "dhs.direction", builder.getStringAttr(copy.getDstIndex() ? "scatter" : "gather"))};
  } else {
    auto unionOp = cast<UnionMissingOp>(op);
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "union/" << unionOp.getRows().getType() << '/' << unionOp.getMissing().getType();
    key = text;
    build = [&, unionOp](OpBuilder &b, StringRef name) {
      return buildUnionMissingKernel(b, unionOp, name, geometry);
    };
    operands = {unionOp.getRows(), unionOp.getSlots(), unionOp.getMissing(), unionOp.getRemap()};
  }

  // A gpu.module of its own per distinct kernel: one PTX file each. Pools,
  // selections and buffers are kernel arguments, so the layers of a model
  // share a handful of kernels.
  auto emitLaunch =
      [&](const std::string &key, StringRef kernelName,
          const std::function<FailureOr<gpu::GPUFuncOp>(OpBuilder &, StringRef)> &build,
          const KernelGeometry &geometry, ValueRange operands,
          ArrayRef<NamedAttribute> attributes) -> LogicalResult {
    KernelEntry &entry = values.kernels[key];
    if (!entry.kernel) {
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointToEnd(module.getBody());
      auto gpuModule = gpu::GPUModuleOp::create(builder, loc, kernelName);
      symbols.insert(gpuModule);
      builder.setInsertionPointToStart(gpuModule.getBody());
      FailureOr<gpu::GPUFuncOp> kernel = build(builder, gpuModule.getName());
      if (failed(kernel))
        return failure();
      // Shared buffers 16-byte aligned: LLVM vectorizes accesses to them.
      for (unsigned i = 0, e = kernel->getNumWorkgroupAttributions(); i < e; ++i)
        kernel->setWorkgroupAttributionAttr(
            i, builder.getStringAttr(LLVM::LLVMDialect::getAlignAttrName()),
            builder.getI64IntegerAttr(16));
      entry = {*kernel, geometry};
      ++numKernels;
    }
    auto dim3 = [&](std::array<int64_t, 3> sizes) {
      return gpu::KernelDim3{arith::ConstantIndexOp::create(builder, loc, sizes[0]),
                             arith::ConstantIndexOp::create(builder, loc, sizes[1]),
                             arith::ConstantIndexOp::create(builder, loc, sizes[2])};
    };
    Value sharedBytes;
    if (entry.geometry.dynamicSharedBytes > 0)
      sharedBytes =
          arith::ConstantIntOp::create(builder, loc, entry.geometry.dynamicSharedBytes, 32);
    auto launch = gpu::LaunchFuncOp::create(builder, loc, entry.kernel, dim3(entry.geometry.grid),
                                            dim3(entry.geometry.block), sharedBytes, operands);
    // What the runtime needs to replay the launch and check it.
    launch->setAttr("dhs.op", builder.getStringAttr(kernelName));
    for (NamedAttribute attribute : attributes)
      launch->setAttr(attribute.getName(), attribute.getValue());
    ++numLaunches;
    return success();
  };
  if (failed(emitLaunch(key, opName, build, geometry, operands, attributes)))
    return failure();
  // Split attention: the combine kernel merges the partials into the output.
  if (partials) {
    Value output = operands[operands.size() - 3];
    // One combine kernel per shape of partials and CTA.
    std::string combineKey;
    llvm::raw_string_ostream os(combineKey);
    os << "attention_combine/" << partials.getType() << '/' << attention->headsPerBlock;
    KernelGeometry combine;
    combine.grid = attention->combineGrid();
    combine.block = attention->block();
    if (failed(emitLaunch(combineKey, "attention_combine",
                          [&](OpBuilder &b, StringRef name) -> FailureOr<gpu::GPUFuncOp> {
                            return buildAttentionCombineKernel(b, loc, name, *attention);
                          },
                          combine, ValueRange{partials, output}, {})))
      return failure();
  }
  op->erase();
  return success();
}

/// Replaces fused attention `op` by a fetch of its missing rows into an arena
/// buffer [B, Q * K, layers, row bytes] and a staged attention over it.
static void stageMissingRows(SparseAttentionOp op,
                             DenseMap<std::pair<Operation *, Type>, Value> &arenaBuffers) {
  OpBuilder builder(op);
  Location loc = op.getLoc();
  MemRefType rows = op.getRowIds().getType();
  KVPoolType pool = op.getPool().getType();
  auto staging = MemRefType::get({rows.getDimSize(0), rows.getDimSize(1) * rows.getDimSize(2),
                                  pool.getLayers(), pool.getFormat().getRowBytes()},
                                 builder.getI8Type());
  Value buffer = getArenaBuffer(builder, op, staging, arenaBuffers);
  FetchOp::create(builder, loc, op.getPool(), op.getRowIds(), op.getSlots(), op.getHistoryStart(),
                  op.getHistoryLen(), buffer);
  AttentionOp::create(builder, loc, op.getQueries(), op.getRowIds(), op.getSlots(), buffer,
                      /*staging_index=*/Value(), op.getPool(), op.getWindow(), op.getWindowTokens(),
                      op.getOutput(), op.getLayerAttr(), op.getSoftmaxScaleAttr(),
                      op.getWindowSizeAttr());
  op.erase();
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
  inlinePhases(module);

  // Ops without a kernel yet are an error, not a silent skip. (Residency
  // specs need none: the manifest carries them to the runtime.)
  WalkResult unsupported = module.walk([&](Operation *op) {
    if (op->getDialect() != op->getContext()->getLoadedDialect<DhsDialect>() ||
        isa<SparseAttentionOp, AttentionOp, FetchOp, UnionMissingOp, RingIndexOp, CopyRowsOp,
            ResolveOp, AcceptOp, TopKOp, PoolTierOp, PoolMapOp, PoolRecencyOp, PoolLogOp,
            PlaceRowsOp, StepStatusOp, ScratchOp, ResidencyOp>(op))
      return WalkResult::advance();
    op->emitOpError() << "has no GPU kernel yet; run the passes that remove "
                         "it (dhs-fuse-retrieval, dhs-draft-ring) or drop "
                         "it from the step";
    return WalkResult::interrupt();
  });
  if (unsupported.wasInterrupted())
    return signalPassFailure();

  StepValues values;
  // A fused attention over a one-layer pool whose heads need several CTAs
  // per KV head would read each missing row over PCIe once per CTA: its
  // missing rows are fetched once into the arena (dhs.fetch), and the CTAs
  // read them from there (dhs.attention).
  SmallVector<SparseAttentionOp> fused;
  module.walk([&](SparseAttentionOp op) { fused.push_back(op); });
  for (SparseAttentionOp op : fused) {
    FailureOr<SparseAttentionKernelConfig> config =
        getSparseAttentionKernelConfig(op, maxHeadsPerBlock, tileRows, minBlocks);
    if (failed(config))
      return signalPassFailure();
    if (config->groupHeads > config->headsPerBlock && op.getPool().getType().getLayers() == 1)
      stageMissingRows(op, values.arenaBuffers);
  }

  SmallVector<Operation *> ops;
  module.walk([&](Operation *op) {
    if (isa<SparseAttentionOp, AttentionOp, FetchOp, UnionMissingOp, RingIndexOp, CopyRowsOp,
            ResolveOp, AcceptOp, TopKOp, PlaceRowsOp>(op))
      ops.push_back(op);
  });
  if (ops.empty())
    return;
  module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                  UnitAttr::get(module.getContext()));
  SymbolTable symbols(module);
  for (Operation *op : ops) {
    if (failed(lower(op, symbols, values)))
      return signalPassFailure();
  }
}
