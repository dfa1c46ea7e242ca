//===- RetrievalKernels.cpp - retrieval and residency kernels -------------===//
//
// The kernels of dhs.fetch, dhs.union_missing, dhs.resolve and
// dhs.place_rows (docs/compiler.md describes the union's hash table).
//
//===----------------------------------------------------------------------===//

#include "codegen/Kernels.h"

#include "codegen/HopperBuilder.h"
#include "codegen/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;

static constexpr int64_t kFetchThreads = 256;
/// 16-byte loads a lane copying a long token issues before it stores them.
static constexpr int64_t kFetchChunksInFlight = 6;
/// The cache line (and PCIe read) granularity the fetch aligns its loads to.
static constexpr int64_t kLineBytes = 128;
/// Lanes that copy a short token together in the compacted fetch, and the
/// most loads a lane issues for it (9: tokens up to 1152 bytes).
static constexpr int64_t kCompactLanesPerToken = 8;
static constexpr int64_t kCompactMaxLoads = 9;
/// The fetch that runs beside its attention (ready flags): this many CTAs
/// of 1024 threads, a warp per tile of 64 listed rows. Four SMs gather
/// scattered host rows at the full rate once there are tens of MB to move
/// (bench/NOTES.md, 2026-12-02), and leave the others to the attention (128
/// CTAs of an SM each at B = 128, 64 heads).
static constexpr int64_t kOverlapFetchBlocks = 4;
static constexpr int64_t kOverlapFetchThreads = 1024;
/// Tiles (items) a warp of that fetch lists and copies together, so that the
/// latency of listing is paid once for them.
static constexpr int64_t kOverlapItemsPerWarp = 4;
/// Requests the CTAs of that fetch copy from at a time (at most; a divisor
/// of the batch).
static constexpr int64_t kOverlapRequestsPerGroup = 16;
/// The compacting fetch's grid: about this many CTAs (4 an SM), each going
/// through chunks of kFetchThreads listed rows in turn. More CTAs put more
/// host reads in flight than PCIe serves: 128 x 2048 listed 656-byte rows,
/// 30% missing, went at 31 GB/s over 1024 CTAs and 46 GB/s over 512 or 128.
static constexpr int64_t kCompactBlocks = 512;
/// The most CTAs of a place_rows launch: two waves of 8 an SM on the H200.
static constexpr int64_t kPlaceBlocks = 2 * 8 * 132;
static constexpr int64_t kUnionThreads = 1024;
/// The largest union table (i32 slots) that fits in shared memory.
static constexpr int64_t kMaxUnionTable = 32768;

