//===- Pipeline.cpp - dhs -> GPU kernels -> PTX pipelines and registration ===//

#include "codegen/Passes.h"
#include "dialects/DhsDialect.h"
#include "passes/Passes.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVM.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/UBToLLVM/UBToLLVM.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVM.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Index/IR/IndexDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/LLVMIR/Transforms/Passes.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir;

void dhs::buildGpuModuleToPtxPipeline(OpPassManager &pm, const PtxOptions &options) {
  // The device half of upstream's gpu-lower-to-nvvm-pipeline: host code stays
  // as it is (the runtime launches kernels from the manifest), every
  // gpu.module becomes a gpu.binary whose object is PTX text. Kernels take
  // memref descriptors (allocated ptr, aligned ptr, offset, sizes, strides).
  GpuNVVMAttachTargetOptions target;
  target.chip = options.chip;
  target.features = options.features;
  target.optLevel = options.optLevel;
  pm.addPass(createGpuNVVMAttachTarget(target));

  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  kernels.addPass(createConvertVectorToSCFPass());
  kernels.addPass(createSCFToControlFlowPass());
  kernels.addPass(createConvertNVGPUToNVVMPass());
  kernels.addPass(memref::createExpandStridedMetadataPass());
  kernels.addPass(createLowerAffinePass());
  kernels.addPass(createStripDebugInfoPass());
  kernels.addPass(createConvertGpuOpsToNVVMOps());
  kernels.addPass(createDhsRelaxSharedAtomics());
  // NVVM ops that lower to inline PTX (wgmma, mbarrier waits, named-barrier
  // arrivals).
  kernels.addPass(createConvertNVVMToLLVMPass());
  kernels.addPass(LLVM::createNVVMOptimizeForTargetPass());
  kernels.addPass(createCanonicalizerPass());
  kernels.addPass(createCSEPass());
  kernels.addPass(createReconcileUnrealizedCastsPass());

  GpuModuleToBinaryPassOptions binary;
  binary.compilationTarget = "isa";
  pm.addPass(createGpuModuleToBinaryPass(binary));
}

void dhs::buildDhsToPtxPipeline(OpPassManager &pm, const PtxOptions &options,
                                const DhsSpecializeOptions &config,
                                const DhsLowerToGPUOptions &tiles,
                                std::optional<DhsShareTilesOptions> shareTiles) {
  // dhs -> dhs: the serving configuration, ring index arithmetic, (on
  // request) verify selections ordered so that positions gather shared rows
  // once, missing rows fetched once for all verify positions, the remaining
  // retrieval fused into attention, the staging arena.
  OpPassManager &steps = pm.nest<func::FuncOp>();
  steps.addPass(createDhsSpecialize(config));
  steps.addPass(createDhsDraftRing());
  if (shareTiles)
    steps.addPass(createDhsShareTiles(*shareTiles));
  steps.addPass(createDhsShareRetrieval());
  steps.addPass(createDhsFuseRetrieval());
  steps.addPass(createDhsPlanStaging());
  // dhs -> GPU kernels -> PTX.
  pm.addPass(createDhsLowerToGPU(tiles));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  buildGpuModuleToPtxPipeline(pm, options);
}

namespace {
/// Command-line options of the `dhs-to-ptx` pipeline.
struct DhsToPtxPipelineOptions : public PassPipelineOptions<DhsToPtxPipelineOptions> {
  Option<std::string> chip{*this, "chip", llvm::cl::desc("Target chip"), llvm::cl::init("sm_90a")};
  Option<std::string> features{*this, "features", llvm::cl::desc("PTX ISA features"),
                               llvm::cl::init("+ptx81")};
  Option<unsigned> optLevel{*this, "opt-level", llvm::cl::desc("NVPTX optimization level"),
                            llvm::cl::init(3)};
  Option<int64_t> requests{*this, "requests", llvm::cl::desc("Requests per step (0: as written)"),
                           llvm::cl::init(0)};
  Option<int64_t> positions{*this, "positions", llvm::cl::desc("Query positions per request"),
                            llvm::cl::init(0)};
  Option<int64_t> heads{*this, "heads", llvm::cl::desc("Query heads"), llvm::cl::init(0)};
  Option<int64_t> topk{*this, "topk", llvm::cl::desc("Selected rows per query"), llvm::cl::init(0)};
  Option<int64_t> hbmSlots{*this, "hbm-slots", llvm::cl::desc("HBM slots per pool (0: as written)"),
                           llvm::cl::init(0)};
  Option<int64_t> maxHeadsPerBlock{*this, "max-heads-per-block",
                                   llvm::cl::desc("Most heads (warps) one attention CTA computes"),
                                   llvm::cl::init(16)};
  Option<int64_t> tileRows{*this, "tile-rows",
                           llvm::cl::desc("Selected rows staged in shared memory per step"),
                           llvm::cl::init(16)};
  Option<int64_t> minBlocks{*this, "min-blocks",
                            llvm::cl::desc("Split each query's rows over CTAs until an attention "
                                           "grid has about this many (0: never split)"),
                            llvm::cl::init(264)};
  Option<bool> tensorCores{*this, "tensor-cores",
                           llvm::cl::desc("Compute MLA attention of 64-head multiples on the "
                                          "tensor cores (wgmma, sm_90a)"),
                           llvm::cl::init(true)};
  Option<bool> overlapRetrieval{
      *this, "overlap-retrieval",
      llvm::cl::desc("Fetch the missing rows of tensor-core attention from a few CTAs into "
                     "staging while the attention runs (a layer group's: one fetch of whole "
                     "tokens, a form for steps missing more than 8% of their rows)"),
      llvm::cl::init(false)};
  Option<bool> shareTiles{*this, "share-tiles",
                          llvm::cl::desc("Let a verify step's query positions gather the rows "
                                         "they all selected once (dhs-share-tiles)"),
                          llvm::cl::init(false)};
  Option<int64_t> shareMinMissing{
      *this, "share-min-missing",
      llvm::cl::desc("With share-tiles: prefix rows of a request missing from HBM from which its "
                     "positions share tiles (0: always)"),
      llvm::cl::init(dhs::DhsShareTilesOptions{}.minMissing)};
};
} // namespace

