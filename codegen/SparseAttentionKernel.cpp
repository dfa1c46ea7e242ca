//===- SparseAttentionKernel.cpp - generate the sparse attention kernel ---===//
//
// The CUDA-core kernel of dhs.sparse_attention and dhs.attention: a warp per
// head, rows staged a tile at a time and folded into an online softmax
// (docs/compiler.md describes its three phases).
//
//===----------------------------------------------------------------------===//

#include "codegen/Kernels.h"

#include "codegen/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;

namespace {

/// Emits the body of one sparse attention kernel at the entry of its
/// gpu.func.
class SparseAttentionKernelEmitter : KernelBuilder {
public:
  SparseAttentionKernelEmitter(ImplicitLocOpBuilder &b, const SparseAttentionKernelConfig &config,
                               const KernelArguments &args)
      : KernelBuilder{b}, config(config), args(args) {}

  /// Emits the kernel's body: the selection tile by tile (classified,
  /// staged, folded into each head's softmax), then the output or the
  /// split's partials.
  void emit();

private:
  /// Loads one decoded key element of a staged row.
  Value loadTileElement(Value row, Value column) {
    return memref::LoadOp::create(b, tile, ValueRange{row, column});
  }

  /// Phase A: classifies the rows of the tile at selection index
  /// `tileStart` (each row's source and its token index there).
  void emitClassifyRows(Value tileStart);
  /// Classifies entry `k` >= K: the (k - K)-th token of the query's window
  /// (source 3 and its ring row), or nothing.
  SmallVector<Value> emitClassifyWindowRow(Value k);
  /// Phase B: stages the classified rows of this CTA's layer as f32 keys
  /// in shared memory.
  void emitStageRows();
  /// Stages one segment of every tile row: `chunks` 16-byte chunks from
  /// `firstChunk` on, decoded by `decode` into f32 elements from column
  /// `firstColumn` on.
  void
  emitStageSegment(int64_t firstChunk, int64_t chunks, int64_t elementsPerChunk,
                   int64_t firstColumn,
                   function_ref<Value(Value tier, Value where, Value chunk, Value bytes)> decode,
                   Value chunkBase = Value());
  /// Writing back: copies the chunks of the tile's host rows that no
  /// segment staged (an FP8 row's scales) from the host store into their
  /// ring entries.
  void emitWriteBackRest();
  /// Decodes 16 e4m3 bytes to f32 (exact, NaN for 0x7f/0xff).
  Value decodeE4M3(Value bytes);
  /// Phase C: folds the staged rows into each warp's head's online
  /// softmax; `state` is (running max, running sum, output slice...), the
  /// result the updated state.
  SmallVector<Value> emitComputeTile(ValueRange state);

  const SparseAttentionKernelConfig &config;
  const KernelArguments &args;

  // Kernel arguments.
  // In staged kernels `host` is the staging buffer seen as [B * N, layers,
  // row bytes], and there is no history.
  Value queries, rowIds, slots, historyStart, historyLen, hbm, host, output, status, stagingIndex,
      partials;
  // The sliding-window ring seen as one tier of B * R tokens, and each
  // request's raw token count.
  Value window, windowTokens;
  // Writing back: each selection's entry in the pool's write-back ring, and
  // the ring seen as a tier.
  Value writeBackEntries, writeBackRing;
  // Shared memory: the staged rows decoded to f32 keys [tileRows, qk_dim],
  // and per staged row its source (0 none, 1 HBM, 2 host, 3 window ring) and
  // its token index in that tier.
  Value tile, rowSource, rowIndex;
  // Writing back: per staged row its ring entry (-1: none, or not a host
  // row, or not this CTA's to write).
  Value rowEntry;
  // Per-thread values computed once.
  Value tid, warp, lane, request, position, head, kvHead;
  Value historyLength, historyBase, hbmRows, hostRows;
  // The request's raw tokens and the first token of this query's window
  // (i64, may be negative).
  Value windowTokenCount, windowFirst;
  SmallVector<Value> queryRegs;
  // Writing back: the [first, end) chunk ranges the segments staged.
  SmallVector<std::pair<int64_t, int64_t>> stagedChunks;
};

} // namespace

