//===- AttentionCombineKernel.cpp - merge a split attention's partials ----===//

#include "codegen/Kernels.h"

#include "codegen/KernelBuilder.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

#include <algorithm>
#include <limits>

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;

/// Most partial values a combine thread loads before it computes (64 keeps
/// 4 splits x 16 column blocks in one round trip without spilling).
static constexpr int64_t kCombineValues = 64;

KernelSpec mlir::dhs::getAttentionCombineKernel(const SparseAttentionKernelConfig &config,
                                                bool dependent) {
  MLIRContext *context = config.pool.getContext();
  MemRefType partials = config.partialsType(context);
  // One combine kernel per shape of partials and CTA.
  KernelSpec spec{abi::LaunchKind::AttentionCombine,
                  kernelKey(partials, config.headsPerBlock, dependent)};
  spec.signature.add(Role::Partials, partials);
  spec.signature.add(Role::Output, config.outputType());
  spec.geometry.grid = config.combineGrid();
  spec.geometry.block = config.block();
  // Dependent: started beside the split attention's last CTAs (which let it
  // start as they begin), it waits for that grid to end before it reads the
  // partials (griddepcontrol: sm_90).
  spec.dependentLaunch = dependent;
  spec.emitBody = [config, dependent](ImplicitLocOpBuilder &b, const KernelArguments &args) {
    if (dependent)
      NVVM::GriddepcontrolOp::create(b, NVVM::GridDepActionKind::wait);
    int64_t vDim = config.pool.getFormat().getVDim();
    KernelBuilder kb{b};
    Value tid = kb.threadId();
    Value warp = kb.warpOf(tid);
    Value lane = kb.laneOf(tid);
    Value pair = kb.blockId();
    Value request = arith::DivUIOp::create(b, pair, kb.index(config.positions));
    Value position = arith::RemUIOp::create(b, pair, kb.index(config.positions));
    Value head = arith::AddIOp::create(
        b, arith::MulIOp::create(b, kb.blockId(gpu::Dimension::y), kb.index(config.headsPerBlock)),
        warp);
    Value negInf = kb.f32(-std::numeric_limits<double>::infinity());
    auto load = [&](Value split, Value column) -> Value {
      return memref::LoadOp::create(b, args[Role::Partials],
                                    ValueRange{request, position, head, split, column});
    };
    // Loads first, then the arithmetic: the output's stores could alias the
    // partials for all ptxas knows, so a load placed after a store stays
    // there (a round trip a column block: 13 us at B=32 x 64 heads x 4
    // splits on an H100; bench/NOTES.md, thirty-ninth session). The output
    // columns go in chunks of at most kCombineValues loads a thread, so
    // that many splits do not spill.
    int64_t columnBlocks = vDim / kWarpSize;
    int64_t chunkBlocks = std::clamp<int64_t>(kCombineValues / config.splits, 1, columnBlocks);
    auto column = [&](int64_t j) {
      return arith::AddIOp::create(b, lane, kb.index(j * kWarpSize));
    };
    // The values of column blocks [first, first + chunkBlocks), split-minor.
    auto loadChunk = [&](int64_t first) {
      SmallVector<Value> values;
      for (int64_t j = first; j < std::min(first + chunkBlocks, columnBlocks); ++j)
        for (int64_t s = 0; s < config.splits; ++s)
          values.push_back(load(kb.index(s), arith::AddIOp::create(b, column(j), kb.index(2))));
      return values;
    };
    SmallVector<Value> maxes, sums;
    for (int64_t s = 0; s < config.splits; ++s) {
      maxes.push_back(load(kb.index(s), kb.index(0)));
      sums.push_back(load(kb.index(s), kb.index(1)));
    }
    SmallVector<Value> chunk = loadChunk(0);
    // The common max over the splits (base 2), then the weighted sums.
    Value max = negInf;
    for (int64_t s = 0; s < config.splits; ++s)
      max = arith::MaximumFOp::create(b, max, maxes[s]);
    Value any = arith::CmpFOp::create(b, arith::CmpFPredicate::ONE, max, negInf);
    SmallVector<Value> weights;
    Value sum = kb.f32(0.0);
    for (int64_t s = 0; s < config.splits; ++s) {
      // A split without rows (max -inf) weighs nothing.
      Value used = arith::CmpFOp::create(b, arith::CmpFPredicate::ONE, maxes[s], negInf);
      Value weight = kb.select(arith::AndIOp::create(b, used, any),
                               kb.exp2(arith::SubFOp::create(b, maxes[s], max)), kb.f32(0.0));
      weights.push_back(weight);
      sum = kb.fma(sums[s], weight, sum);
    }
    Value inverse = kb.select(arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, sum, kb.f32(0.0)),
                              arith::DivFOp::create(b, kb.f32(1.0), sum), kb.f32(0.0));
    for (int64_t first = 0; first < columnBlocks; first += chunkBlocks) {
      if (first > 0)
        chunk = loadChunk(first);
      for (int64_t j = first; j < std::min(first + chunkBlocks, columnBlocks); ++j) {
        Value value = kb.f32(0.0);
        for (int64_t s = 0; s < config.splits; ++s)
          value = LLVM::FMAOp::create(b, chunk[(j - first) * config.splits + s], weights[s], value);
        memref::StoreOp::create(
            b,
            arith::TruncFOp::create(b, b.getBF16Type(), arith::MulFOp::create(b, value, inverse)),
            args[Role::Output], ValueRange{request, position, head, column(j)});
      }
    }
    gpu::ReturnOp::create(b);
  };
  return spec;
}
