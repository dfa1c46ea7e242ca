//===- dhs-run.cpp - Run and check a compiled dhs step --------------------===//
//
// dhs-run [STEP...] [options]
//
// Loads a compiled step (a directory with manifest.json and PTX, or a .mlir
// file compiled on the fly with the dhs-compile next to this executable),
// generates requests and inputs from a seed, and runs the step through the
// runtime on the GPU (or the CPU backend when no GPU is usable) at one or
// more residency mixes (Mixes.h), checking every output against an fp64 CPU
// reference and printing the runtime's residency statistics. Exit status: 0
// when every check passes, 1 on a failed check or any error, 2 on bad usage.
//
//===----------------------------------------------------------------------===//

#include "runtime/Runtime.h"
#include "runtime/core/Error.h"
#include "runtime/core/LaunchForms.h"
#include "runtime/core/Manifest.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/JitLink.h"
#include "runtime/testing/ProblemGenerator.h"
#include "tools/CommandLine.h"
#include "tools/dhs-run/Mixes.h"
#include "tools/dhs-run/Options.h"
#include "tools/dhs-run/StepFiles.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace dhs::runtime;
using namespace dhs::tools;

namespace {

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

/// "a, b, c"
template <typename T> std::string join(const std::vector<T> &items) {
  std::string text;
  for (const T &item : items) {
    if (!text.empty())
      text += ", ";
    if constexpr (std::is_arithmetic_v<T>)
      text += std::to_string(item);
    else
      text += item;
  }
  return text;
}

/// --link-only: nvJitLink every PTX, no GPU needed.
int linkOnly(const Options &options, const StepDirectories &steps) {
  const JitLink &jitLink = JitLink::instance();
  if (!jitLink.available())
    throw Error("cannot link: " + jitLink.unavailableReason());
  std::cout << "step: " << join(steps.directories) << steps.note << "\n";
  std::cout << "linking with nvJitLink " << jitLink.version() << " (" << jitLink.libraryName()
            << ") for " << options.arch << "\n";
  for (const std::string &directory : steps.directories) {
    const Manifest manifest = Manifest::load(directory, {/*requirePtx=*/true});
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
  }
  std::cout << "link: OK\n";
  return 0;
}

/// Where to run: the backend asked, CUDA's reason to fall back on `fallback`.
BackendKind chooseBackend(const Options &options, std::string &fallback) {
  if (options.backend == "cuda") {
    CudaDriver::instance().requireAvailable();
    return BackendKind::Cuda;
  }
  if (options.backend == "cpu")
    return BackendKind::Cpu;
  const CudaDriver &cuda = CudaDriver::instance();
  const JitLink &jitLink = JitLink::instance();
  if (!cuda.available())
    fallback = cuda.unavailableReason();
  else if (!jitLink.available())
    fallback = jitLink.unavailableReason();
  if (!fallback.empty()) {
    std::cout << fallback << ": running on the CPU reference backend\n";
    return BackendKind::Cpu;
  }
  return BackendKind::Auto; // the runtime may still fall back (see fallbackReason)
}

/// Generates the requests and inputs: one problem; each mix only redoes its
/// residency.
SparseAttentionProblem generate(const Options &options, const ProblemShape &shape) {
  GeneratorOptions gen;
  gen.seed = options.seed;
  gen.historyRows = options.historyRows;
  gen.unusedFraction = options.unused;
  gen.positionOverlap = options.overlap;
  gen.residency = 0.0;
  gen.hbmSlots = options.hbmSlots;
  gen.hostRows = options.hostRows;
  const std::int64_t hostLimit = shape.hostRows >= 0     ? shape.hostRows
                                 : options.hostRows >= 0 ? options.hostRows
                                                         : -1;
  if (hostLimit >= 0 && options.historyRows == 0) {
    // Random histories must fit a fixed host store.
    gen.maxHistoryRows = std::min<std::int64_t>(gen.maxHistoryRows, hostLimit / shape.batch);
    gen.minHistoryRows = std::min(gen.minHistoryRows, gen.maxHistoryRows);
  }
  gen.minHistoryRows = std::max(gen.minHistoryRows, shape.topk);
  gen.maxHistoryRows = std::max(gen.maxHistoryRows, gen.minHistoryRows);
  return generateProblem(shape, gen);
}

void printDevice(const DeviceInfo &d, const std::vector<KernelInfo> &kernels) {
  std::cout << "backend: cuda on " << d.name << " (" << d.arch << ", " << d.multiprocessors
            << " SMs, " << format("%.1f", static_cast<double>(d.totalMemory) / (1ull << 30))
            << " GiB)\n";
  for (const KernelInfo &k : kernels)
    std::cout << "kernel: " << k.kernel << ": " << k.registers << " registers, "
              << k.staticSharedBytes << " B static shared, " << k.localBytes << " B local, cubin "
              << k.cubinBytes << " B\n";
}

void printShapes(const Manifest &manifest, const SparseAttentionProblem &problem,
                 const std::vector<std::int32_t> &layers, const Options &options) {
  const ProblemShape &shape = problem.shape;
  const KvPoolInfo &pool = manifest.argument(ArgumentRole::KvPool).pool;
  std::cout << "shapes: B=" << shape.batch << " Q=" << shape.queries << " H=" << shape.heads
            << " K=" << shape.topk << ", kv format " << pool.format << " (" << pool.rowBytes
            << "-byte rows, qk_dim " << pool.qkDim << ", v_dim " << pool.vDim << "), layer"
            << (layers.size() > 1 ? "s " : " ") << join(layers) << " of a group of " << shape.layers
            << ", softmax_scale " << format("%g", shape.softmaxScale) << "\n";
  const auto [minHistory, maxHistory] =
      std::minmax_element(problem.historyLen.begin(), problem.historyLen.end());
  std::cout << "pool: " << shape.hbmSlots << " HBM slots, " << shape.hostRows
            << " host rows (history " << *minHistory;
  if (*maxHistory != *minHistory)
    std::cout << ".." << *maxHistory;
  std::cout << " rows per request), seed " << options.seed << "\n";
  if (shape.windowSize > 0) {
    const auto [minTokens, maxTokens] =
        std::minmax_element(problem.windowTokens.begin(), problem.windowTokens.end());
    std::cout << "sliding window: " << shape.windowSize << " tokens per query in rings of "
              << shape.windowRing << " (" << *minTokens << ".." << *maxTokens
              << " raw tokens per request)\n";
  }
}

/// "1020 distinct rows selected, 510 resident, 510 fetched from host, 510
/// promoted after the step, 0 evicted"
std::string describeRuntimeStats(const MixResult &m) {
  const ResidencyStepStats &r = m.runtimeStats;
  return std::to_string(r.selected) + " distinct rows selected, " + std::to_string(r.resident) +
         " resident, " + std::to_string(r.fetched) + " fetched from host, " +
         std::to_string(r.promoted) + " promoted after the step, " + std::to_string(r.evicted) +
         " evicted";
}

void printMix(const MixResult &mix, const Options &options, bool onGpu, std::size_t layers,
              const std::vector<double> &formLines) {
  const ProblemStats &st = mix.stats;
  std::cout << "residency " << format("%.2f", mix.residency) << ": " << st.selections
            << " rows selected (" << st.distinctRows << " distinct), " << st.residentReads
            << " resident in HBM, " << st.hostReads << " read from host\n";
  if (mix.throughRuntime)
    std::cout << "runtime: "
              << (mix.residency > 0.0
                      ? "a warm-up step promoted " + std::to_string(mix.warmPromoted) + " rows; "
                      : std::string())
              << "the step: " << describeRuntimeStats(mix) << "\n";
  if (mix.timed) {
    const double rate = st.selections * static_cast<double>(layers) / (mix.medianMs / 1e3);
    std::cout << "time: " << format("%.4f", mix.medianMs) << " ms"
              << (onGpu ? " (median of " + std::to_string(mix.timesMs.size()) + ")"
                        : std::string(" (one CPU run)"))
              << ", " << formatRate(rate) << " rows/s\n";
  }
  if (!formLines.empty())
    std::cout << "form: the launches for " << describeForm(formLines, mix.formShare) << "\n";
  if (mix.residentForm)
    std::cout << "attention: its resident form (the step's rows almost all in HBM)\n";
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

void printTable(const std::vector<MixResult> &results, std::size_t layers,
                const std::vector<double> &formLines) {
  std::printf("%9s %10s %10s %10s %10s %11s %10s %10s %6s\n", "residency", "selected", "resident",
              "from host", "fetched", "time (ms)", "rows/s", "rel error", "check");
  for (const MixResult &m : results) {
    const double rate =
        m.timed ? m.stats.selections * static_cast<double>(layers) / (m.medianMs / 1e3) : 0.0;
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
    if (m.throughRuntime)
      std::cout << "runtime at " << format("%.2f", m.residency) << ": "
                << (m.residency > 0.0
                        ? "warm-up promoted " + std::to_string(m.warmPromoted) + " rows; "
                        : std::string())
                << describeRuntimeStats(m) << "\n";
  if (!formLines.empty())
    for (const MixResult &m : results)
      std::cout << "form at " << format("%.2f", m.residency) << ": the launches for "
                << describeForm(formLines, m.formShare) << "\n";
}

nlohmann::json mixJson(const MixResult &m) {
  auto finiteOrNull = [](double v) -> nlohmann::json {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  };
  nlohmann::json j = {{"residency", m.residency},
                      {"selections", m.stats.selections},
                      {"unused_selections", m.stats.unusedSelections},
                      {"resident_reads", m.stats.residentReads},
                      {"host_reads", m.stats.hostReads},
                      {"distinct_missing_rows", m.stats.distinctHostRows},
                      {"fetched_rows", m.fetchedRows >= 0 ? nlohmann::json(m.fetchedRows)
                                                          : nlohmann::json(nullptr)},
                      {"resident_form", m.residentForm},
                      {"form_share", m.formShare},
                      {"distinct_rows", m.stats.distinctRows},
                      {"distinct_resident_rows", m.stats.distinctResidentRows},
                      {"distinct_host_rows", m.stats.distinctHostRows},
                      {"time_ms", m.timed ? nlohmann::json(m.medianMs) : nlohmann::json(nullptr)},
                      {"times_ms", m.timesMs},
                      {"rows_per_s", m.timed
                                         ? nlohmann::json(m.stats.selections / (m.medianMs / 1e3))
                                         : nlohmann::json(nullptr)},
                      {"relative_error", finiteOrNull(m.check.relativeError)},
                      {"max_abs_error", finiteOrNull(m.check.maxAbsError)},
                      {"repeats_identical", m.repeatsIdentical},
                      {"pass", m.pass}};
  if (m.throughRuntime) {
    const ResidencyStepStats &r = m.runtimeStats;
    j["runtime"] = {{"warm_up_promoted", m.warmPromoted},
                    {"selected", r.selected},
                    {"resident", r.resident},
                    {"fetched", r.fetched},
                    {"promoted", r.promoted},
                    {"not_promoted", r.notPromoted},
                    {"evicted", r.evicted}};
  }
  return j;
}

struct RunReport {
  std::string steps;
  const Manifest *manifest = nullptr;
  const SparseAttentionProblem *problem = nullptr;
  const DeviceInfo *device = nullptr;
  std::vector<KernelInfo> kernels;
  std::string fallback;
  std::vector<MixResult> results;
  std::optional<bool> identical;
  bool pass = false;
};

void writeJson(const Options &options, const RunReport &report) {
  const ProblemShape &shape = report.problem->shape;
  const KvPoolInfo &pool = report.manifest->argument(ArgumentRole::KvPool).pool;
  nlohmann::json j;
  j["step"] = report.steps;
  j["step_name"] = report.manifest->step;
  j["backend"] = report.device ? "cuda" : "cpu";
  if (report.device) {
    const DeviceInfo &d = *report.device;
    j["device"] = {{"name", d.name},
                   {"arch", d.arch},
                   {"multiprocessors", d.multiprocessors},
                   {"total_memory", d.totalMemory}};
    nlohmann::json kernels = nlohmann::json::array();
    for (const KernelInfo &k : report.kernels)
      kernels.push_back({{"kernel", k.kernel},
                         {"registers", k.registers},
                         {"static_shared_bytes", k.staticSharedBytes},
                         {"local_bytes", k.localBytes},
                         {"cubin_bytes", k.cubinBytes}});
    j["kernels"] = kernels;
  } else {
    j["device"] = nullptr;
    if (!report.fallback.empty())
      j["fallback_reason"] = report.fallback;
  }
  j["shape"] = {{"B", shape.batch},
                {"Q", shape.queries},
                {"H", shape.heads},
                {"K", shape.topk},
                {"format", pool.format},
                {"row_bytes", pool.rowBytes},
                {"qk_dim", pool.qkDim},
                {"v_dim", pool.vDim},
                {"hbm_slots", shape.hbmSlots},
                {"host_rows", shape.hostRows},
                {"softmax_scale", shape.softmaxScale}};
  j["seed"] = options.seed;
  j["history_len"] = report.problem->historyLen;
  j["tolerance"] = options.tolerance;
  nlohmann::json mixes = nlohmann::json::array();
  for (const MixResult &m : report.results)
    mixes.push_back(mixJson(m));
  j["mixes"] = mixes;
  j["bit_identical_across_mixes"] =
      report.identical ? nlohmann::json(*report.identical) : nlohmann::json(nullptr);
  j["pass"] = report.pass;
  std::ofstream out(options.jsonPath);
  out << j.dump(2) << "\n";
  out.close();
  if (!out)
    throw Error("cannot write " + options.jsonPath);
}

int run(const Options &options) {
  const StepDirectories steps = findSteps(options.steps, options.keepStep);
  if (options.linkOnly)
    return linkOnly(options, steps);
  RunReport report;
  const BackendKind backend = chooseBackend(options, report.fallback);
  if (options.formShare >= 0.0 && backend == BackendKind::Cpu)
    throw Error("--form-share times the kernels of a form on the GPU (with --no-host-check); "
                "on the cpu backend the runtime chooses its forms");

  // A compiled step is its manifest and its PTX: a step with a missing or
  // corrupt kernel is refused on every backend.
  std::vector<Manifest> manifests;
  for (const std::string &directory : steps.directories)
    manifests.push_back(Manifest::load(directory, {/*requirePtx=*/true}));
  const Manifest &manifest = manifests.front();
  // dhs-run generates the problem of one layer group (one KV pool); a
  // whole-model step takes the runtime configured for all its layers.
  const auto pools = std::count_if(manifest.arguments.begin(), manifest.arguments.end(),
                                   [](const Argument &a) { return a.isPool; });
  if (pools > 1)
    throw Error("the step " + manifest.directory + " reads " + std::to_string(pools) +
                " KV pools (layer groups); dhs-run runs steps of one layer group. A "
                "whole-model step runs through the runtime's API configured for all its "
                "layers (RuntimeConfig layers and layers_per_group: "
                "test/unit/WholeModelTest.cpp)");
  const ProblemShape shape = problemShapeFromManifest(manifest);
  if (options.hbmSlots >= 0 && shape.hbmSlots >= 0 && options.hbmSlots != shape.hbmSlots)
    throw Error("--hbm-slots " + std::to_string(options.hbmSlots) +
                " conflicts with the step's fixed " + std::to_string(shape.hbmSlots) +
                " HBM slots");
  if (options.hostRows >= 0 && shape.hostRows >= 0 && options.hostRows != shape.hostRows)
    throw Error("--host-rows " + std::to_string(options.hostRows) +
                " conflicts with the step's fixed " + std::to_string(shape.hostRows) +
                " host rows");
  SparseAttentionProblem problem = generate(options, shape);

  // The runtime, or (--no-host-check on a GPU) the first step's kernels alone.
  std::unique_ptr<RuntimeMixes> session;
  std::unique_ptr<CudaStep> kernels;
  std::vector<std::int32_t> checkedLayers = {static_cast<std::int32_t>(shape.layer)};
  if (!options.hostCheck && backend != BackendKind::Cpu) {
    kernels = std::make_unique<CudaStep>(manifest);
    report.device = &kernels->device();
    report.kernels = kernels->kernels();
  } else {
    session = std::make_unique<RuntimeMixes>(options, manifests, problem, backend);
    Runtime &rt = session->runtime();
    if (!rt.fallbackReason().empty()) {
      report.fallback = rt.fallbackReason();
      std::cout << report.fallback << ": running on the CPU reference backend\n";
    }
    report.device = rt.device();
    report.kernels = rt.kernels();
    checkedLayers = session->checkedLayers();
  }

  // Header.
  report.steps = join(steps.directories);
  std::cout << "step: " << report.steps << steps.note << " ('" << manifest.step << "', "
            << manifest.launches.size() << " launch" << (manifest.launches.size() == 1 ? "" : "es")
            << ")\n";
  if (report.device)
    printDevice(*report.device, report.kernels);
  else
    std::cout << "backend: cpu (float accumulation)\n";
  printShapes(manifest, problem, checkedLayers, options);
  if (session) {
    const ResidencyConfig &c = session->runtime().controller().config();
    std::cout << "runtime: " << shape.batch << " requests admitted per mix, "
              << session->runtime().layers() << " layer"
              << (session->runtime().layers() == 1 ? "" : "s") << " in one group, " << c.hbmSlots
              << " HBM slots, " << c.hostRows << " host rows, " << abi::name(c.policy)
              << " residency with " << abi::name(c.replacement) << " replacement\n";
  } else {
    std::cout << "kernels: run directly on the generated inputs, without host-side checks\n";
  }

  // The fp64 references, from the inputs with every row read from the host
  // store: the exact attention over the selected rows of each checked layer.
  // (The problem itself, its layer set for each: a copy would double the
  // host store's gigabytes.)
  std::vector<double> reference;
  const std::int64_t generatedLayer = problem.shape.layer;
  for (std::int32_t layer : checkedLayers) {
    problem.shape.layer = layer;
    std::vector<double> r;
    try {
      r = CpuAttention(CpuPrecision::Double).runUnrounded(problem);
    } catch (...) {
      problem.shape.layer = generatedLayer;
      throw;
    }
    reference.insert(reference.end(), r.begin(), r.end());
  }
  problem.shape.layer = generatedLayer;

  // A step that fetches the union of its missing rows copies each distinct
  // missing (request, row) exactly once.
  const bool shared =
      std::any_of(manifest.launches.begin(), manifest.launches.end(),
                  [](const Launch &l) { return l.kind == abi::LaunchKind::UnionMissing; });
  const bool table = options.residency.size() > 1;
  const std::vector<double> lines = formLines(manifest, 0, manifest.launches.size());
  const std::size_t layersRun = session ? static_cast<std::size_t>(session->runtime().layers()) : 1;
  for (double fraction : options.residency) {
    MixResult mix = session ? session->run(fraction, problem)
                            : runOnKernels(*kernels, options, fraction, problem);
    mix.check = compareOutputs(mix.output, reference);
    mix.pass = mix.check.relativeError < options.tolerance && mix.repeatsIdentical;
    if (shared && mix.fetchedRows >= 0 && mix.fetchedRows != mix.stats.distinctHostRows) {
      std::cout << "fetch: copied " << mix.fetchedRows << " rows from the host, but "
                << mix.stats.distinctHostRows << " distinct rows were missing\n";
      mix.pass = false;
    }
    if (!table)
      printMix(mix, options, report.device != nullptr, layersRun, lines);
    report.results.push_back(std::move(mix));
  }

  report.pass = std::all_of(report.results.begin(), report.results.end(),
                            [](const MixResult &m) { return m.pass; });
  if (table) {
    printTable(report.results, layersRun, lines);
    std::size_t differing = 0;
    for (const MixResult &m : report.results)
      differing = std::max(differing, countBitDifferences(m.output, report.results[0].output));
    report.identical = differing == 0;
    if (*report.identical)
      std::cout << "outputs at all " << report.results.size()
                << " residency mixes: bit-identical\n";
    else
      std::cout << "outputs at different residency mixes DIFFER (up to " << differing << " of "
                << report.results[0].output.size() << " elements)\n";
    report.pass = report.pass && *report.identical;
  }
  std::cout << "result: " << (report.pass ? "PASS" : "FAIL") << "\n";
  report.manifest = &manifest;
  report.problem = &problem;
  if (!options.jsonPath.empty())
    writeJson(options, report);
  return report.pass ? 0 : 1;
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