/// Phase A: threads [0, tileRows) classify the rows of the tile starting at
/// selection index `tileStart`.
void SparseAttentionKernelEmitter::emitClassifyRows(Value tileStart) {
  OpBuilder::InsertionGuard guard(b);
  Value isClassifier = cmpi(arith::CmpIPredicate::ult, tid, index(config.tileRows));
  auto classifier = scf::IfOp::create(b, isClassifier, /*withElse=*/false);
  b.setInsertionPoint(classifier.thenBlock()->getTerminator());

  Value k = arith::AddIOp::create(b, tileStart, tid);
  Value inRange = cmpi(arith::CmpIPredicate::ult, k, index(config.selected));
  // Past the selection come the window's tokens, then nothing.
  auto classified = scf::IfOp::create(b, TypeRange{b.getI32Type(), b.getI64Type()}, inRange,
                                      /*withElse=*/true);
  {
    OpBuilder::InsertionGuard elseGuard(b);
    b.setInsertionPointToStart(classified.elseBlock());
    if (config.windowSize > 0)
      scf::YieldOp::create(b, emitClassifyWindowRow(k));
    else
      scf::YieldOp::create(b, ValueRange{i32(0), i64(0)});
  }
  b.setInsertionPointToStart(classified.thenBlock());
  Value id = memref::LoadOp::create(b, rowIds, ValueRange{request, position, k});
  Value slot = memref::LoadOp::create(b, slots, ValueRange{request, position, k});
  Value trueValue = arith::ConstantIntOp::create(b, 1, 1);
  Value none = cmpi(arith::CmpIPredicate::eq, id, i32(-1));
  // Staged rows were checked against the history by their fetch.
  Value badRow = config.staged
                     ? cmpi(arith::CmpIPredicate::slt, id, i32(-1))
                     : arith::OrIOp::create(b, cmpi(arith::CmpIPredicate::slt, id, i32(-1)),
                                            cmpi(arith::CmpIPredicate::sge, id, historyLength))
                           .getResult();
  Value slot64 = arith::ExtSIOp::create(b, b.getI64Type(), slot);
  Value badSlot = arith::OrIOp::create(b, cmpi(arith::CmpIPredicate::slt, slot, i32(-1)),
                                       cmpi(arith::CmpIPredicate::sge, slot64, hbmRows));
  Value onHost = cmpi(arith::CmpIPredicate::eq, slot, i32(-1));
  // A missing row's place: the host store at history_start + id (fused), or
  // its staging row b * N + position (staged).
  Value hostRow, hostOutside;
  if (config.staged) {
    Value staged =
        config.indexed
            ? arith::ExtSIOp::create(
                  b, b.getI64Type(),
                  memref::LoadOp::create(b, stagingIndex, ValueRange{request, position, k}))
                  .getResult()
            : arith::IndexCastOp::create(
                  b, b.getI64Type(),
                  arith::AddIOp::create(
                      b, arith::MulIOp::create(b, position, index(config.selected)), k))
                  .getResult();
    hostOutside =
        arith::OrIOp::create(b, cmpi(arith::CmpIPredicate::slt, staged, i64(0)),
                             cmpi(arith::CmpIPredicate::sge, staged, i64(config.stagingRows)));
    hostRow = arith::AddIOp::create(
        b,
        arith::MulIOp::create(b, arith::IndexCastOp::create(b, b.getI64Type(), request),
                              i64(config.stagingRows)),
        staged);
  } else {
    hostRow = arith::AddIOp::create(b, historyBase, arith::ExtSIOp::create(b, b.getI64Type(), id));
    hostOutside = arith::OrIOp::create(b, cmpi(arith::CmpIPredicate::slt, hostRow, i64(0)),
                                       cmpi(arith::CmpIPredicate::sge, hostRow, hostRows));
  }
  // The host row is only checked for present rows with a valid id.
  Value idUsable = arith::XOrIOp::create(b, arith::OrIOp::create(b, none, badRow), trueValue);
  Value badHost = arith::AndIOp::create(b, arith::AndIOp::create(b, onHost, hostOutside), idUsable);
  Value bits = arith::OrIOp::create(
      b,
      arith::OrIOp::create(b, select(badRow, i32(abi::kStatusBadRowId), i32(0)),
                           select(badSlot, i32(abi::kStatusBadSlot), i32(0))),
      select(badHost, i32(config.staged ? abi::kStatusBadStagingIndex : abi::kStatusBadHostRow),
             i32(0)));
  Value failed = cmpi(arith::CmpIPredicate::ne, bits, i32(0));
  auto report = scf::IfOp::create(b, failed, /*withElse=*/false);
  {
    OpBuilder::InsertionGuard reportGuard(b);
    b.setInsertionPoint(report.thenBlock()->getTerminator());
    memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori, bits, status, ValueRange{index(0)});
  }
  Value usable = arith::AndIOp::create(b, arith::XOrIOp::create(b, none, trueValue),
                                       cmpi(arith::CmpIPredicate::eq, bits, i32(0)));
  Value source = select(usable, select(onHost, i32(2), i32(1)), i32(0));
  Value where = select(onHost, hostRow, slot64);
  scf::YieldOp::create(b, ValueRange{source, where});

  b.setInsertionPointAfter(classified);
  memref::StoreOp::create(b, classified.getResult(0), rowSource, ValueRange{tid});
  memref::StoreOp::create(b, classified.getResult(1), rowIndex, ValueRange{tid});
  if (config.writeBack) {
    // A host row's ring entry; the CTAs of a query's first head block write
    // (the others read the same rows).
    // (One value at a time: the IR's order must not depend on the host
    // compiler's order of evaluating arguments.)
    Value firstHeads = cmpi(arith::CmpIPredicate::eq, blockId(gpu::Dimension::y), index(0));
    Value fromHost = cmpi(arith::CmpIPredicate::eq, classified.getResult(0), i32(2));
    Value listedHostRow = arith::AndIOp::create(b, inRange, fromHost);
    Value writes = arith::AndIOp::create(b, listedHostRow, firstHeads);
    Value written =
        loadI32Or(writes, writeBackEntries, ValueRange{request, position, k}, /*fallback=*/-1);
    // An entry outside the ring is reported (a bad slot) and not written.
    Value outside = outsideRing(written, ringRows(writeBackRing));
    auto reportEntry = scf::IfOp::create(b, outside, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard reportGuard(b);
      b.setInsertionPoint(reportEntry.thenBlock()->getTerminator());
      memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori, i32(abi::kStatusBadSlot), status,
                                  ValueRange{index(0)});
    }
    memref::StoreOp::create(b, select(outside, i32(-1), written), rowEntry, ValueRange{tid});
  }
}

