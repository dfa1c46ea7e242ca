//===- Options.cpp - dhs-sim's command line -------------------------------===//

#include "tools/dhs-sim/Options.h"

#include "tools/CommandLine.h"

#include <cstdlib>
#include <limits>
#include <optional>

namespace dhs::tools::sim {

namespace {

const char *kUsage =
    "usage: dhs-sim [options]\n"
    "\n"
    "Replays a selection trace through the adaptive and the fixed-budget residency\n"
    "policies (same HBM pool) and prints per-step fetch rates and memory use.\n"
    "\n"
    "trace:\n"
    "  --trace FILE            replay a trace file instead of the load-step scenario\n"
    "  --write-trace FILE      also write the generated scenario as a trace file\n"
    "  --seed N                generator seed (default 1)\n"
    "  --topk K                selected rows per query (default 2048)\n"
    "  --queries Q             query positions per step, chained DRR steps (default 1)\n"
    "  --f F --q Q --gamma G --r R --sinks S --window W --lambda L\n"
    "                          DRR parameters (defaults 0.57 0.96 1.8 0.5 16 64 2048)\n"
    "  --context-scaling       fresh rate grows as sqrt(context / 32K)\n"
    "\n"
    "load-step scenario:\n"
    "  --low N                 requests at low load (default 4)\n"
    "  --high N                requests at high load (default 32)\n"
    "  --arrive-at S           step the arrivals start (default 400)\n"
    "  --depart-at S           step the departures start (default 1000)\n"
    "  --ramp S                steps over which arrivals / departures spread (default 20)\n"
    "  --steps S               total steps (default 1400)\n"
    "  --context L             prefill rows per request (default 32768)\n"
    "  --warmup S              steps of a phase left out of its summary (default 100)\n"
    "\n"
    "memory and policies:\n"
    "  --hbm-slots N           slots per group (default high x (newest + draft +\n"
    "                          fixed-buffer): the fixed policy just fits at high load)\n"
    "  --newest W              newest tokens protected per request (default 64)\n"
    "  --draft W               draft-ring slots per request (default 8)\n"
    "  --floor F               adaptive hot floor per request (default topk)\n"
    "  --fixed-buffer N        fixed policy's hot buffer per request (default 4096)\n"
    "  --adaptive-replacement clock|lru|lru2   (default clock)\n"
    "  --fixed-replacement clock|lru|lru2      (default lru; lru2: LRU with\n"
    "                                         frequency, LRU-2)\n"
    "  --groups N              layer groups simulated (default 1)\n"
    "  --layers L              model layers, for bytes (default 78)\n"
    "  --layers-per-group G    layers per group, for bytes (default 4)\n"
    "  --row-bytes B           bytes per KV row (default 656, FP8 with scales)\n"
    "\n"
    "output:\n"
    "  --every N               print every Nth step (default 50)\n"
    "  --csv FILE              every step as CSV (for bench/plot_load_step.py)\n"
    "  --no-calibration        skip the LRU calibration check\n"
    "  --calibration-only      print the calibration check and stop\n"
    "  --check                 exit 1 unless the load step shows the expected effect:\n"
    "                          adaptive fetches < half the fixed ones at low load,\n"
    "                          optional rows within budget, no admission refused\n"
    "  -h, --help              this text\n";

Replacement parseReplacement(const std::string &text, const std::string &option) {
  if (std::optional<Replacement> replacement = runtime::abi::parse<Replacement>(text))
    return *replacement;
  throw UsageError(option + " must be clock, lru or lru2, not '" + text + "'");
}

} // namespace

Options parseOptions(int argc, char **argv) {
  Options o;
  ArgumentReader args(argc, argv, kUsage);
  while (args.next()) {
    const std::string arg = args.arg();
    auto next = [&] { return args.value(); };
    auto integer = [&](std::int64_t min, std::int64_t max) { return args.integer(min, max); };
    if (arg == "--trace") {
      o.trace = next();
    } else if (arg == "--write-trace") {
      o.writeTrace = next();
    } else if (arg == "--csv") {
      o.csv = next();
    } else if (arg == "--seed") {
      o.seed = static_cast<std::uint64_t>(integer(0, std::numeric_limits<std::int64_t>::max()));
    } else if (arg == "--topk") {
      o.drr.topk = static_cast<std::int32_t>(integer(1, kMaxInt32));
    } else if (arg == "--queries") {
      o.queries = static_cast<std::int32_t>(integer(1, 64));
    } else if (arg == "--f") {
      o.drr.f = parseDouble(next(), arg);
    } else if (arg == "--q") {
      o.drr.q = parseDouble(next(), arg);
    } else if (arg == "--gamma") {
      o.drr.gamma = parseDouble(next(), arg);
    } else if (arg == "--r") {
      o.drr.r = parseDouble(next(), arg);
    } else if (arg == "--lambda") {
      o.drr.lambda = parseDouble(next(), arg);
    } else if (arg == "--sinks") {
      o.drr.sinks = static_cast<std::int32_t>(integer(0, kMaxInt32));
    } else if (arg == "--window") {
      o.drr.window = static_cast<std::int32_t>(integer(0, kMaxInt32));
    } else if (arg == "--context-scaling") {
      o.drr.contextScaling = true;
    } else if (arg == "--low") {
      o.low = static_cast<std::int32_t>(integer(0, 100000));
    } else if (arg == "--high") {
      o.high = static_cast<std::int32_t>(integer(1, 100000));
    } else if (arg == "--arrive-at") {
      o.arriveAt = integer(0, kMaxInt32);
    } else if (arg == "--depart-at") {
      o.departAt = integer(0, kMaxInt32);
    } else if (arg == "--ramp") {
      o.ramp = integer(1, kMaxInt32);
    } else if (arg == "--steps") {
      o.steps = integer(1, kMaxInt32);
    } else if (arg == "--context") {
      o.context = integer(0, kMaxInt32 / 2);
    } else if (arg == "--warmup") {
      o.warmup = integer(0, kMaxInt32);
    } else if (arg == "--hbm-slots") {
      o.hbmSlots = integer(0, kMaxInt32);
    } else if (arg == "--newest") {
      o.newest = static_cast<std::int32_t>(integer(0, kMaxInt32));
    } else if (arg == "--draft") {
      o.draft = static_cast<std::int32_t>(integer(0, kMaxInt32));
    } else if (arg == "--floor") {
      o.floor = static_cast<std::int32_t>(integer(0, kMaxInt32));
    } else if (arg == "--fixed-buffer") {
      o.fixedBuffer = static_cast<std::int32_t>(integer(0, kMaxInt32));
    } else if (arg == "--adaptive-replacement") {
      o.adaptiveReplacement = parseReplacement(next(), arg);
    } else if (arg == "--fixed-replacement") {
      o.fixedReplacement = parseReplacement(next(), arg);
    } else if (arg == "--groups") {
      o.groups = static_cast<std::int32_t>(integer(1, 1024));
    } else if (arg == "--layers") {
      o.layers = static_cast<std::int32_t>(integer(1, 100000));
    } else if (arg == "--layers-per-group") {
      o.layersPerGroup = static_cast<std::int32_t>(integer(1, 100000));
    } else if (arg == "--row-bytes") {
      o.rowBytes = integer(1, 1 << 20);
    } else if (arg == "--every") {
      o.every = integer(1, kMaxInt32);
    } else if (arg == "--no-calibration") {
      o.calibration = false;
    } else if (arg == "--calibration-only") {
      o.calibrationOnly = true;
    } else if (arg == "--check") {
      o.check = true;
    } else {
      throw UsageError("unknown option '" + arg + "' (see --help)");
    }
  }
  if (o.floor < 0)
    o.floor = o.drr.topk;
  if (o.low > o.high)
    throw UsageError("--low must not exceed --high");
  if (o.trace.empty() && (o.arriveAt > o.departAt || o.departAt > o.steps))
    throw UsageError("need --arrive-at <= --depart-at <= --steps");
  if (o.layersPerGroup > o.layers)
    throw UsageError("--layers-per-group must not exceed --layers");
  o.drr.validate();
  return o;
}

} // namespace dhs::tools::sim
