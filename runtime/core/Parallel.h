//===- Parallel.h - Host work spread over threads ---------------*- C++ -*-===//
//
// One helper for host loops whose iterations are independent (the CPU
// attention's (request, query) pairs, the test-data generator's rows).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_PARALLEL_H
#define DHS_RUNTIME_CORE_PARALLEL_H

#include <cstdint>
#include <functional>

namespace dhs::runtime {

/// The threads parallelFor uses for `threads` = 0: one per hardware thread.
unsigned hardwareThreads();

/// Calls body(begin, end) for consecutive chunks [begin, end) of [0, count),
/// each at most `grain` long, on up to `threads` threads (0: hardwareThreads();
/// the calling thread is one of them, the others come from a pool started on
/// first use and kept, at most hardwareThreads() - 1), chunks handed out in
/// order as threads become free; where one thread is all it would use, or
/// the pool is busy (another thread's parallelFor, or a call from inside a
/// body), one call for [0, count) on the calling thread. The first exception
/// a chunk throws stops the others from taking further chunks and is
/// rethrown on the calling thread once every thread has finished; a thread
/// that cannot be started leaves its share to the others. The body must not
/// depend on which thread runs a chunk.
void parallelFor(std::int64_t count, std::int64_t grain, unsigned threads,
                 const std::function<void(std::int64_t begin, std::int64_t end)> &body);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_PARALLEL_H