SmallVector<Value> SparseAttentionKernelEmitter::emitClassifyWindowRow(Value k) {
  Value j = arith::IndexCastOp::create(b, b.getI64Type(),
                                       arith::SubIOp::create(b, k, index(config.selected)));
  Value token = arith::AddIOp::create(b, windowFirst, j);
  Value inWindow =
      arith::AndIOp::create(b, cmpi(arith::CmpIPredicate::slt, j, i64(config.windowSize)),
                            cmpi(arith::CmpIPredicate::sge, token, i64(0)));
  // A negative token count is bad input; the first window entry reports it.
  Value badCount = cmpi(arith::CmpIPredicate::slt, windowTokenCount, i64(0));
  auto report = scf::IfOp::create(
      b, arith::AndIOp::create(b, badCount, cmpi(arith::CmpIPredicate::eq, j, i64(0))),
      /*withElse=*/false);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(report.thenBlock()->getTerminator());
    memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori, i32(abi::kStatusBadWindowTokens),
                                status, ValueRange{index(0)});
  }
  // Token p of request b lives in ring row b * R + p mod R (p >= 0 here).
  // (Built in sequence: the order of function arguments' evaluation differs
  // between compilers, and so would the IR.)
  Value inRing = arith::RemUIOp::create(b, token, i64(config.windowRing));
  Value ringBase = arith::MulIOp::create(b, arith::IndexCastOp::create(b, b.getI64Type(), request),
                                         i64(config.windowRing));
  Value ringRow = arith::AddIOp::create(b, ringBase, inRing);
  Value usable = arith::AndIOp::create(
      b, inWindow, arith::XOrIOp::create(b, badCount, arith::ConstantIntOp::create(b, 1, 1)));
  return {select(usable, i32(3), i32(0)), select(usable, ringRow, i64(0))};
}

