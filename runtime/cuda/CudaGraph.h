//===- CudaGraph.h - A decode step captured as a CUDA graph -----*- C++ -*-===//
//
// Internal to the CUDA tiers. With graphs on (Runtime::setCudaGraphs), a
// step's work for all its layers (uploads from the pinned staging, kernels,
// downloads) is captured into one graph the first time and replayed
// afterwards, while the step looks the same (the key: its layers in order,
// the batch, where inputs and outputs live, device pointers); a step that
// differs is captured again.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDAGRAPH_H
#define DHS_RUNTIME_CUDA_CUDAGRAPH_H

#include "runtime/core/Tiers.h"
#include "runtime/cuda/CudaResources.h"

#include <chrono>
#include <functional>
#include <vector>

namespace dhs::runtime::cuda_detail {

/// A captured step graph and its executable; destroyed quietly.
class StepGraph {
public:
  StepGraph() = default;
  ~StepGraph() { reset(); }
  StepGraph(const StepGraph &) = delete;
  StepGraph &operator=(const StepGraph &) = delete;

  /// Captures what `enqueue` submits to `stream` and instantiates it.
  void capture(CUstream stream, const std::function<void()> &enqueue) {
    const CudaDriver &cuda = driver();
    reset();
    cuda.check(cuda.streamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
               "cuStreamBeginCapture");
    CUgraph graph = nullptr;
    try {
      enqueue();
    } catch (...) {
      // End the capture so the stream is usable again; drop what it made.
      if (cuda.streamEndCapture(stream, &graph) == CUDA_SUCCESS && graph)
        cuda.graphDestroy(graph);
      throw;
    }
    cuda.check(cuda.streamEndCapture(stream, &graph), "cuStreamEndCapture");
    graph_ = graph;
    cuda.check(cuda.graphInstantiate(&exec_, graph_, 0), "cuGraphInstantiate");
  }
  /// Launches the executable graph on `stream`; returns the call's host
  /// time in ms.
  double launch(CUstream stream) const {
    const auto start = std::chrono::steady_clock::now();
    driver().check(driver().graphLaunch(exec_, stream), "cuGraphLaunch");
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  }
  /// True once instantiated.
  bool ready() const { return exec_ != nullptr; }
  /// Counts the captured graph's nodes by kind into `stats` (left as they
  /// are where the driver cannot list them).
  void countNodes(TierGraphStats &stats) const {
    const CudaDriver &cuda = driver();
    std::size_t count = 0;
    if (!graph_ || !cuda.graphGetNodes || !cuda.graphNodeGetType ||
        cuda.graphGetNodes(graph_, nullptr, &count) != CUDA_SUCCESS)
      return;
    std::vector<CUgraphNode> nodes(count);
    if (count > 0 && cuda.graphGetNodes(graph_, nodes.data(), &count) != CUDA_SUCCESS)
      return;
    stats.nodes = count;
    stats.kernelNodes = stats.copyNodes = stats.memsetNodes = 0;
    for (std::size_t i = 0; i < count; ++i) {
      CUgraphNodeType type;
      if (cuda.graphNodeGetType(nodes[i], &type) != CUDA_SUCCESS)
        continue;
      stats.kernelNodes += type == CU_GRAPH_NODE_TYPE_KERNEL;
      stats.copyNodes += type == CU_GRAPH_NODE_TYPE_MEMCPY;
      stats.memsetNodes += type == CU_GRAPH_NODE_TYPE_MEMSET;
    }
  }
  /// Destroys the graph and its executable.
  void reset() {
    if (exec_)
      driver().graphExecDestroy(exec_);
    if (graph_)
      driver().graphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
  }

private:
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

/// Replays a captured step while the step's key (what its work depends on)
/// stays the same, else captures it again.
template <typename Key> class StepGraphCache {
public:
  /// Launches the step keyed `key` on `stream`: replays the graph captured
  /// for an equal key, else captures what `enqueue` submits first.
  void run(const Key &key, CUstream stream, const std::function<void()> &enqueue) {
    if (!graph_.ready() || key_ != key) {
      graph_.reset();
      key_ = Key();
      graph_.capture(stream, enqueue);
      key_ = key;
      ++stats_.captures;
      graph_.countNodes(stats_);
    } else {
      ++stats_.replays;
    }
    lastLaunchMs_ = graph_.launch(stream);
  }
  /// The host time of the last cuGraphLaunch call, ms.
  double lastLaunchMs() const { return lastLaunchMs_; }
  /// Drops the captured graph.
  void reset() {
    graph_.reset();
    key_ = Key();
  }
  /// Captures and replays so far.
  const TierGraphStats &stats() const { return stats_; }

private:
  StepGraph graph_;
  Key key_;
  TierGraphStats stats_;
  double lastLaunchMs_ = -1.0;
};

} // namespace dhs::runtime::cuda_detail

#endif // DHS_RUNTIME_CUDA_CUDAGRAPH_H
