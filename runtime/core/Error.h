//===- Error.h - The runtime's error type -----------------------*- C++ -*-===//
//
// Every failure the runtime can report (bad manifest, bad input, CUDA driver
// errors, link errors, out of memory) is thrown as a dhs::runtime::Error whose
// message is one line meant for a user: it names the file, field, index or
// driver call involved.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_ERROR_H
#define DHS_RUNTIME_CORE_ERROR_H

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
  using Error::Error;
};

/// A row id outside its request's history, or another index outside the
/// range it must lie in (a layer, a group).
class OutOfRangeError : public InputError {
public:
  using InputError::InputError;
};

/// The runtime's invariant checker found a violation (a resident row that
/// differs from its host copy, a host row that changed, inconsistent
/// bookkeeping).
class InvariantError : public Error {
public:
  using Error::Error;
};

/// A tier has no room for what was asked: admission refused because a
/// protected working set cannot be guaranteed, a host store or slot pool
/// exhausted, a request at its maximum context. Nothing was changed.
class CapacityError : public Error {
public:
  using Error::Error;
};

/// A request that is not admitted (never was, or already finished).
class UnknownRequestError : public Error {
public:
  using Error::Error;
};

/// An operation called in the wrong state: no step loaded, a step already in
/// progress, a group resolved twice in one step.
class StateError : public Error {
public:
  using Error::Error;
};

/// The device (or what stands for it) failed: a launch, a copy into HBM,
/// a driver call. The inputs were fine; the runtime may serve again once
/// the device does.
class DeviceError : public Error {
public:
  using Error::Error;
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_ERROR_H