/// Phase B: the CTA copies the classified rows of its layer, 16 bytes per
/// thread and load, and decodes them into f32 keys in shared memory.
void SparseAttentionKernelEmitter::emitStageRows() {
  RowFormatAttrInterface format = config.pool.getFormat();
  Type f32 = b.getF32Type();
  auto loadBytes = [&](Value tier, Value where, Value byteOffset, int64_t count, int64_t align) {
    return vector::LoadOp::create(b, VectorType::get({count}, b.getI8Type()), tier,
                                  ValueRange{where, index(config.layer), byteOffset},
                                  /*nontemporal=*/false, llvm::MaybeAlign(align));
  };
  // bf16 chunks: 8 elements, exact.
  auto decodeBf16 = [&](Value tier, Value where, Value chunk, Value bytes) {
    Value halves = vector::BitCastOp::create(b, VectorType::get({8}, b.getBF16Type()), bytes);
    return arith::ExtFOp::create(b, VectorType::get({8}, f32), halves).getResult();
  };
  if (isa<MlaBf16Attr>(format)) {
    emitStageSegment(0, format.getRowBytes() / kCopyBytes, 8, 0, decodeBf16);
    return;
  }
  if (auto gqa = dyn_cast<GqaAttr>(format)) {
    // The CTA's KV head: its keys into columns [0, D), its values into
    // [D, 2 D). Elements of 2 or 4 bytes, widened to f32.
    using Row = abi::GqaRow;
    abi::RowElement element = gqa.getRowElement();
    int64_t perChunk = kCopyBytes / abi::bytes(element);
    int64_t headChunks = Row::keyOffset(1, gqa.getHeadDim(), element) / kCopyBytes;
    auto decode = [&](Value, Value, Value, Value bytes) -> Value {
      Value elements =
          vector::BitCastOp::create(b, VectorType::get({perChunk}, gqa.getDtype()), bytes);
      if (gqa.getDtype().isF32())
        return elements;
      return arith::ExtFOp::create(b, VectorType::get({perChunk}, f32), elements);
    };
    Value keyBase = arith::MulIOp::create(b, kvHead, index(headChunks));
    emitStageSegment(0, headChunks, perChunk, 0, decode, keyBase);
    emitStageSegment(Row::valueOffset(gqa.getKvHeads(), 0, gqa.getHeadDim(), element) / kCopyBytes,
                     headChunks, perChunk, gqa.getHeadDim(), decode, keyBase);
    return;
  }
  // FP8 formats: 16 e4m3 dims a chunk, times the chunk's scale
  // (runtime/abi/Contract.h has the layouts).
  auto vec16 = VectorType::get({16}, f32);
  if (isa<MlaFp8Attr>(format)) {
    // The NoPE dims with one fp32 scale per kDimsPerScale, then the bf16
    // RoPE dims.
    using Row = abi::MlaFp8Row;
    auto decodeNope = [&](Value tier, Value where, Value chunk, Value bytes) {
      Value scaleByte = arith::AddIOp::create(
          b, index(Row::kScaleOffset),
          arith::MulIOp::create(
              b, arith::DivUIOp::create(b, chunk, index(Row::kDimsPerScale / kCopyBytes)),
              index(Row::kScaleBytes)));
      Value scaleBits = loadBytes(tier, where, scaleByte, 4, 4);
      Value scale = vector::ExtractOp::create(
          b, vector::BitCastOp::create(b, VectorType::get({1}, f32), scaleBits),
          ArrayRef<int64_t>{0});
      return arith::MulFOp::create(b, decodeE4M3(bytes), splat(vec16, scale)).getResult();
    };
    emitStageSegment(0, Row::kNopeDims / kCopyBytes, 16, 0, decodeNope);
    emitStageSegment(Row::kRopeOffset / kCopyBytes, 2 * Row::kRopeDims / kCopyBytes, 8,
                     Row::kNopeDims, decodeBf16);
    return;
  }
  // v41_fp8: one ue8m0 scale (2^(e-127)) per kDimsPerScale dims.
  using Row = abi::V41Fp8Row;
  auto decode = [&](Value tier, Value where, Value chunk, Value bytes) {
    Value scaleByte = arith::AddIOp::create(
        b, index(Row::kScaleOffset),
        arith::DivUIOp::create(b, chunk, index(Row::kDimsPerScale / kCopyBytes)));
    Value e =
        vector::ExtractOp::create(b, loadBytes(tier, where, scaleByte, 1, 1), ArrayRef<int64_t>{0});
    Value e32 = arith::ExtUIOp::create(b, b.getI32Type(), e);
    // 2^(e-127) has the f32 bits e << 23, except 2^-127 (a denormal) and
    // e = 255 (NaN).
    Value bits = select(cmpi(arith::CmpIPredicate::eq, e32, i32(0)), i32(0x00400000),
                        select(cmpi(arith::CmpIPredicate::eq, e32, i32(255)), i32(0x7fc00000),
                               arith::ShLIOp::create(b, e32, i32(23))));
    Value scale = arith::BitcastOp::create(b, f32, bits);
    return arith::MulFOp::create(b, decodeE4M3(bytes), splat(vec16, scale)).getResult();
  };
  emitStageSegment(0, Row::kDims / kCopyBytes, 16, 0, decode);
}

