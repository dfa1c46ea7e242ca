//===- AttentionConfig.cpp - how an attention op maps to a kernel ---------===//

#include "codegen/AttentionConfig.h"

#include "codegen/KernelBuilder.h"

#include <limits>

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;

/// Most CTAs one query's entries are split over (the combine kernel walks
/// them unrolled).
static constexpr int64_t kMaxSplits = 16;

FailureOr<SparseAttentionKernelConfig>
mlir::dhs::getSparseAttentionKernelConfig(Operation *op, int64_t maxHeadsPerBlock, int64_t tileRows,
                                          int64_t minBlocks, bool tensorCores) {
  SparseAttentionKernelConfig config;
  Value queriesValue, rowsValue, sharedTiles;
  if (auto fused = dyn_cast<SparseAttentionOp>(op)) {
    queriesValue = fused.getQueries();
    rowsValue = fused.getRowIds();
    sharedTiles = fused.getSharedTiles();
    config.softmaxScale = fused.getSoftmaxScale().convertToFloat();
    config.pool = fused.getPool().getType();
    config.layer = fused.getLayer();
    config.writeBack = static_cast<bool>(fused.getWriteBack());
    if (std::optional<uint64_t> size = fused.getWindowSize()) {
      config.windowSize = static_cast<int64_t>(*size);
      config.windowRing = fused.getWindow().getType().getDimSize(1);
    }
  } else {
    auto staged = cast<AttentionOp>(op);
    queriesValue = staged.getQueries();
    rowsValue = staged.getRowIds();
    sharedTiles = staged.getSharedTiles();
    config.softmaxScale = staged.getSoftmaxScale().convertToFloat();
    config.pool = staged.getPool().getType();
    config.layer = staged.getLayer();
    config.staged = true;
    config.indexed = static_cast<bool>(staged.getStagingIndex());
    if (std::optional<uint64_t> size = staged.getWindowSize()) {
      config.windowSize = static_cast<int64_t>(*size);
      config.windowRing = staged.getWindow().getType().getDimSize(1);
    }
    config.stagingRows = staged.getStaging().getType().getDimSize(1);
  }
  MemRefType queries = cast<MemRefType>(queriesValue.getType());
  MemRefType rows = cast<MemRefType>(rowsValue.getType());
  for (Value operand : op->getOperands()) {
    auto type = dyn_cast<MemRefType>(operand.getType());
    if (type && !type.hasStaticShape())
      return op->emitOpError() << "needs static shapes to generate a kernel, operand has type "
                               << type << kStaticShapesHint;
  }
  config.requests = queries.getDimSize(0);
  config.positions = queries.getDimSize(1);
  config.heads = queries.getDimSize(2);
  config.selected = rows.getDimSize(2);
  config.tileRows = tileRows;

  RowFormatAttrInterface format = config.pool.getFormat();
  config.groupHeads = config.heads / format.getKVHeads();
  if (isa<GqaAttr>(format)) {
    // Keys of the CTA's KV head, then its values.
    config.tileColumns = 2 * format.getQKDim();
    config.valueColumn = format.getQKDim();
  } else {
    config.tileColumns = format.getQKDim();
    config.valueColumn = 0;
  }

  if (tileRows <= 0 || tileRows > kWarpSize)
    return op->emitOpError() << "tile-rows must be in [1, 32], got " << tileRows;
  if (maxHeadsPerBlock <= 0 || maxHeadsPerBlock > 32)
    return op->emitOpError() << "max-heads-per-block must be in [1, 32], got " << maxHeadsPerBlock;
  // Largest divisor of the heads sharing a KV head that fits in one CTA:
  // every CTA reads one KV head.
  for (int64_t h = std::min(maxHeadsPerBlock, config.groupHeads); h >= 1; --h) {
    if (config.groupHeads % h == 0) {
      config.headsPerBlock = h;
      break;
    }
  }
  // Decoded keys of a tile plus its row table must fit in the 48 KB of
  // static shared memory a CTA gets without opting in.
  int64_t sharedBytes = tileRows * (config.tileColumns * 4 + 4 + 8 + (config.writeBack ? 4 : 0));
  if (sharedBytes > 48 * 1024)
    return op->emitOpError() << "tile-rows = " << tileRows << " needs " << sharedBytes
                             << " bytes of shared memory for rows of " << config.tileColumns
                             << " decoded dims; at most 49152 are available";
  int64_t rowBytes = format.getRowBytes();
  if (rowBytes % kCopyBytes != 0)
    return op->emitOpError() << "rows of " << rowBytes
                             << " bytes cannot be copied in 16-byte pieces";
  if (format.getQKDim() % kWarpSize != 0 || format.getVDim() % kWarpSize != 0)
    return op->emitOpError() << "head dims must be multiples of 32";
  if (config.requests * config.positions > std::numeric_limits<int32_t>::max())
    return op->emitOpError() << "too many (request, position) pairs for a grid";
  config.splitRows = config.entries();
  // The tensor-core kernel: 64 heads and a whole SM per CTA; small grids
  // split each query's tiles over CTAs (a power of two that divides them,
  // at least two tiles each) while that keeps the grid within about
  // minBlocks / 2 CTAs (one per SM).
  if (config.writeBack && !isa<MlaBf16Attr, MlaFp8Attr>(format))
    return op->emitOpError() << "writes rows back for MLA row formats only, not "
                             << format.getFormatName();
  // (A cluster of verify positions gathers a shared row in one CTA and
  // copies it to the others: its producer does not store rows back yet.)
  if (config.writeBack && sharedTiles && config.positions > 1)
    return op->emitOpError() << "writes rows back without a shared prefix only (the position "
                                "clusters of `shared` do not store rows back yet)";
  if (tensorCores && supportsTensorCoreAttention(config)) {
    config.tensorCores = true;
    if (auto staged = dyn_cast<AttentionOp>(op))
      config.overlapped = static_cast<bool>(staged.getReady());
    config.headsPerBlock = kTensorCoreHeads;
    config.tileRows = kTensorCoreTileRows;
    // The positions of a request share their selections' prefix: one
    // cluster of them per request and head block, never split.
    if (sharedTiles && config.positions > 1) {
      config.sharedPositions = config.positions;
      config.splitRows = config.selected;
      return config;
    }
    int64_t ctas = config.requests * config.positions * (config.heads / kTensorCoreHeads);
    int64_t tiles = config.selected / kTensorCoreTileRows;
    while (2 * ctas * config.splits <= minBlocks / 2 && config.splits * 2 <= kMaxSplits &&
           tiles % (2 * config.splits) == 0 && tiles / (2 * config.splits) >= 2)
      config.splits *= 2;
    config.splitRows = config.selected / config.splits;
    // A fused FP8 query of one CTA stages its host rows through a ring
    // (whole tiles ahead, so only where a CTA walks more tiles than that).
    // Not a split query: with 8 tiles a CTA (32 requests, 4 splits) the ring
    // made the step at 5% missing 4% slower (bench/NOTES.md, fiftieth
    // session), its first four tiles still read from the host.
    if (!config.staged && isa<MlaFp8Attr>(format) && config.groupHeads == kTensorCoreHeads &&
        config.splits == 1 && config.splitRows / kTensorCoreTileRows > kHostRowRingAhead)
      config.hostRowRingTiles = kHostRowRingAhead + 1;
    return config;
  }
  // Small grids: split each query's entries over CTAs (each split at least
  // two tiles, a whole number of tiles).
  int64_t blocks = config.requests * config.positions * (config.heads / config.headsPerBlock);
  if (minBlocks > blocks && config.entries() > 0) {
    int64_t wanted = llvm::divideCeil(minBlocks, blocks);
    int64_t most = std::clamp<int64_t>(config.entries() / (2 * config.tileRows), 1, kMaxSplits);
    int64_t splits = std::min(wanted, most);
    config.splitRows = llvm::alignTo(llvm::divideCeil(config.entries(), splits), config.tileRows);
    config.splits = llvm::divideCeil(config.entries(), config.splitRows);
    if (config.splits <= 1) {
      config.splits = 1;
      config.splitRows = config.entries();
    }
  }
  return config;
}

