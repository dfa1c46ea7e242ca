// RUN: dhs-opt %s --dhs-share-tiles --split-input-file \
// RUN:   | FileCheck %s --check-prefixes=CHECK,BOTH
// RUN: dhs-opt %s --dhs-share-tiles=min-missing=0 --split-input-file \
// RUN:   | FileCheck %s --check-prefixes=ALWAYS,BOTH
// A negative count is refused (dhs.share_rows's min_missing counts rows).
// RUN: not dhs-opt %s --dhs-share-tiles=min-missing=-1 --split-input-file 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NEGATIVE
// NEGATIVE: error: dhs-share-tiles: min-missing must be 0 or more, got -1
// The whole pipeline with --share-tiles is tested in share-tiles-pipeline.mlir.

// Staged attention reads its missing rows from the staging arena (HBM):
// shared only with min-missing = 0. Then every reader of a verify selection
// in the phase (the fetch and both layers' attention) reads the lists
// dhs.share_rows ordered, and the attention ops get the tile counts.
// CHECK-LABEL: func.func @verify_group
// CHECK-NOT: dhs.share_rows
// CHECK-NOT: shared(
// CHECK: return
// ALWAYS-LABEL: func.func @verify_group
// ALWAYS-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: memref<4x5x64x576xbf16>, %[[ROWS:[^:]*]]: memref<4x5x256xi32>, %[[SLOTS:[^:]*]]: memref<4x5x256xi32>, %[[START:[^:]*]]: memref<4xi64>, %[[LEN:[^:]*]]: memref<4xi32>
// ALWAYS: dhs.verify gamma = 4 {
// ALWAYS:   %[[STAGE:.*]] = dhs.scratch : memref<4x1280x2x656xi8>
// ALWAYS:   %[[ORDERED_ROWS:.*]] = dhs.scratch : memref<4x5x256xi32>
// ALWAYS:   %[[ORDERED_SLOTS:.*]] = dhs.scratch : memref<4x5x256xi32>
// ALWAYS:   %[[TILES:.*]] = dhs.scratch : memref<4xi32>
// ALWAYS:   dhs.share_rows rows(%[[ROWS]] : memref<4x5x256xi32>) slots(%[[SLOTS]] : memref<4x5x256xi32>) tile = 64 into(%[[ORDERED_ROWS]], %[[ORDERED_SLOTS]], %[[TILES]] : memref<4x5x256xi32>, memref<4x5x256xi32>, memref<4xi32>)
// ALWAYS:   dhs.fetch pool(%[[POOL]] : {{.*}}) rows(%[[ORDERED_ROWS]] : memref<4x5x256xi32>) slots(%[[ORDERED_SLOTS]] : memref<4x5x256xi32>) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[STAGE]] :
// ALWAYS:   dhs.attention queries(%[[Q]] : {{.*}}) rows(%[[ORDERED_ROWS]] : {{.*}}) slots(%[[ORDERED_SLOTS]] : {{.*}}) staging(%[[STAGE]] : {{.*}}) shared(%[[TILES]] : memref<4xi32>) pool({{.*}}) layer = 0
// ALWAYS:   dhs.attention queries(%[[Q]] : {{.*}}) rows(%[[ORDERED_ROWS]] : {{.*}}) slots(%[[ORDERED_SLOTS]] : {{.*}}) staging(%[[STAGE]] : {{.*}}) shared(%[[TILES]] : memref<4xi32>) pool({{.*}}) layer = 1
// ALWAYS-NOT: dhs.share_rows
func.func @verify_group(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>,
                        %q: memref<4x5x64x576xbf16>, %rows: memref<4x5x256xi32>,
                        %slots: memref<4x5x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
                        %o0: memref<4x5x64x512xbf16>, %o1: memref<4x5x64x512xbf16>) {
  dhs.verify gamma = 4 {
    %stage = dhs.scratch : memref<4x1280x2x656xi8>
    dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>) into(%stage : memref<4x1280x2x656xi8>)
    dhs.attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        staging(%stage : memref<4x1280x2x656xi8>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        layer = 0 output(%o0 : memref<4x5x64x512xbf16>) scale = 0.0416666679
    dhs.attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        staging(%stage : memref<4x1280x2x656xi8>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        layer = 1 output(%o1 : memref<4x5x64x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// Fused attention reads missing rows from the host itself: shared where at
// least min-missing prefix rows of a request are missing (the attribute is
// printed only when not 0).
// CHECK-LABEL: func.func @verify_fused
// CHECK-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: memref<4x5x64x576xbf16>, %[[ROWS:[^:]*]]: memref<4x5x256xi32>, %[[SLOTS:[^:]*]]: memref<4x5x256xi32>
// CHECK: dhs.verify gamma = 4 {
// CHECK:   %[[ORDERED_ROWS:.*]] = dhs.scratch : memref<4x5x256xi32>
// CHECK:   %[[ORDERED_SLOTS:.*]] = dhs.scratch : memref<4x5x256xi32>
// CHECK:   %[[TILES:.*]] = dhs.scratch : memref<4xi32>
// CHECK:   dhs.share_rows rows(%[[ROWS]] : memref<4x5x256xi32>) slots(%[[SLOTS]] : memref<4x5x256xi32>) tile = 64 min_missing = 32 into(%[[ORDERED_ROWS]], %[[ORDERED_SLOTS]], %[[TILES]] : memref<4x5x256xi32>, memref<4x5x256xi32>, memref<4xi32>)
// CHECK:   dhs.sparse_attention queries(%[[Q]] : {{.*}}) rows(%[[ORDERED_ROWS]] : {{.*}}) slots(%[[ORDERED_SLOTS]] : {{.*}}) history({{.*}}) shared(%[[TILES]] : memref<4xi32>) pool({{.*}}) layer = 0
// ALWAYS-LABEL: func.func @verify_fused
// ALWAYS:   dhs.share_rows rows({{.*}}) slots({{.*}}) tile = 64 into(
// ALWAYS:   dhs.sparse_attention {{.*}} shared(
func.func @verify_fused(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
                        %q: memref<4x5x64x576xbf16>, %rows: memref<4x5x256xi32>,
                        %slots: memref<4x5x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
                        %o: memref<4x5x64x512xbf16>) {
  dhs.verify gamma = 4 {
    dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        layer = 0 output(%o : memref<4x5x64x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// Left alone: attention outside a verify phase, and 16 heads (no
// tensor-core kernel). A sliding window is @window_not_shared below.
// CHECK-LABEL: func.func @not_shared
// CHECK-NOT: dhs.share_rows
// CHECK-NOT: shared(
// CHECK: return
// ALWAYS-LABEL: func.func @not_shared
// ALWAYS-NOT: dhs.share_rows
// ALWAYS-NOT: shared(
// ALWAYS: return
func.func @not_shared(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
                      %q: memref<4x5x64x576xbf16>, %q16: memref<4x5x16x576xbf16>,
                      %rows: memref<4x5x256xi32>, %slots: memref<4x5x256xi32>,
                      %start: memref<4xi64>, %len: memref<4xi32>,
                      %o: memref<4x5x64x512xbf16>, %o16: memref<4x5x16x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
      rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
      layer = 0 output(%o : memref<4x5x64x512xbf16>) scale = 0.0416666679
  dhs.verify gamma = 4 {
    dhs.sparse_attention queries(%q16 : memref<4x5x16x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        layer = 0 output(%o16 : memref<4x5x16x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// The bounds are inclusive: 8 positions (a portable cluster) of 2048
// selections each, Q x K = 16384, still share.
// CHECK-LABEL: func.func @largest_shared
// CHECK-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: memref<4x8x64x576xbf16>, %[[ROWS:[^:]*]]: memref<4x8x2048xi32>, %[[SLOTS:[^:]*]]: memref<4x8x2048xi32>
// CHECK:   %[[ORDERED_ROWS:.*]] = dhs.scratch : memref<4x8x2048xi32>
// CHECK:   %[[ORDERED_SLOTS:.*]] = dhs.scratch : memref<4x8x2048xi32>
// CHECK:   %[[TILES:.*]] = dhs.scratch : memref<4xi32>
// CHECK:   dhs.share_rows rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) tile = 64 min_missing = 32 into(%[[ORDERED_ROWS]], %[[ORDERED_SLOTS]], %[[TILES]] :
// CHECK:   dhs.sparse_attention queries(%[[Q]] : {{.*}}) rows(%[[ORDERED_ROWS]] : {{.*}}) slots(%[[ORDERED_SLOTS]] : {{.*}}) history({{.*}}) shared(%[[TILES]] : memref<4xi32>) pool(%[[POOL]] :
func.func @largest_shared(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
    %q: memref<4x8x64x576xbf16>, %rows: memref<4x8x2048xi32>,
    %slots: memref<4x8x2048xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %o: memref<4x8x64x512xbf16>) {
  dhs.verify gamma = 7 {
    dhs.sparse_attention queries(%q : memref<4x8x64x576xbf16>)
        rows(%rows : memref<4x8x2048xi32>) slots(%slots : memref<4x8x2048xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        layer = 0 output(%o : memref<4x8x64x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// 9 verify positions: more than a cluster's 8.
// BOTH-LABEL: func.func @nine_positions
// BOTH-NOT: dhs.share_rows
// BOTH-NOT: shared(
// BOTH: return
func.func @nine_positions(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
    %q: memref<4x9x64x576xbf16>, %rows: memref<4x9x64xi32>,
    %slots: memref<4x9x64xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %o: memref<4x9x64x512xbf16>) {
  dhs.verify gamma = 8 {
    dhs.sparse_attention queries(%q : memref<4x9x64x576xbf16>)
        rows(%rows : memref<4x9x64xi32>) slots(%slots : memref<4x9x64xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        layer = 0 output(%o : memref<4x9x64x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// 8 positions of 2112 selections: Q x K = 16896 > 16384, more than
// dhs.share_rows sorts in shared memory.
// BOTH-LABEL: func.func @too_many_selections
// BOTH-NOT: dhs.share_rows
// BOTH-NOT: shared(
// BOTH: return
func.func @too_many_selections(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
    %q: memref<4x8x64x576xbf16>, %rows: memref<4x8x2112xi32>,
    %slots: memref<4x8x2112xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %o: memref<4x8x64x512xbf16>) {
  dhs.verify gamma = 7 {
    dhs.sparse_attention queries(%q : memref<4x8x64x576xbf16>)
        rows(%rows : memref<4x8x2112xi32>) slots(%slots : memref<4x8x2112xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        layer = 0 output(%o : memref<4x8x64x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// A sliding window: the tensor-core kernel that shares tiles has none.
// BOTH-LABEL: func.func @window_not_shared
// BOTH-NOT: dhs.share_rows
// BOTH-NOT: shared(
// BOTH: return
func.func @window_not_shared(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
    %q: memref<4x5x64x576xbf16>, %rows: memref<4x5x256xi32>,
    %slots: memref<4x5x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %ring: memref<4x132x1x656xi8>, %tokens: memref<4xi32>,
    %o: memref<4x5x64x512xbf16>) {
  dhs.verify gamma = 4 {
    dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        window(%ring, %tokens : memref<4x132x1x656xi8>, memref<4xi32>) size = 128
        layer = 0 output(%o : memref<4x5x64x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// Attention that already has tile counts keeps them: no second ordering.
// BOTH-LABEL: func.func @already_shared
// BOTH-SAME: %[[TILES:[a-z0-9]+]]: memref<4xi32>, %{{[a-z0-9]+}}: memref<4x5x64x512xbf16>)
// BOTH-NOT: dhs.share_rows
// BOTH: dhs.sparse_attention {{.*}} shared(%[[TILES]] : memref<4xi32>)
// BOTH-NOT: dhs.share_rows
// BOTH: return
func.func @already_shared(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
    %q: memref<4x5x64x576xbf16>, %rows: memref<4x5x256xi32>,
    %slots: memref<4x5x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>, %tiles: memref<4xi32>,
    %o: memref<4x5x64x512xbf16>) {
  dhs.verify gamma = 4 {
    dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>) shared(%tiles : memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>)
        layer = 0 output(%o : memref<4x5x64x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// The slots are resolved again between the two layers' attention: the
// selection is written after its first reader, so it keeps its order.
// BOTH-LABEL: func.func @resolved_later
// BOTH-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: {{.*}}, %[[O0:[^:]*]]: {{.*}}, %[[O1:[^:]*]]: memref<4x5x64x512xbf16>)
// BOTH-NEXT: dhs.verify gamma = 4 {
// BOTH-NEXT: dhs.sparse_attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : memref<4xi64>, memref<4xi32>) pool(%[[POOL]] : {{.*}}) layer = 0 output(%[[O0]] :
// BOTH-NEXT: dhs.resolve pool(%[[POOL]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[SLOTS]] :
// BOTH-NEXT: dhs.sparse_attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : memref<4xi64>, memref<4xi32>) pool(%[[POOL]] : {{.*}}) layer = 1 output(%[[O1]] :
// BOTH-NEXT: }
func.func @resolved_later(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>,
    %q: memref<4x5x64x576xbf16>, %rows: memref<4x5x256xi32>,
    %slots: memref<4x5x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %o0: memref<4x5x64x512xbf16>, %o1: memref<4x5x64x512xbf16>) {
  dhs.verify gamma = 4 {
    dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        layer = 0 output(%o0 : memref<4x5x64x512xbf16>) scale = 0.0416666679
    dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        rows(%rows : memref<4x5x256xi32>) history(%start, %len : memref<4xi64>, memref<4xi32>)
        into(%slots : memref<4x5x256xi32>)
    dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        layer = 1 output(%o1 : memref<4x5x64x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// Likewise a selection dhs.topk writes after its first reader.
// BOTH-LABEL: func.func @selected_later
// BOTH-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: {{.*}}, %[[SCORES:[^:]*]]: {{.*}}, %[[O0:[^:]*]]: {{.*}}, %[[O1:[^:]*]]: memref<4x5x64x512xbf16>)
// BOTH-NEXT: dhs.verify gamma = 4 {
// BOTH-NEXT: dhs.sparse_attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : memref<4xi64>, memref<4xi32>) pool(%[[POOL]] : {{.*}}) layer = 0 output(%[[O0]] :
// BOTH-NEXT: dhs.topk scores(%[[SCORES]] : {{.*}}) history(%[[LEN]] : {{.*}}) into(%[[ROWS]] :
// BOTH-NEXT: dhs.sparse_attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : memref<4xi64>, memref<4xi32>) pool(%[[POOL]] : {{.*}}) layer = 1 output(%[[O1]] :
// BOTH-NEXT: }
func.func @selected_later(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>,
    %q: memref<4x5x64x576xbf16>, %rows: memref<4x5x256xi32>,
    %slots: memref<4x5x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %scores: memref<4x5x1024xf32>,
    %o0: memref<4x5x64x512xbf16>, %o1: memref<4x5x64x512xbf16>) {
  dhs.verify gamma = 4 {
    dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        layer = 0 output(%o0 : memref<4x5x64x512xbf16>) scale = 0.0416666679
    dhs.topk scores(%scores : memref<4x5x1024xf32>) history(%len : memref<4xi32>)
        into(%rows : memref<4x5x256xi32>)
    dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        layer = 1 output(%o1 : memref<4x5x64x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

// A selection written before its first reader (the step's own dhs.topk
// and dhs.resolve) is shared: dhs.share_rows runs after them, on what they
// wrote, and they keep reading and writing the unordered lists.
// CHECK-LABEL: func.func @selected_first
// CHECK-SAME: (%[[POOL:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: {{.*}}, %[[SCORES:[^:]*]]: {{.*}}, %[[O0:[^:]*]]: {{.*}}, %[[O1:[^:]*]]: memref<4x5x64x512xbf16>)
// CHECK-NEXT: dhs.verify gamma = 4 {
// CHECK-NEXT: dhs.topk scores(%[[SCORES]] : {{.*}}) history(%[[LEN]] : {{.*}}) into(%[[ROWS]] :
// CHECK-NEXT: dhs.resolve pool(%[[POOL]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) into(%[[SLOTS]] :
// CHECK-NEXT: %[[ORDERED_ROWS:.*]] = dhs.scratch : memref<4x5x256xi32>
// CHECK-NEXT: %[[ORDERED_SLOTS:.*]] = dhs.scratch : memref<4x5x256xi32>
// CHECK-NEXT: %[[TILES:.*]] = dhs.scratch : memref<4xi32>
// CHECK-NEXT: dhs.share_rows rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) tile = 64 min_missing = 32 into(%[[ORDERED_ROWS]], %[[ORDERED_SLOTS]], %[[TILES]] :
// CHECK-NEXT: dhs.sparse_attention queries(%[[Q]] : {{.*}}) rows(%[[ORDERED_ROWS]] : {{.*}}) slots(%[[ORDERED_SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) shared(%[[TILES]] : {{.*}}) pool(%[[POOL]] : {{.*}}) layer = 0 output(%[[O0]] :
// CHECK-NEXT: dhs.sparse_attention queries(%[[Q]] : {{.*}}) rows(%[[ORDERED_ROWS]] : {{.*}}) slots(%[[ORDERED_SLOTS]] : {{.*}}) history(%[[START]], %[[LEN]] : {{.*}}) shared(%[[TILES]] : {{.*}}) pool(%[[POOL]] : {{.*}}) layer = 1 output(%[[O1]] :
// CHECK-NEXT: }
func.func @selected_first(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>,
    %q: memref<4x5x64x576xbf16>, %rows: memref<4x5x256xi32>,
    %slots: memref<4x5x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %scores: memref<4x5x1024xf32>,
    %o0: memref<4x5x64x512xbf16>, %o1: memref<4x5x64x512xbf16>) {
  dhs.verify gamma = 4 {
    dhs.topk scores(%scores : memref<4x5x1024xf32>) history(%len : memref<4xi32>)
        into(%rows : memref<4x5x256xi32>)
    dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        rows(%rows : memref<4x5x256xi32>) history(%start, %len : memref<4xi64>, memref<4xi32>)
        into(%slots : memref<4x5x256xi32>)
    dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        layer = 0 output(%o0 : memref<4x5x64x512xbf16>) scale = 0.0416666679
    dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%start, %len : memref<4xi64>, memref<4xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 4096, host = ?>)
        layer = 1 output(%o1 : memref<4x5x64x512xbf16>) scale = 0.0416666679
  }
  return
}