void SparseAttentionKernelEmitter::emitWriteBackRest() {
  OpBuilder::InsertionGuard guard(b);
  int64_t rowChunks = config.pool.getFormat().getRowBytes() / kCopyBytes;
  SmallVector<int64_t> rest;
  for (int64_t c = 0; c < rowChunks; ++c)
    if (llvm::none_of(stagedChunks,
                      [&](auto range) { return range.first <= c && c < range.second; }))
      rest.push_back(c);
  if (rest.empty())
    return;
  auto rawType = VectorType::get({kCopyBytes}, b.getI8Type());
  int64_t items = config.tileRows * static_cast<int64_t>(rest.size());
  auto loop = scf::ForOp::create(b, tid, index(items), index(config.block()[0]));
  b.setInsertionPoint(loop.getBody()->getTerminator());
  Value item = loop.getInductionVar();
  Value row = arith::DivUIOp::create(b, item, index(rest.size()));
  Value which = arith::RemUIOp::create(b, item, index(rest.size()));
  // The chunk: rest[which], as a chain of selects (a handful at most).
  Value chunk = index(rest.front());
  for (size_t i = 1; i < rest.size(); ++i) {
    Value isIt = cmpi(arith::CmpIPredicate::eq, which, index(i));
    chunk = select(isIt, index(rest[i]), chunk);
  }
  Value entry = memref::LoadOp::create(b, rowEntry, ValueRange{row});
  auto copy = scf::IfOp::create(b, cmpi(arith::CmpIPredicate::sge, entry, i32(0)),
                                /*withElse=*/false);
  b.setInsertionPoint(copy.thenBlock()->getTerminator());
  Value where = arith::IndexCastOp::create(b, b.getIndexType(),
                                           memref::LoadOp::create(b, rowIndex, ValueRange{row}));
  Value byteOffset = arith::MulIOp::create(b, chunk, index(kCopyBytes));
  Value bytes =
      vector::LoadOp::create(b, rawType, host, ValueRange{where, index(config.layer), byteOffset},
                             /*nontemporal=*/false, llvm::MaybeAlign(kCopyBytes));
  vector::StoreOp::create(b, bytes, writeBackRing,
                          ValueRange{arith::IndexCastOp::create(b, b.getIndexType(), entry),
                                     index(config.layer), byteOffset},
                          /*nontemporal=*/false, llvm::MaybeAlign(kCopyBytes));
}

Value SparseAttentionKernelEmitter::decodeE4M3(Value bytes) {
  auto i32v = VectorType::get({16}, b.getI32Type());
  auto f32v = VectorType::get({16}, b.getF32Type());
  Value x = arith::ExtUIOp::create(b, i32v, bytes);
  Value sign =
      arith::AndIOp::create(b, arith::ShRUIOp::create(b, x, splatI32(i32v, 7)), splatI32(i32v, 1));
  Value exponent =
      arith::AndIOp::create(b, arith::ShRUIOp::create(b, x, splatI32(i32v, 3)), splatI32(i32v, 15));
  Value mantissa = arith::AndIOp::create(b, x, splatI32(i32v, 7));
  // Normal: (1 + m/8) 2^(e-7): f32 exponent e - 7 + 127, mantissa m << 20.
  Value normalBits = arith::OrIOp::create(
      b,
      arith::OrIOp::create(
          b, arith::ShLIOp::create(b, sign, splatI32(i32v, 31)),
          arith::ShLIOp::create(b, arith::AddIOp::create(b, exponent, splatI32(i32v, 120)),
                                splatI32(i32v, 23))),
      arith::ShLIOp::create(b, mantissa, splatI32(i32v, 20)));
  Value normal = arith::BitcastOp::create(b, f32v, normalBits);
  // Subnormal (e = 0): m/8 2^-6 = m 2^-9, with the sign.
  Value magnitude = arith::MulFOp::create(b, arith::UIToFPOp::create(b, f32v, mantissa),
                                          splat(f32v, f32(1.0 / 512.0)));
  Value negative = arith::CmpIOp::create(b, arith::CmpIPredicate::ne, sign, splatI32(i32v, 0));
  Value subnormal =
      arith::SelectOp::create(b, negative, arith::NegFOp::create(b, magnitude), magnitude);
  Value isSubnormal =
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq, exponent, splatI32(i32v, 0));
  Value value = arith::SelectOp::create(b, isSubnormal, subnormal, normal);
  // e4m3fn has no infinities; S.1111.111 is NaN.
  Value isNan = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                      arith::AndIOp::create(b, x, splatI32(i32v, 0x7f)),
                                      splatI32(i32v, 0x7f));
  return arith::SelectOp::create(b, isNan,
                                 splat(f32v, f32(std::numeric_limits<double>::quiet_NaN())), value);
}

