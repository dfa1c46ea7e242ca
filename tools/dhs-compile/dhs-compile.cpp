//===- dhs-compile.cpp - compile a dhs step to PTX and a manifest ---------===//
//
//   dhs-compile step.mlir -o out/     writes out/manifest.json, out/<k>.ptx
//   dhs-compile step.mlir --emit=mlir prints the module after the pipeline
//
//===----------------------------------------------------------------------===//

#include "codegen/Manifest.h"
#include "codegen/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

#include <chrono>

using namespace mlir;
namespace cl = llvm::cl;

/// dhs-compile's own options (--help hides LLVM's).
static cl::OptionCategory compileCategory("dhs-compile");
static cl::opt<std::string> inputFilename(cl::Positional, cl::desc("<step .mlir>"), cl::init("-"),
                                          cl::cat(compileCategory));
static cl::opt<std::string> outputDir("o",
                                      cl::desc("Directory for manifest.json and the PTX files"),
                                      cl::value_desc("dir"), cl::cat(compileCategory));
static cl::opt<std::string> stepName("step",
                                     cl::desc("Step function to compile "
                                              "(default: the only one)"),
                                     cl::init(""), cl::cat(compileCategory));
static cl::opt<std::string> chip("chip", cl::desc("Target chip (default sm_90a)"),
                                 cl::init("sm_90a"), cl::cat(compileCategory));
static cl::opt<std::string> features("features", cl::desc("PTX features (default +ptx81)"),
                                     cl::init("+ptx81"), cl::cat(compileCategory));
static cl::OptionCategory
    configCategory("Serving configuration (folded into static shapes; 0 keeps the step's)");
static cl::opt<int64_t> requests("requests", cl::desc("Requests per step"), cl::init(0),
                                 cl::cat(configCategory));
static cl::opt<int64_t> positions("positions", cl::desc("Query positions per request"), cl::init(0),
                                  cl::cat(configCategory));
static cl::opt<int64_t> heads("heads", cl::desc("Query heads"), cl::init(0),
                              cl::cat(configCategory));
static cl::opt<int64_t> topk("topk", cl::desc("Selected rows per query"), cl::init(0),
                             cl::cat(configCategory));
static cl::opt<int64_t> hbmSlots("hbm-slots", cl::desc("HBM slots per pool"), cl::init(0),
                                 cl::cat(configCategory));
static cl::OptionCategory tileCategory("Attention kernel tiles");
static cl::opt<int64_t> maxHeadsPerBlock(
    "max-heads-per-block",
    cl::desc("Most heads (warps) one attention CTA computes; the largest "
             "divisor of the heads sharing a KV head not above it is used (default 16)"),
    cl::init(16), cl::cat(tileCategory));
static cl::opt<int64_t>
    tileRows("tile-rows", cl::desc("Selected rows staged in shared memory per step (default 16)"),
             cl::init(16), cl::cat(tileCategory));
static cl::opt<int64_t>
    minBlocks("min-blocks",
              cl::desc("Split each query's rows over CTAs until an attention grid has "
                       "about this many (0: never split; default 264)"),
              cl::init(264), cl::cat(tileCategory));
static cl::opt<bool>
    tensorCores("tensor-cores",
                cl::desc("Compute MLA attention of 64-head multiples on the tensor cores "
                         "(wgmma, sm_90a; default on); =false keeps the CUDA-core kernel"),
                cl::init(true), cl::cat(tileCategory));
static cl::opt<bool> overlapRetrieval(
    "overlap-retrieval",
    cl::desc("Share the missing rows of tensor-core attention with a fetch of a few CTAs "
             "that runs beside it (programmatic dependent launch, a ready flag per tile of "
             "64 rows): the fetch stages the tiles it claims first, a one-layer attention "
             "gathers the others from the host itself; a layer group's attentions get a second "
             "form, one fetch of whole tokens they wait for, which the runtime runs for steps "
             "missing more than 8% of their rows (the fused attentions below); default off"),
    cl::init(false), cl::cat(tileCategory));
static cl::opt<bool> shareTiles(
    "share-tiles",
    cl::desc("In verify steps, order each request's selections (dhs.share_rows) so that a "
             "cluster of its query positions gathers the rows they all selected once, where "
             "enough of them are missing from HBM (dhs-share-tiles: bench/NOTES.md); default "
             "off"),
    cl::init(false), cl::cat(tileCategory));
