//===- CudaTiers.cpp - The KV tiers on a CUDA device ----------------------===//
//
// The runtime's tiers on a GPU: per pool an HBM buffer [slots, P, row_bytes]
// (cuMemAlloc) and a host store [host_rows, P, row_bytes] in pinned memory
// mapped into the device's address space (the kernels read missing rows from
// it directly); one set of device buffers for the step's memref arguments,
// the status word, and pinned staging per layer for what is uploaded or
// downloaded. A step is stream-ordered on one stream: per layer, the padded
// selections, slot map, history bounds and queries are uploaded and the
// step's kernels launched; outputs are copied back; promotions (row copies
// from the host store into HBM slots) follow in the same stream, after the
// reads. The only host synchronization is finishStep's (the status word and
// host outputs), plus the waits of checks and of host-store writes between
// steps.
//
//===----------------------------------------------------------------------===//

#include "runtime/CudaBackend.h"
#include "runtime/CudaResources.h"
#include "runtime/Error.h"
#include "runtime/Manifest.h"
#include "runtime/Tiers.h"

#include <cstring>
#include <map>
#include <memory>

namespace dhs::runtime {

namespace {

using namespace cuda_detail;

class CudaTiers final : public TierBackend {
public:
  CudaTiers(const TierLayout &layout, const Manifest &manifest, int ordinal)
      : layout_(layout), shape_(problemShapeFromManifest(manifest)),
        backend_(manifest, ordinal) {
    const CudaDriver &cuda = driver();
    backend_.makeCurrent();
    if (layout.layersPerPool > 1) {
      // The compiled kernels read one layer of the group; running every
      // layer needs one compiled step per layer index.
      for (std::int32_t l = 0; l < layout.layers; ++l)
        if (l % layout.layersPerPool != shape_.layer)
          throw Error("the step reads layer " + std::to_string(shape_.layer) +
                      " of its group's pool; the CUDA tiers run every layer with one step, "
                      "which needs pools of one layer");
    }
    // Memory: check against what the device has before allocating.
    const std::size_t tokenBytes = static_cast<std::size_t>(layout.tokenBytes());
    const std::size_t hbmBytes =
        static_cast<std::size_t>(layout.pools()) * layout.hbmSlots * tokenBytes;
    std::size_t freeBytes = 0, totalBytes = 0;
    cuda.check(cuda.memGetInfo(&freeBytes, &totalBytes), "cuMemGetInfo");
    if (hbmBytes + (64u << 20) > freeBytes)
      throw CapacityError("the HBM tier needs " + formatBytes(hbmBytes) + " (" +
                          std::to_string(layout.pools()) + " pools x " +
                          std::to_string(layout.hbmSlots) + " slots x " +
                          std::to_string(tokenBytes) + " bytes), the device has " +
                          formatBytes(freeBytes) + " free");
    for (std::int32_t p = 0; p < layout.pools(); ++p) {
      hbm_.push_back(std::make_unique<DeviceBuffer>(
          static_cast<std::size_t>(layout.hbmSlots) * tokenBytes,
          "HBM pool " + std::to_string(p)));
      host_.push_back(std::make_unique<MappedHostBuffer>(
          static_cast<std::size_t>(layout.hostRows) * tokenBytes,
          "host store " + std::to_string(p)));
    }
    // The step's memref arguments: one device buffer each, reused by every
    // layer (uploads are stream-ordered behind the previous layer's kernels).
    buffers_.arguments.assign(manifest.arguments.size(), 0);
    for (const Argument &arg : manifest.arguments) {
      if (arg.isPool)
        continue;
      std::size_t bytes = dtypeSize(arg.dtype);
      for (std::int64_t d : arg.shape)
        bytes *= static_cast<std::size_t>(d);
      arguments_.push_back(std::make_unique<DeviceBuffer>(bytes, roleName(arg.role)));
      buffers_.arguments[static_cast<std::size_t>(arg.index)] = arguments_.back()->get();
      argumentBytes_[static_cast<int>(arg.role)] = bytes;
      argumentIndex_[static_cast<int>(arg.role)] = arg.index;
    }
    status_ = std::make_unique<DeviceBuffer>(sizeof(std::uint32_t), "the status word");
    buffers_.status = status_->get();
    buffers_.hbmSlots = layout.hbmSlots;
    buffers_.hostRows = layout.hostRows;
    // Pinned staging per layer: selections, slots, history bounds, queries in;
    // output back.
    const std::size_t in = bytesOf(ArgumentRole::RowIds) + bytesOf(ArgumentRole::Slots) +
                           bytesOf(ArgumentRole::HistoryStart) +
                           bytesOf(ArgumentRole::HistoryLen) + bytesOf(ArgumentRole::Queries);
    stagingIn_ = std::make_unique<MappedHostBuffer>(in * layout.layers, "upload staging");
    stagingOut_ = std::make_unique<MappedHostBuffer>(
        bytesOf(ArgumentRole::Output) * layout.layers, "download staging");
    stream_ = std::make_unique<Stream>();
    snapshot_.resize(static_cast<std::size_t>(layout.hbmSlots) * tokenBytes);
    describe_ = "cuda on " + backend_.device().name + " (" + backend_.device().arch + ")";
  }

