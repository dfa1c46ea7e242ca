//===- FailingAllocation.cpp - One chosen allocation fails ----------------===//
//
// The global operator new of dhs-unittests: malloc, except for the one
// allocation a FailingAllocation of the calling thread chose. (The array,
// nothrow and sized forms of the standard library call these.)
//
//===----------------------------------------------------------------------===//

#include "FailingAllocation.h"

#include <cstdlib>

namespace {

/// This thread's armed FailingAllocation: allocations left before the one
/// that fails, and whether it failed.
thread_local bool armed = false;
thread_local std::uint64_t untilFailure = 0;
thread_local bool failedOnce = false;

} // namespace

void *operator new(std::size_t size) {
  if (armed) {
    if (untilFailure == 0) {
      armed = false;
      failedOnce = true;
      throw std::bad_alloc();
    }
    --untilFailure;
  }
  if (void *p = std::malloc(size ? size : 1))
    return p;
  throw std::bad_alloc();
}

void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }

namespace dhs::test {

FailingAllocation::FailingAllocation(std::uint64_t skip) {
  untilFailure = skip;
  failedOnce = false;
  armed = true;
}

FailingAllocation::~FailingAllocation() { armed = false; }

bool FailingAllocation::failed() const { return failedOnce; }

} // namespace dhs::test
