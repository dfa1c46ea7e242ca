//===- dhs-run.cpp - Run and check a compiled dhs step --------------------===//
//
// dhs-run [STEP] [options]
//
// Loads a compiled step (a directory with manifest.json and PTX, or a .mlir
// file compiled on the fly with the dhs-compile next to this executable),
// generates inputs from a seed, runs the step on the GPU (or the CPU reference
// backend when no GPU is usable) at one or more residency mixes, and checks
// every output against an fp64 CPU reference. Exit status: 0 when every check
// passes, 1 on a failed check or any error, 2 on bad usage.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Bf16.h"
#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/SparseAttentionProblem.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaStep.h"
#include "runtime/cuda/JitLink.h"
#include "tools/CommandLine.h"

#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace dhs::runtime;
using namespace dhs::tools;

#ifndef DHS_DEFAULT_STEP
#define DHS_DEFAULT_STEP "examples/default_step.mlir"
#endif

namespace {

/// Bad command-line usage (exit status 2).
/// A deliberately corrupted input, to test error reporting end to end.
enum class Injection { None, RowId, BadId, Slot, HostRow };

/// Command-line options.
struct Options {
  std::string step;             ///< STEP argument ("" = default example)
  std::string backend = "auto"; ///< auto | cpu | cuda
  std::uint64_t seed = 1;
  std::vector<double> residency = {0.5};
  std::int64_t historyRows = 0; ///< 0: random per request
  double unused = 0.0;
  double overlap = 0.0;
  std::int64_t hbmSlots = -1;
  std::int64_t hostRows = -1;
  int repeat = 10;
  int warmup = 1;
  double tolerance = 1e-2;
  bool linkOnly = false;
  std::string arch = "sm_90a";
  std::string jsonPath;
  bool keepStep = false;
  Injection inject = Injection::None;
  bool hostCheck = true;
};

const char *kUsage =
    "usage: dhs-run [STEP] [options]\n"
    "\n"
    "STEP is a compiled step directory (manifest.json + PTX), its manifest.json,\n"
    "or a .mlir file, compiled first with the dhs-compile next to dhs-run.\n"
    "Default: " DHS_DEFAULT_STEP "\n"
    "\n"
    "options:\n"
    "  --backend auto|cpu|cuda  where to run (auto: CUDA if a GPU is usable)\n"
    "  --seed N                 input generator seed (default 1)\n"
    "  --resident F[,F...]      residency mixes in [0,1] (default 0.5); several\n"
    "                           mixes run the same inputs and must agree bit for bit\n"
    "  --history-rows N         history rows per request (default: random, 2048-6144)\n"
    "  --unused F               fraction of each query's K entries set to -1 (default 0)\n"
    "  --overlap F              fraction of a query position's rows the next position\n"
    "                           of its request selects again (default 0; verify\n"
    "                           positions overlap about 0.85)\n"
    "  --hbm-slots N            HBM slots, when the step leaves them to run time\n"
    "  --host-rows N            host-store rows, when the step leaves them to run time\n"
    "  --repeat N               timed repetitions on the GPU (default 10)\n"
    "  --warmup N               untimed runs before timing (default 1)\n"
    "  --tolerance X            relative error bound vs fp64 (default 1e-2)\n"
    "  --link-only              only link every PTX with nvJitLink for --arch and\n"
    "                           print cubin sizes (needs no GPU)\n"
    "  --arch ARCH              architecture for --link-only (default sm_90a)\n"
    "  --json FILE              also write the results as JSON\n"
    "  --keep-step              keep the step compiled from a .mlir file\n"
    "  --inject-error KIND      corrupt one input (row-id, bad-id, slot, host-row) to\n"
    "                           test error reporting\n"
    "  --no-host-check          skip host-side input validation on the GPU (tests the\n"
    "                           kernels' status word; the CPU backend always validates)\n"
    "  -h, --help               this text\n";

Options parseOptions(int argc, char **argv) {
  Options o;
  bool haveStep = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    // --name=value and --name value are both accepted.
    std::string value;
    bool inlineValue = false;
    if (arg.rfind("--", 0) == 0) {
      std::size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        inlineValue = true;
      }
    }
    auto next = [&]() -> std::string {
      if (inlineValue)
        return value;
      if (i + 1 >= argc)
        throw UsageError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--backend") {
      o.backend = next();
      if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda")
        throw UsageError("--backend must be auto, cpu or cuda, not '" + o.backend + "'");
    } else if (arg == "--seed") {
      o.seed = static_cast<std::uint64_t>(
          parseInt(next(), arg, 0, std::numeric_limits<std::int64_t>::max()));
    } else if (arg == "--resident") {
      std::string list = next();
      o.residency.clear();
      std::size_t start = 0;
      for (;;) {
        std::size_t comma = list.find(',', start);
        std::string item = list.substr(start, comma - start);
        double f = parseDouble(item, arg);
        if (f < 0.0 || f > 1.0)
          throw UsageError("--resident fractions must lie in [0, 1], not " + item);
        o.residency.push_back(f);
        if (comma == std::string::npos)
          break;
        start = comma + 1;
      }
    } else if (arg == "--history-rows") {
      o.historyRows = parseInt(next(), arg, 1, std::numeric_limits<std::int32_t>::max());
    } else if (arg == "--unused") {
      o.unused = parseDouble(next(), arg);
      if (o.unused < 0.0 || o.unused > 1.0)
        throw UsageError("--unused must lie in [0, 1]");
    } else if (arg == "--overlap") {
      o.overlap = parseDouble(next(), arg);
      if (o.overlap < 0.0 || o.overlap > 1.0)
        throw UsageError("--overlap must lie in [0, 1]");
    } else if (arg == "--hbm-slots") {
      o.hbmSlots = parseInt(next(), arg, 0, std::numeric_limits<std::int32_t>::max());
    } else if (arg == "--host-rows") {
      o.hostRows = parseInt(next(), arg, 0, std::numeric_limits<std::int32_t>::max());
    } else if (arg == "--repeat") {
      o.repeat = static_cast<int>(parseInt(next(), arg, 0, 1000000));
    } else if (arg == "--warmup") {
      o.warmup = static_cast<int>(parseInt(next(), arg, 0, 1000000));
    } else if (arg == "--tolerance") {
      o.tolerance = parseDouble(next(), arg);
      if (o.tolerance <= 0.0)
        throw UsageError("--tolerance must be positive");
    } else if (arg == "--link-only") {
      o.linkOnly = true;
    } else if (arg == "--arch") {
      o.arch = next();
      if (!isValidArch(o.arch))
        throw UsageError("--arch needs an architecture like sm_90a, not '" + o.arch + "'");
    } else if (arg == "--json") {
      o.jsonPath = next();
    } else if (arg == "--keep-step") {
      o.keepStep = true;
    } else if (arg == "--inject-error") {
      std::string kind = next();
      if (kind == "row-id")
        o.inject = Injection::RowId;
      else if (kind == "bad-id")
        o.inject = Injection::BadId;
      else if (kind == "slot")
        o.inject = Injection::Slot;
      else if (kind == "host-row")
        o.inject = Injection::HostRow;
      else
        throw UsageError("--inject-error must be row-id, bad-id, slot or host-row");
    } else if (arg == "--no-host-check") {
      o.hostCheck = false;
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw UsageError("unknown option '" + arg + "'");
    } else {
      if (haveStep)
        throw UsageError("more than one STEP given ('" + o.step + "' and '" + arg + "')");
      o.step = arg;
      haveStep = true;
    }
  }
  return o;
}

