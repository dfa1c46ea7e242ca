//===- CudaExchange.cpp - What a step's work exchanges with the host ------===//

#include "runtime/cuda/CudaExchange.h"

#include "runtime/core/Checked.h"
#include "runtime/core/Error.h"

#include <algorithm>
#include <cstring>
#include <optional>

namespace dhs::runtime::cuda_detail {

HostExchange::Part HostExchange::add(Direction direction, std::size_t bytes,
                                     const std::string &what) {
  parts_.push_back({direction, 0, 0, what});
  const Part part = parts_.size() - 1;
  try {
    resize(part, bytes);
  } catch (...) {
    parts_.pop_back();
    throw;
  }
  return part;
}

void HostExchange::resize(Part part, std::size_t bytes) {
  const Direction direction = parts_.at(part).direction;
  std::vector<std::size_t> sizes;
  for (std::size_t p = 0; p < parts_.size(); ++p)
    if (parts_[p].direction == direction)
      sizes.push_back(p == part ? bytes : parts_[p].bytes);
  relayout(direction, sizes);
}

void HostExchange::relayout(Direction direction, const std::vector<std::size_t> &bytes) {
  // Each part at a 256-byte boundary, in the order added.
  std::vector<PartInfo *> parts;
  for (PartInfo &info : parts_)
    if (info.direction == direction)
      parts.push_back(&info);
  std::vector<std::size_t> sizes = bytes;
  for (std::size_t i = 0; i < parts.size(); ++i)
    if (parts[i]->released)
      sizes[i] = 0;
  std::vector<std::size_t> offsets(parts.size());
  // (Each part rounded up to 256 bytes, the sum checked: a part's size
  // comes from a manifest's shapes or a replay's appends.)
  std::size_t total = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    offsets[i] = total;
    const std::optional<std::size_t> rounded = tryAdd<std::size_t>(sizes[i], 255);
    const std::optional<std::size_t> sum =
        rounded ? tryAdd<std::size_t>(total, *rounded / 256 * 256) : std::nullopt;
    if (!sum)
      throw CapacityError("the host exchange's parts (" + parts[i]->what + ": " +
                          std::to_string(sizes[i]) + " bytes) do not fit an address space");
    total = *sum;
  }
  const char *name =
      direction == Direction::ToDevice ? "the words copied to the device" : "the words copied back";
  Area moved;
  moved.bytes = total;
  moved.host = std::make_unique<MappedHostBuffer>(total, name);
  moved.mirror = std::make_unique<DeviceBuffer>(total, std::string(name) + "' device mirror");
  auto *to = static_cast<std::uint8_t *>(moved.host->host());
  std::memset(to, 0, std::max<std::size_t>(total, 1));
  Area &old = area(direction);
  for (std::size_t i = 0; i < parts.size(); ++i)
    if (old.host && parts[i]->bytes > 0)
      std::memcpy(to + offsets[i],
                  static_cast<const std::uint8_t *>(old.host->host()) + parts[i]->offset,
                  std::min(parts[i]->bytes, sizes[i]));
  // The mirror as the host (the stream is idle).
  if (total > 0)
    driver().check(driver().memcpyHtoD(moved.mirror->get(), to, total),
                   std::string("initializing ") + name + "' device mirror");
  for (std::size_t i = 0; i < parts.size(); ++i) {
    parts[i]->offset = offsets[i];
    parts[i]->bytes = sizes[i];
  }
  old = std::move(moved);
  ++generation_;
}

void *HostExchange::host(Part part) const {
  const PartInfo &info = parts_.at(part);
  return static_cast<std::uint8_t *>(area(info.direction).host->host()) + info.offset;
}

CUdeviceptr HostExchange::mirror(Part part) const {
  const PartInfo &info = parts_.at(part);
  return area(info.direction).mirror->get() + info.offset;
}

void HostExchange::refreshMirror(Part part) const {
  const PartInfo &info = parts_.at(part);
  if (info.bytes > 0)
    driver().check(driver().memcpyHtoD(mirror(part), host(part), info.bytes),
                   "refreshing the device mirror of " + info.what);
}

void HostExchange::enqueue(Direction direction, CUstream stream) const {
  const Area &a = area(direction);
  if (a.bytes == 0)
    return;
  const bool toDevice = direction == Direction::ToDevice;
  driver().check(toDevice
                     ? driver().memcpyDtoDAsync(a.mirror->get(), a.host->device(), a.bytes, stream)
                     : driver().memcpyDtoDAsync(a.host->device(), a.mirror->get(), a.bytes, stream),
                 toDevice ? "copying the words for the device" : "copying the words back");
}

} // namespace dhs::runtime::cuda_detail
