//===- FailingAllocation.cpp - One chosen allocation fails ----------------===//
//
// The global operator new and delete of dhs-unittests: malloc and free,
// except for the one allocation a FailingAllocation of the calling thread
// chose, which fails.
//
//===----------------------------------------------------------------------===//

#include "FailingAllocation.h"

#include <cstdlib>
#include <new>

namespace {

/// This thread's armed FailingAllocation: allocations left before the one
/// that fails, and whether it failed.
thread_local bool armed = false;
thread_local std::uint64_t untilFailure = 0;
thread_local bool failedOnce = false;

/// malloc, or nullptr for the allocation a FailingAllocation chose.
void *allocate(std::size_t size) {
  if (armed) {
    if (untilFailure == 0) {
      armed = false;
      failedOnce = true;
      return nullptr;
    }
    --untilFailure;
  }
  return std::malloc(size ? size : 1);
}

} // namespace

// Every form that pairs with free, so that none is left to the library's or
// a sanitizer's allocator: a block allocated by one must not be freed by the
// other. (The over-aligned forms are left as they are, paired among
// themselves, and never fail here.)
void *operator new(std::size_t size) {
  if (void *p = allocate(size))
    return p;
  throw std::bad_alloc();
}
void *operator new[](std::size_t size) {
  if (void *p = allocate(size))
    return p;
  throw std::bad_alloc();
}
void *operator new(std::size_t size, const std::nothrow_t &) noexcept { return allocate(size); }
void *operator new[](std::size_t size, const std::nothrow_t &) noexcept { return allocate(size); }
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t) noexcept { std::free(p); }
void operator delete(void *p, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete[](void *p, const std::nothrow_t &) noexcept { std::free(p); }

namespace dhs::test {

FailingAllocation::FailingAllocation(std::uint64_t skip) {
  untilFailure = skip;
  failedOnce = false;
  armed = true;
}

FailingAllocation::~FailingAllocation() { armed = false; }

bool FailingAllocation::failed() const { return failedOnce; }

} // namespace dhs::test
