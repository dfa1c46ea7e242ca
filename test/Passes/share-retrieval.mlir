// RUN: dhs-opt %s --dhs-share-retrieval --split-input-file | FileCheck %s

// Verify positions of a request fetch the union of their missing rows once;
// attention reads the staged rows through the remap.
// CHECK-LABEL: func.func @verify_step
// CHECK-SAME: (%[[POOL:[^:]*]]: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>, %[[Q:[^:]*]]: memref<4x2x64x576xbf16>, %[[ROWS:[^:]*]]: memref<4x2x64xi32>, %[[SLOTS:[^:]*]]: memref<4x2x64xi32>, %[[START:[^:]*]]: memref<4xi64>, %[[LEN:[^:]*]]: memref<4xi32>, %[[O0:[^:]*]]: memref<4x2x64x512xbf16>, %[[O1:[^:]*]]: memref<4x2x64x512xbf16>)
// CHECK: dhs.verify gamma = 1 {
// CHECK:   %[[STAGE:.*]] = dhs.scratch : memref<4x128x4x656xi8>
// CHECK:   %[[MISSING:.*]] = dhs.scratch : memref<4x128xi32>
// CHECK:   %[[REMAP:.*]] = dhs.scratch : memref<4x2x64xi32>
// CHECK:   dhs.union_missing rows(%[[ROWS]] : memref<4x2x64xi32>) slots(%[[SLOTS]] : memref<4x2x64xi32>) into(%[[MISSING]], %[[REMAP]] : memref<4x128xi32>, memref<4x2x64xi32>)
// CHECK:   dhs.fetch pool(%[[POOL]] : {{.*}}) rows(%[[MISSING]] : memref<4x128xi32>) history(%[[START]], %[[LEN]] : memref<4xi64>, memref<4xi32>) into(%[[STAGE]] : memref<4x128x4x656xi8>)
// CHECK:   dhs.attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) staging(%[[STAGE]] : memref<4x128x4x656xi8>) index(%[[REMAP]] : memref<4x2x64xi32>) pool(%[[POOL]] : {{.*}}) layer = 0 output(%[[O0]]
// CHECK:   dhs.attention queries(%[[Q]] : {{.*}}) staging(%[[STAGE]] : memref<4x128x4x656xi8>) index(%[[REMAP]] : memref<4x2x64xi32>) {{.*}} layer = 1 output(%[[O1]]
func.func @verify_step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>,
                       %q: memref<4x2x64x576xbf16>, %rows: memref<4x2x64xi32>,
                       %slots: memref<4x2x64xi32>, %start: memref<4xi64>,
                       %len: memref<4xi32>, %o0: memref<4x2x64x512xbf16>,
                       %o1: memref<4x2x64x512xbf16>) {
  dhs.verify gamma = 1 {
    %stage = dhs.scratch : memref<4x128x4x656xi8>
    dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
        rows(%rows : memref<4x2x64xi32>) slots(%slots : memref<4x2x64xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        into(%stage : memref<4x128x4x656xi8>)
    dhs.attention queries(%q : memref<4x2x64x576xbf16>)
        rows(%rows : memref<4x2x64xi32>) slots(%slots : memref<4x2x64xi32>)
        staging(%stage : memref<4x128x4x656xi8>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
        layer = 0 output(%o0 : memref<4x2x64x512xbf16>) scale = 0.0416666679
    dhs.attention queries(%q : memref<4x2x64x576xbf16>)
        rows(%rows : memref<4x2x64xi32>) slots(%slots : memref<4x2x64xi32>)
        staging(%stage : memref<4x128x4x656xi8>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
        layer = 1 output(%o1 : memref<4x2x64x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// Outside a verify phase there is one position per request: nothing to share.
// CHECK-LABEL: func.func @decode_step
// CHECK-NOT: dhs.union_missing
// CHECK: dhs.fetch {{.*}} slots(
func.func @decode_step(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>,
                       %rows: memref<2x1x32xi32>, %slots: memref<2x1x32xi32>,
                       %start: memref<2xi64>, %len: memref<2xi32>,
                       %stage: memref<2x32x1x1152xi8>) {
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x32xi32>) slots(%slots : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x32x1x1152xi8>)
  return
}

// -----

// A staged buffer that something else reads is left alone: the remap would
// change what that reader sees.
// CHECK-LABEL: func.func @other_reader
// CHECK-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: {{.*}}, %[[STAGE:[^:]*]]: {{.*}}, %[[COPY:[^:]*]]: memref<2x64x1x1152xi8>)
// CHECK-NOT: dhs.union_missing
// CHECK: dhs.verify gamma = 1
// CHECK-NEXT: dhs.fetch pool(%[[POOL]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[STAGE]] : memref<2x64x1x1152xi8>)
// CHECK-NEXT: memref.copy %[[STAGE]], %[[COPY]]
// CHECK-NOT: dhs.union_missing
// CHECK: return
func.func @other_reader(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>,
                        %rows: memref<2x2x32xi32>, %slots: memref<2x2x32xi32>,
                        %start: memref<2xi64>, %len: memref<2xi32>,
                        %stage: memref<2x64x1x1152xi8>, %copy: memref<2x64x1x1152xi8>) {
  dhs.verify gamma = 1 {
    dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 64, host = ?>)
        rows(%rows : memref<2x2x32xi32>) slots(%slots : memref<2x2x32xi32>)
        history(%start, %len : memref<2xi64>, memref<2xi32>)
        into(%stage : memref<2x64x1x1152xi8>)
    memref.copy %stage, %copy : memref<2x64x1x1152xi8> to memref<2x64x1x1152xi8>
  }
  return
}

// -----

// An overlapped fetch (ready flags) shares its tiles with an attention that
// reads staging in selection order: a union's staging index would break
// that, so it stays.
// CHECK-LABEL: func.func @overlapped_stays
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: {{.*}}, %[[POOL:[^:]*]]: {{.*}}, %[[OUT:[^:]*]]: memref<4x2x64x512xbf16>)
// CHECK-NOT: dhs.union_missing
// CHECK: dhs.fetch pool(%[[POOL]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[STAGE:.*]] : memref<4x4096x1x656xi8>) ready(%[[READY:.*]] : memref<4x64xi32>)
// CHECK-NOT: dhs.union_missing
// CHECK: dhs.attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) staging(%[[STAGE]] : memref<4x4096x1x656xi8>) ready(%[[READY]] : memref<4x64xi32>) history(
// CHECK-NOT: index(
// CHECK-SAME: output(%[[OUT]]
func.func @overlapped_stays(%q: memref<4x2x64x576xbf16>, %rows: memref<4x2x2048xi32>,
                            %slots: memref<4x2x2048xi32>, %start: memref<4xi64>,
                            %len: memref<4xi32>,
                            %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
                            %out: memref<4x2x64x512xbf16>) {
  dhs.verify gamma = 1 {
    %stage = dhs.scratch : memref<4x4096x1x656xi8>
    %ready = dhs.scratch : memref<4x64xi32>
    dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        rows(%rows : memref<4x2x2048xi32>) slots(%slots : memref<4x2x2048xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        into(%stage : memref<4x4096x1x656xi8>) ready(%ready : memref<4x64xi32>)
    dhs.attention queries(%q : memref<4x2x64x576xbf16>)
        rows(%rows : memref<4x2x2048xi32>) slots(%slots : memref<4x2x2048xi32>)
        staging(%stage : memref<4x4096x1x656xi8>) ready(%ready : memref<4x64xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        layer = 0 output(%out : memref<4x2x64x512xbf16>) scale = 0.0416666679
  }
  return
}
