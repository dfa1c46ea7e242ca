//===- HostMemory.cpp - What the process may still allocate ---------------===//

#include "runtime/core/HostMemory.h"

#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <sys/resource.h>

namespace dhs::runtime {

namespace {

/// The first line of a small file ("" when it cannot be read).
std::string firstLine(const std::string &path) {
  std::ifstream in(path);
  std::string line;
  if (in)
    std::getline(in, line);
  return line;
}

/// A non-negative decimal integer, or std::nullopt ("max", garbage).
std::optional<std::uint64_t> parseCount(const std::string &text) {
  if (text.empty() || text.size() > 20)
    return std::nullopt;
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return std::nullopt;
    if (__builtin_mul_overflow(value, 10u, &value) ||
        __builtin_add_overflow(value, static_cast<std::uint64_t>(c - '0'), &value))
      return std::nullopt;
  }
  return value;
}

/// A "Key:   123 kB" field of /proc/meminfo or /proc/self/status, in bytes.
std::optional<std::uint64_t> kilobyteField(const std::string &path, const std::string &key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0 || line.size() <= key.size() ||
        line[key.size()] != ':')
      continue;
    std::istringstream fields(line.substr(key.size() + 1));
    std::string number;
    fields >> number;
    std::optional<std::uint64_t> kb = parseCount(number);
    std::uint64_t bytes = 0;
    if (!kb || __builtin_mul_overflow(*kb, 1024u, &bytes))
      return std::nullopt;
    return bytes;
  }
  return std::nullopt;
}

class Budget {
public:
  void consider(std::uint64_t bytes, std::string why) {
    if (bytes < result_.bytes) {
      result_.bytes = bytes;
      result_.limitedBy = std::move(why);
    }
  }
  HostMemoryBudget result() const { return result_; }

private:
  HostMemoryBudget result_;
};

/// A limit file minus a usage file in `dir` (and its ancestors up to
/// `root`): cgroup v2 memory.max - memory.current, v1
/// memory.limit_in_bytes - memory.usage_in_bytes.
void considerCgroup(Budget &budget, const std::string &root, std::string relative,
                    const char *version, const char *limitFile, const char *usageFile) {
  while (true) {
    const std::string dir = relative.empty() || relative == "/" ? root : root + relative;
    std::optional<std::uint64_t> limit = parseCount(firstLine(dir + "/" + limitFile));
    // v1 writes "unlimited" as a page-rounded INT64_MAX: anything past 2^60 is no limit.
    if (limit && *limit < (std::uint64_t(1) << 60)) {
      std::uint64_t usage = parseCount(firstLine(dir + "/" + usageFile)).value_or(0);
      std::uint64_t left = *limit > usage ? *limit - usage : 0;
      budget.consider(left, std::string(version) + " " + dir + ": " + limitFile + " " +
                                formatSize(*limit) + " - " + usageFile + " " + formatSize(usage));
    }
    if (relative.empty() || relative == "/")
      break;
    std::size_t slash = relative.find_last_of('/');
    relative = slash == 0 || slash == std::string::npos ? "/" : relative.substr(0, slash);
  }
}

} // namespace

std::string formatSize(std::uint64_t bytes) {
  char text[64];
  const double value = static_cast<double>(bytes);
  if (bytes >= (std::uint64_t(1) << 30))
    std::snprintf(text, sizeof(text), "%.1f GiB", value / (1u << 30));
  else if (bytes >= (std::uint64_t(1) << 20))
    std::snprintf(text, sizeof(text), "%.1f MiB", value / (1u << 20));
  else if (bytes >= (std::uint64_t(1) << 10))
    std::snprintf(text, sizeof(text), "%.1f KiB", value / (1u << 10));
  else
    std::snprintf(text, sizeof(text), "%llu B", static_cast<unsigned long long>(bytes));
  return text;
}

