//===- BenchTiming.h - Wall-clock timing of enqueued GPU work ---*- C++ -*-===//
//
// The benchmarks' one timing rule for work enqueued on a stream: from the
// first enqueue to the end of the stream, median of several runs after a
// warm-up; and the wall-clock helpers of the benchmarks that time host calls.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_BENCH_BENCHTIMING_H
#define DHS_BENCH_BENCHTIMING_H

#include "runtime/cuda/CudaDriver.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace dhs::bench {

using Clock = std::chrono::steady_clock;

/// Milliseconds from `a` to `b`.
inline double elapsedMs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

/// The median of `values` (0 for none).
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

/// Median of `runs` timings (ms) of `work`, each from its first enqueue to
/// the end of `stream`, after one warm-up run.
template <typename Work> double medianMs(CUstream stream, int runs, Work work) {
  const runtime::CudaDriver &cuda = runtime::CudaDriver::instance();
  std::vector<double> ms;
  for (int i = 0; i < runs + 1; ++i) {
    const auto start = std::chrono::steady_clock::now();
    work();
    cuda.check(cuda.streamSynchronize(stream), "cuStreamSynchronize");
    const auto end = std::chrono::steady_clock::now();
    if (i > 0)
      ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

} // namespace dhs::bench

#endif // DHS_BENCH_BENCHTIMING_H