static cl::opt<int64_t> shareMinMissing(
    "share-min-missing",
    cl::desc("With --share-tiles: prefix rows of a request missing from HBM from which its "
             "positions share tiles (0: always; with fewer each position gathers alone; "
             "default 32)"),
    cl::init(dhs::DhsShareTilesOptions{}.minMissing), cl::cat(tileCategory));
static cl::opt<bool> timing("time", cl::desc("Print how long compilation took"), cl::init(false),
                            cl::cat(compileCategory));
enum class Emit { Files, Mlir, Manifest };
static cl::opt<Emit>
    emit("emit", cl::desc("What to produce"), cl::init(Emit::Files), cl::cat(compileCategory),
         cl::values(clEnumValN(Emit::Files, "files", "manifest.json and PTX files in -o (default)"),
                    clEnumValN(Emit::Mlir, "mlir", "the module after the pipeline, on stdout"),
                    clEnumValN(Emit::Manifest, "manifest", "the manifest, on stdout")));

/// Writes `contents` to `dir/name`, reporting failures.
static LogicalResult writeFile(StringRef dir, StringRef name, StringRef contents) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, name);
  std::string error;
  auto file = openOutputFile(path, &error);
  if (!file) {
    llvm::errs() << "dhs-compile: " << error << "\n";
    return failure();
  }
  file->os() << contents;
  file->keep();
  return success();
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions({&compileCategory, &configCategory, &tileCategory});
  cl::ParseCommandLineOptions(argc, argv, "dhs-compile: a dhs step to PTX + manifest\n");
  if (emit == Emit::Files && outputDir.empty()) {
    llvm::errs() << "dhs-compile: give an output directory with -o DIR (or "
                    "--emit=mlir|manifest)\n";
    return 2;
  }

  DialectRegistry registry;
  dhs::registerCompilerDialects(registry);
  MLIRContext context(registry);

  std::string error;
  auto input = openInputFile(inputFilename, &error);
  if (!input) {
    llvm::errs() << "dhs-compile: " << error << "\n";
    return 1;
  }
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return 1;

  dhs::PtxOptions options;
  options.chip = chip;
  options.features = features;
  dhs::DhsSpecializeOptions config;
  config.requests = requests;
  config.positions = positions;
  config.heads = heads;
  config.topk = topk;
  config.hbmSlots = hbmSlots;
  PassManager pm(&context);
  dhs::DhsLowerToGPUOptions tiles;
  tiles.maxHeadsPerBlock = maxHeadsPerBlock;
  tiles.tileRows = tileRows;
  tiles.minBlocks = minBlocks;
  tiles.tensorCores = tensorCores;
  tiles.overlapRetrieval = overlapRetrieval;
  std::optional<dhs::DhsShareTilesOptions> share;
  if (shareTiles)
    share = dhs::DhsShareTilesOptions{shareMinMissing};
  if (shareMinMissing < 0) {
    llvm::errs() << "dhs-compile: --share-min-missing must be 0 or more, got " << shareMinMissing
                 << "\n";
    return 1;
  }
  dhs::buildDhsToPtxPipeline(pm, options, config, tiles, share);
  auto start = std::chrono::steady_clock::now();
  if (failed(pm.run(*module)))
    return 1;
  if (timing)
    llvm::errs() << "dhs-compile: pipeline took "
                 << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
                 << " s\n";

  if (emit == Emit::Mlir) {
    module->print(llvm::outs());
    return 0;
  }
  FailureOr<dhs::CompiledStep> compiled = dhs::buildCompiledStep(*module, stepName, options);
  if (failed(compiled))
    return 1;
  if (emit == Emit::Manifest) {
    llvm::outs() << compiled->manifest;
    return 0;
  }
  if (std::error_code ec = llvm::sys::fs::create_directories(outputDir)) {
    llvm::errs() << "dhs-compile: cannot create " << outputDir << ": " << ec.message() << "\n";
    return 1;
  }
  if (failed(writeFile(outputDir, "manifest.json", compiled->manifest)))
    return 1;
  for (const dhs::CompiledFile &ptx : compiled->ptx)
    if (failed(writeFile(outputDir, ptx.name, ptx.contents)))
      return 1;
  return 0;
}