HostMemoryBudget usableHostMemory(const HostMemorySources &sources) {
  Budget budget;
  if (std::optional<std::uint64_t> available =
          kilobyteField(sources.procRoot + "/meminfo", "MemAvailable"))
    budget.consider(*available, "MemAvailable " + formatSize(*available) + " (" + sources.procRoot +
                                    "/meminfo)");

  // /proc/self/cgroup: "0::/path" (v2), "N:memory:/path" or
  // "N:cpu,memory:/path" (v1).
  std::ifstream cgroups(sources.procRoot + "/self/cgroup");
  std::string line;
  bool sawV2 = false, sawV1 = false;
  while (std::getline(cgroups, line)) {
    std::size_t first = line.find(':');
    std::size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos)
      continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      sawV2 = true;
      considerCgroup(budget, sources.cgroupRoot, path, "cgroup v2", "memory.max", "memory.current");
      // A cgroup v2 mount beside v1 controllers (hybrid).
      considerCgroup(budget, sources.cgroupRoot + "/unified", path, "cgroup v2", "memory.max",
                     "memory.current");
      continue;
    }
    std::istringstream names(controllers);
    std::string name;
    while (std::getline(names, name, ','))
      if (name == "memory") {
        sawV1 = true;
        considerCgroup(budget, sources.cgroupRoot + "/memory", path, "cgroup v1",
                       "memory.limit_in_bytes", "memory.usage_in_bytes");
      }
  }
  // Inside a cgroup namespace the process's own cgroup is the mount's root.
  if (!sawV2)
    considerCgroup(budget, sources.cgroupRoot, "/", "cgroup v2", "memory.max", "memory.current");
  if (!sawV1)
    considerCgroup(budget, sources.cgroupRoot + "/memory", "/", "cgroup v1",
                   "memory.limit_in_bytes", "memory.usage_in_bytes");

  if (sources.resourceLimits) {
    struct rlimit limit{};
    const std::string status = sources.procRoot + "/self/status";
    if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      std::uint64_t used = kilobyteField(status, "VmSize").value_or(0);
      std::uint64_t cap = static_cast<std::uint64_t>(limit.rlim_cur);
      budget.consider(cap > used ? cap - used : 0, "RLIMIT_AS (ulimit -v) " + formatSize(cap) +
                                                       " - virtual size " + formatSize(used));
    }
    if (getrlimit(RLIMIT_DATA, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      std::uint64_t used = kilobyteField(status, "VmData").value_or(0);
      std::uint64_t cap = static_cast<std::uint64_t>(limit.rlim_cur);
      budget.consider(cap > used ? cap - used : 0, "RLIMIT_DATA (ulimit -d) " + formatSize(cap) +
                                                       " - data size " + formatSize(used));
    }
  }
  if (std::optional<std::uint64_t> pretended = faults::hostMemoryLimit())
    budget.consider(*pretended, "a limit set for testing of " + formatSize(*pretended));
  return budget.result();
}

void requireHostMemory(const std::string &what,
                       const std::vector<std::pair<std::string, std::uint64_t>> &parts) {
  std::uint64_t total = 0;
  bool overflow = false;
  for (const auto &part : parts)
    overflow = overflow || __builtin_add_overflow(total, part.second, &total);
  const HostMemoryBudget budget = usableHostMemory();
  if (!overflow && total <= budget.bytes)
    return;
  std::vector<std::pair<std::string, std::uint64_t>> sorted(parts);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto &a, const auto &b) { return a.second > b.second; });
  std::string list;
  for (const auto &[name, bytes] : sorted)
    if (bytes > 0)
      list += (list.empty() ? "" : ", ") + name + " " + formatSize(bytes);
  const std::string needed =
      overflow ? "more than 2^64 bytes of host memory" : formatSize(total) + " of host memory";
  throw CapacityError(what + " needs " + needed + " (" + list + "); this process may use " +
                      formatSize(budget.bytes) + " more (" + budget.limitedBy + ")");
}

} // namespace dhs::runtime
