//===- CudaExchange.h - What a step's work exchanges with the host -*- C++ -*-===//
//
// Internal to the CUDA tiers. The small words and lists a step's work reads
// from the host (budgets, the logs' stamps, the appends' lists) and writes
// back (counts, status words, the appends' slots) lie in two pinned areas,
// each with a mirror in device memory: the work copies device to device,
// and a step moves each area with one copy. In a graph's launch a copy that
// touches host memory costs ~1.4 us warm and ~3.7 us cold, one between
// device buffers nothing measurable (bench/NOTES.md, 2026-12-04), so a
// decided step with appends launched 11 copies of the first kind where it
// now launches 2.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDAEXCHANGE_H
#define DHS_RUNTIME_CUDA_CUDAEXCHANGE_H

#include "runtime/cuda/CudaResources.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dhs::runtime::cuda_detail {

/// Two pinned areas (to the device, to the host) of named parts, each with
/// a device mirror. The host writes a part of the first area before the
/// work that reads it is enqueued, and enqueueToDevice copies the whole area
/// to its mirror ahead of that work; the work writes parts of the second
/// area's mirror, and enqueueToHost copies it to the host after them. Every
/// copy moves whole areas, so a part of the second may be copied to the
/// host again later with what its mirror still holds.
class HostExchange {
public:
  /// Which way a part goes.
  enum class Direction { ToDevice, ToHost };
  /// A part's handle.
  using Part = std::size_t;

  HostExchange() = default;
  HostExchange(const HostExchange &) = delete;
  HostExchange &operator=(const HostExchange &) = delete;

  /// Adds a part of `bytes`, zero on both sides. Moves the area (see
  /// resize).
  Part add(Direction direction, std::size_t bytes, const std::string &what);
  /// Grows or shrinks a part: its first bytes are kept, the rest is zero.
  /// The area's buffers move (addresses taken before are stale, graphs
  /// that copy them no longer fit: generation changes) and the mirror is
  /// made equal to the host: call only with the stream idle.
  void resize(Part part, std::size_t bytes);
  /// Drops a part (its owner is gone); its bytes go at the next move.
  void release(Part part) noexcept { parts_.at(part).released = true; }
  /// Copies a part's host bytes to its mirror now (the host rewrote a part
  /// copied back, whose mirror a later copy would otherwise bring back;
  /// call only with the stream idle).
  void refreshMirror(Part part) const;
  /// A part's bytes.
  std::size_t bytes(Part part) const { return parts_.at(part).bytes; }
  /// A part's pinned bytes.
  void *host(Part part) const;
  /// A part's device mirror.
  CUdeviceptr mirror(Part part) const;
  /// Enqueues the copy of the area to the device into its mirror (nothing
  /// when it has no parts).
  void enqueueToDevice(CUstream stream) const { enqueue(Direction::ToDevice, stream); }
  /// Enqueues the copy of the area to the host from its mirror.
  void enqueueToHost(CUstream stream) const { enqueue(Direction::ToHost, stream); }
  /// Changes whenever an area moves.
  std::uint64_t generation() const { return generation_; }

private:
  struct PartInfo {
    Direction direction;
    std::size_t bytes = 0, offset = 0;
    std::string what;
    bool released = false;
  };
  struct Area {
    std::unique_ptr<MappedHostBuffer> host;
    std::unique_ptr<DeviceBuffer> mirror;
    std::size_t bytes = 0;
  };
  Area &area(Direction direction) { return areas_[direction == Direction::ToHost]; }
  const Area &area(Direction direction) const { return areas_[direction == Direction::ToHost]; }
  /// Lays out `direction`'s parts at new buffers with `bytes` as each
  /// part's size, moving what they hold.
  void relayout(Direction direction, const std::vector<std::size_t> &bytes);
  void enqueue(Direction direction, CUstream stream) const;

  std::vector<PartInfo> parts_;
  Area areas_[2];
  std::uint64_t generation_ = 0;
};

} // namespace dhs::runtime::cuda_detail

#endif // DHS_RUNTIME_CUDA_CUDAEXCHANGE_H
