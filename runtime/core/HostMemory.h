//===- HostMemory.h - What the process may still allocate -------*- C++ -*-===//
//
// Allocations whose size comes from a caller or a file (tiers, request
// tables, per-lane tables, rings) are checked against what this process can
// actually use before they are made, so that an absurd size is refused with
// CapacityError (DHS_ERROR_OUT_OF_MEMORY) naming the sizes instead of being
// killed by the OOM killer: the machine's physical memory is not the limit
// in a container. The usable amount is the smallest of
//  - MemAvailable (/proc/meminfo),
//  - the memory cgroup's limit minus its usage, for the process's cgroup and
//    each of its ancestors (cgroup v2: memory.max - memory.current; cgroup
//    v1: memory.limit_in_bytes - memory.usage_in_bytes),
//  - RLIMIT_AS minus the process's virtual size and RLIMIT_DATA minus its
//    data size (ulimit -v / -d), when set.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_HOSTMEMORY_H
#define DHS_RUNTIME_CORE_HOSTMEMORY_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dhs::runtime {

/// Where the limits are read (tests point these at files of their own).
struct HostMemorySources {
  std::string procRoot = "/proc";            ///< meminfo, self/cgroup, self/status
  std::string cgroupRoot = "/sys/fs/cgroup"; ///< the cgroup mount(s)
  bool resourceLimits = true;                ///< also RLIMIT_AS / RLIMIT_DATA
};

/// What the process may still allocate on the host.
struct HostMemoryBudget {
  std::uint64_t bytes = UINT64_MAX; ///< usable bytes (UINT64_MAX: no limit found)
  std::string limitedBy;            ///< what sets it, e.g. "cgroup v2 /sys/fs/cgroup/x:
                                    ///< memory.max 8.0 GiB - memory.current 1.2 GiB"
};

/// Reads the usable host memory now (see the file comment). Never throws:
/// files that are missing or unreadable are skipped.
HostMemoryBudget usableHostMemory(const HostMemorySources &sources = {});

/// Sizes in words: "18.0 GiB", "512.0 MiB", "4096 B".
std::string formatSize(std::uint64_t bytes);

/// Throws CapacityError unless `parts` (name, bytes) fit the usable host
/// memory. The message says `what` needs the total, lists the parts
/// (largest first, zero-sized ones left out) and what the process may use
/// and why, e.g. "loading the step needs 18.0 GiB of host memory (request
/// table 17.9 GiB, host store 64.0 MiB); this process may use 7.5 GiB more
/// (cgroup v1 ...: memory.limit_in_bytes 8.0 GiB - memory.usage_in_bytes
/// 512.0 MiB)". A part too large to add up is refused as such.
void requireHostMemory(const std::string &what,
                       const std::vector<std::pair<std::string, std::uint64_t>> &parts);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_HOSTMEMORY_H