//===----------------------------------------------------------------------===//
// Finding and compiling the step
//===----------------------------------------------------------------------===//

/// A temporary directory removed on destruction unless kept.
class TempDir {
public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "dhs-run-XXXXXX").string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!mkdtemp(buffer.data()))
      throw Error("cannot create a temporary directory: " + std::string(std::strerror(errno)));
    path_ = buffer.data();
  }
  ~TempDir() {
    if (!keep_) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return path_; }
  void keep() { keep_ = true; }

private:
  std::string path_;
  bool keep_ = false;
};

/// dhs-compile next to this executable.
std::string findCompiler() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    throw Error("cannot locate dhs-run itself (/proc/self/exe): " + ec.message());
  fs::path compiler = self.parent_path() / "dhs-compile";
  if (!fs::exists(compiler, ec))
    throw Error("dhs-compile not found next to dhs-run (looked for " + compiler.string() +
                "); build it (-DDHS_BUILD_COMPILER=ON) or pass a compiled step "
                "directory");
  return compiler.string();
}

/// Runs `dhs-compile input -o outDir`; throws on failure.
void compileStep(const std::string &compiler, const std::string &input, const std::string &outDir) {
  std::cout.flush();
  pid_t pid = fork();
  if (pid < 0)
    throw Error("cannot start dhs-compile: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    const char *args[] = {compiler.c_str(), input.c_str(), "-o", outDir.c_str(), nullptr};
    execv(compiler.c_str(), const_cast<char *const *>(args));
    std::fprintf(stderr, "dhs-run: cannot execute %s: %s\n", compiler.c_str(),
                 std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw Error("waiting for dhs-compile: " + std::string(std::strerror(errno)));
  }
  if (WIFSIGNALED(status))
    throw Error("dhs-compile crashed (signal " + std::to_string(WTERMSIG(status)) + ") compiling " +
                input);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error("dhs-compile failed (exit status " +
                std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ") compiling " +
                input);
}

//===----------------------------------------------------------------------===//
// Output helpers
//===----------------------------------------------------------------------===//

std::string format(const char *fmt, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), fmt, value);
  return text;
}

