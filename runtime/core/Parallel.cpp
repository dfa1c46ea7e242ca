//===- Parallel.cpp - Host work spread over threads -----------------------===//

#include "runtime/core/Parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace dhs::runtime {

unsigned hardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

void parallelFor(std::int64_t count, std::int64_t grain, unsigned threads,
                 const std::function<void(std::int64_t begin, std::int64_t end)> &body) {
  if (count <= 0)
    return;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t chunks = (count + grain - 1) / grain;
  if (threads == 0)
    threads = hardwareThreads();
  threads = static_cast<unsigned>(std::min<std::int64_t>(threads, chunks));
  if (threads <= 1) {
    body(0, count);
    return;
  }
  std::atomic<std::int64_t> next{0};
  std::mutex failureMutex;
  std::exception_ptr failure;
  auto worker = [&] {
    try {
      for (;;) {
        const std::int64_t chunk = next.fetch_add(1);
        if (chunk >= chunks)
          return;
        const std::int64_t begin = chunk * grain;
        body(begin, std::min(count, begin + grain));
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(failureMutex);
      if (!failure)
        failure = std::current_exception();
      // The other threads take no further chunk.
      next.store(chunks);
    }
  };
  std::vector<std::thread> helpers;
  try {
    helpers.reserve(threads - 1);
    for (unsigned t = 1; t < threads; ++t)
      helpers.emplace_back(worker);
  } catch (...) {
    // Could not start every thread: the started ones and this one do the work.
  }
  worker();
  for (std::thread &thread : helpers)
    thread.join();
  if (failure)
    std::rethrow_exception(failure);
}

} // namespace dhs::runtime
