//===- FaultInjection.h - Test-only failures at chosen places ---*- C++ -*-===//
//
// Tests make the runtime fail where real machines fail (a host or device
// allocation, nvJitLink, a kernel launch, a row copy into HBM) to check that
// each failure gives a clear error, leaves the other requests' KV and
// outputs intact, and that the runtime keeps serving. A site asks
// DHS_FAULT(kind) and, when it is true, fails the way the real failure
// would (the allocation throws std::bad_alloc or gets
// CUDA_ERROR_OUT_OF_MEMORY, the launch an error, ...), with "(injected
// fault)" in the message.
//
// Off by default: nothing is armed unless a test calls faults::arm, and an
// unarmed site costs one relaxed atomic load. Configuring with
// -DDHS_FAULT_INJECTION=OFF compiles every site out (DHS_FAULT is false).
// The armed state is process-wide; tests arm and disarm it around one case
// (ScopedFault).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_FAULTINJECTION_H
#define DHS_RUNTIME_CORE_FAULTINJECTION_H

#include <atomic>
#include <cstdint>
#include <optional>

#ifndef DHS_FAULT_INJECTION
#define DHS_FAULT_INJECTION 0
#endif

namespace dhs::runtime {

/// The places that can be made to fail.
enum class Fault : unsigned {
  HostAlloc,   ///< a tier allocation in host memory: pinned host memory on
               ///< CUDA (the host store, staging), the CPU tiers' vectors,
               ///< a CPU attention worker's scratch, a loaded step's tables
  DeviceAlloc, ///< device memory (HBM): the pools, rings and step buffers on
               ///< CUDA; on the CPU, the per-request rings standing in for it
  JitLink,     ///< nvJitLink linking a step's PTX
  Launch,      ///< a kernel launch (on the CPU, one layer's attention)
  Copy,        ///< row copies into HBM (promotions, appends, admissions)
  CorruptCopy, ///< a row copy into HBM that succeeds but changes the row's
               ///< first bytes (silent corruption the invariant checker
               ///< must find)
  Wait,        ///< waiting for the work submitted to the device (where a
               ///< kernel's or a copy's asynchronous error surfaces)
  RingWrite,   ///< a write into a draft ring (one layer group's) or a
               ///< window ring: its kernels or copies on CUDA
  BadState,    ///< a layer group's decision control words in HBM (its
               ///< CLOCK hand) corrupted between steps, which the
               ///< device's decision kernels must reject
  Count,       ///< (the number of kinds)
};

/// "host allocation", "device allocation", ...
const char *faultName(Fault fault);

namespace faults {

/// True when the hooks are compiled in (DHS_FAULT_INJECTION).
constexpr bool kCompiledIn = DHS_FAULT_INJECTION != 0;

/// Arms `fault`: the next `skip` times a site of that kind is reached pass,
/// the `count` after them fail, then it disarms itself.
void arm(Fault fault, std::uint32_t skip = 0, std::uint32_t count = 1);
/// Disarms every fault and the host memory limit.
void disarmAll();
/// Times a site of `fault` was reached since the last disarmAll (armed or
/// not while something is armed; for tests that check a site was reached).
std::uint64_t reached(Fault fault);
/// Times `fault` failed since the last disarmAll.
std::uint64_t failed(Fault fault);
/// Pretends the process may use at most `bytes` of host memory (see
/// HostMemory.h); std::nullopt: the real limit.
void setHostMemoryLimit(std::optional<std::uint64_t> bytes);
/// The pretended limit, if any.
std::optional<std::uint64_t> hostMemoryLimit();

/// Set while anything is armed.
extern std::atomic<bool> armedFlag;
/// True while anything is armed (the cheap test every site makes first).
inline bool anyArmed() { return armedFlag.load(std::memory_order_relaxed); }
/// Counts a site of `fault` and says whether it must fail now.
bool hit(Fault fault);

} // namespace faults

/// Arms a fault for the lifetime of a scope; disarms everything after.
class ScopedFault {
public:
  explicit ScopedFault(Fault fault, std::uint32_t skip = 0, std::uint32_t count = 1) {
    faults::arm(fault, skip, count);
  }
  ~ScopedFault() { faults::disarmAll(); }
  ScopedFault(const ScopedFault &) = delete;
  ScopedFault &operator=(const ScopedFault &) = delete;
};

} // namespace dhs::runtime

#if DHS_FAULT_INJECTION
/// True when the armed fault `kind` (a dhs::runtime::Fault enumerator name)
/// must fail here.
#define DHS_FAULT(kind)                                                                            \
  (::dhs::runtime::faults::anyArmed() && ::dhs::runtime::faults::hit(::dhs::runtime::Fault::kind))
#else
#define DHS_FAULT(kind) false
#endif

#endif // DHS_RUNTIME_CORE_FAULTINJECTION_H