/// "83.2 M" style rates.
std::string formatRate(double perSecond) {
  if (!(perSecond > 0.0) || !std::isfinite(perSecond))
    return "-";
  if (perSecond >= 1e9)
    return format("%.2f G", perSecond / 1e9);
  if (perSecond >= 1e6)
    return format("%.1f M", perSecond / 1e6);
  if (perSecond >= 1e3)
    return format("%.1f k", perSecond / 1e3);
  return format("%.0f", perSecond);
}

/// Relative errors: scientific, "inf" for non-finite.
std::string formatError(double value) {
  if (!std::isfinite(value))
    return "inf";
  return format("%.2e", value);
}

/// Corrupts one input as asked (after residency was applied).
void injectError(SparseAttentionProblem &p, Injection kind) {
  const ProblemShape &s = p.shape;
  // The first valid selection satisfying `want`, searching from the last
  // request backwards so that the message names a nonzero request.
  auto find = [&](auto want) -> std::optional<std::size_t> {
    for (std::int64_t b = s.batch - 1; b >= 0; --b)
      for (std::int64_t q = 0; q < s.queries; ++q)
        for (std::int64_t k = s.topk / 2; k < s.topk + s.topk / 2; ++k) {
          std::size_t i = p.selectionIndex(b, q, k % s.topk);
          if (p.rowIds[i] != -1 && want(b, i))
            return i;
        }
    return std::nullopt;
  };
  auto requestOf = [&](std::size_t i) {
    return static_cast<std::int64_t>(i) / (s.queries * s.topk);
  };
  switch (kind) {
  case Injection::None:
    return;
  case Injection::RowId:
  case Injection::BadId: {
    auto i = find([](std::int64_t, std::size_t) { return true; });
    if (!i)
      throw Error("cannot inject an error: no selection is valid");
    p.rowIds[*i] = kind == Injection::BadId ? -2 : p.historyLen[requestOf(*i)];
    return;
  }
  case Injection::Slot: {
    auto i = find([](std::int64_t, std::size_t) { return true; });
    if (!i)
      throw Error("cannot inject an error: no selection is valid");
    p.slots[*i] = static_cast<std::int32_t>(s.hbmSlots);
    return;
  }
  case Injection::HostRow: {
    auto i = find([&](std::int64_t, std::size_t j) { return p.slots[j] == -1; });
    if (!i)
      throw Error("cannot inject a host-row error: no selection reads the host "
                  "store (residency 1?)");
    // Move the request's history so that this row lands just past the store.
    p.historyStart[requestOf(*i)] = s.hostRows - p.rowIds[*i];
    return;
  }
  }
}

/// Results of one residency mix.
struct MixResult {
  double residency = 0.0;
  ProblemStats stats;
  double medianMs = 0.0;
  std::vector<double> timesMs;
  bool timed = false;
  Comparison check;
  bool pass = false;
  bool repeatsIdentical = true;
  std::vector<bf16_t> output;
  /// Rows the step's fetches copied from the host (GPU; -1: no fetch).
  std::int64_t fetchedRows = -1;
};

