//===- CudaWorkerStreams.h - Streams forked from a queue's stream -*- C++ -*-===//
//
// Internal to the CUDA tiers: a few streams that run independent pieces of
// work side by side, forked from the queue's stream (they start after
// everything enqueued there before the fork) and joined back into it
// (everything enqueued there after the join waits for all of their work).
// Ordering is by events only: the host never waits here. CudaDecisions
// replays the layer groups' appends on them (one group's launches in a
// row on one stream).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDAWORKERSTREAMS_H
#define DHS_RUNTIME_CUDA_CUDAWORKERSTREAMS_H

#include "runtime/cuda/CudaResources.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace dhs::runtime::cuda_detail {

/// Worker streams with the events of a fork from and a join into one
/// parent stream.
class CudaWorkerStreams {
public:
  /// The most streams: a piece of work each up to here. Captured into a
  /// graph, each stream's work is a branch the device runs beside the
  /// others, also beyond its CUDA_DEVICE_MAX_CONNECTIONS hardware queues
  /// (default 8): on the H200, 20 layer groups' aging replays on 20 streams
  /// took 1.9 ms a step where 8 streams (2-3 replays in a row each) took
  /// 5.1 ms (bench/NOTES.md, 2026-12-03).
  static constexpr std::size_t kMaxStreams = 32;

  /// min(`count`, kMaxStreams) streams, at least one (the context must be
  /// current).
  explicit CudaWorkerStreams(std::size_t count) : fork_(CU_EVENT_DISABLE_TIMING) {
    const std::size_t streams = std::clamp<std::size_t>(count, 1, kMaxStreams);
    for (std::size_t i = 0; i < streams; ++i) {
      streams_.push_back(std::make_unique<Stream>());
      joins_.push_back(std::make_unique<Event>(CU_EVENT_DISABLE_TIMING));
    }
  }

  /// The number of streams.
  std::size_t size() const { return streams_.size(); }
  /// Stream i (work for piece k goes to stream k mod size()).
  CUstream stream(std::size_t i) const { return streams_[i]->get(); }

  /// Makes the work enqueued on every stream from now on wait for the work
  /// enqueued on `parent` so far.
  void fork(CUstream parent) {
    const CudaDriver &cuda = driver();
    cuda.check(cuda.eventRecord(fork_.get(), parent), "recording a stream fork");
    for (const std::unique_ptr<Stream> &stream : streams_)
      cuda.check(cuda.streamWaitEvent(stream->get(), fork_.get(), 0), "forking a stream");
  }
  /// Makes the work enqueued on `parent` from now on wait for the work
  /// enqueued on every stream so far.
  void join(CUstream parent) {
    const CudaDriver &cuda = driver();
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      cuda.check(cuda.eventRecord(joins_[i]->get(), streams_[i]->get()),
                 "recording a stream's end");
      cuda.check(cuda.streamWaitEvent(parent, joins_[i]->get(), 0), "joining a stream");
    }
  }

private:
  Event fork_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Event>> joins_; // [stream]: its last work
};

} // namespace dhs::runtime::cuda_detail

#endif // DHS_RUNTIME_CUDA_CUDAWORKERSTREAMS_H
