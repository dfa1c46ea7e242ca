// bf16 MLA rows on the tensor cores (the kernel of tensor-core-attention.mlir
// with 1152-byte rows, nothing to dequantize): the producer copies each row
// held in an HBM slot into its tile buffer by cp.async (eighteen 16-byte
// copies a thread a row, cache = cg, to the same swizzled places its stores
// would take), so it waits for no row and both tile buffers can be in
// flight; a row from the host store (which cp.async reads at a third of the
// rate of plain loads) and a row without data (zeros) still go through
// registers. Before its arrival on the tile's full barrier each producer
// thread makes the barrier track its copies (cp.async.mbarrier.arrive, which
// adds one pending arrival), so the consumers see the tile once every copy
// landed. FP8 rows (dequantized in registers) keep their loads. In both, the
// consumer threads copy Q by cp.async (18 copies a thread) before the
// warpgroups part, so the producer starts its first tile at once.
// RUN: dhs-opt %s --dhs-lower-to-gpu="min-blocks=0" --canonicalize --cse | FileCheck %s
// RUN: sed 's/mla_bf16/mla_fp8/g' %s | dhs-opt --dhs-lower-to-gpu="min-blocks=0" \
// RUN:   | FileCheck %s --check-prefix=FP8
// RUN: rm -rf %t && dhs-compile %s --min-blocks=0 -o %t
// RUN: grep -c 'cp.async.cg.shared.global' %t/sparse_attention.ptx | FileCheck %s --check-prefix=COUNT
// RUN: FileCheck %s --check-prefix=PTX < %t/sparse_attention.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t/sparse_attention.ptx -o %t/sparse_attention.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS %}
// RUN: dhs-run %t --link-only | FileCheck %s --check-prefix=LINK

// CHECK-LABEL: gpu.func @sparse_attention(
// The producer: for each of its two rows of a tile, the row's bias, then
// its 18 copies where it is in HBM, else its loads and stores.
// CHECK:       nvvm.setmaxregister  decrease 144
// CHECK:       scf.for
// CHECK:       nvvm.mbarrier.try_wait.parity
// CHECK:       llvm.store {{.*}} : f32, !llvm.ptr<3>
// CHECK-COUNT-18: nvvm.cp.async.shared.global {{.*}}, 16, cache =  cg : !llvm.ptr<3>, !llvm.ptr<1>
// CHECK-NEXT:  } else {
// CHECK-COUNT-18: llvm.load {{.*}} invariant {alignment = 16 : i64} : !llvm.ptr<1> -> vector<4xi32>
// CHECK-COUNT-18: llvm.store {{.*}} {alignment = 16 : i64} : vector<4xi32>, !llvm.ptr<3>
// CHECK:       llvm.store {{.*}} : f32, !llvm.ptr<3>
// CHECK-COUNT-18: nvvm.cp.async.shared.global {{.*}}, 16, cache =  cg : !llvm.ptr<3>, !llvm.ptr<1>
// CHECK-NEXT:  } else {
// The full barrier tracks the thread's copies, then takes its own arrival.
// CHECK:       nvvm.cp.async.mbarrier.arrive [[FULL:%.+]] : !llvm.ptr<3>
// CHECK-NEXT:  nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT:  nvvm.mbarrier.arrive [[FULL]] : !llvm.ptr<3> -> i64
// CHECK:       nvvm.setmaxregister  increase 200

// FP8-LABEL: gpu.func @sparse_attention(
// FP8-COUNT-18: nvvm.cp.async.shared.global {{.*}}, 16, cache =  cg
// FP8:       nvvm.cp.async.commit.group
// FP8-NOT:   nvvm.cp.async.shared.global
// FP8:       nvvm.convert.f8x2.to.f16x2
// FP8-NOT:   nvvm.cp.async.shared.global
// FP8-LABEL: gpu.func @sparse_attention_resident(
// FP8-COUNT-18: nvvm.cp.async.shared.global {{.*}}, 16, cache =  cg
// FP8:       nvvm.cp.async.commit.group
// FP8-NOT:   nvvm.cp.async.shared.global
// FP8:       nvvm.convert.f8x2.to.f16x2
// FP8-NOT:   nvvm.cp.async.shared.global

// COUNT: 54
// PTX: cp.async.mbarrier.arrive.shared.b64
// PTXAS-NOT: Potential Performance Loss
// PTXAS: 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Used 168 registers
// LINK: link: OK

func.func @step(%queries: memref<2x1x64x576xbf16>, %rows: memref<2x1x256xi32>,
                %slots: memref<2x1x256xi32>, %history_start: memref<2xi64>,
                %history_len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 1024, host = ?>,
                %out: memref<2x1x64x512xbf16>) {
  dhs.sparse_attention queries(%queries : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x256xi32>) slots(%slots : memref<2x1x256xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 1024, host = ?>)
      layer = 0 output(%out : memref<2x1x64x512xbf16>) scale = 0.0721687824
  return
}