int run(const Options &options) {
  // The step: a directory, its manifest, or a .mlir file to compile.
  std::string input = options.step.empty() ? DHS_DEFAULT_STEP : options.step;
  std::error_code ec;
  std::unique_ptr<TempDir> compiled;
  std::string stepDir;
  std::string stepNote;
  if (fs::is_directory(input, ec)) {
    stepDir = input;
  } else if (!fs::exists(input, ec)) {
    throw Error("step " + input + " does not exist");
  } else if (fs::path(input).filename() == kManifestFileName) {
    stepDir = fs::path(input).parent_path().string();
    if (stepDir.empty())
      stepDir = ".";
  } else if (fs::path(input).extension() == ".mlir") {
    std::string compiler = findCompiler();
    compiled = std::make_unique<TempDir>();
    if (options.keepStep)
      compiled->keep();
    compileStep(compiler, input, compiled->path());
    stepDir = compiled->path();
    stepNote = " (compiled from " + input + (options.keepStep ? ", kept" : "") + ")";
  } else {
    throw Error("step " + input + " is neither a step directory, a manifest.json nor a .mlir file");
  }

  // --link-only: nvJitLink every PTX, no GPU needed.
  if (options.linkOnly) {
    Manifest manifest = Manifest::load(stepDir, {/*requirePtx=*/true});
    const JitLink &jitLink = JitLink::instance();
    if (!jitLink.available())
      throw Error("cannot link: " + jitLink.unavailableReason());
    std::cout << "step: " << stepDir << stepNote << "\n";
    std::cout << "linking with nvJitLink " << jitLink.version() << " (" << jitLink.libraryName()
              << ") for " << options.arch << "\n";
    for (const std::string &path : manifest.ptxPaths()) {
      LinkedCubin linked = jitLink.linkPtx(readPtxFile(path), options.arch, path);
      std::vector<std::string> functions = cubinFunctionNames(linked.cubin);
      for (const Launch &launch : manifest.launches)
        if (launch.ptxPath == path &&
            std::find(functions.begin(), functions.end(), launch.kernel) == functions.end())
          throw Error("kernel '" + launch.kernel + "' is not in the cubin linked from " + path);
      std::cout << "  " << fs::path(path).filename().string() << ": " << linked.cubin.size()
                << " bytes of " << options.arch << " cubin, kernels:";
      for (const std::string &f : functions)
        std::cout << " " << f;
      std::cout << "\n";
    }
    std::cout << "link: OK\n";
    return 0;
  }

  // Backend.
  bool useCuda = false;
  std::string fallback;
  if (options.backend == "cuda") {
    CudaDriver::instance().requireAvailable();
    useCuda = true;
  } else if (options.backend == "auto") {
    const CudaDriver &cuda = CudaDriver::instance();
    const JitLink &jitLink = JitLink::instance();
    if (!cuda.available())
      fallback = cuda.unavailableReason();
    else if (!jitLink.available())
      fallback = jitLink.unavailableReason();
    else
      useCuda = true;
    if (!useCuda)
      std::cout << fallback << ": running on the CPU reference backend\n";
  }

  // A compiled step is its manifest and its PTX: a step with a missing or
  // corrupt kernel is refused on every backend.
  Manifest manifest = Manifest::load(stepDir, {/*requirePtx=*/true});
  ProblemShape shape = problemShapeFromManifest(manifest);
  const KvPoolInfo &pool = manifest.argument(ArgumentRole::KvPool).pool;
  if (options.hbmSlots >= 0 && shape.hbmSlots >= 0 && options.hbmSlots != shape.hbmSlots)
    throw Error("--hbm-slots " + std::to_string(options.hbmSlots) +
                " conflicts with the step's fixed " + std::to_string(shape.hbmSlots) +
                " HBM slots");
  if (options.hostRows >= 0 && shape.hostRows >= 0 && options.hostRows != shape.hostRows)
    throw Error("--host-rows " + std::to_string(options.hostRows) +
                " conflicts with the step's fixed " + std::to_string(shape.hostRows) +
                " host rows");

  // Inputs: one problem; each mix only redoes its residency.
  GeneratorOptions gen;
  gen.seed = options.seed;
  gen.historyRows = options.historyRows;
  gen.unusedFraction = options.unused;
  gen.positionOverlap = options.overlap;
  gen.residency = 0.0;
  gen.hbmSlots = options.hbmSlots;
  gen.hostRows = options.hostRows;
  std::int64_t hostLimit = shape.hostRows >= 0     ? shape.hostRows
                           : options.hostRows >= 0 ? options.hostRows
                                                   : -1;
  if (hostLimit >= 0 && options.historyRows == 0) {
    // Random histories must fit a fixed host store.
    gen.maxHistoryRows = std::min<std::int64_t>(gen.maxHistoryRows, hostLimit / shape.batch);
    gen.minHistoryRows = std::min(gen.minHistoryRows, gen.maxHistoryRows);
  }
  gen.minHistoryRows = std::max(gen.minHistoryRows, shape.topk);
  gen.maxHistoryRows = std::max(gen.maxHistoryRows, gen.minHistoryRows);
  SparseAttentionProblem problem = generateProblem(shape, gen);

  std::unique_ptr<CudaStep> cuda;
  if (useCuda)
    cuda = std::make_unique<CudaStep>(manifest);

  // Header.
  std::cout << "step: " << stepDir << stepNote << " ('" << manifest.step << "', "
            << manifest.launches.size() << " launch" << (manifest.launches.size() == 1 ? "" : "es")
            << ")\n";
  if (cuda) {
    const DeviceInfo &d = cuda->device();
    std::cout << "backend: cuda on " << d.name << " (" << d.arch << ", " << d.multiprocessors
              << " SMs, " << format("%.1f", static_cast<double>(d.totalMemory) / (1ull << 30))
              << " GiB)\n";
    for (const KernelInfo &k : cuda->kernels())
      std::cout << "kernel: " << k.kernel << ": " << k.registers << " registers, "
                << k.staticSharedBytes << " B static shared, " << k.localBytes << " B local, cubin "
                << k.cubinBytes << " B\n";
  } else {
    std::cout << "backend: cpu (float accumulation)\n";
  }
  std::int32_t minHistory = *std::min_element(problem.historyLen.begin(), problem.historyLen.end());
  std::int32_t maxHistory = *std::max_element(problem.historyLen.begin(), problem.historyLen.end());
  std::cout << "shapes: B=" << shape.batch << " Q=" << shape.queries << " H=" << shape.heads
            << " K=" << shape.topk << ", kv format " << pool.format << " (" << pool.rowBytes
            << "-byte rows, qk_dim " << pool.qkDim << ", v_dim " << pool.vDim << "), layer "
            << shape.layer << " of a group of " << shape.layers << ", softmax_scale "
            << format("%g", shape.softmaxScale) << "\n";
  std::cout << "pool: " << problem.shape.hbmSlots << " HBM slots, " << problem.shape.hostRows
            << " host rows (history " << minHistory;
  if (maxHistory != minHistory)
    std::cout << ".." << maxHistory;
  std::cout << " rows per request), seed " << options.seed << "\n";
  if (shape.windowSize > 0) {
    std::int32_t minTokens =
        *std::min_element(problem.windowTokens.begin(), problem.windowTokens.end());
    std::int32_t maxTokens =
        *std::max_element(problem.windowTokens.begin(), problem.windowTokens.end());
    std::cout << "sliding window: " << shape.windowSize << " tokens per query in rings of "
              << shape.windowRing << " (" << minTokens << ".." << maxTokens
              << " raw tokens per request)\n";
  }

  // The fp64 reference, from the inputs with every row read from the host
  // store: the exact attention over the selected rows.
  std::vector<double> reference = CpuAttention(CpuPrecision::Double).runUnrounded(problem);

  std::vector<MixResult> results;
  CudaRunOptions runOptions;
  runOptions.repeat = options.repeat;
  runOptions.warmup = options.warmup;
  runOptions.validateInputs = options.hostCheck;
  const bool table = options.residency.size() > 1;
  for (double fraction : options.residency) {
    applyResidency(problem, fraction, options.seed);
    injectError(problem, options.inject);
    if (options.hostCheck || !cuda)
      problem.validate();
    MixResult mix;
    mix.residency = fraction;
    mix.stats = problem.stats();
    if (cuda) {
      CudaRunResult r = cuda->run(problem, runOptions);
      mix.output = std::move(r.output);
      mix.timesMs = r.timesMs;
      mix.medianMs = r.medianMs;
      mix.timed = !r.timesMs.empty();
      mix.repeatsIdentical = r.repeatsIdentical;
      mix.fetchedRows = r.fetchedRows;
    } else {
      auto start = std::chrono::steady_clock::now();
      mix.output = CpuAttention(CpuPrecision::Float).run(problem);
      auto stop = std::chrono::steady_clock::now();
      mix.medianMs = std::chrono::duration<double, std::milli>(stop - start).count();
      mix.timesMs = {mix.medianMs};
      mix.timed = true;
    }
    mix.check = compareOutputs(mix.output, reference);
    mix.pass = mix.check.relativeError < options.tolerance && mix.repeatsIdentical;
    // A step that fetches the union of its missing rows copies each distinct
    // missing (request, row) exactly once.
    bool shared = std::any_of(manifest.launches.begin(), manifest.launches.end(),
                              [](const Launch &l) { return l.op == "union_missing"; });
    if (shared && mix.fetchedRows >= 0 && mix.fetchedRows != mix.stats.distinctHostRows) {
      std::cout << "fetch: copied " << mix.fetchedRows << " rows from the host, but "
                << mix.stats.distinctHostRows << " distinct rows were missing\n";
      mix.pass = false;
    }
    if (!table) {
      const ProblemStats &st = mix.stats;
      std::cout << "residency " << format("%.2f", fraction) << ": " << st.selections
                << " rows selected (" << st.distinctRows << " distinct), " << st.residentReads
                << " resident in HBM, " << st.hostReads << " read from host\n";
      if (mix.timed) {
        double rate = st.selections / (mix.medianMs / 1e3);
        std::cout << "time: " << format("%.4f", mix.medianMs) << " ms"
                  << (cuda ? " (median of " + std::to_string(mix.timesMs.size()) + ")"
                           : std::string(" (one CPU run)"))
                  << ", " << formatRate(rate) << " rows/s\n";
      }
      if (mix.fetchedRows >= 0)
        std::cout << "fetched from host: " << mix.fetchedRows << " rows for " << st.hostReads
                  << " selections of missing rows (" << st.distinctHostRows << " distinct)\n";
      if (!mix.repeatsIdentical)
        std::cout << "repetitions: output changed between runs (nondeterministic)\n";
      std::cout << "check vs fp64 CPU reference: relative error "
                << formatError(mix.check.relativeError) << ", max abs error "
                << formatError(mix.check.maxAbsError) << " (tolerance "
                << format("%g", options.tolerance) << "): " << (mix.pass ? "PASS" : "FAIL") << "\n";
    }
    results.push_back(std::move(mix));
  }

  bool pass =
      std::all_of(results.begin(), results.end(), [](const MixResult &m) { return m.pass; });
  std::optional<bool> identical;
  std::size_t differing = 0;
  if (table) {
    std::printf("%9s %10s %10s %10s %10s %11s %10s %10s %6s\n", "residency", "selected", "resident",
                "from host", "fetched", "time (ms)", "rows/s", "rel error", "check");
    for (const MixResult &m : results) {
      double rate = m.timed ? m.stats.selections / (m.medianMs / 1e3) : 0.0;
      std::printf("%9.2f %10lld %10lld %10lld %10s %11s %10s %10s %6s\n", m.residency,
                  static_cast<long long>(m.stats.selections),
                  static_cast<long long>(m.stats.residentReads),
                  static_cast<long long>(m.stats.hostReads),
                  m.fetchedRows >= 0 ? std::to_string(m.fetchedRows).c_str() : "-",
                  m.timed ? format("%.4f", m.medianMs).c_str() : "-", formatRate(rate).c_str(),
                  formatError(m.check.relativeError).c_str(), m.pass ? "PASS" : "FAIL");
    }
    std::fflush(stdout);
    for (const MixResult &m : results)
      differing = std::max(differing, countBitDifferences(m.output, results[0].output));
    identical = differing == 0;
    if (*identical)
      std::cout << "outputs at all " << results.size() << " residency mixes: bit-identical\n";
    else
      std::cout << "outputs at different residency mixes DIFFER (up to " << differing << " of "
                << results[0].output.size() << " elements)\n";
    pass = pass && *identical;
  }
  std::cout << "result: " << (pass ? "PASS" : "FAIL") << "\n";

  if (!options.jsonPath.empty()) {
    nlohmann::json j;
    j["step"] = stepDir;
    j["step_name"] = manifest.step;
    j["backend"] = cuda ? "cuda" : "cpu";
    if (cuda) {
      const DeviceInfo &d = cuda->device();
      j["device"] = {{"name", d.name},
                     {"arch", d.arch},
                     {"multiprocessors", d.multiprocessors},
                     {"total_memory", d.totalMemory}};
      nlohmann::json kernels = nlohmann::json::array();
      for (const KernelInfo &k : cuda->kernels())
        kernels.push_back({{"kernel", k.kernel},
                           {"registers", k.registers},
                           {"static_shared_bytes", k.staticSharedBytes},
                           {"local_bytes", k.localBytes},
                           {"cubin_bytes", k.cubinBytes}});
      j["kernels"] = kernels;
    } else {
      j["device"] = nullptr;
      if (!fallback.empty())
        j["fallback_reason"] = fallback;
    }
    j["shape"] = {{"B", shape.batch},
                  {"Q", shape.queries},
                  {"H", shape.heads},
                  {"K", shape.topk},
                  {"format", pool.format},
                  {"row_bytes", pool.rowBytes},
                  {"qk_dim", pool.qkDim},
                  {"v_dim", pool.vDim},
                  {"hbm_slots", problem.shape.hbmSlots},
                  {"host_rows", problem.shape.hostRows},
                  {"softmax_scale", shape.softmaxScale}};
    j["seed"] = options.seed;
    j["history_len"] = problem.historyLen;
    j["tolerance"] = options.tolerance;
    nlohmann::json mixes = nlohmann::json::array();
    for (const MixResult &m : results) {
      auto finiteOrNull = [](double v) -> nlohmann::json {
        return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
      };
      mixes.push_back(
          {{"residency", m.residency},
           {"selections", m.stats.selections},
           {"unused_selections", m.stats.unusedSelections},
           {"resident_reads", m.stats.residentReads},
           {"host_reads", m.stats.hostReads},
           {"distinct_missing_rows", m.stats.distinctHostRows},
           {"fetched_rows",
            m.fetchedRows >= 0 ? nlohmann::json(m.fetchedRows) : nlohmann::json(nullptr)},
           {"distinct_rows", m.stats.distinctRows},
           {"distinct_resident_rows", m.stats.distinctResidentRows},
           {"distinct_host_rows", m.stats.distinctHostRows},
           {"time_ms", m.timed ? nlohmann::json(m.medianMs) : nlohmann::json(nullptr)},
           {"times_ms", m.timesMs},
           {"rows_per_s", m.timed ? nlohmann::json(m.stats.selections / (m.medianMs / 1e3))
                                  : nlohmann::json(nullptr)},
           {"relative_error", finiteOrNull(m.check.relativeError)},
           {"max_abs_error", finiteOrNull(m.check.maxAbsError)},
           {"repeats_identical", m.repeatsIdentical},
           {"pass", m.pass}});
    }
    j["mixes"] = mixes;
    j["bit_identical_across_mixes"] =
        identical ? nlohmann::json(*identical) : nlohmann::json(nullptr);
    j["pass"] = pass;
    std::ofstream out(options.jsonPath);
    out << j.dump(2) << "\n";
    out.close();
    if (!out)
      throw Error("cannot write " + options.jsonPath);
  }
  return pass ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  try {
    Options options = parseOptions(argc, argv);
    return run(options);
  } catch (const UsageError &error) {
    std::cerr << "dhs-run: " << error.what() << "\n(see dhs-run --help)\n";
    return 2;
  } catch (const InputError &error) {
    std::cout.flush();
    std::cerr << "dhs-run: error: invalid input: " << error.what() << "\n";
  } catch (const Error &error) {
    std::cout.flush();
    std::cerr << "dhs-run: error: " << error.what() << "\n";
  } catch (const std::bad_alloc &) {
    std::cout.flush();
    std::cerr << "dhs-run: error: out of host memory\n";
  } catch (const std::exception &error) {
    std::cout.flush();
    std::cerr << "dhs-run: error: " << error.what() << "\n";
  }
  return 1;
}