void SparseAttentionKernelEmitter::emitStageSegment(
    int64_t firstChunk, int64_t chunks, int64_t elementsPerChunk, int64_t firstColumn,
    function_ref<Value(Value tier, Value where, Value chunk, Value bytes)> decode,
    Value chunkBase) {
  OpBuilder::InsertionGuard guard(b);
  int64_t threads = config.block()[0];
  auto rawType = VectorType::get({kCopyBytes}, b.getI8Type());
  auto decodedType = VectorType::get({elementsPerChunk}, b.getF32Type());
  if (!chunkBase)
    stagedChunks.push_back({firstChunk, firstChunk + chunks});

  auto copyLoop = scf::ForOp::create(b, tid, index(config.tileRows * chunks), index(threads));
  b.setInsertionPoint(copyLoop.getBody()->getTerminator());
  Value item = copyLoop.getInductionVar();
  Value row = arith::DivUIOp::create(b, item, index(chunks));
  Value inSegment = arith::RemUIOp::create(b, item, index(chunks));
  Value chunk = arith::AddIOp::create(b, index(firstChunk), inSegment);
  if (chunkBase)
    chunk = arith::AddIOp::create(b, chunkBase, chunk);
  Value source = memref::LoadOp::create(b, rowSource, ValueRange{row});
  Value where = arith::IndexCastOp::create(b, b.getIndexType(),
                                           memref::LoadOp::create(b, rowIndex, ValueRange{row}));
  Value present = cmpi(arith::CmpIPredicate::ne, source, i32(0));
  auto decoded = scf::IfOp::create(b, TypeRange{decodedType}, present,
                                   /*withElse=*/true);
  {
    OpBuilder::InsertionGuard thenGuard(b);
    b.setInsertionPointToStart(decoded.thenBlock());
    Value fromHost = cmpi(arith::CmpIPredicate::eq, source, i32(2));
    Value tier = select(fromHost, host, hbm);
    if (window)
      tier = select(cmpi(arith::CmpIPredicate::eq, source, i32(3)), window, tier);
    Value byteOffset = arith::MulIOp::create(b, chunk, index(kCopyBytes));
    Value bytes =
        vector::LoadOp::create(b, rawType, tier, ValueRange{where, index(config.layer), byteOffset},
                               /*nontemporal=*/false, llvm::MaybeAlign(kCopyBytes));
    if (config.writeBack) {
      // A host row's bytes also go to its ring entry, as read.
      Value entry = memref::LoadOp::create(b, rowEntry, ValueRange{row});
      auto store = scf::IfOp::create(b, cmpi(arith::CmpIPredicate::sge, entry, i32(0)),
                                     /*withElse=*/false);
      OpBuilder::InsertionGuard storeGuard(b);
      b.setInsertionPoint(store.thenBlock()->getTerminator());
      vector::StoreOp::create(b, bytes, writeBackRing,
                              ValueRange{arith::IndexCastOp::create(b, b.getIndexType(), entry),
                                         index(config.layer), byteOffset},
                              /*nontemporal=*/false, llvm::MaybeAlign(kCopyBytes));
    }
    scf::YieldOp::create(b, decode(tier, where, chunk, bytes));
    // Absent rows become zeros, so that a zero probability never meets
    // stale (possibly non-finite) shared memory.
    b.setInsertionPointToStart(decoded.elseBlock());
    Value zeros = arith::ConstantOp::create(
        b, decodedType, DenseElementsAttr::get(decodedType, b.getF32FloatAttr(0.0f)));
    scf::YieldOp::create(b, zeros);
  }
  Value column = arith::AddIOp::create(
      b, index(firstColumn), arith::MulIOp::create(b, inSegment, index(elementsPerChunk)));
  vector::StoreOp::create(b, decoded.getResult(0), tile, ValueRange{row, column},
                          /*nontemporal=*/false, llvm::MaybeAlign(16));
}

