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
  /// Creates an input error carrying `message`.
  explicit InputError(const std::string &message) : Error(message) {}
};

/// A row id outside its request's history, or another index outside the
/// range it must lie in (a layer, a group).
class OutOfRangeError : public InputError {
public:
  /// Creates an out-of-range error carrying `message`.
  explicit OutOfRangeError(const std::string &message) : InputError(message) {}
};

/// The runtime's invariant checker found a violation (a resident row that
/// differs from its host copy, a host row that changed, inconsistent
/// bookkeeping).
class InvariantError : public Error {
public:
  /// Creates an invariant error carrying `message`.
  explicit InvariantError(const std::string &message) : Error(message) {}
};

/// A tier has no room for what was asked: admission refused because a
/// protected working set cannot be guaranteed, a host store or slot pool
/// exhausted, a request at its maximum context. Nothing was changed.
class CapacityError : public Error {
public:
  /// Creates a capacity error carrying `message`.
  explicit CapacityError(const std::string &message) : Error(message) {}
};

/// A request that is not admitted (never was, or already finished).
class UnknownRequestError : public Error {
public:
  /// Creates an unknown-request error carrying `message`.
  explicit UnknownRequestError(const std::string &message) : Error(message) {}
};

/// An operation called in the wrong state: no step loaded, a step already in
/// progress, a group resolved twice in one step.
class StateError : public Error {
public:
  /// Creates a state error carrying `message`.
  explicit StateError(const std::string &message) : Error(message) {}
};

/// The device (or what stands for it) failed: a launch, a copy into HBM,
/// a driver call. The inputs were fine; the runtime may serve again once
/// the device does.
class DeviceError : public Error {
public:
  /// Creates a device error carrying `message`.
  explicit DeviceError(const std::string &message) : Error(message) {}
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_ERROR_H
