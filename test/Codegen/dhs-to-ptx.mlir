// The whole pipeline as one dhs-opt pass pipeline (what dhs-compile runs,
// replayable pass by pass): a step written for any shape, specialized to 4
// requests, 1 position, 16 heads, top-256 and 2048 HBM slots, compiled to
// gpu.binary objects holding PTX for sm_90a and the launches of their
// kernels.
// RUN: dhs-opt %s --pass-pipeline="builtin.module(dhs-to-ptx{requests=4 positions=1 heads=16 topk=256 hbm-slots=2048})" \
// RUN:   | FileCheck %s

// CHECK-LABEL: func.func @step
// CHECK-SAME: (%{{.*}}: memref<4x1x16x576xbf16>, %{{.*}}: memref<4x1x256xi32>, %{{.*}}: memref<4x1x256xi32>
// CHECK-SAME: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>
// Four requests fill few SMs: each query's rows are split over 8 CTAs and
// combined after (min-blocks).
// CHECK: gpu.launch_func @sparse_attention::@sparse_attention blocks in (%c4, %c1, %c8)
// CHECK-SAME: dhs.op = "sparse_attention"
// CHECK: gpu.launch_func @attention_combine::@attention_combine
// CHECK: gpu.binary @sparse_attention [#gpu.object<#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx81">
// CHECK-SAME: assembly = "{{.*}}.target sm_90a
// CHECK-SAME: .entry sparse_attention(
// CHECK: gpu.binary @attention_combine
func.func @step(%q: memref<?x?x?x576xbf16>, %rows: memref<?x?x?xi32>,
                %slots: memref<?x?x?xi32>, %start: memref<?xi64>, %len: memref<?xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>,
                %out: memref<?x?x?x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<?x?x?x576xbf16>)
      rows(%rows : memref<?x?x?xi32>) slots(%slots : memref<?x?x?xi32>)
      history(%start, %len : memref<?xi64>, memref<?xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>)
      layer = 0 output(%out : memref<?x?x?x512xbf16>) scale = 0.0416666679
  return
}
