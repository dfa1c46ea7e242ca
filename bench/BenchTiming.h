//===- BenchTiming.h - Wall-clock timing of enqueued GPU work ---*- C++ -*-===//
//
// The benchmarks' two timing rules for work enqueued on a stream, each the
// median of several runs after a warm-up: the wall clock from the first
// enqueue to the end of the stream (the host's launch and its wake-up
// included), and the device's time between two CUDA events around the work
// (the rule of dhs-run's table, runtime/cuda/CudaStep.cpp); and the
// wall-clock helpers of the benchmarks that time host calls.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_BENCH_BENCHTIMING_H
#define DHS_BENCH_BENCHTIMING_H

#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaResources.h"

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

/// Median of `runs` timings (ms) of `work` between a CUDA event recorded on
/// `stream` before it and one after it, after one warm-up run.
template <typename Work> double medianEventMs(CUstream stream, int runs, Work work) {
  const runtime::CudaDriver &cuda = runtime::CudaDriver::instance();
  runtime::cuda_detail::Event start, stop;
  std::vector<double> ms;
  for (int i = 0; i < runs + 1; ++i) {
    cuda.check(cuda.eventRecord(start.get(), stream), "cuEventRecord");
    work();
    cuda.check(cuda.eventRecord(stop.get(), stream), "cuEventRecord");
    cuda.check(cuda.eventSynchronize(stop.get()), "cuEventSynchronize");
    float elapsed = 0.0f;
    cuda.check(cuda.eventElapsedTime(&elapsed, start.get(), stop.get()), "cuEventElapsedTime");
    if (i > 0)
      ms.push_back(elapsed);
  }
  return median(ms);
}

} // namespace dhs::bench

#endif // DHS_BENCH_BENCHTIMING_H