/// Phase C: one warp folds the staged rows, one at a time, into its head's
/// online softmax. `state` is (running max, running sum, output slice...) in
/// base-2 units; returns the updated state. The loop over rows stays rolled:
/// unrolled, the compiler hoists every row's loads and spills.
SmallVector<Value> SparseAttentionKernelEmitter::emitComputeTile(ValueRange state) {
  OpBuilder::InsertionGuard guard(b);
  int64_t qkPerLane = config.pool.getFormat().getQKDim() / kWarpSize;
  int64_t vPerLane = config.pool.getFormat().getVDim() / kWarpSize;
  // Scores in base 2: exp(x * scale) == exp2(x * scale * log2(e)).
  Value scoreScale = f32(static_cast<double>(config.softmaxScale) * M_LOG2E);
  Value negInf = f32(-std::numeric_limits<double>::infinity());

  auto rowLoop = scf::ForOp::create(b, index(0), index(config.tileRows), index(1), state);
  b.setInsertionPointToStart(rowLoop.getBody());
  Value row = rowLoop.getInductionVar();
  ValueRange carried = rowLoop.getRegionIterArgs();
  Value runningMax = carried[0];
  Value runningSum = carried[1];

  // Absent rows (and those past the selection) are skipped; the branch is
  // uniform across the CTA.
  Value present =
      cmpi(arith::CmpIPredicate::ne, memref::LoadOp::create(b, rowSource, ValueRange{row}), i32(0));
  auto fold = scf::IfOp::create(b, rowLoop.getResultTypes(), present,
                                /*withElse=*/true);
  {
    OpBuilder::InsertionGuard elseGuard(b);
    b.setInsertionPointToStart(fold.elseBlock());
    scf::YieldOp::create(b, carried);
  }
  b.setInsertionPointToStart(fold.thenBlock());
  Value dot = f32(0.0);
  for (int64_t j = 0; j < qkPerLane; ++j) {
    Value column = arith::AddIOp::create(b, lane, index(j * kWarpSize));
    dot = fma(queryRegs[j], loadTileElement(row, column), dot);
  }
  Value score = arith::MulFOp::create(b, warpSum(dot), scoreScale);
  Value newMax = arith::MaximumFOp::create(b, runningMax, score);
  // Rescale what was accumulated so far; while the max is -inf nothing was
  // (and exp2(-inf - -inf) would be NaN).
  Value hadRows = arith::CmpFOp::create(b, arith::CmpFPredicate::ONE, runningMax, negInf);
  Value alpha = select(hadRows, exp2(arith::SubFOp::create(b, runningMax, newMax)), f32(0.0));
  Value p = exp2(arith::SubFOp::create(b, score, newMax));
  SmallVector<Value> next{newMax, fma(runningSum, alpha, p)};
  for (int64_t j = 0; j < vPerLane; ++j) {
    Value column = arith::AddIOp::create(b, lane, index(config.valueColumn + j * kWarpSize));
    Value acc = arith::MulFOp::create(b, carried[2 + j], alpha);
    next.push_back(fma(p, loadTileElement(row, column), acc));
  }
  scf::YieldOp::create(b, next);

  b.setInsertionPointAfter(fold);
  scf::YieldOp::create(b, fold.getResults());
  return SmallVector<Value>(rowLoop.getResults());
}

