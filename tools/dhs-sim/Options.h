//===- Options.h - dhs-sim's command line -----------------------*- C++ -*-===//

#ifndef DHS_TOOLS_DHSSIM_OPTIONS_H
#define DHS_TOOLS_DHSSIM_OPTIONS_H

#include "runtime/residency/Residency.h"
#include "tools/dhs-sim/SelectionTrace.h"

#include <cstdint>
#include <string>

namespace dhs::tools::sim {

using runtime::Replacement;

/// dhs-sim's options.
struct Options {
  std::string trace, writeTrace, csv;
  std::uint64_t seed = 1;
  DrrParams drr;
  std::int32_t queries = 1;
  std::int32_t low = 4, high = 32;
  std::int64_t arriveAt = 400, departAt = 1000, ramp = 20, steps = 1400;
  std::int64_t context = 32768, warmup = 100;
  std::int64_t hbmSlots = -1;
  std::int32_t newest = 64, draft = 8, floor = -1, fixedBuffer = 4096;
  Replacement adaptiveReplacement = Replacement::Clock;
  Replacement fixedReplacement = Replacement::Lru;
  std::int32_t groups = 1, layers = 78, layersPerGroup = 4;
  std::int64_t rowBytes = 656;
  std::int64_t every = 50;
  bool calibration = true, calibrationOnly = false, check = false;
};

/// Parses the command line; prints the usage and exits for -h / --help.
/// Throws UsageError.
Options parseOptions(int argc, char **argv);

} // namespace dhs::tools::sim

#endif // DHS_TOOLS_DHSSIM_OPTIONS_H
