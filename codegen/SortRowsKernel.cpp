//===- SortRowsKernel.cpp - each request's row ids in ascending order -----===//
//
// The kernel of dhs.sort_rows. One CTA per request:
//
//   A. the threads load the request's N row ids into shared memory, padded
//      with -1 to P = the next power of two (at least 2);
//   B. a bitonic network sorts the P words as unsigned keys, so -1 (and
//      the padding) goes after every row id: log2(P) merges, the one of
//      size 2^l in l passes; each pass is one compare-exchange per pair of
//      words, P / 2 of them spread over the threads, then a barrier. The
//      passes are unrolled at generation time: strides are constants;
//   C. the threads write the first N words back.
//
// Exact and deterministic (equal keys are equal words). P = 8192 (Q x K =
// 4 x 2048) is 32 KB of shared memory and 91 passes of 4 pairs a thread.
//
// With values carried, each word is 64 bits, the row id above its value
// (64 KB of dynamic shared memory at P = 8192): the network orders rows,
// and a row's repeats by value; a -1 row's value is written as -1.
//
//===----------------------------------------------------------------------===//

#include "codegen/KernelBuilder.h"
#include "codegen/Kernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;

/// Rows of one request the kernel sorts at most (32 KB of shared memory).
static constexpr int64_t kMaxSortRows = 8192;
/// Threads of a CTA at most.
static constexpr int64_t kMaxSortThreads = 1024;

