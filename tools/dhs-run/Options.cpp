//===- Options.cpp - dhs-run's command line -------------------------------===//

#include "tools/dhs-run/Options.h"

#include "runtime/core/Manifest.h"
#include "tools/CommandLine.h"

#include <cstdlib>
#include <limits>

#ifndef DHS_DEFAULT_STEP
#define DHS_DEFAULT_STEP "examples/default_step.mlir"
#endif

namespace dhs::tools {

namespace {

const char *kUsage =
    "usage: dhs-run [STEP...] [options]\n"
    "\n"
    "STEP is a compiled step directory (manifest.json + PTX), its manifest.json,\n"
    "or a .mlir file, compiled first with the dhs-compile next to dhs-run.\n"
    "Several STEPs are a layer group's steps: one step compiled for each layer\n"
    "index of a pool that holds the group's layers (the CUDA backend needs all).\n"
    "Default: " DHS_DEFAULT_STEP "\n"
    "\n"
    "dhs-run runs the step through the runtime: it admits the generated\n"
    "requests with their histories, makes the asked fraction of each request's\n"
    "selected rows resident (a warm-up step whose selections the residency\n"
    "controller promotes), runs the step, checks every output against an fp64\n"
    "CPU reference and prints the runtime's residency statistics.\n"
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
    "  --repeat N               timed steps on the GPU (default 10; promotions\n"
    "                           withheld so that each sees the same residency)\n"
    "  --warmup N               untimed steps before timing (default 1)\n"
    "  --tolerance X            relative error bound vs fp64 (default 1e-2)\n"
    "  --link-only              only link every PTX with nvJitLink for --arch and\n"
    "                           print cubin sizes (needs no GPU)\n"
    "  --arch ARCH              architecture for --link-only (default sm_90a)\n"
    "  --json FILE              also write the results as JSON\n"
    "  --keep-step              keep the step compiled from a .mlir file\n"
    "  --inject-error KIND      corrupt one input (row-id, bad-id, slot, host-row) to\n"
    "                           test error reporting\n"
    "  --no-host-check          run the step's kernels directly on the generated inputs\n"
    "                           (not through the runtime, whose slot maps and host rows\n"
    "                           are never wrong) without host-side validation: tests\n"
    "                           the kernels' status word (GPU; the CPU always validates);\n"
    "                           a layer group's step runs every layer, checks the first\n"
    "  --form-share F           with --no-host-check: run the launches of the form a\n"
    "                           step missing that share of its rows takes (a layer\n"
    "                           group's fused or staged form; default: the problem's)\n"
    "  -h, --help               this text\n";

Injection parseInjection(const std::string &kind) {
  if (kind == "row-id")
    return Injection::RowId;
  if (kind == "bad-id")
    return Injection::BadId;
  if (kind == "slot")
    return Injection::Slot;
  if (kind == "host-row")
    return Injection::HostRow;
  throw UsageError("--inject-error must be row-id, bad-id, slot or host-row");
}

std::vector<double> parseFractions(const std::string &list, const std::string &option) {
  std::vector<double> fractions;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma - start);
    const double f = parseDouble(item, option);
    if (f < 0.0 || f > 1.0)
      throw UsageError("--resident fractions must lie in [0, 1], not " + item);
    fractions.push_back(f);
    if (comma == std::string::npos)
      return fractions;
    start = comma + 1;
  }
}

/// Parses a fraction in [0, 1] for `option`.
double parseFraction(const std::string &text, const std::string &option) {
  const double f = parseDouble(text, option);
  if (f < 0.0 || f > 1.0)
    throw UsageError(option + " must lie in [0, 1]");
  return f;
}

} // namespace

Options parseOptions(int argc, char **argv) {
  Options o;
  ArgumentReader args(argc, argv, kUsage);
  while (args.next()) {
    const std::string arg = args.arg();
    if (arg == "--backend") {
      o.backend = args.value();
      if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda")
        throw UsageError("--backend must be auto, cpu or cuda, not '" + o.backend + "'");
    } else if (arg == "--seed") {
      o.seed =
          static_cast<std::uint64_t>(args.integer(0, std::numeric_limits<std::int64_t>::max()));
    } else if (arg == "--resident") {
      o.residency = parseFractions(args.value(), arg);
    } else if (arg == "--history-rows") {
      o.historyRows = args.integer(1, kMaxInt32);
    } else if (arg == "--unused") {
      o.unused = parseFraction(args.value(), arg);
    } else if (arg == "--overlap") {
      o.overlap = parseFraction(args.value(), arg);
    } else if (arg == "--hbm-slots") {
      o.hbmSlots = args.integer(0, kMaxInt32);
    } else if (arg == "--host-rows") {
      o.hostRows = args.integer(0, kMaxInt32);
    } else if (arg == "--repeat") {
      o.repeat = static_cast<int>(args.integer(0, 1000000));
    } else if (arg == "--warmup") {
      o.warmup = static_cast<int>(args.integer(0, 1000000));
    } else if (arg == "--tolerance") {
      o.tolerance = parseDouble(args.value(), arg);
      if (o.tolerance <= 0.0)
        throw UsageError("--tolerance must be positive");
    } else if (arg == "--link-only") {
      o.linkOnly = true;
    } else if (arg == "--arch") {
      o.arch = args.value();
      if (!runtime::isChipName(o.arch))
        throw UsageError("--arch needs an architecture like sm_90a, not '" + o.arch + "'");
    } else if (arg == "--json") {
      o.jsonPath = args.value();
    } else if (arg == "--keep-step") {
      o.keepStep = true;
    } else if (arg == "--inject-error") {
      o.inject = parseInjection(args.value());
    } else if (arg == "--no-host-check") {
      o.hostCheck = false;
    } else if (arg == "--form-share") {
      o.formShare = parseFraction(args.value(), arg);
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw UsageError("unknown option '" + arg + "'");
    } else {
      o.steps.push_back(arg);
    }
  }
  if (o.formShare >= 0.0 && o.hostCheck)
    throw UsageError("--form-share needs --no-host-check (the runtime chooses its forms)");
  if (o.steps.empty())
    o.steps.push_back(DHS_DEFAULT_STEP);
  return o;
}

} // namespace dhs::tools
