//===- decision_bench.cpp - Times steps whose residency the device decides ===//
//
// Usage: dhs-decision-bench [--groups G] [--history N] [--steps S]
//            [--drift X] [--aging-step DIR] [--batched-appends] [--profile]
//            [--write-back-rows N]
//            <placement step> <decision step> <layer steps...>
// The layer steps (one per layer index of a group, e.g. gpu-check's
// group-steps/large_g4_resolved/layer0..3) must resolve on the device; the
// decision step must be compiled for their shapes and pools
// (examples/decision_step.mlir). Two runtimes of the same config (G groups,
// the adaptive policy with CLOCK and hot floor 0, checks off, CUDA graphs
// on, selections, queries and outputs in device memory) run the same steps:
//   logged   the host books each group from its resolve log and decides
//            promotions and releases (the path before the decision step)
//   decided  the decision step decides and places them on the device; the
//            host reads counts
// For each: the median wall time of a step and of its calls (begin +
// select, attend of every layer, end), with fresh selections each step
// (about a third resident), or with --drift X a decode's: each step keeps
// the last one's selections but a share X of them, drawn afresh, so that
// where the pool holds the working set a step misses about X of its rows
// and promotes them (the steady state whose promotions read the host rows
// the attention just read); then the same with one appended token per
// request between steps (a decode loop; with --aging-step the decided
// runtime replays them on the device; with --batched-appends the tokens go
// in one Runtime::appendBatch call a step instead of an append per request).
// Checks that both give the same output bits and end with the same
// residency. With --profile, the last decided step without appends runs
// inside cuProfilerStart/Stop, so that `ncu --profile-from-start off` sees
// its kernels (the decisions' and the attention's) and nothing else. With
// --write-back-rows N the decided runtime gives each pool a write-back ring
// of N tokens (RuntimeConfig::writeBackRows): layer and decision steps
// compiled with write_back (gpu-check's b16_g1_write_back) copy the
// promoted rows the attention read from the host store out of HBM.
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSetup.h"
#include "bench/BenchTiming.h"
#include "runtime/Runtime.h"
#include "runtime/core/RowFormat.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaResources.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <execinfo.h>
#include <fstream>
#include <random>
#include <unistd.h>

using namespace dhs::runtime;
using namespace dhs::runtime::cuda_detail;

namespace {

using Clock = dhs::bench::Clock;
using dhs::bench::median;
constexpr auto ms = dhs::bench::elapsedMs;

/// Medians of a step's phases.
struct Phases {
  double step = 0, begin = 0, select = 0, attend = 0, end = 0, appends = 0;
  double device = 0;      ///< the device's span of the step (CUDA events)
  double launch = 0;      ///< endStep's launch of the step's work (the graph)
  double wait = 0;        ///< endStep waiting for the device
  double graphLaunch = 0; ///< of `launch`, the cuGraphLaunch call alone
};

/// On a crash: the stack's return addresses and where the binary is mapped
/// (for addr2line on the build machine).
void printCrash(int signal) {
  void *frames[64];
  const int count = backtrace(frames, 64);
  std::fprintf(stderr, "dhs-decision-bench: signal %d, stack:\n", signal);
  backtrace_symbols_fd(frames, count, STDERR_FILENO);
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("dhs-decision-bench") != std::string::npos)
      std::fprintf(stderr, "%s\n", line.c_str());
  std::_Exit(128 + signal);
}

} // namespace

