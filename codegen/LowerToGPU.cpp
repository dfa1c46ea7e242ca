//===- LowerToGPU.cpp - dhs attention ops to GPU kernels and launches -----===//

#include "codegen/Passes.h"
#include "codegen/SparseAttentionKernel.h"
#include "dialects/DhsOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"

#include <map>

namespace mlir::dhs {
#define GEN_PASS_DEF_DHSLOWERTOGPU
#include "codegen/Passes.h.inc"
} // namespace mlir::dhs

using namespace mlir;
using namespace mlir::dhs;

namespace {

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
    /// Kernels generated so far, by configuration: layers of the same
    /// shape, format and layer index within their group share one kernel.
    std::map<std::string, gpu::GPUFuncOp> kernels;
  };

  /// Replaces `op` by the launch of a kernel generated for it.
  LogicalResult lower(SparseAttentionOp op, SymbolTable &symbols,
                      StepValues &values);
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
  Value view = PoolTierOp::create(builder, loc, poolType.getTierMemRefType(tier),
                                  tier, pool);
  MemRefType staticType = poolType.getTierMemRefType(tier);
  auto dynamicType = MemRefType::get(
      {ShapedType::kDynamic, staticType.getDimSize(1), staticType.getDimSize(2)},
      staticType.getElementType());
  if (view.getType() != dynamicType)
    view = memref::CastOp::create(builder, loc, dynamicType, view);
  cache[key] = view;
  return view;
}

/// Returns the step status of the function around `op`, made at its entry.
static Value getStepStatus(OpBuilder &builder, Operation *op,
                           DenseMap<Operation *, Value> &statuses) {
  auto func = op->getParentOfType<FunctionOpInterface>();
  Value &status = statuses[func];
  if (!status) {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&func.getFunctionBody().front());
    status = StepStatusOp::create(builder, func.getLoc(),
                                  MemRefType::get({1}, builder.getI32Type()));
  }
  return status;
}

LogicalResult DhsLowerToGPU::lower(SparseAttentionOp op, SymbolTable &symbols,
                                   StepValues &values) {
  FailureOr<SparseAttentionKernelConfig> config =
      getSparseAttentionKernelConfig(op, maxHeadsPerBlock, tileRows);
  if (failed(config))
    return failure();

  ModuleOp module = getOperation();
  OpBuilder builder(module.getContext());
  Location loc = op.getLoc();

  // A gpu.module of its own per distinct kernel: one PTX file each. The pool
  // (and so which layer group) is a kernel argument, so the layers of a
  // model share a handful of kernels.
  gpu::GPUFuncOp &kernel = values.kernels[config->key()];
  if (!kernel) {
    builder.setInsertionPointToEnd(module.getBody());
    auto gpuModule =
        gpu::GPUModuleOp::create(builder, loc, "sparse_attention");
    symbols.insert(gpuModule);
    builder.setInsertionPointToStart(gpuModule.getBody());
    kernel = buildSparseAttentionKernel(builder, loc, gpuModule.getName(),
                                        *config);
    ++numKernels;
  }

  builder.setInsertionPoint(op);
  Value hbm = getTierView(builder, op.getPool(), Tier::hbm, values.tierViews);
  Value host = getTierView(builder, op.getPool(), Tier::host, values.tierViews);
  Value status = getStepStatus(builder, op, values.statuses);

  auto dim3 = [&](std::array<int64_t, 3> sizes) {
    return gpu::KernelDim3{
        arith::ConstantIndexOp::create(builder, loc, sizes[0]),
        arith::ConstantIndexOp::create(builder, loc, sizes[1]),
        arith::ConstantIndexOp::create(builder, loc, sizes[2])};
  };
  gpu::KernelDim3 grid = dim3(config->grid());
  gpu::KernelDim3 block = dim3(config->block());
  auto launch = gpu::LaunchFuncOp::create(
      builder, loc, kernel, grid, block, /*dynamicSharedMemorySize=*/Value(),
      ValueRange{op.getQueries(), op.getRowIds(), op.getSlots(),
                 op.getHistoryStart(), op.getHistoryLen(), hbm, host,
                 op.getOutput(), status});
  // What the runtime's reference backend needs to replay the launch.
  launch->setAttr("dhs.op", builder.getStringAttr(op->getName().stripDialect()));
  launch->setAttr("dhs.softmax_scale", op.getSoftmaxScaleAttr());
  launch->setAttr("dhs.layer", op.getLayerAttr());
  op.erase();
  ++numLaunches;
  return success();
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
    phase->getBlock()->getOperations().splice(
        Block::iterator(phase), body.getOperations());
    phase->erase();
  }
}

void DhsLowerToGPU::runOnOperation() {
  ModuleOp module = getOperation();
  inlinePhases(module);

  // Ops without a kernel yet are an error, not a silent skip.
  WalkResult unsupported = module.walk([&](Operation *op) {
    if (op->getDialect() != op->getContext()->getLoadedDialect<DhsDialect>() ||
        isa<SparseAttentionOp, PoolTierOp, StepStatusOp>(op))
      return WalkResult::advance();
    op->emitOpError() << "has no GPU kernel yet; run the passes that remove "
                         "it (dhs-fuse-retrieval, dhs-draft-ring) or drop "
                         "it from the step";
    return WalkResult::interrupt();
  });
  if (unsupported.wasInterrupted())
    return signalPassFailure();

  SmallVector<SparseAttentionOp> ops;
  module.walk([&](SparseAttentionOp op) { ops.push_back(op); });
  if (ops.empty())
    return;
  module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                  UnitAttr::get(module.getContext()));
  SymbolTable symbols(module);
  StepValues values;
  for (SparseAttentionOp op : ops) {
    if (failed(lower(op, symbols, values)))
      return signalPassFailure();
  }
}
