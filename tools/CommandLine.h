//===- CommandLine.h - option parsing shared by the runtime tools -*- C++ -*-===//
//
// dhs-run and dhs-sim parse their options by hand (no MLIR/LLVM in them);
// these are the pieces they share.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_TOOLS_COMMANDLINE_H
#define DHS_TOOLS_COMMANDLINE_H

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace dhs::tools {

/// A bad command line: the tool prints it with its usage and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parses `text` as an integer in [min, max] for `option`.
inline std::int64_t parseInt(const std::string &text, const std::string &option, std::int64_t min,
                             std::int64_t max) {
  errno = 0;
  char *end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < min || value > max)
    throw UsageError(option + " needs an integer in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "], not '" + text + "'");
  return value;
}

/// Parses `text` as a finite number for `option`.
inline double parseDouble(const std::string &text, const std::string &option) {
  errno = 0;
  char *end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(value))
    throw UsageError(option + " needs a number, not '" + text + "'");
  return value;
}

} // namespace dhs::tools

#endif // DHS_TOOLS_COMMANDLINE_H