FailureOr<KernelSpec> mlir::dhs::getKernelSpec(SortRowsOp op) {
  MemRefType rows = op.getRows().getType();
  if (!rows.hasStaticShape() || !op.getSorted().getType().hasStaticShape())
    return op.emitOpError() << "needs static shapes to generate a kernel" << kStaticShapesHint;
  int64_t requests = rows.getDimSize(0), listed = rows.getDimSize(1);
  if (requests == 0 || listed == 0)
    return op.emitOpError() << "has no rows to sort";
  if (listed > kMaxSortRows)
    return op.emitOpError() << "sorts up to " << kMaxSortRows
                            << " rows per request in shared memory, got " << listed;
  const int64_t padded = std::max<int64_t>(2, llvm::PowerOf2Ceil(listed));
  const int64_t levels = llvm::Log2_64(padded);
  const int64_t threads = std::clamp<int64_t>(padded / 2, kWarpSize, kMaxSortThreads);

  MLIRContext *context = op.getContext();
  Type i32 = IntegerType::get(context, 32), i64 = IntegerType::get(context, 64);
  bool withValues = static_cast<bool>(op.getValues());
  Type word = withValues ? i64 : i32;
  KernelSpec spec{abi::LaunchKind::SortRows, kernelKey(rows) + (withValues ? "_values" : "")};
  spec.signature.add(Role::Missing, rows);
  spec.signature.add(Role::FetchedRows, op.getSorted().getType());
  if (withValues) {
    spec.signature.add(Role::MissingSources, op.getValues().getType());
    spec.signature.add(Role::FetchedSources, op.getSortedValues().getType());
    spec.geometry.dynamicSharedBytes = padded * 8;
  } else {
    spec.workgroup = {sharedBuffer(padded, i32)};
  }
  spec.geometry.grid = {requests, 1, 1};
  spec.geometry.block = {threads, 1, 1};

  spec.emitBody = [=](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    KernelBuilder kb{b};
    using P = arith::CmpIPredicate;
    Value in = args[Role::Missing], out = args[Role::FetchedRows];
    Value keys;
    if (withValues) {
      auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
      Value shared = gpu::DynamicSharedMemoryOp::create(
          b, MemRefType::get({ShapedType::kDynamic}, b.getI8Type(), MemRefLayoutAttrInterface{},
                             workgroup));
      keys = memref::ViewOp::create(
          b, MemRefType::get({padded}, i64, MemRefLayoutAttrInterface{}, workgroup), shared,
          kb.index(0), ValueRange{});
    } else {
      keys = args.workgroup(0);
    }
    Value tid = kb.threadId();
    Value request = kb.blockId();
    Value step = kb.index(threads);
    Value noWord = arith::ConstantIntOp::create(b, word, -1);

    // A. The list, padded with -1 (with values: the row id above the value).
    kb.forLoop(tid, kb.index(padded), step, [&](Value i) {
      auto load = scf::IfOp::create(b, TypeRange{word}, kb.cmpi(P::ult, i, kb.index(listed)),
                                    /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(load.thenBlock());
        Value key = memref::LoadOp::create(b, in, ValueRange{request, i});
        if (withValues) {
          Value value =
              memref::LoadOp::create(b, args[Role::MissingSources], ValueRange{request, i});
          // (One value at a time: the IR's order must not depend on the
          // host compiler's order of evaluating arguments.)
          Value high = arith::ExtUIOp::create(b, i64, key);
          Value shift = arith::ConstantIntOp::create(b, i64, 32);
          Value low = arith::ExtUIOp::create(b, i64, value);
          key = arith::OrIOp::create(b, arith::ShLIOp::create(b, high, shift), low);
        }
        scf::YieldOp::create(b, ValueRange{key});
        b.setInsertionPointToStart(load.elseBlock());
        scf::YieldOp::create(b, ValueRange{noWord});
      }
      memref::StoreOp::create(b, load.getResult(0), keys, ValueRange{i});
    });
    gpu::BarrierOp::create(b);

    // B. The bitonic network, ascending as unsigned words.
    for (int64_t level = 1; level <= levels; ++level) {
      const int64_t size = int64_t(1) << level;
      for (int64_t stride = size / 2; stride >= 1; stride /= 2) {
        kb.forLoop(tid, kb.index(padded / 2), step, [&](Value pair) {
          // The pair's lower word: `pair` with a 0 bit inserted at the stride.
          Value low = arith::AddIOp::create(
              b,
              arith::MulIOp::create(b, arith::DivUIOp::create(b, pair, kb.index(stride)),
                                    kb.index(2 * stride)),
              arith::RemUIOp::create(b, pair, kb.index(stride)));
          Value high = arith::AddIOp::create(b, low, kb.index(stride));
          Value x = memref::LoadOp::create(b, keys, ValueRange{low});
          Value y = memref::LoadOp::create(b, keys, ValueRange{high});
          // Blocks of `size` alternate direction; the last merge is one
          // ascending block.
          Value ascending =
              kb.cmpi(P::eq, arith::AndIOp::create(b, low, kb.index(size)), kb.index(0));
          Value outOfOrder = kb.select(ascending, kb.cmpi(P::ugt, x, y), kb.cmpi(P::ult, x, y));
          kb.ifThen(outOfOrder, [&] {
            memref::StoreOp::create(b, y, keys, ValueRange{low});
            memref::StoreOp::create(b, x, keys, ValueRange{high});
          });
        });
        gpu::BarrierOp::create(b);
      }
    }

    // C. The first N words back.
    kb.forLoop(tid, kb.index(listed), step, [&](Value i) {
      Value sorted = memref::LoadOp::create(b, keys, ValueRange{i});
      if (!withValues) {
        memref::StoreOp::create(b, sorted, out, ValueRange{request, i});
        return;
      }
      Value shift = arith::ConstantIntOp::create(b, i64, 32);
      Value key = arith::TruncIOp::create(b, i32, arith::ShRUIOp::create(b, sorted, shift));
      Value value = arith::TruncIOp::create(b, i32, sorted);
      memref::StoreOp::create(b, key, out, ValueRange{request, i});
      Value none = kb.cmpi(P::eq, key, kb.i32(-1));
      memref::StoreOp::create(b, kb.select(none, kb.i32(-1), value), args[Role::FetchedSources],
                              ValueRange{request, i});
    });
    gpu::ReturnOp::create(b);
  };
  return spec;
}