void SparseAttentionKernelEmitter::emit() {
  queries = args[Role::Queries];
  rowIds = args[Role::RowIds];
  slots = args[Role::Slots];
  // Staged kernels read missing rows from the staging buffer, viewed as a
  // tier below.
  stagingIndex = args.lookup(Role::Remap);
  historyStart = args.lookup(Role::HistoryStart);
  historyLen = args.lookup(Role::HistoryLen);
  hbm = args[Role::HbmTier];
  host = args.lookup(Role::HostTier);
  window = args.lookup(Role::WindowRing);
  windowTokens = args.lookup(Role::WindowTokens);
  output = args[Role::Output];
  partials = args.lookup(Role::Partials);
  status = args[Role::Status];
  tile = args.workgroup(0);
  rowSource = args.workgroup(1);
  rowIndex = args.workgroup(2);
  if (config.writeBack) {
    writeBackEntries = args[Role::WriteBack];
    writeBackRing = args[Role::WriteBackRing];
    rowEntry = args.workgroup(3);
  }

  RowFormatAttrInterface format = config.pool.getFormat();
  tid = threadId();
  Value blockX = blockId();
  Value blockY = blockId(gpu::Dimension::y);
  warp = arith::DivUIOp::create(b, tid, index(kWarpSize));
  lane = arith::RemUIOp::create(b, tid, index(kWarpSize));
  request = arith::DivUIOp::create(b, blockX, index(config.positions));
  position = arith::RemUIOp::create(b, blockX, index(config.positions));
  head =
      arith::AddIOp::create(b, arith::MulIOp::create(b, blockY, index(config.headsPerBlock)), warp);
  // Every head of the CTA shares one KV head.
  kvHead = arith::DivUIOp::create(b, arith::MulIOp::create(b, blockY, index(config.headsPerBlock)),
                                  index(config.groupHeads));

  // A [B, N, layers, row bytes] buffer as one tier of B * N tokens.
  auto asTier = [&](Value buffer) -> Value {
    Value flat = memref::CollapseShapeOp::create(b, buffer,
                                                 ArrayRef<ReassociationIndices>{{0, 1}, {2}, {3}});
    auto flatType = cast<MemRefType>(flat.getType());
    return memref::CastOp::create(
        b,
        MemRefType::get({ShapedType::kDynamic, flatType.getDimSize(1), flatType.getDimSize(2)},
                        flatType.getElementType()),
        flat);
  };
  if (config.staged) {
    host = asTier(args[Role::Staging]);
  } else {
    historyLength = memref::LoadOp::create(b, historyLen, ValueRange{request});
    historyBase = memref::LoadOp::create(b, historyStart, ValueRange{request});
  }
  if (window) {
    window = asTier(window);
    // Query q of Q sees tokens [e - W, e), e = tokens - (Q - 1 - q).
    windowTokenCount = arith::ExtSIOp::create(
        b, b.getI64Type(), memref::LoadOp::create(b, windowTokens, ValueRange{request}));
    Value hidden = arith::IndexCastOp::create(
        b, b.getI64Type(), arith::SubIOp::create(b, index(config.positions - 1), position));
    windowFirst = arith::SubIOp::create(b, arith::SubIOp::create(b, windowTokenCount, hidden),
                                        i64(config.windowSize));
  }
  hbmRows = arith::IndexCastOp::create(b, b.getI64Type(), memref::DimOp::create(b, hbm, index(0)));
  hostRows =
      arith::IndexCastOp::create(b, b.getI64Type(), memref::DimOp::create(b, host, index(0)));

  // This lane's slice of its head's query: elements lane + 32 j.
  int64_t qkPerLane = format.getQKDim() / kWarpSize;
  for (int64_t j = 0; j < qkPerLane; ++j) {
    Value column = arith::AddIOp::create(b, lane, index(j * kWarpSize));
    Value q = memref::LoadOp::create(b, queries, ValueRange{request, position, head, column});
    queryRegs.push_back(arith::ExtFOp::create(b, b.getF32Type(), q));
  }

  int64_t vPerLane = format.getVDim() / kWarpSize;
  SmallVector<Value> init{f32(-std::numeric_limits<double>::infinity()), f32(0.0)};
  init.append(vPerLane, f32(0.0));

  // This CTA's entries: split z of [0, K + W).
  Value split = blockId(gpu::Dimension::z);
  Value first = arith::MulIOp::create(b, split, index(config.splitRows));
  Value end = arith::MinUIOp::create(b, arith::AddIOp::create(b, first, index(config.splitRows)),
                                     index(config.entries()));
  auto loop = scf::ForOp::create(b, first, end, index(config.tileRows), init);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    emitClassifyRows(loop.getInductionVar());
    gpu::BarrierOp::create(b);
    emitStageRows();
    if (config.writeBack)
      emitWriteBackRest();
    gpu::BarrierOp::create(b);
    SmallVector<Value> next = emitComputeTile(loop.getRegionIterArgs());
    // The next tile overwrites shared memory.
    gpu::BarrierOp::create(b);
    scf::YieldOp::create(b, next);
  }

  if (config.splits > 1) {
    // Unnormalized: the combine kernel merges the splits.
    for (int64_t j = 0; j < vPerLane; ++j) {
      Value column = arith::AddIOp::create(b, lane, index(2 + j * kWarpSize));
      memref::StoreOp::create(b, loop.getResult(2 + j), partials,
                              ValueRange{request, position, head, split, column});
    }
    Value leader = cmpi(arith::CmpIPredicate::eq, lane, index(0));
    auto write = scf::IfOp::create(b, leader, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(write.thenBlock()->getTerminator());
      for (int64_t i = 0; i < 2; ++i)
        memref::StoreOp::create(b, loop.getResult(i), partials,
                                ValueRange{request, position, head, split, index(i)});
    }
    gpu::ReturnOp::create(b);
    return;
  }
  // Normalize; a query without any valid row yields zeros.
  Value sum = loop.getResult(1);
  Value inverse = select(arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, sum, f32(0.0)),
                         arith::DivFOp::create(b, f32(1.0), sum), f32(0.0));
  for (int64_t j = 0; j < vPerLane; ++j) {
    Value column = arith::AddIOp::create(b, lane, index(j * kWarpSize));
    Value value = arith::MulFOp::create(b, loop.getResult(2 + j), inverse);
    Value rounded = arith::TruncFOp::create(b, b.getBF16Type(), value);
    memref::StoreOp::create(b, rounded, output, ValueRange{request, position, head, column});
  }
  gpu::ReturnOp::create(b);
}

KernelSpec mlir::dhs::getSparseAttentionKernel(const SparseAttentionKernelConfig &config) {
  MLIRContext *context = config.pool.getContext();
  KernelSpec spec{config.staged ? abi::LaunchKind::Attention : abi::LaunchKind::SparseAttention,
                  config.key()};
  spec.signature = getAttentionSignature(config);
  spec.geometry.grid = config.grid();
  spec.geometry.block = config.block();
  // Decoded keys of a tile, then each staged row's source and its index.
  spec.workgroup = {sharedBuffer({config.tileRows, config.tileColumns}, Float32Type::get(context)),
                    sharedBuffer(config.tileRows, IntegerType::get(context, 32)),
                    sharedBuffer(config.tileRows, IntegerType::get(context, 64))};
  // Writing back: each staged row's ring entry.
  if (config.writeBack)
    spec.workgroup.push_back(sharedBuffer(config.tileRows, IntegerType::get(context, 32)));
  spec.emitBody = [config](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    SparseAttentionKernelEmitter(b, config, args).emit();
  };
  return spec;
}
