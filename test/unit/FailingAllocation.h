//===- FailingAllocation.h - One chosen allocation fails ---------*- C++ -*-===//
//
// dhs-unittests replaces the global operator new (FailingAllocation.cpp) so
// that a test can make any one allocation of a call fail, wherever it is:
// the first, then the second, ... (failEachAllocation), to check that the
// call either completes or throws for want of memory with nothing changed.
// Only the arming thread's allocations are counted and failed.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_TEST_UNIT_FAILINGALLOCATION_H
#define DHS_TEST_UNIT_FAILINGALLOCATION_H

#include "runtime/core/Error.h"

#include <cstdint>
#include <new>
#include <stdexcept>

namespace dhs::test {

/// While alive, the `skip` + 1-th operator new of this thread (counted from
/// the construction) throws std::bad_alloc; the others succeed.
class FailingAllocation {
public:
  explicit FailingAllocation(std::uint64_t skip);
  ~FailingAllocation();
  FailingAllocation(const FailingAllocation &) = delete;
  FailingAllocation &operator=(const FailingAllocation &) = delete;

  /// Whether the chosen allocation was reached (and failed).
  bool failed() const;
};

/// Runs `call` with its first allocation failing, then again with its
/// second failing, and so on, until a run reaches no failing allocation (or
/// completes although one failed, the failure handled inside). After each
/// run that threw for want of memory (std::bad_alloc, or the runtime's
/// CapacityError, which the C API also reports as DHS_ERROR_OUT_OF_MEMORY),
/// `afterFailure()` checks what the failed run left; anything else a run
/// throws ends the loop. Returns the number of runs that threw.
template <typename Call, typename AfterFailure>
std::uint64_t failEachAllocation(Call &&call, AfterFailure &&afterFailure) {
  for (std::uint64_t skip = 0;; ++skip) {
    bool threw = false, failed = false;
    {
      FailingAllocation failing(skip);
      try {
        call();
      } catch (const std::bad_alloc &) {
        threw = true;
      } catch (const runtime::CapacityError &) {
        threw = true;
      }
      failed = failing.failed();
    }
    if (!threw)
      return skip;
    if (!failed)
      throw std::logic_error("a run threw for want of memory without a failed allocation");
    afterFailure();
  }
}

} // namespace dhs::test

#endif // DHS_TEST_UNIT_FAILINGALLOCATION_H
