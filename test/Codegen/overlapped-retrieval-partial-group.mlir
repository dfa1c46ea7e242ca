// With overlap-retrieval, a layer group's attentions get the form with one
// fetch of whole tokens only where they read every layer of those tokens: a
// step with one layer of a group of 4 (or any proper subset of its layers)
// would fetch the other layers' rows for nothing, four times the bytes the
// fused attention reads. Its attentions stay fused, as without the option
// (the whole group: overlapped-retrieval-group.mlir).
// RUN: dhs-opt %s --split-input-file --dhs-lower-to-gpu="min-blocks=0 overlap-retrieval=true" | FileCheck %s

// CHECK-LABEL: func.func @one_layer_of_four
// CHECK-NOT: @fetch
// CHECK-NOT: dhs.missing_
// CHECK: gpu.launch_func @sparse_attention::@sparse_attention {{.*}} {dhs.layer = 2 : i64, dhs.op = "sparse_attention"
// CHECK-NOT: @fetch
// CHECK-NOT: @attention::
func.func @one_layer_of_four(%q: memref<2x1x64x576xbf16>, %rows: memref<2x1x256xi32>,
                             %slots: memref<2x1x256xi32>, %history_start: memref<2xi64>,
                             %history_len: memref<2xi32>,
                             %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
                             %out: memref<2x1x64x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x256xi32>) slots(%slots : memref<2x1x256xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      layer = 2 output(%out : memref<2x1x64x512xbf16>) scale = 0.0721687824
  return
}

// -----

// Two attentions of one layer (two query sets, one kernel) over a 2-layer
// pool read layer 0 only: no fetch of whole tokens either.
// CHECK-LABEL: func.func @one_layer_twice
// CHECK-NOT: @fetch
// CHECK-NOT: dhs.missing_
// CHECK: gpu.launch_func @sparse_attention::@sparse_attention {{.*}} {dhs.layer = 0 : i64, dhs.op = "sparse_attention"
// CHECK: gpu.launch_func @sparse_attention::@sparse_attention {{.*}} {dhs.layer = 0 : i64, dhs.op = "sparse_attention"
// CHECK-NOT: @fetch
func.func @one_layer_twice(%q0: memref<2x1x64x576xbf16>, %q1: memref<2x1x64x576xbf16>,
                           %rows: memref<2x1x256xi32>, %slots: memref<2x1x256xi32>,
                           %history_start: memref<2xi64>, %history_len: memref<2xi32>,
                           %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 1024, host = ?>,
                           %out0: memref<2x1x64x512xbf16>, %out1: memref<2x1x64x512xbf16>) {
  dhs.sparse_attention queries(%q0 : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x256xi32>) slots(%slots : memref<2x1x256xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 1024, host = ?>)
      layer = 0 output(%out0 : memref<2x1x64x512xbf16>) scale = 0.0721687824
  dhs.sparse_attention queries(%q1 : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x256xi32>) slots(%slots : memref<2x1x256xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 1024, host = ?>)
      layer = 0 output(%out1 : memref<2x1x64x512xbf16>) scale = 0.0721687824
  return
}