MemRefType SparseAttentionKernelConfig::partialsType(MLIRContext *context) const {
  return MemRefType::get({requests, positions, heads, splits, 2 + pool.getFormat().getVDim()},
                         Float32Type::get(context));
}

MemRefType SparseAttentionKernelConfig::hostRowRingType(MLIRContext *context) const {
  std::array<int64_t, 3> ctas = grid();
  return MemRefType::get({ctas[0] * ctas[1] * ctas[2], hostRowRingTiles, kTensorCoreTileRows,
                          pool.getFormat().getRowBytes()},
                         IntegerType::get(context, 8));
}

std::string SparseAttentionKernelConfig::key() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << requests << 'x' << positions << 'x' << heads << 'x' << selected << '/' << headsPerBlock
     << '/' << tileRows << '/' << layer << '/' << llvm::bit_cast<uint32_t>(softmaxScale) << '/'
     << pool.getFormat() << '/' << pool.getLayers() << '/' << windowSize << '/' << windowRing << '/'
     << splits << 'x' << splitRows << '/' << staged << indexed << overlapped << '/' << stagingRows
     << (tensorCores ? "/tensor-cores" : "")
     << (sharedPositions > 1 ? "/share" + std::to_string(sharedPositions) : "")
     << (unsharedRequests ? "/unshared" : "") << (residentForm ? "/resident" : "")
     << (writeBack ? "/write-back" : "")
     << (hostRowRingTiles > 0 ? "/host-row-ring" + std::to_string(hostRowRingTiles) : "");
  return text;
}

