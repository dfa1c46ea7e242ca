//===- Error.h - The runtime's error type -----------------------*- C++ -*-===//
//
// Every failure the runtime can report (bad manifest, bad input, CUDA driver
// errors, link errors, out of memory) is thrown as a dhs::runtime::Error whose
// message is one line meant for a user: it names the file, field, index or
// driver call involved.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_ERROR_H
#define DHS_RUNTIME_ERROR_H

#include <stdexcept>
#include <string>

namespace dhs::runtime {

/// A runtime failure with a one-line, user-facing message.
class Error : public std::runtime_error {
public:
  /// Creates an error carrying `message` (one line, no trailing newline).
  explicit Error(const std::string &message) : std::runtime_error(message) {}
};

/// Input data rejected by validation (row ids, slots, history bounds): the
/// inputs of a step are wrong, not the runtime or the device.
class InputError : public Error {
public:
  /// Creates an input error carrying `message`.
  explicit InputError(const std::string &message) : Error(message) {}
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_ERROR_H
