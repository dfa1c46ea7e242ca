//===- FaultInjection.cpp - Test-only failures at chosen places -----------===//

#include "runtime/core/FaultInjection.h"

#include <array>
#include <iterator>
#include <mutex>

namespace dhs::runtime {

namespace {

/// Fault's names, in its order.
constexpr const char *kFaultNames[] = {
    "host allocation",         "device allocation", "nvJitLink",
    "kernel launch",           "row copy",          "corrupted row copy",
    "wait for submitted work", "ring write",        "corrupted decision state"};
static_assert(std::size(kFaultNames) == static_cast<std::size_t>(Fault::Count),
              "a name for every Fault");

} // namespace

const char *faultName(Fault fault) {
  return fault < Fault::Count ? kFaultNames[static_cast<std::size_t>(fault)] : "?";
}

namespace faults {

std::atomic<bool> armedFlag{false};

namespace {

struct Armed {
  std::uint32_t skip = 0;
  std::uint32_t count = 0;
  std::uint64_t reached = 0;
  std::uint64_t failed = 0;
};

struct State {
  std::mutex mutex;
  std::array<Armed, static_cast<std::size_t>(Fault::Count)> faults;
  std::optional<std::uint64_t> hostMemoryLimit;

  void updateFlag() {
    bool any = hostMemoryLimit.has_value();
    for (const Armed &a : faults)
      any = any || a.count > 0;
    // Counting continues while the flag stays up (reached() after a fault
    // disarmed itself); disarmAll lowers it.
    armedFlag.store(any || armedFlag.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
};

State &state() {
  static State s;
  return s;
}

} // namespace

void arm(Fault fault, std::uint32_t skip, std::uint32_t count) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Armed &a = s.faults[static_cast<std::size_t>(fault)];
  a.skip = skip;
  a.count = count;
  s.updateFlag();
}

void disarmAll() {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (Armed &a : s.faults)
    a = Armed{};
  s.hostMemoryLimit.reset();
  armedFlag.store(false, std::memory_order_relaxed);
}

std::uint64_t reached(Fault fault) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.faults[static_cast<std::size_t>(fault)].reached;
}

std::uint64_t failed(Fault fault) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.faults[static_cast<std::size_t>(fault)].failed;
}

void setHostMemoryLimit(std::optional<std::uint64_t> bytes) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.hostMemoryLimit = bytes;
  s.updateFlag();
}

std::optional<std::uint64_t> hostMemoryLimit() {
  if (!anyArmed())
    return std::nullopt;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.hostMemoryLimit;
}

bool hit(Fault fault) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Armed &a = s.faults[static_cast<std::size_t>(fault)];
  ++a.reached;
  if (a.count == 0)
    return false;
  if (a.skip > 0) {
    --a.skip;
    return false;
  }
  --a.count;
  ++a.failed;
  return true;
}

} // namespace faults
} // namespace dhs::runtime
