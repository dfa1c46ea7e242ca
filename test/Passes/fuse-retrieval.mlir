// RUN: dhs-opt %s --dhs-fuse-retrieval --split-input-file | FileCheck %s

// A decode step: fetch + attention become one attention that reads missing
// rows from the host store itself; the staging buffer goes away.
// CHECK-LABEL: func.func @decode_step
// CHECK-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: memref<4x1x16x576xbf16>, %[[ROWS:[^:]*]]: memref<4x1x256xi32>, %[[SLOTS:[^:]*]]: memref<4x1x256xi32>, %[[START:[^:]*]]: memref<4xi64>, %[[LEN:[^:]*]]: memref<4xi32>, %[[OUT:[^:]*]]: memref<4x1x16x512xbf16>)
// CHECK-NOT: dhs.scratch
// CHECK-NOT: dhs.fetch
// CHECK: dhs.sparse_attention queries(%[[Q]] : memref<4x1x16x576xbf16>) rows(%[[ROWS]] : memref<4x1x256xi32>) slots(%[[SLOTS]] : memref<4x1x256xi32>) history(%[[START]], %[[LEN]] : memref<4xi64>, memref<4xi32>) pool(%[[POOL]] : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>) layer = 0 output(%[[OUT]] : memref<4x1x16x512xbf16>) scale = 0.0416666679
// CHECK-NOT: dhs.attention
func.func @decode_step(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>,
                       %q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
                       %slots: memref<4x1x256xi32>, %start: memref<4xi64>,
                       %len: memref<4xi32>, %out: memref<4x1x16x512xbf16>) {
  %stage = dhs.scratch : memref<4x256x1x1152xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      into(%stage : memref<4x256x1x1152xi8>)
  dhs.attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      staging(%stage : memref<4x256x1x1152xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// One fetch for a layer group of two: both layers' attention fuse, each
// over the group's selection, writing its own output.
// CHECK-LABEL: func.func @layer_group
// CHECK-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: {{.*}}, %[[O0:[^:]*]]: {{.*}}, %[[O1:[^:]*]]: memref<2x1x16x512xbf16>)
// CHECK-NOT: dhs.scratch
// CHECK-NOT: dhs.fetch
// CHECK: dhs.sparse_attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) pool(%[[POOL]] : {{.*}}) layer = 0 output(%[[O0]] : {{.*}})
// CHECK-NOT: dhs.fetch
// CHECK: dhs.sparse_attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) pool(%[[POOL]] : {{.*}}) layer = 1 output(%[[O1]] : {{.*}})
// CHECK-NOT: dhs.attention
// CHECK-NOT: dhs.fetch
// CHECK: return
func.func @layer_group(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>,
                       %q: memref<2x1x16x576xbf16>, %rows: memref<2x1x32xi32>,
                       %slots: memref<2x1x32xi32>, %start: memref<2xi64>,
                       %len: memref<2xi32>, %o0: memref<2x1x16x512xbf16>,
                       %o1: memref<2x1x16x512xbf16>) {
  %stage = dhs.scratch : memref<2x32x2x656xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x32x2x656xi8>)
  dhs.attention queries(%q : memref<2x1x16x576xbf16>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      staging(%stage : memref<2x32x2x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      layer = 0 output(%o0 : memref<2x1x16x512xbf16>) scale = 0.0416666679
  dhs.attention queries(%q : memref<2x1x16x576xbf16>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      staging(%stage : memref<2x32x2x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 64, host = ?>)
      layer = 1 output(%o1 : memref<2x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// A shared (union) fetch stays: one fetch serves every verify position.
// CHECK-LABEL: func.func @shared_fetch_stays
// CHECK-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: {{.*}}, %[[MISSING:[^:]*]]: {{.*}}, %[[REMAP:[^:]*]]: {{.*}}, %[[STAGE:[^:]*]]: {{.*}}, %[[OUT:[^:]*]]: memref<2x2x16x512xbf16>)
// CHECK-NEXT: dhs.fetch pool(%[[POOL]] : {{.*}}) rows(%[[MISSING]] : memref<2x64xi32>) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[STAGE]] : memref<2x64x1x1152xi8>)
// CHECK-NEXT: dhs.attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) staging(%[[STAGE]] : {{.*}}) index(%[[REMAP]] : memref<2x2x32xi32>) pool(%[[POOL]] : {{.*}}) layer = 0 output(%[[OUT]] : {{.*}})
// CHECK-NEXT: return
func.func @shared_fetch_stays(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>,
                              %q: memref<2x2x16x576xbf16>, %rows: memref<2x2x32xi32>,
                              %slots: memref<2x2x32xi32>, %start: memref<2xi64>,
                              %len: memref<2xi32>, %missing: memref<2x64xi32>,
                              %remap: memref<2x2x32xi32>, %stage: memref<2x64x1x1152xi8>,
                              %out: memref<2x2x16x512xbf16>) {
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      rows(%missing : memref<2x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x64x1x1152xi8>)
  dhs.attention queries(%q : memref<2x2x16x576xbf16>)
      rows(%rows : memref<2x2x32xi32>) slots(%slots : memref<2x2x32xi32>)
      staging(%stage : memref<2x64x1x1152xi8>) index(%remap : memref<2x2x32xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x2x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// A fetch with slots whose reader indexes the staging buffer (a staging
// index: the rows are not staged in selection order) stays: fused
// attention reads missing rows in selection order only.
// CHECK-LABEL: func.func @indexed_reader_stays
// CHECK-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: {{.*}}, %[[REMAP:[^:]*]]: {{.*}}, %[[OUT:[^:]*]]: memref<2x2x16x512xbf16>)
// CHECK-NEXT: %[[STAGE:.*]] = dhs.scratch : memref<2x64x1x1152xi8>
// CHECK-NEXT: dhs.fetch pool(%[[POOL]] : {{.*}}) rows(%[[ROWS]] : memref<2x2x32xi32>) slots(%[[SLOTS]] : memref<2x2x32xi32>) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[STAGE]] : memref<2x64x1x1152xi8>)
// CHECK-NEXT: dhs.attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) staging(%[[STAGE]] : {{.*}}) index(%[[REMAP]] : memref<2x2x32xi32>) pool(%[[POOL]] : {{.*}}) layer = 0 output(%[[OUT]] : {{.*}})
// CHECK-NEXT: return
func.func @indexed_reader_stays(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>,
                                %q: memref<2x2x16x576xbf16>, %rows: memref<2x2x32xi32>,
                                %slots: memref<2x2x32xi32>, %start: memref<2xi64>,
                                %len: memref<2xi32>, %remap: memref<2x2x32xi32>,
                                %out: memref<2x2x16x512xbf16>) {
  %stage = dhs.scratch : memref<2x64x1x1152xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      rows(%rows : memref<2x2x32xi32>) slots(%slots : memref<2x2x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x64x1x1152xi8>)
  dhs.attention queries(%q : memref<2x2x16x576xbf16>)
      rows(%rows : memref<2x2x32xi32>) slots(%slots : memref<2x2x32xi32>)
      staging(%stage : memref<2x64x1x1152xi8>) index(%remap : memref<2x2x32xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x2x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// An overlapped fetch (ready flags) runs beside its attention: both stay
// staged, with their flags.
// CHECK-LABEL: func.func @overlapped_fetch_stays
// CHECK-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: {{.*}}, %[[READY:[^:]*]]: {{.*}}, %[[OUT:[^:]*]]: memref<2x1x16x512xbf16>)
// CHECK-NEXT: %[[STAGE:.*]] = dhs.scratch : memref<2x64x1x1152xi8>
// CHECK-NEXT: dhs.fetch pool(%[[POOL]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[STAGE]] : {{.*}}) ready(%[[READY]] : memref<2x1xi32>)
// CHECK-NEXT: dhs.attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) staging(%[[STAGE]] : {{.*}}) ready(%[[READY]] : memref<2x1xi32>) history(%[[START]], %[[LEN]] : {{.*}}) pool(%[[POOL]] : {{.*}}) layer = 0 output(%[[OUT]] : {{.*}})
// CHECK-NEXT: return
func.func @overlapped_fetch_stays(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>,
                                  %q: memref<2x1x16x576xbf16>, %rows: memref<2x1x64xi32>,
                                  %slots: memref<2x1x64xi32>, %start: memref<2xi64>,
                                  %len: memref<2xi32>, %ready: memref<2x1xi32>,
                                  %out: memref<2x1x16x512xbf16>) {
  %stage = dhs.scratch : memref<2x64x1x1152xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x64x1x1152xi8>) ready(%ready : memref<2x1xi32>)
  dhs.attention queries(%q : memref<2x1x16x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      staging(%stage : memref<2x64x1x1152xi8>) ready(%ready : memref<2x1xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// A fetch nothing reads stays (the pass fuses a fetch into its readers; it
// does not delete work).
// CHECK-LABEL: func.func @unread_fetch_stays
// CHECK-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: memref<2xi32>)
// CHECK-NEXT: %[[STAGE:.*]] = dhs.scratch : memref<2x64x1x1152xi8>
// CHECK-NEXT: dhs.fetch pool(%[[POOL]] : {{.*}}) rows(%[[ROWS]] : memref<2x2x32xi32>) slots(%[[SLOTS]] : memref<2x2x32xi32>) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[STAGE]] : memref<2x64x1x1152xi8>)
// CHECK-NEXT: return
func.func @unread_fetch_stays(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>,
                              %rows: memref<2x2x32xi32>, %slots: memref<2x2x32xi32>,
                              %start: memref<2xi64>, %len: memref<2xi32>) {
  %stage = dhs.scratch : memref<2x64x1x1152xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      rows(%rows : memref<2x2x32xi32>) slots(%slots : memref<2x2x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x64x1x1152xi8>)
  return
}

// -----

// A sliding window rides along: the fused attention reads the same ring.
// CHECK-LABEL: func.func @sliding_window
// CHECK-SAME: %[[RING:[^:]*]]: memref<2x132x1x528xi8>, %[[TOKENS:[^:]*]]: memref<2xi32>
// CHECK-NOT: dhs.fetch
// CHECK: dhs.sparse_attention {{.*}} window(%[[RING]], %[[TOKENS]] : memref<2x132x1x528xi8>, memref<2xi32>) size = 128 layer = 0
func.func @sliding_window(%pool: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 64, host = ?>,
                          %q: memref<2x5x64x512xbf16>, %rows: memref<2x5x32xi32>,
                          %slots: memref<2x5x32xi32>, %start: memref<2xi64>,
                          %len: memref<2xi32>, %ring: memref<2x132x1x528xi8>,
                          %tokens: memref<2xi32>, %out: memref<2x5x64x512xbf16>) {
  %stage = dhs.scratch : memref<2x160x1x528xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 64, host = ?>)
      rows(%rows : memref<2x5x32xi32>) slots(%slots : memref<2x5x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x160x1x528xi8>)
  dhs.attention queries(%q : memref<2x5x64x512xbf16>)
      rows(%rows : memref<2x5x32xi32>) slots(%slots : memref<2x5x32xi32>)
      staging(%stage : memref<2x160x1x528xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 64, host = ?>)
      window(%ring, %tokens : memref<2x132x1x528xi8>, memref<2xi32>) size = 128
      layer = 0 output(%out : memref<2x5x64x512xbf16>) scale = 0.0441941738
  return
}