/// The step log's words (runtime/abi/Contract.h). The resolve kernel's block
/// counters are in the order of the header's counts.
using StepLog = abi::StepLogLayout;
static_assert(StepLog::kMisses == StepLog::kHits + 1 && StepLog::kEntries == StepLog::kHits + 2,
              "the step log's counts are consecutive words");

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(FetchOp op) {
  KVPoolType pool = op.getPool().getType();
  MemRefType rows = op.getRows().getType();
  MemRefType staging = op.getStaging().getType();
  if (!rows.hasStaticShape() || !staging.hasStaticShape())
    return op.emitOpError() << "needs static shapes to generate a kernel" << kStaticShapesHint;
  int64_t batch = rows.getDimSize(0);
  int64_t listed = rows.getNumElements() / batch;
  int64_t layers = pool.getLayers();
  int64_t rowBytes = pool.getFormat().getRowBytes();
  int64_t tokenChunks = layers * rowBytes / kCopyBytes;
  // A token's loads are shifted by its offset in its 128-byte line (up to
  // maxShift chunks) so that they cover whole lines.
  int64_t tokenBytes = tokenChunks * kCopyBytes;
  int64_t maxShift = tokenBytes % kLineBytes ? kLineBytes / kCopyBytes - 1 : 0;
  // A CTA compacts the missing ones of its 256 listed rows in shared
  // memory, then copies them: short tokens (a row of one layer: 656 or 1152
  // bytes) by 8 lanes each, 4 tokens a warp instruction, long ones (a layer
  // group's token) by a warp each.
  int64_t compactLoads = llvm::divideCeil(tokenChunks + maxShift, kCompactLanesPerToken);
  bool compact = compactLoads <= kCompactMaxLoads;
  int64_t chunks = llvm::divideCeil(listed, kFetchThreads);
  int64_t chunksPerBlock =
      std::min<int64_t>(chunks, llvm::divideCeil(batch * chunks, kCompactBlocks));
  int64_t rowsPerBlock = kFetchThreads * chunksPerBlock;

  bool withSlots = static_cast<bool>(op.getSlots());
  bool withWriteBack = static_cast<bool>(op.getWriteBack());
  // Beside the attention: tiles of 64 listed rows (a request's tiles in the
  // attention's order: k tile, then position), a flag each.
  Value readyArg = op.getReady();
  bool overlapped = static_cast<bool>(readyArg);
  int64_t positions = rows.getRank() == 3 ? rows.getDimSize(1) : 1;
  int64_t tilesPerPosition = listed / positions / kReadyTileRows;
  int64_t lanesPerToken = compact ? kCompactLanesPerToken : kWarpSize;
  int64_t tokenLoads = compact ? compactLoads : kFetchChunksInFlight;
  KernelSpec spec{abi::LaunchKind::Fetch, kernelKey(rows, withSlots, pool, staging) +
                                              (overlapped ? "_overlapped" : "") +
                                              (withWriteBack ? "_write_back" : "")};
  spec.signature.add(Role::RowIds, rows);
  if (withSlots)
    spec.signature.add(Role::Slots, op.getSlots().getType());
  if (withWriteBack)
    spec.signature.add(Role::WriteBack, op.getWriteBack().getType());
  spec.signature.add(Role::HistoryStart, op.getHistoryStart().getType());
  spec.signature.add(Role::HistoryLen, op.getHistoryLen().getType());
  spec.signature.add(Role::HostTier, getTierType(pool));
  if (withWriteBack)
    spec.signature.add(Role::WriteBackRing, getTierType(pool));
  spec.signature.add(Role::Staging, staging);
  if (overlapped)
    spec.signature.add(Role::ReadyFlags, readyArg.getType());
  spec.signature.add(Role::Status, getStatusType(op.getContext()));
  spec.geometry.grid = {batch, llvm::divideCeilSigned(listed, rowsPerBlock), 1};
  spec.geometry.block = {kFetchThreads, 1, 1};
  spec.geometry.dynamicSharedBytes = (kFetchThreads + 1) * 4;
  if (overlapped) {
    spec.geometry.grid = {kOverlapFetchBlocks, 1, 1};
    spec.geometry.block = {kOverlapFetchThreads, 1, 1};
    // Per warp, its items' missing rows and their host rows, and a count.
    spec.geometry.dynamicSharedBytes =
        kOverlapFetchThreads / kWarpSize * (kOverlapItemsPerWarp * kReadyTileRows * 12 + 4);
  }

  spec.emitBody = [=](ImplicitLocOpBuilder &ib, const KernelArguments &args) {
    Type i8 = ib.getI8Type();
    KernelBuilder kb{ib};
    Value rowsArg = args[Role::RowIds];
    Value slotsArg = args.lookup(Role::Slots);
    Value startArg = args[Role::HistoryStart];
    Value lenArg = args[Role::HistoryLen];
    Value host = args[Role::HostTier];
    Value stage = args[Role::Staging];
    Value status = args[Role::Status];
    // Lists of any rank are [B, N] to the kernel.
    auto flatten = [&](Value list) -> Value {
      if (cast<MemRefType>(list.getType()).getRank() == 2)
        return list;
      return memref::CollapseShapeOp::create(ib, list, ArrayRef<ReassociationIndices>{{0}, {1, 2}});
    };
    rowsArg = flatten(rowsArg);
    if (slotsArg)
      slotsArg = flatten(slotsArg);
    Value entriesArg = withWriteBack ? flatten(args[Role::WriteBack]) : Value();
    Value ring = args.lookup(Role::WriteBackRing);
    Value stageFlat = memref::CollapseShapeOp::create(
        ib, stage, ArrayRef<ReassociationIndices>{{0}, {1}, {2, 3}});

    Value tid = kb.threadId();
    // A CTA's request and rows (beside the attention, each tile's).
    Value request, firstRow, historyLength, historyBase;
    if (!overlapped) {
      request = kb.blockId();
      firstRow = arith::MulIOp::create(ib, kb.blockId(gpu::Dimension::y), kb.index(rowsPerBlock));
      historyLength = memref::LoadOp::create(ib, lenArg, ValueRange{request});
      historyBase = memref::LoadOp::create(ib, startArg, ValueRange{request});
    }
    Value hostRows = arith::IndexCastOp::create(ib, ib.getI64Type(),
                                                memref::DimOp::create(ib, host, kb.index(0)));
    auto chunkType = VectorType::get({kCopyBytes}, i8);

    // Listed row i of `request`: whether it is missing (listed and not
    // resident) and its id is good; a bad one is reported through the
    // status word where `reporter()` holds. `body` runs for a good missing
    // row with its host row.
    auto classify = [&](Value request, Value historyBase, Value historyLength, Value i,
                        function_ref<Value()> reporter, function_ref<void(Value)> body) {
      Value id = memref::LoadOp::create(ib, rowsArg, ValueRange{request, i});
      Value wanted = kb.cmpi(arith::CmpIPredicate::ne, id, kb.i32(-1));
      if (slotsArg) {
        Value slot = memref::LoadOp::create(ib, slotsArg, ValueRange{request, i});
        wanted =
            arith::AndIOp::create(ib, wanted, kb.cmpi(arith::CmpIPredicate::eq, slot, kb.i32(-1)));
      }
      Value hostRow =
          arith::AddIOp::create(ib, historyBase, arith::ExtSIOp::create(ib, ib.getI64Type(), id));
      Value badRow = arith::OrIOp::create(ib, kb.cmpi(arith::CmpIPredicate::slt, id, kb.i32(0)),
                                          kb.cmpi(arith::CmpIPredicate::sge, id, historyLength));
      Value badHost = kb.cmpi(arith::CmpIPredicate::sge, hostRow, hostRows);
      Value bits =
          arith::OrIOp::create(ib, kb.select(badRow, kb.i32(abi::kStatusBadRowId), kb.i32(0)),
                               kb.select(badHost, kb.i32(abi::kStatusBadHostRow), kb.i32(0)));
      Value ok = kb.cmpi(arith::CmpIPredicate::eq, bits, kb.i32(0));
      // Report once per row, copy only good rows.
      kb.ifThen(arith::AndIOp::create(
                    ib, wanted,
                    arith::AndIOp::create(
                        ib, arith::XOrIOp::create(ib, ok, arith::ConstantIntOp::create(ib, 1, 1)),
                        reporter())),
                [&] {
                  memref::AtomicRMWOp::create(ib, arith::AtomicRMWKind::ori, bits, status,
                                              ValueRange{kb.index(0)});
                });
      kb.ifThen(arith::AndIOp::create(ib, wanted, ok), [&] { body(hostRow); });
    };
    // The host row of listed row i of `request` (a good one).
    auto hostRowOf = [&](Value request, Value historyBase, Value i) -> Value {
      Value id = memref::LoadOp::create(ib, rowsArg, ValueRange{request, i});
      return arith::AddIOp::create(ib, historyBase,
                                   arith::ExtSIOp::create(ib, ib.getI64Type(), id));
    };
    // The fetch beside the attention reads the store through the
    // non-coherent path (ld.global.nc) at its address: 9-11% faster at 5-30%
    // missing (bench/NOTES.md, 2026-12-02).
    Value hostBase = overlapped ? HopperBuilder{ib}.getAddress(host) : Value();
    // Copies listed row i's token of `request` (host row `hostRow`) into staging: its
    // `lanes` lanes (this one is `lane` of them) read 16-byte chunks,
    // `inFlight` loads each before their stores. Shifted by the token's
    // offset in its 128-byte line, a load of the lanes covers whole lines
    // (a token of 2624 bytes starts mid-line every other token), so no line
    // is read by two loads. Lane slots before the token or past it load its
    // first or last chunk again (valid addresses) and store nothing.
    auto copyToken = [&](Value request, Value i, Value hostRow, Value lane, int64_t lanes,
                         int64_t inFlight) {
      Value hostIndex = kb.toIndex(hostRow);
      // Writing back: the token's ring entry, if it has one there. An entry
      // outside the ring is reported (a bad slot) by the token's first
      // lane and not written.
      // (One value at a time: the IR's order must not depend on the host
      // compiler's order of evaluating arguments.)
      Value inRing, ringEntry;
      if (ring) {
        Value entry = memref::LoadOp::create(ib, entriesArg, ValueRange{request, i});
        Value ringRows = kb.ringRows(ring);
        Value outside = kb.outsideRing(entry, ringRows);
        Value firstLane = kb.cmpi(arith::CmpIPredicate::eq, lane, kb.index(0));
        Value reports = arith::AndIOp::create(ib, outside, firstLane);
        kb.ifThen(reports, [&] {
          memref::AtomicRMWOp::create(ib, arith::AtomicRMWKind::ori, kb.i32(abi::kStatusBadSlot),
                                      status, ValueRange{kb.index(0)});
        });
        Value given = kb.cmpi(arith::CmpIPredicate::sge, entry, kb.i32(0));
        Value notPast = kb.cmpi(arith::CmpIPredicate::slt, entry, ringRows);
        inRing = arith::AndIOp::create(ib, given, notPast);
        ringEntry = kb.toIndex(entry);
      }
      Value shift = kb.index(0);
      if (maxShift)
        shift = kb.toIndex(arith::DivUIOp::create(
            ib,
            arith::RemUIOp::create(ib, arith::MulIOp::create(ib, hostRow, kb.i64(tokenBytes)),
                                   kb.i64(kLineBytes)),
            kb.i64(kCopyBytes)));
      int64_t span = lanes * inFlight;
      kb.forLoop(
          lane, kb.index(llvm::alignTo(tokenChunks + maxShift, span)), kb.index(span),
          [&](Value first) {
            SmallVector<Value> slots, data;
            for (int64_t j = 0; j < inFlight; ++j) {
              Value slot = arith::AddIOp::create(ib, first, kb.index(j * lanes));
              slots.push_back(slot);
              Value chunk = arith::MinUIOp::create(
                  ib, arith::SubIOp::create(ib, arith::MaxUIOp::create(ib, slot, shift), shift),
                  kb.index(tokenChunks - 1));
              Value byte = arith::MulIOp::create(ib, chunk, kb.index(kCopyBytes));
              if (hostBase) {
                HopperBuilder hb{ib};
                Value address = arith::AddIOp::create(
                    ib, hostBase,
                    arith::AddIOp::create(ib,
                                          arith::MulIOp::create(ib, hostRow, kb.i64(tokenBytes)),
                                          arith::IndexCastOp::create(ib, ib.getI64Type(), byte)));
                data.push_back(vector::BitCastOp::create(ib, chunkType, hb.loadGlobal16(address)));
                continue;
              }
              data.push_back(vector::LoadOp::create(
                  ib, chunkType, host,
                  ValueRange{hostIndex, arith::DivUIOp::create(ib, byte, kb.index(rowBytes)),
                             arith::RemUIOp::create(ib, byte, kb.index(rowBytes))},
                  /*nontemporal=*/false, llvm::MaybeAlign(kCopyBytes)));
            }
            for (int64_t j = 0; j < inFlight; ++j) {
              Value inToken = arith::AndIOp::create(
                  ib, kb.cmpi(arith::CmpIPredicate::uge, slots[j], shift),
                  kb.cmpi(arith::CmpIPredicate::ult, arith::SubIOp::create(ib, slots[j], shift),
                          kb.index(tokenChunks)));
              kb.ifThen(inToken, [&] {
                Value byte = arith::MulIOp::create(ib, arith::SubIOp::create(ib, slots[j], shift),
                                                   kb.index(kCopyBytes));
                vector::StoreOp::create(ib, data[j], stageFlat, ValueRange{request, i, byte},
                                        /*nontemporal=*/false, llvm::MaybeAlign(kCopyBytes));
                if (!ring)
                  return;
                kb.ifThen(inRing, [&] {
                  Value layer = arith::DivUIOp::create(ib, byte, kb.index(rowBytes));
                  Value offset = arith::RemUIOp::create(ib, byte, kb.index(rowBytes));
                  vector::StoreOp::create(ib, data[j], ring, ValueRange{ringEntry, layer, offset},
                                          /*nontemporal=*/false, llvm::MaybeAlign(kCopyBytes));
                });
              });
            }
          });
    };

    Value lane = kb.laneOf(tid);
    auto workgroup = gpu::AddressSpaceAttr::get(ib.getContext(), gpu::AddressSpace::Workgroup);
    auto dynamicShared = [&] {
      return gpu::DynamicSharedMemoryOp::create(
          ib, MemRefType::get({ShapedType::kDynamic}, i8, MemRefLayoutAttrInterface{}, workgroup));
    };
    if (overlapped) {
      // The attention (programmatic dependent launch) may start once every
      // CTA of the fetch runs: its waits for ready flags cannot block the
      // fetch.
      NVVM::GriddepcontrolOp::create(ib, NVVM::GridDepActionKind::launch_dependents);
      HopperBuilder hb{ib};
      constexpr int64_t warpsPerBlock = kOverlapFetchThreads / kWarpSize;
      constexpr int64_t listLength = kOverlapItemsPerWarp * kReadyTileRows;
      Value warp = kb.warpOf(tid);
      // Per warp: its listed rows' host rows (i64), then the rows (i32,
      // g * 64 + e) and their count.
      Value shared = dynamicShared();
      Value hostRowLists =
          memref::ViewOp::create(ib,
                                 MemRefType::get({warpsPerBlock, listLength}, ib.getI64Type(),
                                                 MemRefLayoutAttrInterface{}, workgroup),
                                 shared, kb.index(0), ValueRange{});
      Value lists =
          memref::ViewOp::create(ib,
                                 MemRefType::get({warpsPerBlock, listLength + 1}, ib.getI32Type(),
                                                 MemRefLayoutAttrInterface{}, workgroup),
                                 shared, kb.index(warpsPerBlock * listLength * 8), ValueRange{});
      Value countAt = kb.index(listLength);
      Value tokenLane = arith::RemUIOp::create(ib, lane, kb.index(lanesPerToken));
      Value tokenOfLane = arith::DivUIOp::create(ib, lane, kb.index(lanesPerToken));
      int64_t tokensPerWarp = kWarpSize / lanesPerToken;
      Value readyBase = hb.getAddress(args[Role::ReadyFlags]);
      Value firstLane = kb.cmpi(arith::CmpIPredicate::eq, lane, kb.index(0));
      // Items in groups of G requests, tile by tile: item n is request
      // (n / (G T)) G + n % G, its position and k tile (n % (G T)) / G (T
      // tiles a request; at B = 128 x 32 tiles a round of the CTAs' warps
      // is one group). Gathers spread over every request (the attention's
      // order) crossed PCIe at 29-31 GB/s, over 64 at 35-38, over 16 at
      // 42-47 (address translation, bench/NOTES.md 2026-12-02); the
      // attention's CTAs of the last groups wait longer.
      int64_t tilesPerRequest = tilesPerPosition * positions;
      int64_t group = kOverlapRequestsPerGroup;
      while (batch % group)
        --group;
      int64_t items = batch * tilesPerRequest;
      // Item n's request, the tile's first listed row and its flag's index,
      // and whether it exists.
      struct Item {
        Value request, first, flag, exists;
      };
      auto itemOf = [&](Value n) -> Item {
        Value inGroup = arith::RemUIOp::create(ib, n, kb.index(group * tilesPerRequest));
        Value request = arith::AddIOp::create(
            ib,
            arith::MulIOp::create(ib,
                                  arith::DivUIOp::create(ib, n, kb.index(group * tilesPerRequest)),
                                  kb.index(group)),
            arith::RemUIOp::create(ib, inGroup, kb.index(group)));
        Value rest = arith::DivUIOp::create(ib, inGroup, kb.index(group));
        Value position = arith::RemUIOp::create(ib, rest, kb.index(positions));
        Value kTile = arith::DivUIOp::create(ib, rest, kb.index(positions));
        Value tile = arith::AddIOp::create(
            ib, arith::MulIOp::create(ib, position, kb.index(tilesPerPosition)), kTile);
        Value flag = arith::AddIOp::create(
            ib, arith::MulIOp::create(ib, request, kb.index(tilesPerRequest)), tile);
        Value exists = kb.cmpi(arith::CmpIPredicate::ult, n, kb.index(items));
        return {request, arith::MulIOp::create(ib, tile, kb.index(kReadyTileRows)), flag, exists};
      };
      // Item n's flag (i64 address).
      auto flagOf = [&](const Item &item) -> Value {
        return arith::AddIOp::create(
            ib, readyBase,
            arith::MulIOp::create(ib, arith::IndexCastOp::create(ib, ib.getI64Type(), item.flag),
                                  kb.i64(4)));
      };
      // A warp takes kOverlapItemsPerWarp consecutive items at a time: lane
      // g claims item g (a tile the attention reached first is its own),
      // then the warp lists the claimed items' good missing rows (entry
      // g * 64 + e: row e of its item g), copies them, and marks the items
      // staged.
      Value globalWarp = arith::AddIOp::create(
          ib, arith::MulIOp::create(ib, kb.blockId(), kb.index(warpsPerBlock)), warp);
      kb.forLoop(
          arith::MulIOp::create(ib, globalWarp, kb.index(kOverlapItemsPerWarp)), kb.index(items),
          kb.index(kOverlapFetchBlocks * warpsPerBlock * kOverlapItemsPerWarp), [&](Value base) {
            kb.ifThen(firstLane, [&] {
              memref::StoreOp::create(ib, kb.i32(0), lists, ValueRange{warp, countAt});
            });
            Item mine = itemOf(arith::AddIOp::create(ib, base, lane));
            Value claimer = arith::AndIOp::create(
                ib, kb.cmpi(arith::CmpIPredicate::ult, lane, kb.index(kOverlapItemsPerWarp)),
                mine.exists);
            auto claim = scf::IfOp::create(ib, ib.getI32Type(), claimer, /*withElse=*/true);
            {
              OpBuilder::InsertionGuard guard(ib);
              ib.setInsertionPointToStart(claim.thenBlock());
              Value was =
                  hb.compareAndSwap(flagOf(mine), kb.i32(kTileUnclaimed), kb.i32(kTileStaging));
              Value unclaimed = kb.cmpi(arith::CmpIPredicate::eq, was, kb.i32(kTileUnclaimed));
              scf::YieldOp::create(
                  ib, ValueRange{arith::ExtUIOp::create(ib, ib.getI32Type(), unclaimed)});
              ib.setInsertionPointToStart(claim.elseBlock());
              scf::YieldOp::create(ib, kb.i32(0));
            }
            Value claimed = claim.getResult(0);
            NVVM::SyncWarpOp::create(ib, kb.i32(-1));
            for (int64_t g = 0; g < kOverlapItemsPerWarp; ++g) {
              Item item = itemOf(arith::AddIOp::create(ib, base, kb.index(g)));
              Value claimedItem =
                  kb.cmpi(arith::CmpIPredicate::ne,
                          gpu::ShuffleOp::create(ib, claimed, kb.i32(g), kb.i32(kWarpSize),
                                                 gpu::ShuffleMode::IDX)
                              .getShuffleResult(),
                          kb.i32(0));
              kb.ifThen(claimedItem, [&] {
                Value length = memref::LoadOp::create(ib, lenArg, ValueRange{item.request});
                Value start = memref::LoadOp::create(ib, startArg, ValueRange{item.request});
                for (int64_t half = 0; half < kReadyTileRows / kWarpSize; ++half) {
                  Value entry = arith::AddIOp::create(ib, lane, kb.index(half * kWarpSize));
                  classify(
                      item.request, start, length, arith::AddIOp::create(ib, item.first, entry),
                      [&]() -> Value { return arith::ConstantIntOp::create(ib, 1, 1); },
                      [&](Value hostRow) {
                        Value at = kb.toIndex(
                            memref::AtomicRMWOp::create(ib, arith::AtomicRMWKind::addi, kb.i32(1),
                                                        lists, ValueRange{warp, countAt}));
                        memref::StoreOp::create(
                            ib,
                            arith::IndexCastOp::create(
                                ib, ib.getI32Type(),
                                arith::AddIOp::create(ib, entry, kb.index(g * kReadyTileRows))),
                            lists, ValueRange{warp, at});
                        memref::StoreOp::create(ib, hostRow, hostRowLists, ValueRange{warp, at});
                      });
                }
              });
            }
            NVVM::SyncWarpOp::create(ib, kb.i32(-1));
            Value count = kb.toIndex(memref::LoadOp::create(ib, lists, ValueRange{warp, countAt}));
            kb.forLoop(tokenOfLane, count, kb.index(tokensPerWarp), [&](Value j) {
              Value entry = kb.toIndex(memref::LoadOp::create(ib, lists, ValueRange{warp, j}));
              Item item = itemOf(arith::AddIOp::create(
                  ib, base, arith::DivUIOp::create(ib, entry, kb.index(kReadyTileRows))));
              Value i = arith::AddIOp::create(
                  ib, item.first, arith::RemUIOp::create(ib, entry, kb.index(kReadyTileRows)));
              copyToken(item.request, i,
                        memref::LoadOp::create(ib, hostRowLists, ValueRange{warp, j}), tokenLane,
                        lanesPerToken, tokenLoads);
            });
            // The warp's copies happen before each flag: a warp barrier,
            // then lane g marks its claimed item staged (release is
            // cumulative).
            NVVM::SyncWarpOp::create(ib, kb.i32(-1));
            kb.ifThen(kb.cmpi(arith::CmpIPredicate::ne, claimed, kb.i32(0)),
                      [&] { hb.storeRelease(flagOf(mine), kb.i32(kTileStaged)); });
          });
      gpu::ReturnOp::create(ib);
      return;
    }
    // Compacted, per chunk of 256 listed rows: thread t classifies its row
    // and appends a good missing one to the block's list in shared memory
    // (its count after the list); then each warp copies 4 short tokens at a
    // time, 8 lanes a token, so one load instruction reads 128 contiguous
    // bytes of 4 tokens (scattered host rows cross PCIe at 44-47 GB/s so,
    // against 29-33 GB/s for 64-byte pieces of 8 rows: bench/NOTES.md), or
    // one long token. (Long tokens had a form of their own, a CTA for every
    // 16 listed rows and a warp per row straight from the list: the same
    // 49-50.5 GB/s at 5-20% missing, bench/NOTES.md 2026-12-03.)
    Value shared = dynamicShared();
    Value list = memref::ViewOp::create(ib,
                                        MemRefType::get({kFetchThreads + 1}, ib.getI32Type(),
                                                        MemRefLayoutAttrInterface{}, workgroup),
                                        shared, kb.index(0), ValueRange{});
    Value countAt = kb.index(kFetchThreads);
    const int64_t tokensPerWarp = kWarpSize / lanesPerToken;
    Value tokenLane = arith::RemUIOp::create(ib, lane, kb.index(lanesPerToken));
    Value tokenOfLane = arith::DivUIOp::create(ib, lane, kb.index(lanesPerToken));
    // The block's chunks of 256 listed rows, one after the other.
    kb.forLoop(kb.index(0), kb.index(chunksPerBlock), kb.index(1), [&](Value chunk) {
      Value chunkFirst = arith::AddIOp::create(
          ib, firstRow, arith::MulIOp::create(ib, chunk, kb.index(kFetchThreads)));
      kb.ifThen(kb.cmpi(arith::CmpIPredicate::eq, tid, kb.index(0)),
                [&] { memref::StoreOp::create(ib, kb.i32(0), list, ValueRange{countAt}); });
      gpu::BarrierOp::create(ib);
      Value mine = arith::AddIOp::create(ib, chunkFirst, tid);
      kb.ifThen(kb.cmpi(arith::CmpIPredicate::ult, mine, kb.index(listed)), [&] {
        classify(
            request, historyBase, historyLength, mine,
            [&]() -> Value { return arith::ConstantIntOp::create(ib, 1, 1); },
            [&](Value) {
              Value at = memref::AtomicRMWOp::create(ib, arith::AtomicRMWKind::addi, kb.i32(1),
                                                     list, ValueRange{countAt});
              memref::StoreOp::create(ib, arith::IndexCastOp::create(ib, ib.getI32Type(), tid),
                                      list, ValueRange{kb.toIndex(at)});
            });
      });
      gpu::BarrierOp::create(ib);
      Value count = kb.toIndex(memref::LoadOp::create(ib, list, ValueRange{countAt}));
      kb.forLoop(arith::MulIOp::create(ib, kb.warpOf(tid), kb.index(tokensPerWarp)), count,
                 kb.index(kFetchThreads / kWarpSize * tokensPerWarp), [&](Value first) {
                   Value entry = arith::AddIOp::create(ib, first, tokenOfLane);
                   kb.ifThen(kb.cmpi(arith::CmpIPredicate::ult, entry, count), [&] {
                     Value i = arith::AddIOp::create(
                         ib, chunkFirst,
                         kb.toIndex(memref::LoadOp::create(ib, list, ValueRange{entry})));
                     copyToken(request, i, hostRowOf(request, historyBase, i), tokenLane,
                               lanesPerToken, tokenLoads);
                   });
                 });
      // (Every warp is done with the list before the next chunk resets it.)
      gpu::BarrierOp::create(ib);
    });
    gpu::ReturnOp::create(ib);
  };
  return spec;
}

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(PlaceRowsOp op) {
  KVPoolType pool = op.getPool().getType();
  MemRefType rows = op.getRows().getType();
  if (!rows.hasStaticShape())
    return op.emitOpError() << "needs static shapes to generate a kernel" << kStaticShapesHint;
  int64_t placed = rows.getDimSize(0);
  int64_t layers = pool.getLayers();
  int64_t rowBytes = pool.getFormat().getRowBytes();
  int64_t tokenChunks = layers * rowBytes / kCopyBytes;

  bool withSources = static_cast<bool>(op.getSources());
  KernelSpec spec{abi::LaunchKind::PlaceRows,
                  kernelKey(rows, pool.getFormat(), layers) + (withSources ? "_sources" : "")};
  MLIRContext *context = op.getContext();
  spec.signature.add(Role::HbmTier, getTierType(pool));
  spec.signature.add(Role::HostTier, getTierType(pool));
  spec.signature.add(Role::ResidencyMap, getResidencyMapType(context));
  spec.signature.add(Role::PlaceRows, rows);
  spec.signature.add(Role::PlaceSlots, op.getSlots().getType());
  if (withSources) {
    spec.signature.add(Role::PlaceSources, op.getSources().getType());
    spec.signature.add(Role::WriteBackRing, getTierType(pool));
  }
  spec.signature.add(Role::ReplacementState, getReplacementStateType(context));
  spec.signature.add(Role::StepLog, getStepLogType(context));
  spec.signature.add(Role::Status, getStatusType(context));
  // A warp per list entry, up to kPlaceBlocks CTAs that stride over the
  // rest: a list sized for every promotion a step could make (524288
  // entries at B=128 x top-2048) holds few (-1 past them), so an empty entry
  // costs one load a warp, not one a 16-byte chunk (a thread a chunk read
  // each entry 41 times for one-layer FP8 tokens: 13 us a launch for 2.8k
  // rows, 137 GB/s, in the thirty-sixth session's steady state).
  constexpr int64_t warpsPerBlock = kFetchThreads / kWarpSize;
  const int64_t blocks =
      std::min<int64_t>(llvm::divideCeilSigned(placed, warpsPerBlock), kPlaceBlocks);
  spec.geometry.grid = {blocks, 1, 1};
  spec.geometry.block = {kFetchThreads, 1, 1};

  spec.emitBody = [=](ImplicitLocOpBuilder &ib, const KernelArguments &args) {
    Type i8 = ib.getI8Type();
    KernelBuilder kb{ib};
    Value hbm = args[Role::HbmTier], host = args[Role::HostTier], map = args[Role::ResidencyMap],
          rowsArg = args[Role::PlaceRows], slotsArg = args[Role::PlaceSlots],
          recency = args[Role::ReplacementState], log = args[Role::StepLog],
          status = args[Role::Status];
    Value lane = kb.laneOf(kb.threadId());
    Value firstEntry =
        arith::AddIOp::create(ib, arith::MulIOp::create(ib, kb.blockId(), kb.index(warpsPerBlock)),
                              kb.warpOf(kb.threadId()));
    Value hostRows = arith::IndexCastOp::create(ib, ib.getI64Type(),
                                                memref::DimOp::create(ib, host, kb.index(0)));
    Value hbmSlots = arith::IndexCastOp::create(ib, ib.getI64Type(),
                                                memref::DimOp::create(ib, hbm, kb.index(0)));
    Value mapRows = arith::IndexCastOp::create(ib, ib.getI64Type(),
                                               memref::DimOp::create(ib, map, kb.index(0)));
    Value recencySlots = arith::IndexCastOp::create(
        ib, ib.getI64Type(), memref::DimOp::create(ib, recency, kb.index(0)));
    Value logWords = memref::DimOp::create(ib, log, kb.index(0));
    auto chunkType = VectorType::get({kCopyBytes}, i8);
    // With sources: the write-back ring and its entries.
    Value ring, ringRows;
    if (withSources) {
      ring = args[Role::WriteBackRing];
      ringRows = kb.ringRows(ring);
    }

    kb.forLoop(firstEntry, kb.index(placed), kb.index(blocks * warpsPerBlock), [&](Value i) {
      // (Every lane reads the entry: one broadcast load a warp.)
      Value row = memref::LoadOp::create(ib, rowsArg, ValueRange{i});
      Value slot = memref::LoadOp::create(ib, slotsArg, ValueRange{i});
      Value slot64 = arith::ExtSIOp::create(ib, ib.getI64Type(), slot);
      Value listed = kb.cmpi(arith::CmpIPredicate::sge, row, kb.i64(0));
      Value badHost = arith::OrIOp::create(ib, kb.cmpi(arith::CmpIPredicate::sge, row, hostRows),
                                           kb.cmpi(arith::CmpIPredicate::sge, row, mapRows));
      Value badSlot = arith::OrIOp::create(
          ib, kb.cmpi(arith::CmpIPredicate::slt, slot, kb.i32(-1)),
          arith::OrIOp::create(ib, kb.cmpi(arith::CmpIPredicate::sge, slot64, hbmSlots),
                               kb.cmpi(arith::CmpIPredicate::sge, slot64, recencySlots)));
      // The row's ring entry (-1: the host store); one outside the ring is
      // a bad slot too.
      Value source = kb.i32(-1);
      if (withSources) {
        source = memref::LoadOp::create(ib, args[Role::PlaceSources], ValueRange{i});
        badSlot = arith::OrIOp::create(ib, badSlot, kb.outsideRing(source, ringRows));
      }
      Value bits =
          arith::OrIOp::create(ib, kb.select(badHost, kb.i32(abi::kStatusBadHostRow), kb.i32(0)),
                               kb.select(badSlot, kb.i32(abi::kStatusBadSlot), kb.i32(0)));
      Value ok = kb.cmpi(arith::CmpIPredicate::eq, bits, kb.i32(0));
      Value first = kb.cmpi(arith::CmpIPredicate::eq, lane, kb.index(0));
      // Lane 0 reports bad input, or records the row's slot.
      kb.ifThen(arith::AndIOp::create(ib, listed, first), [&] {
        kb.ifThen(arith::XOrIOp::create(ib, ok, arith::ConstantIntOp::create(ib, 1, 1)), [&] {
          memref::AtomicRMWOp::create(ib, arith::AtomicRMWKind::ori, bits, status,
                                      ValueRange{kb.index(0)});
        });
        kb.ifThen(ok, [&] { memref::StoreOp::create(ib, slot, map, ValueRange{kb.toIndex(row)}); });
        // A filled slot's replacement state starts at [step, 0] (nothing is
        // stamped without a log to read the step from).
        Value stamped = arith::AndIOp::create(
            ib, arith::AndIOp::create(ib, ok, kb.cmpi(arith::CmpIPredicate::sge, slot, kb.i32(0))),
            kb.cmpi(arith::CmpIPredicate::ne, logWords, kb.index(0)));
        kb.ifThen(stamped, [&] {
          Value step = memref::LoadOp::create(ib, log, ValueRange{kb.index(StepLog::kStep)});
          memref::StoreOp::create(ib, step, recency, ValueRange{kb.toIndex(slot64), kb.index(0)});
          memref::StoreOp::create(ib, kb.i32(0), recency,
                                  ValueRange{kb.toIndex(slot64), kb.index(1)});
        });
      });
      Value copies = arith::AndIOp::create(ib, arith::AndIOp::create(ib, listed, ok),
                                           kb.cmpi(arith::CmpIPredicate::sge, slot, kb.i32(0)));
      // The lanes copy the token's chunks, consecutive lanes consecutive
      // chunks.
      kb.ifThen(copies, [&] {
        kb.forLoop(lane, kb.index(tokenChunks), kb.index(kWarpSize), [&](Value chunk) {
          Value byte = arith::MulIOp::create(ib, chunk, kb.index(kCopyBytes));
          Value layer = arith::DivUIOp::create(ib, byte, kb.index(rowBytes));
          Value column = arith::RemUIOp::create(ib, byte, kb.index(rowBytes));
          auto load = [&](Value tier, Value token) -> Value {
            return vector::LoadOp::create(ib, chunkType, tier, ValueRange{token, layer, column},
                                          /*nontemporal=*/false, llvm::MaybeAlign(kCopyBytes));
          };
          Value data;
          if (withSources) {
            auto read = scf::IfOp::create(ib, TypeRange{chunkType},
                                          kb.cmpi(arith::CmpIPredicate::sge, source, kb.i32(0)),
                                          /*withElse=*/true);
            OpBuilder::InsertionGuard guard(ib);
            ib.setInsertionPointToStart(read.thenBlock());
            scf::YieldOp::create(ib, load(ring, kb.toIndex(source)));
            ib.setInsertionPointToStart(read.elseBlock());
            scf::YieldOp::create(ib, load(host, kb.toIndex(row)));
            data = read.getResult(0);
          } else {
            data = load(host, kb.toIndex(row));
          }
          vector::StoreOp::create(ib, data, hbm, ValueRange{kb.toIndex(slot64), layer, column},
                                  /*nontemporal=*/false, llvm::MaybeAlign(kCopyBytes));
        });
      });
    });
    gpu::ReturnOp::create(ib);
  };
  return spec;
}

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(UnionMissingOp op) {
  MemRefType rows = op.getRows().getType();
  if (!rows.hasStaticShape() || !op.getMissing().getType().hasStaticShape())
    return op.emitOpError() << "needs static shapes to generate a kernel" << kStaticShapesHint;
  int64_t batch = rows.getDimSize(0), positions = rows.getDimSize(1), selected = rows.getDimSize(2);
  int64_t entries = positions * selected;
  // At most half full: probes stay short.
  int64_t table = llvm::PowerOf2Ceil(2 * entries);
  if (table > kMaxUnionTable)
    return op.emitOpError() << "unions up to " << kMaxUnionTable / 2
                            << " selections per request in shared memory, "
                               "got "
                            << entries;
  int64_t tableBits = llvm::Log2_64(table);
  int64_t room = op.getMissing().getType().getDimSize(1);
  Location loc = op.getLoc();

  bool withSources = static_cast<bool>(op.getSources());
  KernelSpec spec{abi::LaunchKind::UnionMissing,
                  kernelKey(rows, op.getMissing().getType()) + (withSources ? "_sources" : "")};
  spec.signature.add(Role::RowIds, rows);
  spec.signature.add(Role::Slots, op.getSlots().getType());
  spec.signature.add(Role::Missing, op.getMissing().getType());
  spec.signature.add(Role::Remap, op.getRemap().getType());
  if (withSources) {
    spec.signature.add(Role::WriteBack, op.getWriteBack().getType());
    spec.signature.add(Role::MissingSources, op.getSources().getType());
  }
  spec.geometry.grid = {batch, 1, 1};
  spec.geometry.block = {kUnionThreads, 1, 1};
  spec.geometry.dynamicSharedBytes = table * 4;

  spec.emitBody = [=](ImplicitLocOpBuilder &ib, const KernelArguments &args) {
    KernelBuilder kb{ib};
    auto flatten = [&](Value list) -> Value {
      return memref::CollapseShapeOp::create(ib, list, ArrayRef<ReassociationIndices>{{0}, {1, 2}});
    };
    Value rowsFlat = flatten(args[Role::RowIds]);
    Value slotsFlat = flatten(args[Role::Slots]);
    Value missing = args[Role::Missing];
    Value remapFlat = flatten(args[Role::Remap]);
    Value writeBackFlat = withSources ? flatten(args[Role::WriteBack]) : Value();
    Value sources = withSources ? args[Role::MissingSources] : Value();

    auto workgroup = gpu::AddressSpaceAttr::get(ib.getContext(), gpu::AddressSpace::Workgroup);
    Value shared = gpu::DynamicSharedMemoryOp::create(
        ib, MemRefType::get({ShapedType::kDynamic}, ib.getI8Type(), MemRefLayoutAttrInterface{},
                            workgroup));
    Value slotsOfTable = memref::ViewOp::create(
        ib, MemRefType::get({table}, ib.getI32Type(), MemRefLayoutAttrInterface{}, workgroup),
        shared, kb.index(0), ValueRange{});

    Value tid = kb.threadId();
    Value request = kb.blockId();
    Value threads = kb.index(kUnionThreads);
    Value mask = kb.index(table - 1);
    auto hashOf = [&](Value id) {
      // Fibonacci hashing: the top bits of id * 2^32 / phi.
      Value product = arith::MulIOp::create(ib, id, kb.i32(-1640531535));
      return kb.toIndex(arith::ShRUIOp::create(ib, product, kb.i32(32 - tableBits)));
    };
    auto isMissing = [&](Value id, Value slot) {
      return arith::AndIOp::create(ib, kb.cmpi(arith::CmpIPredicate::ne, id, kb.i32(-1)),
                                   kb.cmpi(arith::CmpIPredicate::eq, slot, kb.i32(-1)));
    };
    /// True when table entry `owner` (a flat position or -1) holds row `id`.
    auto holds = [&](Value owner, Value id) {
      Value clamped =
          kb.select(kb.cmpi(arith::CmpIPredicate::eq, owner, kb.i32(-1)), kb.i32(0), owner);
      Value ownerRow =
          memref::LoadOp::create(ib, rowsFlat, ValueRange{request, kb.toIndex(clamped)});
      return arith::AndIOp::create(ib, kb.cmpi(arith::CmpIPredicate::ne, owner, kb.i32(-1)),
                                   kb.cmpi(arith::CmpIPredicate::eq, ownerRow, id));
    };
    /// Probes from the row's hash until `found(slot)` holds; returns the slot.
    auto probe = [&](Value id, function_ref<Value(Value slot)> found) -> Value {
      auto loop = scf::WhileOp::create(ib, TypeRange{ib.getIndexType()}, ValueRange{hashOf(id)});
      {
        OpBuilder::InsertionGuard guard(ib);
        Block *before = ib.createBlock(&loop.getBefore(), {}, {ib.getIndexType()}, {loc});
        Value slot = before->getArgument(0);
        Value done = found(slot);
        Value nextSlot =
            arith::AndIOp::create(ib, arith::AddIOp::create(ib, slot, kb.index(1)), mask);
        scf::ConditionOp::create(
            ib, arith::XOrIOp::create(ib, done, arith::ConstantIntOp::create(ib, 1, 1)),
            ValueRange{kb.select(done, slot, nextSlot)});
        Block *after = ib.createBlock(&loop.getAfter(), {}, {ib.getIndexType()}, {loc});
        scf::YieldOp::create(ib, after->getArgument(0));
      }
      return loop.getResult(0);
    };

    // 1. An empty table.
    kb.forLoop(tid, kb.index(table), threads, [&](Value i) {
      memref::StoreOp::create(ib, kb.i32(-1), slotsOfTable, ValueRange{i});
    });
    gpu::BarrierOp::create(ib);
    // 2. Every missing selection claims its row.
    kb.forLoop(tid, kb.index(entries), threads, [&](Value i) {
      Value id = memref::LoadOp::create(ib, rowsFlat, ValueRange{request, i});
      Value slot = memref::LoadOp::create(ib, slotsFlat, ValueRange{request, i});
      kb.ifThen(isMissing(id, slot), [&] {
        Value self = arith::IndexCastOp::create(ib, ib.getI32Type(), i);
        probe(id, [&](Value at) {
          auto cas = memref::GenericAtomicRMWOp::create(ib, slotsOfTable, ValueRange{at});
          {
            OpBuilder::InsertionGuard guard(ib);
            ib.setInsertionPointToStart(cas.getBody());
            Value current = cas.getCurrentValue();
            memref::AtomicYieldOp::create(
                ib,
                kb.select(kb.cmpi(arith::CmpIPredicate::eq, current, kb.i32(-1)), self, current));
          }
          Value previous = cas.getResult();
          return arith::OrIOp::create(ib, kb.cmpi(arith::CmpIPredicate::eq, previous, kb.i32(-1)),
                                      holds(previous, id));
        });
      });
    });
    gpu::BarrierOp::create(ib);
    // 3. Owners list their row; every missing selection points at its owner.
    kb.forLoop(tid, kb.index(entries), threads, [&](Value i) {
      Value id = memref::LoadOp::create(ib, rowsFlat, ValueRange{request, i});
      Value slot = memref::LoadOp::create(ib, slotsFlat, ValueRange{request, i});
      Value self = arith::IndexCastOp::create(ib, ib.getI32Type(), i);
      auto result =
          scf::IfOp::create(ib, TypeRange{ib.getI32Type()}, isMissing(id, slot), /*withElse=*/true);
      {
        OpBuilder::InsertionGuard guard(ib);
        ib.setInsertionPointToStart(result.thenBlock());
        Value at = probe(id, [&](Value at) {
          return holds(memref::LoadOp::create(ib, slotsOfTable, ValueRange{at}), id);
        });
        scf::YieldOp::create(ib,
                             memref::LoadOp::create(ib, slotsOfTable, ValueRange{at}).getResult());
        ib.setInsertionPointToStart(result.elseBlock());
        scf::YieldOp::create(ib, kb.i32(-1));
      }
      Value owner = result.getResult(0);
      memref::StoreOp::create(ib, owner, remapFlat, ValueRange{request, i});
      Value owns = kb.cmpi(arith::CmpIPredicate::eq, owner, self);
      memref::StoreOp::create(ib, kb.select(owns, id, kb.i32(-1)), missing, ValueRange{request, i});
      // The listed row's ring entry is its owner's (every selection of the
      // row reads the same bytes).
      if (withSources) {
        Value written = memref::LoadOp::create(ib, writeBackFlat, ValueRange{request, i});
        memref::StoreOp::create(ib, kb.select(owns, written, kb.i32(-1)), sources,
                                ValueRange{request, i});
      }
    });
    // Room past the selections (a longer list) holds no rows.
    if (room > entries)
      kb.forLoop(arith::AddIOp::create(ib, tid, kb.index(entries)), kb.index(room), threads,
                 [&](Value i) {
                   memref::StoreOp::create(ib, kb.i32(-1), missing, ValueRange{request, i});
                   if (withSources)
                     memref::StoreOp::create(ib, kb.i32(-1), sources, ValueRange{request, i});
                 });
    gpu::ReturnOp::create(ib);
  };
  return spec;
}

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(ResolveOp op) {
  MemRefType rows = op.getRows().getType();
  if (!rows.hasStaticShape())
    return op.emitOpError() << "needs static shapes to generate a kernel" << kStaticShapesHint;
  int64_t batch = rows.getDimSize(0), positions = rows.getDimSize(1), selected = rows.getDimSize(2);
  int64_t entries = rows.getNumElements();
  constexpr int64_t threads = 256;
  MLIRContext *context = op.getContext();

  bool withWriteBack = static_cast<bool>(op.getWriteBack());
  KernelSpec spec{abi::LaunchKind::Resolve, kernelKey(rows) + (withWriteBack ? "_write_back" : "")};
  spec.signature.add(Role::RowIds, rows);
  spec.signature.add(Role::ResidencyMap, getResidencyMapType(context));
  spec.signature.add(Role::HistoryStart, op.getHistoryStart().getType());
  spec.signature.add(Role::HistoryLen, op.getHistoryLen().getType());
  spec.signature.add(Role::Slots, op.getSlots().getType());
  if (withWriteBack) {
    spec.signature.add(Role::WriteBack, op.getWriteBack().getType());
    spec.signature.add(Role::WriteBackRing, getTierType(op.getPool().getType()));
  }
  spec.signature.add(Role::ReplacementState, getReplacementStateType(context));
  spec.signature.add(Role::StepLog, getStepLogType(context));
  spec.signature.add(Role::Status, getStatusType(context));
  spec.workgroup = {sharedBuffer(5, IntegerType::get(context, 32))};
  spec.geometry.grid = {batch * positions, llvm::divideCeilSigned(selected, threads), 1};
  spec.geometry.block = {threads, 1, 1};

  spec.emitBody = [=](ImplicitLocOpBuilder &ib, const KernelArguments &args) {
    Type i32 = ib.getI32Type();
    KernelBuilder kb{ib};
    Value rowsArg = args[Role::RowIds], mapArg = args[Role::ResidencyMap],
          startArg = args[Role::HistoryStart], lenArg = args[Role::HistoryLen],
          slotsArg = args[Role::Slots], recency = args[Role::ReplacementState],
          log = args[Role::StepLog], status = args[Role::Status];
    // Block counts: first hits, misses, valid selections; then the bases of
    // the block's hits and misses in the log.
    Value counts = args.workgroup(0);
    Value tid = kb.threadId();
    Value pair = kb.blockId();
    Value request = arith::DivUIOp::create(ib, pair, kb.index(positions));
    Value position = arith::RemUIOp::create(ib, pair, kb.index(positions));
    Value k = arith::AddIOp::create(
        ib, arith::MulIOp::create(ib, kb.blockId(gpu::Dimension::y), kb.index(threads)), tid);
    Value mapRows = arith::IndexCastOp::create(ib, ib.getI64Type(),
                                               memref::DimOp::create(ib, mapArg, kb.index(0)));
    Value isTrue = arith::ConstantIntOp::create(ib, 1, 1);
    Value isFalse = arith::ConstantIntOp::create(ib, 0, 1);
    auto negate = [&](Value v) { return arith::XOrIOp::create(ib, v, isTrue); };

    // 1. The slot of every selection (-1 past the last one, for the counts).
    Value listed = kb.cmpi(arith::CmpIPredicate::ult, k, kb.index(selected));
    Value kIn = kb.select(listed, k, kb.index(0));
    Value id =
        kb.select(listed, memref::LoadOp::create(ib, rowsArg, ValueRange{request, position, kIn}),
                  kb.i32(-1));
    Value length = memref::LoadOp::create(ib, lenArg, ValueRange{request});
    Value start = memref::LoadOp::create(ib, startArg, ValueRange{request});
    Value hostRow =
        arith::AddIOp::create(ib, start, arith::ExtSIOp::create(ib, ib.getI64Type(), id));
    Value none = kb.cmpi(arith::CmpIPredicate::eq, id, kb.i32(-1));
    // Valid ids lie in the history, and their host rows in the store.
    Value inside = arith::AndIOp::create(
        ib,
        arith::AndIOp::create(ib, kb.cmpi(arith::CmpIPredicate::sge, id, kb.i32(0)),
                              kb.cmpi(arith::CmpIPredicate::slt, id, length)),
        arith::AndIOp::create(ib, kb.cmpi(arith::CmpIPredicate::sge, hostRow, kb.i64(0)),
                              kb.cmpi(arith::CmpIPredicate::slt, hostRow, mapRows)));
    auto lookup = scf::IfOp::create(ib, TypeRange{i32}, inside, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(ib);
      ib.setInsertionPointToStart(lookup.thenBlock());
      scf::YieldOp::create(
          ib, memref::LoadOp::create(ib, mapArg, ValueRange{kb.toIndex(hostRow)}).getResult());
      ib.setInsertionPointToStart(lookup.elseBlock());
      scf::YieldOp::create(ib, kb.i32(-1));
    }
    Value slot = lookup.getResult(0);
    kb.ifThen(arith::AndIOp::create(ib, negate(none), negate(inside)), [&] {
      memref::AtomicRMWOp::create(ib, arith::AtomicRMWKind::ori, kb.i32(abi::kStatusBadRowId),
                                  status, ValueRange{kb.index(0)});
    });
    kb.ifThen(listed, [&] {
      memref::StoreOp::create(ib, slot, slotsArg, ValueRange{request, position, k});
    });

    // 2. The step's booking, unless the log is empty (the same selections
    // resolved again for another layer of the group).
    Value logWords = memref::DimOp::create(ib, log, kb.index(0));
    kb.ifThen(kb.cmpi(arith::CmpIPredicate::ne, logWords, kb.index(0)), [&] {
      Value first = kb.cmpi(arith::CmpIPredicate::eq, tid, kb.index(0));
      kb.ifThen(first, [&] {
        for (int64_t i = 0; i < 3; ++i)
          memref::StoreOp::create(ib, kb.i32(0), counts, ValueRange{kb.index(i)});
      });
      gpu::BarrierOp::create(ib);
      Value recencySlots =
          arith::IndexCastOp::create(ib, i32, memref::DimOp::create(ib, recency, kb.index(0)));
      Value resident = kb.cmpi(arith::CmpIPredicate::sge, slot, kb.i32(0));
      Value badSlot = arith::AndIOp::create(ib, resident,
                                            kb.cmpi(arith::CmpIPredicate::sge, slot, recencySlots));
      kb.ifThen(badSlot, [&] {
        memref::AtomicRMWOp::create(ib, arith::AtomicRMWKind::ori, kb.i32(abi::kStatusBadSlot),
                                    status, ValueRange{kb.index(0)});
      });
      Value hit = arith::AndIOp::create(ib, resident, negate(badSlot));
      Value miss = arith::AndIOp::create(ib, inside, negate(resident));
      Value step = memref::LoadOp::create(ib, log, ValueRange{kb.index(StepLog::kStep)});
      // A slot's first hit in this step (one exchange per hit) moves its last
      // use to the previous use and is listed once.
      auto stamp = scf::IfOp::create(ib, TypeRange{ib.getI1Type()}, hit,
                                     /*withElse=*/true);
      {
        OpBuilder::InsertionGuard guard(ib);
        ib.setInsertionPointToStart(stamp.thenBlock());
        Value slotIndex = kb.toIndex(slot);
        Value old = memref::AtomicRMWOp::create(ib, arith::AtomicRMWKind::assign, step, recency,
                                                ValueRange{slotIndex, kb.index(0)});
        Value fresh = kb.cmpi(arith::CmpIPredicate::ne, old, step);
        kb.ifThen(fresh, [&] {
          memref::StoreOp::create(ib, old, recency, ValueRange{slotIndex, kb.index(1)});
        });
        scf::YieldOp::create(ib, fresh);
        ib.setInsertionPointToStart(stamp.elseBlock());
        scf::YieldOp::create(ib, isFalse);
      }
      Value firstHit = stamp.getResult(0);
      // Positions within the block's lists.
      auto claim = [&](Value condition, int64_t counter) -> Value {
        auto position = scf::IfOp::create(ib, TypeRange{i32}, condition,
                                          /*withElse=*/true);
        OpBuilder::InsertionGuard guard(ib);
        ib.setInsertionPointToStart(position.thenBlock());
        scf::YieldOp::create(ib,
                             memref::AtomicRMWOp::create(ib, arith::AtomicRMWKind::addi, kb.i32(1),
                                                         counts, ValueRange{kb.index(counter)})
                                 .getResult());
        ib.setInsertionPointToStart(position.elseBlock());
        scf::YieldOp::create(ib, kb.i32(0));
        return position.getResult(0);
      };
      Value hitAt = claim(firstHit, 0);
      Value missAt = claim(miss, 1);
      claim(inside, 2);
      gpu::BarrierOp::create(ib);
      // One thread reserves the block's room in the log.
      kb.ifThen(first, [&] {
        for (int64_t i = 0; i < 3; ++i) {
          Value count = memref::LoadOp::create(ib, counts, ValueRange{kb.index(i)});
          Value base = memref::AtomicRMWOp::create(ib, arith::AtomicRMWKind::addi, count, log,
                                                   ValueRange{kb.index(StepLog::kHits + i)});
          if (i < 2)
            memref::StoreOp::create(ib, base, counts, ValueRange{kb.index(3 + i)});
        }
      });
      gpu::BarrierOp::create(ib);
      Value words = arith::IndexCastOp::create(ib, ib.getI64Type(), logWords);
      auto logIndex = [&](int64_t baseCounter, Value at, int64_t offset, int64_t scale) -> Value {
        Value base = memref::LoadOp::create(ib, counts, ValueRange{kb.index(baseCounter)});
        Value index =
            arith::ExtUIOp::create(ib, ib.getI64Type(), arith::AddIOp::create(ib, base, at));
        return arith::AddIOp::create(ib, arith::MulIOp::create(ib, index, kb.i64(scale)),
                                     kb.i64(offset));
      };
      // Entries past the list's room (or a short log) are dropped; the counts
      // tell the reader.
      Value hitWord = logIndex(3, hitAt, StepLog::hitsBegin(), StepLog::kHitWords);
      kb.ifThen(arith::AndIOp::create(
                    ib, firstHit,
                    arith::AndIOp::create(ib,
                                          kb.cmpi(arith::CmpIPredicate::slt, hitWord,
                                                  kb.i64(StepLog::missesBegin(entries))),
                                          kb.cmpi(arith::CmpIPredicate::slt, hitWord, words))),
                [&] { memref::StoreOp::create(ib, slot, log, ValueRange{kb.toIndex(hitWord)}); });
      // A miss's ring entry is its index in the log's misses (while the
      // ring has room).
      if (withWriteBack) {
        Value ringRows = arith::IndexCastOp::create(
            ib, ib.getI64Type(), memref::DimOp::create(ib, args[Role::WriteBackRing], kb.index(0)));
        Value entry = logIndex(4, missAt, 0, 1);
        Value fits = kb.cmpi(arith::CmpIPredicate::slt, entry, ringRows);
        Value kept = arith::AndIOp::create(ib, miss, fits);
        kb.ifThen(listed, [&] {
          Value narrow = arith::TruncIOp::create(ib, i32, entry);
          memref::StoreOp::create(ib, kb.select(kept, narrow, kb.i32(-1)), args[Role::WriteBack],
                                  ValueRange{request, position, k});
        });
      }
      Value missWord = logIndex(4, missAt, StepLog::missesBegin(entries), StepLog::kMissWords);
      Value missNext = arith::AddIOp::create(ib, missWord, kb.i64(1));
      kb.ifThen(
          arith::AndIOp::create(ib, miss, kb.cmpi(arith::CmpIPredicate::slt, missNext, words)),
          [&] {
            memref::StoreOp::create(ib, arith::IndexCastOp::create(ib, i32, request), log,
                                    ValueRange{kb.toIndex(missWord)});
            memref::StoreOp::create(ib, id, log, ValueRange{kb.toIndex(missNext)});
          });
    });
    gpu::ReturnOp::create(ib);
  };
  return spec;
}