void dhs::registerCodegenPasses() {
  registerDhsCodegenPasses();
  // The upstream passes of the pipeline, so that it can be replayed (and
  // bisected) pass by pass with dhs-opt.
  registerCanonicalizerPass();
  registerCSEPass();
  registerStripDebugInfoPass();
  registerGpuNVVMAttachTarget();
  registerGpuModuleToBinaryPass();
  registerConvertVectorToSCFPass();
  registerSCFToControlFlowPass();
  registerConvertNVGPUToNVVMPass();
  memref::registerExpandStridedMetadataPass();
  registerLowerAffinePass();
  registerConvertGpuOpsToNVVMOps();
  registerConvertNVVMToLLVMPass();
  LLVM::registerNVVMOptimizeForTargetPass();
  registerReconcileUnrealizedCastsPass();
  PassPipelineRegistration<DhsToPtxPipelineOptions>(
      "dhs-to-ptx", "Compile a dhs step to GPU kernels in PTX (gpu.binary)",
      [](OpPassManager &pm, const DhsToPtxPipelineOptions &options) {
        PtxOptions ptx;
        ptx.chip = options.chip;
        ptx.features = options.features;
        ptx.optLevel = options.optLevel;
        DhsSpecializeOptions config;
        config.requests = options.requests;
        config.positions = options.positions;
        config.heads = options.heads;
        config.topk = options.topk;
        config.hbmSlots = options.hbmSlots;
        DhsLowerToGPUOptions tiles;
        tiles.maxHeadsPerBlock = options.maxHeadsPerBlock;
        tiles.tileRows = options.tileRows;
        tiles.minBlocks = options.minBlocks;
        tiles.tensorCores = options.tensorCores;
        tiles.overlapRetrieval = options.overlapRetrieval;
        std::optional<DhsShareTilesOptions> share;
        if (options.shareTiles)
          share = dhs::DhsShareTilesOptions{options.shareMinMissing};
        buildDhsToPtxPipeline(pm, ptx, config, tiles, share);
      });
}

void dhs::registerCompilerDialects(DialectRegistry &registry) {
  registry.insert<dhs::DhsDialect, affine::AffineDialect, arith::ArithDialect,
                  cf::ControlFlowDialect, func::FuncDialect, gpu::GPUDialect, index::IndexDialect,
                  LLVM::LLVMDialect, math::MathDialect, memref::MemRefDialect, NVVM::NVVMDialect,
                  nvgpu::NVGPUDialect, scf::SCFDialect, ub::UBDialect, vector::VectorDialect>();
  // Lowering to NVVM goes through each dialect's ConvertToLLVM interface.
  arith::registerConvertArithToLLVMInterface(registry);
  cf::registerConvertControlFlowToLLVMInterface(registry);
  registerConvertFuncToLLVMInterface(registry);
  index::registerConvertIndexToLLVMInterface(registry);
  registerConvertMathToLLVMInterface(registry);
  registerConvertMemRefToLLVMInterface(registry);
  registerConvertNVVMToLLVMInterface(registry);
  ub::registerConvertUBToLLVMInterface(registry);
  vector::registerConvertVectorToLLVMInterface(registry);
  NVVM::registerConvertGpuToNVVMInterface(registry);
  // Serialization: the NVVM target and the translations to LLVM IR.
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
}
