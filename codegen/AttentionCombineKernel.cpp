//===- AttentionCombineKernel.cpp - merge a split attention's partials ----===//

#include "codegen/Kernels.h"

#include "codegen/KernelBuilder.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"

#include <limits>

using namespace mlir;
using namespace mlir::dhs;
using Role = abi::ParamRole;

KernelSpec mlir::dhs::getAttentionCombineKernel(const SparseAttentionKernelConfig &config) {
  MLIRContext *context = config.pool.getContext();
  MemRefType partials = config.partialsType(context);
  // One combine kernel per shape of partials and CTA.
  KernelSpec spec{abi::LaunchKind::AttentionCombine, kernelKey(partials, config.headsPerBlock)};
  spec.signature.add(Role::Partials, partials);
  spec.signature.add(Role::Output, config.outputType());
  spec.geometry.grid = config.combineGrid();
  spec.geometry.block = config.block();
  spec.emitBody = [config](ImplicitLocOpBuilder &b, const KernelArguments &args) {
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
    // The common max over the splits (base 2), then the weighted sums.
    Value max = negInf;
    for (int64_t s = 0; s < config.splits; ++s)
      max = arith::MaximumFOp::create(b, max, load(kb.index(s), kb.index(0)));
    Value any = arith::CmpFOp::create(b, arith::CmpFPredicate::ONE, max, negInf);
    SmallVector<Value> weights;
    Value sum = kb.f32(0.0);
    for (int64_t s = 0; s < config.splits; ++s) {
      Value m = load(kb.index(s), kb.index(0));
      // A split without rows (max -inf) weighs nothing.
      Value used = arith::CmpFOp::create(b, arith::CmpFPredicate::ONE, m, negInf);
      Value weight = kb.select(arith::AndIOp::create(b, used, any),
                               kb.exp2(arith::SubFOp::create(b, m, max)), kb.f32(0.0));
      weights.push_back(weight);
      sum = kb.fma(load(kb.index(s), kb.index(1)), weight, sum);
    }
    Value inverse = kb.select(arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, sum, kb.f32(0.0)),
                              arith::DivFOp::create(b, kb.f32(1.0), sum), kb.f32(0.0));
    for (int64_t j = 0; j < vDim / kWarpSize; ++j) {
      Value column = arith::AddIOp::create(b, lane, kb.index(j * kWarpSize));
      Value value = kb.f32(0.0);
      for (int64_t s = 0; s < config.splits; ++s)
        value = LLVM::FMAOp::create(
            b, load(kb.index(s), arith::AddIOp::create(b, column, kb.index(2))), weights[s], value);
      memref::StoreOp::create(
          b, arith::TruncFOp::create(b, b.getBF16Type(), arith::MulFOp::create(b, value, inverse)),
          args[Role::Output], ValueRange{request, position, head, column});
    }
    gpu::ReturnOp::create(b);
  };
  return spec;
}
