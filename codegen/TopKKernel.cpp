//===- TopKKernel.cpp - top-k selection kernel ----------------------------===//

#include "codegen/KernelBuilder.h"
#include "codegen/Kernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;

static constexpr int64_t kThreads = 1024;
/// The most rows one CTA selects (its candidates live in shared memory).
static constexpr int64_t kMaxK = 4096;

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(TopKOp op) {
  MemRefType scores = op.getScores().getType();
  MemRefType rows = op.getRows().getType();
  if (!scores.hasStaticShape() || !rows.hasStaticShape())
    return op.emitOpError() << "needs static shapes to generate a kernel" << kStaticShapesHint;
  int64_t batch = scores.getDimSize(0), positions = scores.getDimSize(1),
          scored = scores.getDimSize(2), k = rows.getDimSize(2);
  if (k > kMaxK)
    return op.emitOpError() << "selects up to " << kMaxK << " rows per query in one CTA, got " << k;
  int64_t padded = static_cast<int64_t>(llvm::PowerOf2Ceil(k));
  int64_t sortLevels = llvm::Log2_64(padded);

  MLIRContext *context = op.getContext();
  Type i32 = IntegerType::get(context, 32), i64 = IntegerType::get(context, 64);
  KernelSpec spec{abi::LaunchKind::TopK, kernelKey(scores, rows)};
  spec.signature.add(Role::Scores, scores);
  spec.signature.add(Role::HistoryLen, op.getHistoryLen().getType());
  spec.signature.add(Role::RowIds, rows);
  spec.signature.add(Role::Status, getStatusType(context));
  spec.workgroup = {sharedBuffer(256, i32), sharedBuffer(3, i64), sharedBuffer(padded, i64),
                    sharedBuffer(1, i32)};
  spec.geometry.grid = {batch * positions, 1, 1};
  spec.geometry.block = {kThreads, 1, 1};

  spec.emitBody = [=](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    KernelBuilder kb{b};

    Value scoresArg = args[Role::Scores], lenArg = args[Role::HistoryLen],
          rowsArg = args[Role::RowIds], status = args[Role::Status];
    Value histogram = args.workgroup(0);
    Value state = args.workgroup(1); // prefix, remaining, done
    Value candidates = args.workgroup(2);
    Value counter = args.workgroup(3);
    Value tid = kb.threadId();
    Value pair = kb.blockId();
    Value request = arith::DivUIOp::create(b, pair, kb.index(positions));
    Value position = arith::RemUIOp::create(b, pair, kb.index(positions));
    Value threads = kb.index(kThreads);
    Value isThread0 = kb.cmpi(arith::CmpIPredicate::eq, tid, kb.index(0));

    // Rows query q of Q sees: [0, history_len - (Q - 1 - q)), within the scores.
    Value length =
        arith::ExtSIOp::create(b, i64, memref::LoadOp::create(b, lenArg, ValueRange{request}));
    Value visible =
        arith::SubIOp::create(b, length,
                              arith::SubIOp::create(b, kb.i64(positions - 1),
                                                    arith::IndexCastOp::create(b, i64, position)));
    // A history the scores do not cover is reported; selection stays within
    // the scored rows.
    kb.ifThen(
        arith::AndIOp::create(
            b, isThread0,
            arith::OrIOp::create(b, kb.cmpi(arith::CmpIPredicate::sgt, length, kb.i64(scored)),
                                 kb.cmpi(arith::CmpIPredicate::slt, length, kb.i64(0)))),
        [&] {
          memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::ori,
                                      kb.i32(abi::kStatusHistoryBeyondScores), status,
                                      ValueRange{kb.index(0)});
        });
    visible =
        arith::MaxSIOp::create(b, kb.i64(0), arith::MinSIOp::create(b, visible, kb.i64(scored)));
    Value visibleIndex = arith::IndexCastOp::create(b, b.getIndexType(), visible);

    /// The order-preserving key of row i: score bits with the sign folded,
    /// then the complement of i (equal scores: lower ids rank higher).
    auto keyOf = [&](Value i) -> Value {
      Value score = memref::LoadOp::create(b, scoresArg, ValueRange{request, position, i});
      Value bits = arith::BitcastOp::create(b, i32, score);
      Value negative = kb.cmpi(arith::CmpIPredicate::slt, bits, kb.i32(0));
      Value ordered =
          kb.select(negative, arith::XOrIOp::create(b, bits, kb.i32(-1)),
                    arith::OrIOp::create(b, bits, kb.i32(static_cast<int32_t>(0x80000000u))));
      Value high = arith::ShLIOp::create(b, arith::ExtUIOp::create(b, i64, ordered), kb.i64(32));
      Value low = arith::ExtUIOp::create(
          b, i64, arith::XOrIOp::create(b, arith::IndexCastOp::create(b, i32, i), kb.i32(-1)));
      return arith::OrIOp::create(b, high, low);
    };

    // Radix select: the k-th largest key, 8 bits a pass from the top. A pass
    // whose chosen bin holds exactly the keys still wanted ends the search:
    // the whole bin is taken, whatever its lower bits (with distinct scores,
    // usually after the score's top 24 or 32 bits; ties at the threshold go
    // on into the id bits).
    kb.ifThen(isThread0, [&] {
      memref::StoreOp::create(b, kb.i64(0), state, ValueRange{kb.index(0)});
      memref::StoreOp::create(b, arith::MinSIOp::create(b, visible, kb.i64(k)), state,
                              ValueRange{kb.index(1)});
      memref::StoreOp::create(b, kb.i64(0), state, ValueRange{kb.index(2)});
    });
    gpu::BarrierOp::create(b);
    kb.forLoop(kb.index(0), kb.index(8), kb.index(1), [&](Value pass) {
      // Uniform across the CTA (read after a barrier).
      Value searching =
          kb.cmpi(arith::CmpIPredicate::eq,
                  memref::LoadOp::create(b, state, ValueRange{kb.index(2)}), kb.i64(0));
      kb.ifThen(searching, [&] {
        Value shift = arith::IndexCastOp::create(
            b, i64,
            arith::MulIOp::create(b, arith::SubIOp::create(b, kb.index(7), pass), kb.index(8)));
        Value prefix = memref::LoadOp::create(b, state, ValueRange{kb.index(0)});
        // Digits above this pass are fixed by the prefix.
        Value mask = arith::XOrIOp::create(
            b,
            arith::SubIOp::create(
                b, arith::ShLIOp::create(b, kb.i64(1), arith::AddIOp::create(b, shift, kb.i64(8))),
                kb.i64(1)),
            kb.i64(-1));
        mask = kb.select(kb.cmpi(arith::CmpIPredicate::eq, pass, kb.index(0)), kb.i64(0), mask);
        kb.forLoop(tid, kb.index(256), threads, [&](Value bin) {
          memref::StoreOp::create(b, kb.i32(0), histogram, ValueRange{bin});
        });
        gpu::BarrierOp::create(b);
        kb.forLoop(tid, visibleIndex, threads, [&](Value i) {
          Value key = keyOf(i);
          kb.ifThen(
              kb.cmpi(arith::CmpIPredicate::eq, arith::AndIOp::create(b, key, mask), prefix), [&] {
                Value digit =
                    arith::AndIOp::create(b, arith::ShRUIOp::create(b, key, shift), kb.i64(255));
                memref::AtomicRMWOp::create(
                    b, arith::AtomicRMWKind::addi, kb.i32(1), histogram,
                    ValueRange{arith::IndexCastOp::create(b, b.getIndexType(), digit)});
              });
        });
        gpu::BarrierOp::create(b);
        kb.ifThen(isThread0, [&] {
          Value remaining = memref::LoadOp::create(b, state, ValueRange{kb.index(1)});
          // From the highest digit down: the bin where the k-th key falls.
          auto scan = scf::ForOp::create(b, kb.index(0), kb.index(256), kb.index(1),
                                         ValueRange{kb.i64(0), kb.i64(-1), remaining, kb.i64(0)});
          {
            OpBuilder::InsertionGuard g(b);
            b.setInsertionPointToStart(scan.getBody());
            Value j = scan.getInductionVar();
            Value bin = arith::SubIOp::create(b, kb.index(255), j);
            Value above = scan.getRegionIterArgs()[0];
            Value chosen = scan.getRegionIterArgs()[1];
            Value left = scan.getRegionIterArgs()[2];
            Value inBin = scan.getRegionIterArgs()[3];
            Value count = arith::ExtUIOp::create(
                b, i64, memref::LoadOp::create(b, histogram, ValueRange{bin}));
            Value open = kb.cmpi(arith::CmpIPredicate::eq, chosen, kb.i64(-1));
            Value reaches = kb.cmpi(arith::CmpIPredicate::sge,
                                    arith::AddIOp::create(b, above, count), remaining);
            Value take = arith::AndIOp::create(b, open, reaches);
            scf::YieldOp::create(
                b, ValueRange{arith::AddIOp::create(b, above, count),
                              kb.select(take, arith::IndexCastOp::create(b, i64, bin), chosen),
                              kb.select(take, arith::SubIOp::create(b, remaining, above), left),
                              kb.select(take, count, inBin)});
          }
          // The chosen bin holds exactly the keys still wanted: done.
          memref::StoreOp::create(
              b,
              arith::ExtUIOp::create(
                  b, i64, kb.cmpi(arith::CmpIPredicate::eq, scan.getResult(3), scan.getResult(2))),
              state, ValueRange{kb.index(2)});
          Value digit = scan.getResult(1);
          // No visible rows: nothing to select (the key stays 0).
          digit = kb.select(kb.cmpi(arith::CmpIPredicate::eq, digit, kb.i64(-1)), kb.i64(0), digit);
          memref::StoreOp::create(
              b, arith::OrIOp::create(b, prefix, arith::ShLIOp::create(b, digit, shift)), state,
              ValueRange{kb.index(0)});
          memref::StoreOp::create(b, scan.getResult(2), state, ValueRange{kb.index(1)});
        });
        gpu::BarrierOp::create(b);
      });
    });

    // Gather the keys at or above the k-th (exactly min(k, visible) of them:
    // keys are distinct); empty candidate slots hold 0 (sorted last).
    Value threshold = memref::LoadOp::create(b, state, ValueRange{kb.index(0)});
    kb.forLoop(tid, kb.index(padded), threads,
               [&](Value i) { memref::StoreOp::create(b, kb.i64(0), candidates, ValueRange{i}); });
    kb.ifThen(isThread0,
              [&] { memref::StoreOp::create(b, kb.i32(0), counter, ValueRange{kb.index(0)}); });
    gpu::BarrierOp::create(b);
    Value anyVisible = kb.cmpi(arith::CmpIPredicate::sgt, visible, kb.i64(0));
    kb.forLoop(tid, visibleIndex, threads, [&](Value i) {
      Value key = keyOf(i);
      kb.ifThen(
          arith::AndIOp::create(b, anyVisible, kb.cmpi(arith::CmpIPredicate::uge, key, threshold)),
          [&] {
            Value slot = memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addi, kb.i32(1),
                                                     counter, ValueRange{kb.index(0)});
            kb.ifThen(kb.cmpi(arith::CmpIPredicate::slt, slot, kb.i32(padded)), [&] {
              memref::StoreOp::create(
                  b, key, candidates,
                  ValueRange{arith::IndexCastOp::create(b, b.getIndexType(), slot)});
            });
          });
    });
    gpu::BarrierOp::create(b);

    // Bitonic sort, descending (unsigned keys).
    kb.forLoop(kb.index(1), kb.index(sortLevels + 1), kb.index(1), [&](Value level) {
      kb.forLoop(kb.index(0), level, kb.index(1), [&](Value j) {
        Value size = arith::ShLIOp::create(b, kb.index(1), level);
        Value stride = arith::ShLIOp::create(
            b, kb.index(1),
            arith::SubIOp::create(b, arith::SubIOp::create(b, level, j), kb.index(1)));
        kb.forLoop(tid, kb.index(padded / 2), threads, [&](Value p) {
          Value low = arith::AddIOp::create(
              b,
              arith::MulIOp::create(b, arith::DivUIOp::create(b, p, stride),
                                    arith::MulIOp::create(b, stride, kb.index(2))),
              arith::RemUIOp::create(b, p, stride));
          Value high = arith::AddIOp::create(b, low, stride);
          Value a = memref::LoadOp::create(b, candidates, ValueRange{low});
          Value c = memref::LoadOp::create(b, candidates, ValueRange{high});
          // Blocks alternate direction; the final merge leaves it descending.
          Value descending =
              kb.cmpi(arith::CmpIPredicate::eq, arith::AndIOp::create(b, low, size), kb.index(0));
          Value outOfOrder = kb.select(descending, kb.cmpi(arith::CmpIPredicate::ult, a, c),
                                       kb.cmpi(arith::CmpIPredicate::ugt, a, c));
          kb.ifThen(outOfOrder, [&] {
            memref::StoreOp::create(b, c, candidates, ValueRange{low});
            memref::StoreOp::create(b, a, candidates, ValueRange{high});
          });
        });
        gpu::BarrierOp::create(b);
      });
    });

    // Ids out, -1 past the visible rows.
    kb.forLoop(tid, kb.index(k), threads, [&](Value i) {
      Value key = memref::LoadOp::create(b, candidates, ValueRange{i});
      Value id = arith::XOrIOp::create(b, arith::TruncIOp::create(b, i32, key), kb.i32(-1));
      memref::StoreOp::create(
          b, kb.select(kb.cmpi(arith::CmpIPredicate::eq, key, kb.i64(0)), kb.i32(-1), id), rowsArg,
          ValueRange{request, position, i});
    });
    gpu::ReturnOp::create(b);
  };
  return spec;
}