int main(int argc, char **argv) {
  std::signal(SIGSEGV, printCrash);
  std::signal(SIGABRT, printCrash);
  std::int32_t groups = 2, stepsTimed = 30;
  std::int64_t history = 4096;
  std::string agingStep;       // appends replayed on the device (decided)
  bool batchedAppends = false; // Runtime::appendBatch instead of append
  bool profile = false;        // one decided step inside a profiler range
  double drift = 1.0;          // share of the selections drawn afresh a step
  std::int64_t writeBackRows = 0; // the decided runtime's write-back rings
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--aging-step" && i + 1 < argc) {
      agingStep = argv[++i];
    } else if (arg == "--batched-appends") {
      batchedAppends = true;
    } else if (arg == "--profile") {
      profile = true;
    } else if (arg == "--drift" && i + 1 < argc) {
      drift = std::atof(argv[++i]);
    } else if (arg == "--write-back-rows" && i + 1 < argc) {
      writeBackRows = std::atoll(argv[++i]);
    } else if ((arg == "--groups" || arg == "--history" || arg == "--steps") && i + 1 < argc) {
      const long long value = std::atoll(argv[++i]);
      if (arg == "--groups")
        groups = static_cast<std::int32_t>(value);
      else if (arg == "--steps")
        stepsTimed = static_cast<std::int32_t>(value);
      else
        history = value;
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() < 3 || groups < 1 || history < 64 || stepsTimed < 1 ||
      !(drift > 0.0 && drift <= 1.0) || writeBackRows < 0) {
    std::fprintf(
        stderr,
        "usage: dhs-decision-bench [--groups G] [--history N] [--steps S] [--drift X in (0, 1]] "
        "[--aging-step DIR] [--batched-appends] [--profile] [--write-back-rows N] "
        "<placement step> <decision step> "
        "<layer steps...>\n");
    return 2;
  }
  try {
    const CudaDriver &cuda = dhs::bench::requireGpu();
    const std::vector<std::string> steps(positional.begin() + 2, positional.end());
    RuntimeConfig config;
    config.layersPerGroup = static_cast<std::int32_t>(steps.size());
    config.layers = groups * config.layersPerGroup;
    config.newestWindow = 64;
    config.hotFloor = 0;
    config.checkInvariants = false;
    config.cudaGraphs = true;
    config.backend = BackendKind::Cuda;
    // Room for every request's history and the appends.
    const std::int64_t appends = 2 * (stepsTimed + 10);
    ProblemShape s;
    std::int64_t rowBytes = 0;
    {
      RuntimeConfig small = config;
      small.hostRows = 1 << 12;
      Runtime probe(small);
      probe.loadSteps(steps);
      s = probe.shape();
      rowBytes = probe.rowBytes();
    }
    config.hostRows = s.batch * (history + appends);
    config.maxRequests = static_cast<std::int32_t>(s.batch);
    Runtime logged(config);
    RuntimeConfig decidedConfig = config;
    decidedConfig.writeBackRows = writeBackRows;
    Runtime decided(decidedConfig);
    for (Runtime *rt : {&logged, &decided}) {
      rt->loadSteps(steps);
      rt->loadPlacementStep(positional[0]);
    }
    decided.loadDecisionStep(positional[1]);
    if (!agingStep.empty())
      decided.loadAgingStep(agingStep);
    const std::int64_t L = config.layers;
    std::mt19937_64 rng(5);
    std::vector<std::uint64_t> ids;
    std::printf("admitting %lld requests of %lld rows, %lld layers in %d groups\n",
                static_cast<long long>(s.batch), static_cast<long long>(history),
                static_cast<long long>(L), groups);
    std::fflush(stdout);
    std::vector<std::uint8_t> prefill(static_cast<std::size_t>(L * history * rowBytes));
    for (std::int64_t i = 0; i < L * history; ++i)
      fillRandomRow(s.format, prefill.data() + i * rowBytes, rng);
    for (std::int64_t b = 0; b < s.batch; ++b) {
      ids.push_back(static_cast<std::uint64_t>(b + 1));
      for (Runtime *rt : {&logged, &decided})
        rt->admit(ids.back(), history, history + appends, prefill.data());
    }
    const std::int64_t perGroup = s.batch * s.queries * s.topk;
    std::vector<std::int32_t> rows(static_cast<std::size_t>(groups * perGroup));
    DeviceBuffer deviceRows(rows.size() * 4, "selections");
    const std::size_t qPerLayer = static_cast<std::size_t>(s.batch * s.queries * s.heads * s.qkDim);
    const std::size_t oPerLayer = static_cast<std::size_t>(s.batch * s.queries * s.heads * s.vDim);
    std::vector<bf16_t> q(qPerLayer * static_cast<std::size_t>(L));
    for (auto &v : q)
      v = floatToBf16(static_cast<float>(rng() % 1000) / 1000.0f - 0.5f);
    DeviceBuffer deviceQ(q.size() * 2, "queries");
    cuda.check(cuda.memcpyHtoD(deviceQ.get(), q.data(), q.size() * 2), "queries");
    DeviceBuffer outLogged(oPerLayer * static_cast<std::size_t>(L) * 2, "outputs"),
        outDecided(oPerLayer * static_cast<std::size_t>(L) * 2, "outputs");
    // A token per request (the same one each, as before; appendBatch takes
    // one per request).
    std::vector<std::uint8_t> token(static_cast<std::size_t>(L * rowBytes));
    std::vector<std::uint8_t> tokens(token.size() * ids.size());
    // Fresh selections: a third from the newest 2048 rows (recurring), the
    // rest anywhere in the history; with --drift, after the first step only
    // that share of them.
    bool selected = false;
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    auto randomSelections = [&] {
      for (std::int64_t b = 0; b < s.batch; ++b) {
        const std::int64_t len = logged.historyLen(ids[static_cast<std::size_t>(b)]);
        for (std::int32_t g = 0; g < groups; ++g)
          for (std::int64_t k = 0; k < s.queries * s.topk; ++k) {
            if (selected && drift < 1.0 && uniform(rng) >= drift)
              continue;
            const bool recent = rng() % 3 == 0;
            const std::int64_t span = recent ? std::min<std::int64_t>(2048, len) : len;
            rows[static_cast<std::size_t>(g * perGroup + b * s.queries * s.topk + k)] =
                static_cast<std::int32_t>(len - 1 - static_cast<std::int64_t>(rng() % span));
          }
      }
      cuda.check(cuda.memcpyHtoD(deviceRows.get(), rows.data(), rows.size() * 4), "selections");
      selected = true;
    };
    auto run = [&](Runtime &rt, const DeviceBuffer &out, Phases &phase, bool append) {
      const auto t0 = Clock::now();
      rt.beginStep(ids.data(), s.batch);
      const auto tBegun = Clock::now();
      for (std::int32_t g = 0; g < groups; ++g)
        rt.selectGroup(g, reinterpret_cast<const std::int32_t *>(deviceRows.get()) + g * perGroup,
                       MemorySpace::Device);
      const auto t1 = Clock::now();
      for (std::int64_t l = 0; l < L; ++l)
        rt.attendLayer(static_cast<std::int32_t>(l),
                       reinterpret_cast<const bf16_t *>(deviceQ.get()) + l * qPerLayer,
                       reinterpret_cast<bf16_t *>(out.get()) + l * oPerLayer, MemorySpace::Device);
      const auto t2 = Clock::now();
      rt.endStep();
      const auto t3 = Clock::now();
      const StepTimes times = rt.lastStepTimes();
      phase = {ms(t0, t3), ms(t0, tBegun), ms(tBegun, t1), ms(t1, t2), ms(t2, t3),
               0,          times.device,   times.launch,   times.wait, times.graphLaunch};
      if (append) {
        if (batchedAppends) // (not timed: an engine's tokens are laid out so)
          for (std::size_t i = 0; i < ids.size(); ++i)
            std::memcpy(tokens.data() + i * token.size(), token.data(), token.size());
        const auto a0 = Clock::now();
        if (batchedAppends) {
          rt.appendBatch(ids.data(), static_cast<std::int64_t>(ids.size()), tokens.data());
        } else {
          for (std::uint64_t id : ids)
            rt.append(id, token.data());
        }
        phase.appends = ms(a0, Clock::now());
      }
    };
    std::size_t differing = 0;
    auto measure = [&](bool append, Phases &medianLogged, Phases &medianDecided) {
      std::vector<Phases> a, b;
      for (int i = 0; i < stepsTimed + 5; ++i) {
        randomSelections();
        for (auto &byte : token)
          byte = static_cast<std::uint8_t>(rng());
        for (std::int64_t l = 0; l < L; ++l)
          fillRandomRow(s.format, token.data() + l * rowBytes, rng);
        Phases pl, pd;
        // Alternate which runtime goes first.
        if (profile && !append && i == stepsTimed + 4) {
          run(logged, outLogged, pl, append);
          cuda.check(cuda.ctxSynchronize(), "profiled step");
          if (cuda.profilerStart)
            cuda.check(cuda.profilerStart(), "profiler start");
          run(decided, outDecided, pd, append);
          cuda.check(cuda.ctxSynchronize(), "profiled step");
          if (cuda.profilerStop)
            cuda.check(cuda.profilerStop(), "profiler stop");
        } else if (i % 2 == 0) {
          run(logged, outLogged, pl, append);
          run(decided, outDecided, pd, append);
        } else {
          run(decided, outDecided, pd, append);
          run(logged, outLogged, pl, append);
        }
        std::vector<std::uint16_t> x(oPerLayer * static_cast<std::size_t>(L)), y(x.size());
        cuda.check(cuda.memcpyDtoH(x.data(), outLogged.get(), x.size() * 2), "outputs");
        cuda.check(cuda.memcpyDtoH(y.data(), outDecided.get(), y.size() * 2), "outputs");
        for (std::size_t e = 0; e < x.size(); ++e)
          differing += x[e] != y[e];
        if (i >= 5) {
          a.push_back(pl);
          b.push_back(pd);
        }
        if (i % 10 == 9) {
          std::printf("  %s: %d steps\n", append ? "with appends" : "steps", i + 1);
          std::fflush(stdout);
        }
      }
      auto med = [](const std::vector<Phases> &v, double Phases::*field) {
        std::vector<double> values;
        for (const Phases &p : v)
          values.push_back(p.*field);
        return median(values);
      };
      for (auto [v, out] : {std::pair{&a, &medianLogged}, std::pair{&b, &medianDecided}})
        *out = {med(*v, &Phases::step),       med(*v, &Phases::begin),  med(*v, &Phases::select),
                med(*v, &Phases::attend),     med(*v, &Phases::end),    med(*v, &Phases::appends),
                med(*v, &Phases::device),     med(*v, &Phases::launch), med(*v, &Phases::wait),
                med(*v, &Phases::graphLaunch)};
    };
    Phases loggedSteps, decidedSteps, loggedAppends, decidedAppends;
    measure(false, loggedSteps, decidedSteps);
    const ResidencyStepStats last = decided.stats().lastStep;
    measure(true, loggedAppends, decidedAppends);
    // Same residency: the controller of `decided` adopts the device state.
    decided.checkInvariants();
    std::int64_t differentSlots = 0;
    for (std::int32_t g = 0; g < groups; ++g)
      for (std::int32_t slot = 0; slot < decided.controller().config().hbmSlots; ++slot)
        differentSlots +=
            logged.controller().slotOwner(g, slot) != decided.controller().slotOwner(g, slot) ||
            logged.controller().slotRow(g, slot) != decided.controller().slotRow(g, slot);
    std::printf(
        "B=%lld Q=%lld H=%lld K=%lld, %lld layers in %d groups of %d, %d slots a group, "
        "hot floor 0, graphs on, device selections/queries/outputs%s%s%s\n",
        static_cast<long long>(s.batch), static_cast<long long>(s.queries),
        static_cast<long long>(s.heads), static_cast<long long>(s.topk), static_cast<long long>(L),
        groups, config.layersPerGroup, decided.controller().config().hbmSlots,
        batchedAppends ? ", appends batched" : "",
        drift < 1.0 ? (", selections drift " + std::to_string(drift) + " a step").c_str() : "",
        writeBackRows > 0
            ? (", decided: write-back rings of " + std::to_string(writeBackRows) + " tokens")
                  .c_str()
            : "");
    for (auto [name, rt] : {std::pair{"logged", &logged}, std::pair{"decided", &decided}}) {
      const RuntimeStats stats = rt->stats();
      std::printf("%s step graph: %llu nodes (%llu kernels, %llu copies, %llu memsets, %llu "
                  "other), %llu captures\n",
                  name, static_cast<unsigned long long>(stats.graphNodes),
                  static_cast<unsigned long long>(stats.graphKernelNodes),
                  static_cast<unsigned long long>(stats.graphCopyNodes),
                  static_cast<unsigned long long>(stats.graphMemsetNodes),
                  static_cast<unsigned long long>(stats.graphNodes - stats.graphKernelNodes -
                                                  stats.graphCopyNodes - stats.graphMemsetNodes),
                  static_cast<unsigned long long>(stats.graphCaptures));
    }
    std::printf("last step: %lld selected, %lld resident (%.1f%% missing), %lld promoted, %lld "
                "evicted\n",
                static_cast<long long>(last.selected), static_cast<long long>(last.resident),
                last.selected > 0 ? 100.0 * static_cast<double>(last.selected - last.resident) /
                                        static_cast<double>(last.selected)
                                  : 0.0,
                static_cast<long long>(last.promoted), static_cast<long long>(last.evicted));
    auto report = [](const char *what, const Phases &p) {
      // host: the step's wall time past the device's span; host work: the
      // runtime's calls less their waits for the device.
      std::printf(
          "  %-30s step %.3f ms (device %.3f, %.2fx; host %.3f, host work %.3f): begin "
          "%.3f, select %.3f, attend %.3f, end %.3f (launch %.3f [cuGraphLaunch %.3f], wait "
          "%.3f, rest %.3f)",
          what, p.step, p.device, p.step / p.device, p.step - p.device, p.step - p.wait, p.begin,
          p.select, p.attend, p.end, p.launch, p.graphLaunch, p.wait, p.end - p.launch - p.wait);
      if (p.appends > 0)
        std::printf(", appends %.3f", p.appends);
      std::printf("\n");
    };
    std::printf("medians of %d steps (ms of host wall time):\n", stepsTimed);
    report("logged (host decides)", loggedSteps);
    report("decided (device decides)", decidedSteps);
    report("logged, with appends", loggedAppends);
    report("decided, with appends", decidedAppends);
    std::printf("outputs differing: %zu; slots whose row differs at the end: %lld\n", differing,
                static_cast<long long>(differentSlots));
    return differing == 0 && differentSlots == 0 ? 0 : 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dhs-decision-bench: %s\n", e.what());
    return 1;
  }
}