MemRefType SparseAttentionKernelConfig::queriesType() const {
  return MemRefType::get({requests, positions, heads, pool.getFormat().getQKDim()},
                         BFloat16Type::get(pool.getContext()));
}

MemRefType SparseAttentionKernelConfig::outputType() const {
  return MemRefType::get({requests, positions, heads, pool.getFormat().getVDim()},
                         BFloat16Type::get(pool.getContext()));
}

KernelSignature mlir::dhs::getAttentionSignature(const SparseAttentionKernelConfig &config) {
  MLIRContext *context = config.pool.getContext();
  Type i8 = IntegerType::get(context, 8), i32 = IntegerType::get(context, 32),
       i64 = IntegerType::get(context, 64);
  int64_t B = config.requests, layers = config.pool.getLayers(),
          rowBytes = config.pool.getFormat().getRowBytes();
  auto selections = MemRefType::get({B, config.positions, config.selected}, i32);
  KernelSignature signature;
  signature.add(Role::Queries, config.queriesType());
  signature.add(Role::RowIds, selections);
  signature.add(Role::Slots, selections);
  if (config.staged) {
    signature.add(Role::Staging, MemRefType::get({B, config.stagingRows, layers, rowBytes}, i8));
    if (config.indexed)
      signature.add(Role::Remap, selections);
    if (config.overlapped)
      signature.add(Role::ReadyFlags,
                    MemRefType::get({B, config.stagingRows / kTensorCoreTileRows}, i32));
    signature.add(Role::HbmTier, getTierType(config.pool));
    // Overlapped: the tiles the attention takes are read from the host.
    if (config.overlapped) {
      signature.add(Role::HistoryStart, MemRefType::get({B}, i64));
      signature.add(Role::HistoryLen, MemRefType::get({B}, i32));
      signature.add(Role::HostTier, getTierType(config.pool));
    }
  } else {
    signature.add(Role::HistoryStart, MemRefType::get({B}, i64));
    signature.add(Role::HistoryLen, MemRefType::get({B}, i32));
    signature.add(Role::HbmTier, getTierType(config.pool));
    signature.add(Role::HostTier, getTierType(config.pool));
    if (config.writeBack) {
      signature.add(Role::WriteBack, selections);
      signature.add(Role::WriteBackRing, getTierType(config.pool));
    }
  }
  if (config.sharedPositions > 1 || config.unsharedRequests)
    signature.add(Role::SharedTiles, MemRefType::get({B}, i32));
  if (config.windowSize > 0) {
    signature.add(Role::WindowRing, MemRefType::get({B, config.windowRing, layers, rowBytes}, i8));
    signature.add(Role::WindowTokens, MemRefType::get({B}, i32));
  }
  signature.add(Role::Output, config.outputType());
  if (config.splits > 1)
    signature.add(Role::Partials, config.partialsType(context));
  if (config.hostRowRingTiles > 0)
    signature.add(Role::HostRowRing, config.hostRowRingType(context));
  signature.add(Role::Status, getStatusType(context));
  return signature;
}

bool mlir::dhs::supportsTensorCoreAttention(const SparseAttentionKernelConfig &config) {
  RowFormatAttrInterface format = config.pool.getFormat();
  return isa<MlaBf16Attr, MlaFp8Attr>(format) && format.getQKDim() == 576 &&
         format.getVDim() == 512 && config.groupHeads % kTensorCoreHeads == 0 &&
         config.selected % kTensorCoreTileRows == 0 && config.windowSize == 0;
}