  ~CudaTiers() override {
    try {
      backend_.makeCurrent();
      driver().streamSynchronize(stream_->get());
    } catch (...) {
    }
  }

  std::string describe() const override { return describe_; }
  const TierLayout &layout() const override { return layout_; }
  bool acceptsDevicePointers() const override { return true; }

  std::uint8_t *hostRow(std::int32_t layer, std::int64_t row) override {
    // The caller may write: nothing in flight may still read the store.
    quiesce();
    return static_cast<std::uint8_t *>(host_[static_cast<std::size_t>(layer / layout_.layersPerPool)]->host()) +
           row * layout_.tokenBytes() + layout_.layerOffset(layer);
  }

  void copyToHbm(const std::vector<RowCopy> &copies) override {
    const CudaDriver &cuda = driver();
    backend_.makeCurrent();
    const std::size_t tokenBytes = static_cast<std::size_t>(layout_.tokenBytes());
    for (const RowCopy &copy : copies)
      for (std::int32_t l = layout_.firstLayer(copy.group); l < layout_.endLayer(copy.group);
           l += layout_.layersPerPool) {
        const std::size_t pool = static_cast<std::size_t>(l / layout_.layersPerPool);
        const auto *source = static_cast<const std::uint8_t *>(host_[pool]->host()) +
                             static_cast<std::size_t>(copy.hostRow) * tokenBytes;
        cuda.check(cuda.memcpyHtoDAsync(hbm_[pool]->get() +
                                            static_cast<std::size_t>(copy.slot) * tokenBytes,
                                        source, tokenBytes, stream_->get()),
                   "copying host row " + std::to_string(copy.hostRow) + " to slot " +
                       std::to_string(copy.slot));
      }
    busy_ = busy_ || !copies.empty();
  }

  const std::uint8_t *hbmSnapshot(std::int32_t layer) override {
    const CudaDriver &cuda = driver();
    quiesce();
    const std::size_t pool = static_cast<std::size_t>(layer / layout_.layersPerPool);
    if (!snapshot_.empty())
      cuda.check(cuda.memcpyDtoH(snapshot_.data(), hbm_[pool]->get(), snapshot_.size()),
                 "reading the HBM tier for a check");
    return snapshot_.data();
  }

  void attend(std::int32_t layer, const LayerStep &step) override {
    const CudaDriver &cuda = driver();
    backend_.makeCurrent();
    CUstream stream = stream_->get();
    const ProblemShape &s = *step.shape;
    if (!stepOpen_) {
      cuda.check(cuda.memsetD32Async(buffers_.status, 0, 1, stream), "clearing the status word");
      stepOpen_ = true;
      hostOutputs_.clear();
    }
    // Stage this layer's inputs in its own pinned region, then upload.
    std::uint8_t *stage = static_cast<std::uint8_t *>(stagingIn_->host()) +
                          static_cast<std::size_t>(layer) * stagingInBytes();
    auto upload = [&](ArgumentRole role, const void *data, std::size_t bytes) {
      std::memcpy(stage, data, bytes);
      cuda.check(cuda.memcpyHtoDAsync(argument(role), stage, bytes, stream),
                 std::string("uploading ") + roleName(role));
      stage += bytesOf(role);
    };
    upload(ArgumentRole::RowIds, step.rowIds, bytesOf(ArgumentRole::RowIds));
    upload(ArgumentRole::Slots, step.slots, bytesOf(ArgumentRole::Slots));
    upload(ArgumentRole::HistoryStart, step.historyStart, bytesOf(ArgumentRole::HistoryStart));
    upload(ArgumentRole::HistoryLen, step.historyLen, bytesOf(ArgumentRole::HistoryLen));
    const std::size_t queryBytes = static_cast<std::size_t>(
        step.lanes * s.queries * s.heads * s.qkDim * static_cast<std::int64_t>(sizeof(bf16_t)));
    const std::size_t outputBytes = static_cast<std::size_t>(
        step.lanes * s.queries * s.heads * s.vDim * static_cast<std::int64_t>(sizeof(bf16_t)));
    // Queries: the engine's lanes, zeros for the padding lanes.
    cuda.check(cuda.memsetD16Async(argument(ArgumentRole::Queries), 0,
                                   bytesOf(ArgumentRole::Queries) / 2, stream),
               "clearing the queries");
    if (queryBytes > 0) {
      if (step.memory == MemorySpace::Host) {
        std::memcpy(stage, step.queries, queryBytes);
        cuda.check(cuda.memcpyHtoDAsync(argument(ArgumentRole::Queries), stage, queryBytes, stream),
                   "uploading queries");
      } else {
        cuda.check(cuda.memcpyDtoDAsync(argument(ArgumentRole::Queries),
                                        reinterpret_cast<CUdeviceptr>(step.queries), queryBytes,
                                        stream),
                   "copying queries");
      }
    }
    // The kernels, over this layer's pool.
    const std::size_t pool = static_cast<std::size_t>(layer / layout_.layersPerPool);
    buffers_.hbm = hbm_[pool]->get();
    buffers_.host = host_[pool]->device();
    cuda.check(cuda.memsetD16Async(argument(ArgumentRole::Output), kBf16Poison,
                                   bytesOf(ArgumentRole::Output) / 2, stream),
               "poisoning the output");
    backend_.launchAsync(buffers_, stream);
    // Outputs: the engine's lanes.
    if (outputBytes > 0) {
      if (step.memory == MemorySpace::Host) {
        std::uint8_t *out = static_cast<std::uint8_t *>(stagingOut_->host()) +
                            static_cast<std::size_t>(layer) * bytesOf(ArgumentRole::Output);
        cuda.check(cuda.memcpyDtoHAsync(out, argument(ArgumentRole::Output), outputBytes, stream),
                   "downloading the output");
        hostOutputs_.push_back({step.output, out, outputBytes});
      } else {
        cuda.check(cuda.memcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(step.output),
                                        argument(ArgumentRole::Output), outputBytes, stream),
                   "copying the output");
      }
    }
    busy_ = true;
  }

