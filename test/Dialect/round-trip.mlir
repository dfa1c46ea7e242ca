// RUN: dhs-opt %s | dhs-opt | FileCheck %s
// RUN: dhs-opt %s --mlir-print-op-generic | dhs-opt | FileCheck %s

// CHECK-LABEL: func.func @pool_types
// CHECK-SAME: !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?>
// CHECK-SAME: !dhs.kv_pool<mla_bf16, hbm = ?, host = 1048576>
func.func @pool_types(%a: !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?>,
                      %b: !dhs.kv_pool<mla_bf16, hbm = ?, host = 1048576>) {
  return
}

// CHECK-LABEL: func.func @tiers
// CHECK: dhs.pool_tier hbm of %{{.*}} : !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?> -> memref<4096x576xbf16>
// CHECK: dhs.pool_tier host of %{{.*}} : !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?> -> memref<?x576xbf16>
// CHECK: dhs.step_status : memref<1xi32>
func.func @tiers(%pool: !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?>)
    -> (memref<4096x576xbf16>, memref<?x576xbf16>, memref<1xi32>) {
  %hbm = dhs.pool_tier hbm of %pool
      : !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?> -> memref<4096x576xbf16>
  %host = dhs.pool_tier host of %pool
      : !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?> -> memref<?x576xbf16>
  %status = dhs.step_status : memref<1xi32>
  return %hbm, %host, %status
      : memref<4096x576xbf16>, memref<?x576xbf16>, memref<1xi32>
}

// CHECK-LABEL: func.func @attention
// CHECK: dhs.sparse_attention queries(%{{.*}} : memref<4x2x16x576xbf16>)
// CHECK-SAME: rows(%{{.*}} : memref<4x2x256xi32>) slots(%{{.*}} : memref<4x2x256xi32>)
// CHECK-SAME: history(%{{.*}}, %{{.*}} : memref<4xi64>, memref<4xi32>)
// CHECK-SAME: pool(%{{.*}} : !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>)
// CHECK-SAME: output(%{{.*}} : memref<4x2x16x512xbf16>) scale = 0.0416666679
func.func @attention(%q: memref<4x2x16x576xbf16>, %rows: memref<4x2x256xi32>,
                     %slots: memref<4x2x256xi32>, %start: memref<4xi64>,
                     %len: memref<4xi32>,
                     %pool: !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>,
                     %out: memref<4x2x16x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<4x2x16x576xbf16>)
      rows(%rows : memref<4x2x256xi32>) slots(%slots : memref<4x2x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>)
      output(%out : memref<4x2x16x512xbf16>) scale = 0.0416666679
  return
}

// Dynamic batch and selection sizes are valid IR; codegen needs them static.
// CHECK-LABEL: func.func @dynamic_shapes
// CHECK: dhs.sparse_attention queries(%{{.*}} : memref<?x1x16x576xbf16>)
func.func @dynamic_shapes(%q: memref<?x1x16x576xbf16>, %rows: memref<?x1x?xi32>,
                          %slots: memref<?x1x?xi32>, %start: memref<?xi64>,
                          %len: memref<?xi32>,
                          %pool: !dhs.kv_pool<mla_bf16, hbm = ?, host = ?>,
                          %out: memref<?x1x16x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<?x1x16x576xbf16>)
      rows(%rows : memref<?x1x?xi32>) slots(%slots : memref<?x1x?xi32>)
      history(%start, %len : memref<?xi64>, memref<?xi32>)
      pool(%pool : !dhs.kv_pool<mla_bf16, hbm = ?, host = ?>)
      output(%out : memref<?x1x16x512xbf16>) scale = 1.0
  return
}
