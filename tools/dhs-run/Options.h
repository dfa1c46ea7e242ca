//===- Options.h - dhs-run's command line -----------------------*- C++ -*-===//

#ifndef DHS_TOOLS_DHSRUN_OPTIONS_H
#define DHS_TOOLS_DHSRUN_OPTIONS_H

#include <cstdint>
#include <string>
#include <vector>

namespace dhs::tools {

/// A deliberately corrupted input, to test error reporting end to end.
enum class Injection { None, RowId, BadId, Slot, HostRow };

/// dhs-run's options.
struct Options {
  std::vector<std::string> steps; ///< STEP arguments (none: the default example)
  std::string backend = "auto";   ///< auto | cpu | cuda
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
  /// The form share the kernels run at (--form-share; negative: the problem's).
  double formShare = -1.0;
};

/// Parses the command line; prints the usage and exits for -h / --help.
/// Throws UsageError.
Options parseOptions(int argc, char **argv);

} // namespace dhs::tools

#endif // DHS_TOOLS_DHSRUN_OPTIONS_H
