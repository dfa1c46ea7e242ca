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
#include <cstdio>
#include <cstdlib>
#include <optional>
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

/// The largest int32, the bound of most integer options.
inline constexpr std::int64_t kMaxInt32 = 2147483647;

/// Walks a command line: options as "--name value" or "--name=value", other
/// arguments as they are; -h and --help print `usage` and exit.
class ArgumentReader {
public:
  ArgumentReader(int argc, char **argv, const char *usage)
      : argc_(argc), argv_(argv), usage_(usage) {}

  /// Moves to the next argument; false past the last.
  bool next() {
    if (++index_ >= argc_)
      return false;
    arg_ = argv_[index_];
    if (arg_ == "-h" || arg_ == "--help") {
      std::fputs(usage_, stdout);
      std::exit(0);
    }
    inlineValue_.reset();
    const std::size_t eq = arg_.find('=');
    if (arg_.rfind("--", 0) == 0 && eq != std::string::npos) {
      inlineValue_ = arg_.substr(eq + 1);
      arg_ = arg_.substr(0, eq);
    }
    return true;
  }
  /// The current argument (an option without its "=value").
  const std::string &arg() const { return arg_; }
  /// The current option's value: its "=value", else the next argument.
  /// Throws UsageError when there is none.
  std::string value() {
    if (inlineValue_)
      return *inlineValue_;
    if (index_ + 1 >= argc_)
      throw UsageError(arg_ + " needs a value");
    return argv_[++index_];
  }
  /// The value as an integer in [min, max] (see parseInt).
  std::int64_t integer(std::int64_t min, std::int64_t max) {
    return parseInt(value(), arg_, min, max);
  }

private:
  int argc_;
  char **argv_;
  const char *usage_;
  int index_ = 0;
  std::string arg_;
  std::optional<std::string> inlineValue_;
};

} // namespace dhs::tools

#endif // DHS_TOOLS_COMMANDLINE_H
