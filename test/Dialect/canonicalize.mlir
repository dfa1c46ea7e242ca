// RUN: dhs-opt %s --canonicalize --split-input-file | FileCheck %s

// Casts that only hide static shapes fold into the attention op, so that
// code generation sees the static sizes it needs.
// CHECK-LABEL: func.func @fold_casts
// CHECK-SAME: (%[[Q:[^:]*]]: memref<2x1x8x576xbf16>, %[[ROWS:[^:]*]]: memref<2x1x64xi32>
// CHECK-NOT: memref.cast
// CHECK: dhs.sparse_attention queries(%[[Q]] : memref<2x1x8x576xbf16>) rows(%[[ROWS]] : memref<2x1x64xi32>)
func.func @fold_casts(%q: memref<2x1x8x576xbf16>, %rows: memref<2x1x64xi32>,
                      %slots: memref<2x1x64xi32>, %start: memref<2xi64>,
                      %len: memref<2xi32>,
                      %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 128, host = ?>,
                      %out: memref<2x1x8x512xbf16>) {
  %dq = memref.cast %q : memref<2x1x8x576xbf16> to memref<?x1x8x576xbf16>
  %drows = memref.cast %rows : memref<2x1x64xi32> to memref<?x1x?xi32>
  dhs.sparse_attention queries(%dq : memref<?x1x8x576xbf16>)
      rows(%drows : memref<?x1x?xi32>) slots(%slots : memref<2x1x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 128, host = ?>)
      layer = 0 output(%out : memref<2x1x8x512xbf16>) scale = 0.5
  return
}

// -----

// An unused view disappears.
// CHECK-LABEL: func.func @dead_view
// CHECK-NEXT: return
func.func @dead_view(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 128, host = ?>) {
  %a = dhs.pool_tier host of %pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 128, host = ?> -> memref<?x1x1152xi8>
  return
}

// -----

// A cast that makes shapes static (a checked assertion about the argument)
// must stay: folding it would hand the attention op the dynamic shapes.
// CHECK-LABEL: func.func @keep_static_casts
// CHECK-SAME: (%[[Q:[^:]*]]: memref<?x1x8x576xbf16>, %[[ROWS:[^:]*]]: memref<2x1x?xi32>
// CHECK-NEXT: %[[SQ:.*]] = memref.cast %[[Q]] : memref<?x1x8x576xbf16> to memref<2x1x8x576xbf16>
// CHECK-NEXT: %[[SROWS:.*]] = memref.cast %[[ROWS]] : memref<2x1x?xi32> to memref<2x1x64xi32>
// CHECK-NEXT: dhs.sparse_attention queries(%[[SQ]] : memref<2x1x8x576xbf16>) rows(%[[SROWS]] : memref<2x1x64xi32>)
func.func @keep_static_casts(%q: memref<?x1x8x576xbf16>, %rows: memref<2x1x?xi32>,
                             %slots: memref<2x1x64xi32>, %start: memref<2xi64>,
                             %len: memref<2xi32>,
                             %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 128, host = ?>,
                             %out: memref<2x1x8x512xbf16>) {
  %sq = memref.cast %q : memref<?x1x8x576xbf16> to memref<2x1x8x576xbf16>
  %srows = memref.cast %rows : memref<2x1x?xi32> to memref<2x1x64xi32>
  dhs.sparse_attention queries(%sq : memref<2x1x8x576xbf16>)
      rows(%srows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 128, host = ?>)
      layer = 0 output(%out : memref<2x1x8x512xbf16>) scale = 0.5
  return
}
