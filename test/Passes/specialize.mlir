// RUN: dhs-opt %s --dhs-specialize="requests=8 positions=5 heads=64 topk=2048 hbm-slots=65536" --split-input-file --verify-diagnostics | FileCheck %s

// A verify step written once for GLM-5-like layers, specialized to 8 requests,
// gamma = 4 (5 positions), 64 heads, top-2048 and 65536 HBM slots. The host
// store stays sized at run time; dims the ops do not give a meaning to (the
// head dim) were static already.
// CHECK-LABEL: func.func @step
// CHECK-SAME: (%{{.*}}: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 65536, host = ?>,
// CHECK-SAME: %{{.*}}: memref<8x5x64x576xbf16>, %{{.*}}: memref<8x5x2048xi32>, %{{.*}}: memref<8x5x2048xi32>,
// CHECK-SAME: %{{.*}}: memref<8xi64>, %{{.*}}: memref<8xi32>, %{{.*}}: memref<8x10240x4x656xi8>,
// CHECK-SAME: %{{.*}}: memref<8x5x64x512xbf16>)
// CHECK: dhs.fetch {{.*}} rows(%{{.*}} : memref<8x5x2048xi32>)
// CHECK: dhs.attention queries(%{{.*}} : memref<8x5x64x576xbf16>)
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                %q: memref<?x?x?x576xbf16>, %rows: memref<?x?x?xi32>,
                %slots: memref<?x?x?xi32>, %start: memref<?xi64>, %len: memref<?xi32>,
                %stage: memref<?x?x4x656xi8>, %out: memref<?x?x?x512xbf16>) {
  dhs.verify gamma = 4 {
    dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
        rows(%rows : memref<?x?x?xi32>) slots(%slots : memref<?x?x?xi32>)
        history(%start, %len : memref<?xi64>, memref<?xi32>)
        into(%stage : memref<?x?x4x656xi8>)
    dhs.attention queries(%q : memref<?x?x?x576xbf16>)
        rows(%rows : memref<?x?x?xi32>) slots(%slots : memref<?x?x?xi32>)
        staging(%stage : memref<?x?x4x656xi8>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
        layer = 2 output(%out : memref<?x?x?x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// A static size that disagrees with the configuration is an error.
func.func @conflict(%q: memref<4x1x64x576xbf16>, %rows: memref<?x?x?xi32>,
                    %slots: memref<?x?x?xi32>, %start: memref<?xi64>, %len: memref<?xi32>,
                    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>,
                    %out: memref<?x?x?x512xbf16>) {
  // expected-error @below {{operand #0 has 4 in dimension 0 but the configuration says 8}}
  dhs.sparse_attention queries(%q : memref<4x1x64x576xbf16>)
      rows(%rows : memref<?x?x?xi32>) slots(%slots : memref<?x?x?xi32>)
      history(%start, %len : memref<?xi64>, memref<?xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>)
      layer = 0 output(%out : memref<?x?x?x512xbf16>) scale = 0.0416666679
  return
}

// -----

// An aging step: one recorded append per request at most ([8, 4]), the slot
// tables [HBM slots] and its list [2 x 8]; place_rows over the same list
// gives it no dims of its own. A list written for 16 requests disagrees.
func.func @aging(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                 %appends: memref<?x4xi64>, %hot: memref<?xi64>, %cleared: memref<?xi32>,
                 %free: memref<?xi32>, %control: memref<8xi32>,
                 %rows: memref<32xi64>, %slots: memref<?xi32>) {
  // expected-error @below {{operand #6 has 32 in dimension 0 but the configuration says 16}}
  dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      appends(%appends : memref<?x4xi64>) hot(%hot : memref<?xi64>)
      cleared(%cleared : memref<?xi32>) free(%free : memref<?xi32>)
      control(%control : memref<8xi32>) into(%rows, %slots : memref<32xi64>, memref<?xi32>)
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      rows(%rows : memref<32xi64>) slots(%slots : memref<?xi32>)
  return
}

// -----

// A pool written with another HBM capacity disagrees with the configuration.
// expected-error @below {{argument #0 '!dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>' disagrees with the configured capacities}}
func.func @pool_conflict(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>) {
  return
}