  void finishStep() override {
    const CudaDriver &cuda = driver();
    backend_.makeCurrent();
    std::uint32_t word = 0;
    if (stepOpen_) {
      cuda.check(cuda.memcpyDtoHAsync(&word, buffers_.status, sizeof(word), stream_->get()),
                 "reading the status word");
    }
    cuda.check(cuda.streamSynchronize(stream_->get()), "the step's kernels failed");
    busy_ = false;
    const bool wasOpen = stepOpen_;
    stepOpen_ = false;
    if (!wasOpen)
      return;
    if (word != 0)
      throw Error("the kernels rejected their input: status " + describeStatus(word));
    // Every output element of the engine's lanes was written (the poison
    // is a NaN the kernels never produce).
    for (const HostOutput &o : hostOutputs_) {
      const auto *values = static_cast<const bf16_t *>(o.staging);
      std::size_t unwritten = 0;
      for (std::size_t i = 0; i < o.bytes / sizeof(bf16_t); ++i)
        unwritten += values[i] == kBf16Poison;
      if (unwritten)
        throw Error(std::to_string(unwritten) + " output elements were not written by the kernels");
      std::memcpy(o.destination, o.staging, o.bytes);
    }
    hostOutputs_.clear();
  }

private:
  struct HostOutput {
    void *destination;
    const void *staging;
    std::size_t bytes;
  };

  std::size_t bytesOf(ArgumentRole role) const {
    auto it = argumentBytes_.find(static_cast<int>(role));
    return it == argumentBytes_.end() ? 0 : it->second;
  }
  std::size_t stagingInBytes() const {
    return bytesOf(ArgumentRole::RowIds) + bytesOf(ArgumentRole::Slots) +
           bytesOf(ArgumentRole::HistoryStart) + bytesOf(ArgumentRole::HistoryLen) +
           bytesOf(ArgumentRole::Queries);
  }
  CUdeviceptr argument(ArgumentRole role) const {
    return buffers_.arguments[static_cast<std::size_t>(argumentIndex_.at(static_cast<int>(role)))];
  }
  /// Waits for everything submitted (between steps only).
  void quiesce() {
    if (!busy_)
      return;
    backend_.makeCurrent();
    driver().check(driver().streamSynchronize(stream_->get()), "waiting for the stream");
    busy_ = false;
  }

  TierLayout layout_;
  ProblemShape shape_;
  CudaBackend backend_; // context and kernels; destroyed after the buffers
  std::vector<std::unique_ptr<DeviceBuffer>> hbm_;      // [pool]
  std::vector<std::unique_ptr<MappedHostBuffer>> host_; // [pool]
  std::vector<std::unique_ptr<DeviceBuffer>> arguments_;
  std::map<int, std::size_t> argumentBytes_;
  std::map<int, int> argumentIndex_;
  std::unique_ptr<DeviceBuffer> status_;
  std::unique_ptr<MappedHostBuffer> stagingIn_, stagingOut_;
  std::unique_ptr<Stream> stream_;
  CudaStepBuffers buffers_;
  std::vector<std::uint8_t> snapshot_;
  std::vector<HostOutput> hostOutputs_;
  std::string describe_;
  bool stepOpen_ = false;
  bool busy_ = false;
};

} // namespace

std::unique_ptr<TierBackend> makeCudaTiers(const TierLayout &layout, const Manifest &manifest,
                                           int ordinal) {
  return std::make_unique<CudaTiers>(layout, manifest, ordinal);
}

} // namespace dhs::runtime
