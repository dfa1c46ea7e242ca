//===- ErrorStatus.h - Exceptions to C API statuses -------------*- C++ -*-===//
//
// How the C API turns what a call threw into its dhs_status (dhs_runtime.h
// documents each): the runtime's error classes map to their statuses, a
// plain dhs::runtime::Error to the entry point's own (`generic`: e.g.
// DHS_ERROR_STEP while loading a step), std::bad_alloc to
// DHS_ERROR_OUT_OF_MEMORY, anything else to DHS_ERROR_INTERNAL.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CAPI_ERRORSTATUS_H
#define DHS_RUNTIME_CAPI_ERRORSTATUS_H

#include "runtime/capi/dhs_runtime.h"

#include <exception>
#include <string>

namespace dhs::runtime {

/// The status of `error` (a non-null exception) thrown by an entry point
/// whose plain errors are `generic`; its message into `message`.
dhs_status statusOfException(const std::exception_ptr &error, dhs_status generic,
                             std::string &message);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CAPI_ERRORSTATUS_H
