// RUN: dhs-opt %s | dhs-opt | FileCheck %s
// RUN: dhs-opt %s --mlir-print-op-generic | dhs-opt | FileCheck %s

// Row formats and pools of layer groups.
// CHECK-LABEL: func.func @pool_types
// CHECK-SAME: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>
// CHECK-SAME: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = 1048576>
// CHECK-SAME: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 8192, host = ?>
// CHECK-SAME: !dhs.kv_pool<#dhs.gqa<kv_heads = 8, head_dim = 128, dtype = bf16>, layers = 1, hbm = ?, host = ?>
func.func @pool_types(%a: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>,
                      %b: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = 1048576>,
                      %c: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 8192, host = ?>,
                      %d: !dhs.kv_pool<#dhs.gqa<kv_heads = 8, head_dim = 128, dtype = bf16>, layers = 1, hbm = ?, host = ?>) {
  return
}

// Tiers are byte views [tokens, layers, row bytes]; 656-byte FP8 rows,
// four layers per token.
// CHECK-LABEL: func.func @tiers
// CHECK: dhs.pool_tier hbm of %{{.*}} : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?> -> memref<4096x4x656xi8>
// CHECK: dhs.pool_tier host of %{{.*}} : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?> -> memref<?x4x656xi8>
// CHECK: dhs.step_status : memref<1xi32>
// CHECK: dhs.group_bindings : memref<?x?xi64>
// CHECK: dhs.scratch : memref<4x2048x4x656xi8>
// CHECK: dhs.scratch {offset = 4096 : i64, slot = 1 : i64} : memref<4x2048xi32>
func.func @tiers(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>) {
  %hbm = dhs.pool_tier hbm of %pool
      : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?> -> memref<4096x4x656xi8>
  %host = dhs.pool_tier host of %pool
      : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?> -> memref<?x4x656xi8>
  %status = dhs.step_status : memref<1xi32>
  %bindings = dhs.group_bindings : memref<?x?xi64>
  %stage = dhs.scratch : memref<4x2048x4x656xi8>
  %list = dhs.scratch {offset = 4096 : i64, slot = 1 : i64} : memref<4x2048xi32>
  return
}

// A fetch beside its attention: both take the ready flags of its tiles, and
// the attention the histories (it reads the tiles it takes from the host).
// CHECK-LABEL: func.func @overlapped
// CHECK: dhs.fetch pool({{.*}}) rows(%{{.*}} : memref<4x2x2048xi32>) slots(%{{.*}} : memref<4x2x2048xi32>) history({{.*}}) into(%{{.*}} : memref<4x4096x1x656xi8>) ready(%[[READY:.*]] : memref<4x64xi32>)
// CHECK: dhs.attention {{.*}} staging(%{{.*}} : memref<4x4096x1x656xi8>) ready(%[[READY]] : memref<4x64xi32>) history(%{{.*}}, %{{.*}} : memref<4xi64>, memref<4xi32>) pool
func.func @overlapped(%q: memref<4x2x64x576xbf16>, %rows: memref<4x2x2048xi32>,
                      %slots: memref<4x2x2048xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
                      %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 4096, host = ?>,
                      %out: memref<4x2x64x512xbf16>) {
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
  return
}

// Selection, residency, retrieval and both attention forms, each operand
// where it was written (rows and slots share a type: a swap would show).
// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[SCORES:[^:]*]]: {{.*}}, %[[Q:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[START:[^:]*]]: {{.*}}, %[[LEN:[^:]*]]: {{.*}}, %[[POOL:[^:]*]]: {{.*}}, %[[STAGE:[^:]*]]: {{.*}}, %[[UNION:[^:]*]]: {{.*}}, %[[REMAP:[^:]*]]: {{.*}}, %[[OUT:[^:]*]]: memref<4x2x64x512xbf16>)
// CHECK: dhs.topk scores(%[[SCORES]] : memref<4x2x8192xf32>) history(%[[LEN]] : memref<4xi32>) into(%[[ROWS]] : memref<4x2x2048xi32>)
// CHECK: dhs.resolve pool(%[[POOL]] : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>) rows(%[[ROWS]] : memref<4x2x2048xi32>) history(%[[START]], %[[LEN]] : memref<4xi64>, memref<4xi32>) into(%[[SLOTS]] : memref<4x2x2048xi32>)
// CHECK: dhs.fetch pool(%[[POOL]] : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>) rows(%[[ROWS]] : memref<4x2x2048xi32>) slots(%[[SLOTS]] : memref<4x2x2048xi32>) history(%[[START]], %[[LEN]] : memref<4xi64>, memref<4xi32>) into(%[[STAGE]] : memref<4x4096x4x656xi8>)
// CHECK: dhs.attention queries(%[[Q]] : memref<4x2x64x576xbf16>) rows(%[[ROWS]] : memref<4x2x2048xi32>) slots(%[[SLOTS]] : memref<4x2x2048xi32>) staging(%[[STAGE]] : memref<4x4096x4x656xi8>) pool(%[[POOL]] : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>) layer = 3 output(%[[OUT]] : memref<4x2x64x512xbf16>) scale = 0.0416666679
// CHECK: dhs.union_missing rows(%[[ROWS]] : memref<4x2x2048xi32>) slots(%[[SLOTS]] : memref<4x2x2048xi32>) into(%[[UNION]], %[[REMAP]] : memref<4x4096xi32>, memref<4x2x2048xi32>)
// CHECK: dhs.fetch pool(%[[POOL]] : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>) rows(%[[UNION]] : memref<4x4096xi32>) history(%[[START]], %[[LEN]] : memref<4xi64>, memref<4xi32>) into(%[[STAGE]] : memref<4x4096x4x656xi8>)
// CHECK: dhs.attention queries(%[[Q]] : {{.*}}) rows(%[[ROWS]] : {{.*}}) slots(%[[SLOTS]] : {{.*}}) staging(%[[STAGE]] : memref<4x4096x4x656xi8>) index(%[[REMAP]] : memref<4x2x2048xi32>) pool(%[[POOL]] : {{.*}}) layer = 0 output(%[[OUT]] : {{.*}})
// CHECK: dhs.sparse_attention queries(%[[Q]] : memref<4x2x64x576xbf16>) rows(%[[ROWS]] : memref<4x2x2048xi32>) slots(%[[SLOTS]] : memref<4x2x2048xi32>) history(%[[START]], %[[LEN]] : memref<4xi64>, memref<4xi32>) pool(%[[POOL]] : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>) layer = 1 output(%[[OUT]] : memref<4x2x64x512xbf16>) scale = 0.0416666679
func.func @step(%scores: memref<4x2x8192xf32>, %q: memref<4x2x64x576xbf16>,
                %rows: memref<4x2x2048xi32>, %slots: memref<4x2x2048xi32>,
                %start: memref<4xi64>, %len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>,
                %stage: memref<4x4096x4x656xi8>, %union: memref<4x4096xi32>,
                %remap: memref<4x2x2048xi32>, %out: memref<4x2x64x512xbf16>) {
  dhs.topk scores(%scores : memref<4x2x8192xf32>) history(%len : memref<4xi32>)
      into(%rows : memref<4x2x2048xi32>)
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
      rows(%rows : memref<4x2x2048xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>) into(%slots : memref<4x2x2048xi32>)
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
      rows(%rows : memref<4x2x2048xi32>) slots(%slots : memref<4x2x2048xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      into(%stage : memref<4x4096x4x656xi8>)
  dhs.attention queries(%q : memref<4x2x64x576xbf16>)
      rows(%rows : memref<4x2x2048xi32>) slots(%slots : memref<4x2x2048xi32>)
      staging(%stage : memref<4x4096x4x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
      layer = 3 output(%out : memref<4x2x64x512xbf16>) scale = 0.0416666679
  dhs.union_missing rows(%rows : memref<4x2x2048xi32>) slots(%slots : memref<4x2x2048xi32>)
      into(%union, %remap : memref<4x4096xi32>, memref<4x2x2048xi32>)
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
      rows(%union : memref<4x4096xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      into(%stage : memref<4x4096x4x656xi8>)
  dhs.attention queries(%q : memref<4x2x64x576xbf16>)
      rows(%rows : memref<4x2x2048xi32>) slots(%slots : memref<4x2x2048xi32>)
      staging(%stage : memref<4x4096x4x656xi8>) index(%remap : memref<4x2x2048xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
      layer = 0 output(%out : memref<4x2x64x512xbf16>) scale = 0.0416666679
  dhs.sparse_attention queries(%q : memref<4x2x64x576xbf16>)
      rows(%rows : memref<4x2x2048xi32>) slots(%slots : memref<4x2x2048xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
      layer = 1 output(%out : memref<4x2x64x512xbf16>) scale = 0.0416666679
  return
}

// Placing rows: copies into HBM slots recorded in the pool's residency map.
// CHECK-LABEL: func.func @place_rows
// CHECK: dhs.pool_map of %{{.*}} : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = 65536> -> memref<65536xi32>
// CHECK: dhs.place_rows pool(%{{.*}} : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = 65536>) rows(%{{.*}} : memref<512xi64>) slots(%{{.*}} : memref<512xi32>)
func.func @place_rows(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = 65536>,
                      %rows: memref<512xi64>, %slots: memref<512xi32>) {
  %map = dhs.pool_map of %pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = 65536> -> memref<65536xi32>
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = 65536>)
      rows(%rows : memref<512xi64>) slots(%slots : memref<512xi32>)
  return
}

// The replacement state and the step log of a pool.
// CHECK-LABEL: func.func @pool_state
// CHECK: dhs.pool_recency of %{{.*}} : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?> -> memref<4096x2xi32>
// CHECK: dhs.pool_log of %{{.*}} : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?> -> memref<?xi32>
func.func @pool_state(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>) {
  %recency = dhs.pool_recency of %pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?> -> memref<4096x2xi32>
  %log = dhs.pool_log of %pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?> -> memref<?xi32>
  return
}

// Residency: the protected working set and the optional-residency hints.
// CHECK-LABEL: func.func @residency
// CHECK: dhs.residency pool(%{{.*}} : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 65536, host = ?>) newest = 128 floor = 64 policy = adaptive replacement = clock promotions = 512
// CHECK: dhs.residency pool(%{{.*}} : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 8192, host = ?>) newest = 64 floor = 4096 policy = fixed{{$}}
// CHECK: dhs.residency pool(%{{.*}} : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 8192, host = ?>) newest = 64 floor = 4096 policy = fixed replacement = lru2
func.func @residency(%a: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 65536, host = ?>,
                     %b: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 8192, host = ?>,
                     %c: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 8192, host = ?>) {
  dhs.residency pool(%a : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 65536, host = ?>)
      newest = 128 floor = 64 policy = adaptive replacement = clock promotions = 512
  dhs.residency pool(%b : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 8192, host = ?>)
      newest = 64 floor = 4096 policy = fixed
  dhs.residency pool(%c : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 8192, host = ?>)
      newest = 64 floor = 4096 policy = fixed replacement = lru2
  return
}

// A DeepSeek-V4.1 layer: top-512 compressed entries plus a 128-token sliding
// window in a ring of 128 + 5 - 1 tokens.
// CHECK-LABEL: func.func @sliding_window
// CHECK: dhs.sparse_attention queries(%{{.*}} : memref<2x5x64x512xbf16>) rows(%{{.*}} : memref<2x5x512xi32>) slots(%{{.*}} : memref<2x5x512xi32>) history(%{{.*}}, %{{.*}} : memref<2xi64>, memref<2xi32>) pool(%{{.*}} : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>) window(%{{.*}}, %{{.*}} : memref<2x132x1x528xi8>, memref<2xi32>) size = 128 layer = 0 output(%{{.*}} : memref<2x5x64x512xbf16>) scale = 0.0441941731
func.func @sliding_window(%q: memref<2x5x64x512xbf16>, %rows: memref<2x5x512xi32>,
    %slots: memref<2x5x512xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %pool: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>,
    %ring: memref<2x132x1x528xi8>, %tokens: memref<2xi32>,
    %out: memref<2x5x64x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<2x5x64x512xbf16>)
      rows(%rows : memref<2x5x512xi32>) slots(%slots : memref<2x5x512xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>)
      window(%ring, %tokens : memref<2x132x1x528xi8>, memref<2xi32>) size = 128
      layer = 0 output(%out : memref<2x5x64x512xbf16>) scale = 0.0441941738
  return
}

// The same window on dhs.attention: staged rows (one per selection, 5 x 512)
// beside the ring.
// CHECK-LABEL: func.func @attention_window
// CHECK-SAME: (%[[Q:[^:]*]]: {{.*}}, %[[ROWS:[^:]*]]: {{.*}}, %[[SLOTS:[^:]*]]: {{.*}}, %[[STAGE:[^:]*]]: {{.*}}, %[[POOL:[^:]*]]: {{.*}}, %[[RING:[^:]*]]: {{.*}}, %[[TOKENS:[^:]*]]: {{.*}}, %[[OUT:[^:]*]]: memref<2x5x64x512xbf16>)
// CHECK: dhs.attention queries(%[[Q]] : memref<2x5x64x512xbf16>) rows(%[[ROWS]] : memref<2x5x512xi32>) slots(%[[SLOTS]] : memref<2x5x512xi32>) staging(%[[STAGE]] : memref<2x2560x1x528xi8>) pool(%[[POOL]] : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>) window(%[[RING]], %[[TOKENS]] : memref<2x132x1x528xi8>, memref<2xi32>) size = 128 layer = 0 output(%[[OUT]] : memref<2x5x64x512xbf16>) scale = 0.0441941731
func.func @attention_window(%q: memref<2x5x64x512xbf16>, %rows: memref<2x5x512xi32>,
    %slots: memref<2x5x512xi32>, %stage: memref<2x2560x1x528xi8>,
    %pool: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>,
    %ring: memref<2x132x1x528xi8>, %tokens: memref<2xi32>,
    %out: memref<2x5x64x512xbf16>) {
  dhs.attention queries(%q : memref<2x5x64x512xbf16>)
      rows(%rows : memref<2x5x512xi32>) slots(%slots : memref<2x5x512xi32>)
      staging(%stage : memref<2x2560x1x528xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>)
      window(%ring, %tokens : memref<2x132x1x528xi8>, memref<2xi32>) size = 128
      layer = 0 output(%out : memref<2x5x64x512xbf16>) scale = 0.0441941738
  return
}

// A verify step's selections with a shared prefix (dhs.share_rows): the
// five positions' first tiles[b] x 64 selections are the same rows.
// CHECK-LABEL: func.func @shared_prefix
// CHECK: dhs.sparse_attention queries(%{{.*}} : memref<2x5x64x576xbf16>) rows(%{{.*}} : memref<2x5x2048xi32>) slots(%{{.*}} : memref<2x5x2048xi32>) history(%{{.*}}, %{{.*}} : memref<2xi64>, memref<2xi32>) shared(%[[TILES:.*]] : memref<2xi32>) pool(
// CHECK: dhs.attention queries(%{{.*}} : memref<2x5x64x576xbf16>) rows(%{{.*}} : memref<2x5x2048xi32>) slots(%{{.*}} : memref<2x5x2048xi32>) staging(%{{.*}} : memref<2x10240x1x656xi8>) shared(%[[TILES]] : memref<2xi32>) pool(
func.func @shared_prefix(%q: memref<2x5x64x576xbf16>, %rows: memref<2x5x2048xi32>,
    %slots: memref<2x5x2048xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %tiles: memref<2xi32>, %stage: memref<2x10240x1x656xi8>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = ?, host = ?>,
    %out: memref<2x5x64x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<2x5x64x576xbf16>)
      rows(%rows : memref<2x5x2048xi32>) slots(%slots : memref<2x5x2048xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      shared(%tiles : memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = ?, host = ?>)
      layer = 0 output(%out : memref<2x5x64x512xbf16>) scale = 0.0416666679
  dhs.attention queries(%q : memref<2x5x64x576xbf16>)
      rows(%rows : memref<2x5x2048xi32>) slots(%slots : memref<2x5x2048xi32>)
      staging(%stage : memref<2x10240x1x656xi8>) shared(%tiles : memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = ?, host = ?>)
      layer = 0 output(%out : memref<2x5x64x512xbf16>) scale = 0.0416666679
  return
}

// Phases: a draft phase with its ring, a verify phase of gamma = 4, and
// acceptance by either rule.
// CHECK-LABEL: func.func @speculative
// CHECK: dhs.draft ring(%[[RING:.*]] : memref<2x128x1x1152xi8>) block = 5 {
// CHECK:   dhs.ring_append rows(%{{.*}} : memref<2x5x1x1152xi8>) positions(%{{.*}} : memref<2xi32>) into(%[[RING]] : memref<2x128x1x1152xi8>)
// CHECK:   dhs.ring_read ring(%[[RING]] : memref<2x128x1x1152xi8>) positions(%{{.*}} : memref<2xi32>) into(%{{.*}} : memref<2x128x1x1152xi8>)
// CHECK: }
// CHECK: dhs.verify gamma = 4 {
// CHECK:   dhs.sparse_attention queries(%{{.*}} : memref<2x5x16x576xbf16>)
// CHECK: }
// CHECK: dhs.ring_index positions(%{{.*}} : memref<2xi32>) offset = -5 window = 128 into(%{{.*}} : memref<2x5xi32>)
// CHECK: dhs.copy_rows src(%{{.*}} : memref<2x5x1x1152xi8>) dst(%{{.*}} : memref<2x128x1x1152xi8>) dst_index(%{{.*}} : memref<2x5xi32>)
// CHECK: dhs.accept greedy draft(%{{.*}} : memref<2x4xi32>) target(%{{.*}} : memref<2x5x1000xf32>) seeds(%{{.*}} : memref<2xi64>) step(%{{.*}} : memref<1xi64>) into(%{{.*}}, %{{.*}} : memref<2xi32>, memref<2xi32>)
// CHECK: dhs.accept rejection_sampling draft(%{{.*}} : memref<2x4xi32>) target(%{{.*}} : memref<2x5x1000xf32>) draft_probs(%{{.*}} : memref<2x4x1000xf32>)
func.func @speculative(%ring: memref<2x128x1x1152xi8>, %new: memref<2x5x1x1152xi8>,
                       %window: memref<2x128x1x1152xi8>, %pos: memref<2xi32>,
                       %q: memref<2x5x16x576xbf16>, %rows: memref<2x5x64xi32>,
                       %slots: memref<2x5x64xi32>, %start: memref<2xi64>,
                       %len: memref<2xi32>,
                       %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 512, host = ?>,
                       %out: memref<2x5x16x512xbf16>, %idx: memref<2x5xi32>,
                       %draft: memref<2x4xi32>, %p: memref<2x5x1000xf32>,
                       %qprobs: memref<2x4x1000xf32>, %seeds: memref<2xi64>,
                       %stepc: memref<1xi64>, %n: memref<2xi32>, %next: memref<2xi32>) {
  dhs.draft ring(%ring : memref<2x128x1x1152xi8>) block = 5 {
    dhs.ring_append rows(%new : memref<2x5x1x1152xi8>) positions(%pos : memref<2xi32>)
        into(%ring : memref<2x128x1x1152xi8>)
    dhs.ring_read ring(%ring : memref<2x128x1x1152xi8>) positions(%pos : memref<2xi32>)
        into(%window : memref<2x128x1x1152xi8>)
  }
  dhs.verify gamma = 4 {
    dhs.sparse_attention queries(%q : memref<2x5x16x576xbf16>)
        rows(%rows : memref<2x5x64xi32>) slots(%slots : memref<2x5x64xi32>)
        history(%start, %len : memref<2xi64>, memref<2xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 512, host = ?>)
        layer = 0 output(%out : memref<2x5x16x512xbf16>) scale = 0.0416666679
  }
  dhs.ring_index positions(%pos : memref<2xi32>) offset = -5 window = 128
      into(%idx : memref<2x5xi32>)
  dhs.copy_rows src(%new : memref<2x5x1x1152xi8>) dst(%ring : memref<2x128x1x1152xi8>)
      dst_index(%idx : memref<2x5xi32>)
  dhs.accept greedy draft(%draft : memref<2x4xi32>) target(%p : memref<2x5x1000xf32>)
      seeds(%seeds : memref<2xi64>) step(%stepc : memref<1xi64>)
      into(%n, %next : memref<2xi32>, memref<2xi32>)
  dhs.accept rejection_sampling draft(%draft : memref<2x4xi32>)
      target(%p : memref<2x5x1000xf32>) draft_probs(%qprobs : memref<2x4x1000xf32>)
      seeds(%seeds : memref<2xi64>) step(%stepc : memref<1xi64>)
      into(%n, %next : memref<2xi32>, memref<2xi32>)
  return
}

// copy_rows as a gather: dst[b, i] = src[b, src_index[b, i]] (five rows read
// out of a ring by slot).
// CHECK-LABEL: func.func @copy_rows_gather
// CHECK-SAME: (%[[SRC:[^:]*]]: {{.*}}, %[[DST:[^:]*]]: {{.*}}, %[[IDX:[^:]*]]: memref<2x5xi32>)
// CHECK: dhs.copy_rows src(%[[SRC]] : memref<2x128x1x1152xi8>) dst(%[[DST]] : memref<2x5x1x1152xi8>) src_index(%[[IDX]] : memref<2x5xi32>){{$}}
func.func @copy_rows_gather(%ring: memref<2x128x1x1152xi8>, %rows: memref<2x5x1x1152xi8>,
                            %idx: memref<2x5xi32>) {
  dhs.copy_rows src(%ring : memref<2x128x1x1152xi8>) dst(%rows : memref<2x5x1x1152xi8>)
      src_index(%idx : memref<2x5xi32>)
  return
}

// Dynamic batch and selection sizes are valid IR; codegen needs them static.
// CHECK-LABEL: func.func @dynamic_shapes
// CHECK: dhs.sparse_attention queries(%{{.*}} : memref<?x1x16x576xbf16>)
func.func @dynamic_shapes(%q: memref<?x1x16x576xbf16>, %rows: memref<?x1x?xi32>,
                          %slots: memref<?x1x?xi32>, %start: memref<?xi64>,
                          %len: memref<?xi32>,
                          %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>,
                          %out: memref<?x1x16x512xbf16>) {
  dhs.sparse_attention queries(%q : memref<?x1x16x576xbf16>)
      rows(%rows : memref<?x1x?xi32>) slots(%slots : memref<?x1x?xi32>)
      history(%start, %len : memref<?xi64>, memref<?xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>)
      layer = 0 output(%out : memref<?x1x16x512xbf16>) scale = 1.0
  return
}

// The appends between two steps, replayed over the device residency state
// (CLOCK).
// CHECK-LABEL: func.func @age_rows
// CHECK: dhs.age_rows pool(%{{.*}} : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>) appends(%{{.*}} : memref<16x4xi64>) hot(%{{.*}} : memref<1024xi64>) cleared(%{{.*}} : memref<1024xi32>) free(%{{.*}} : memref<1024xi32>) control(%{{.*}} : memref<8xi32>) into(%{{.*}}, %{{.*}} : memref<32xi64>, memref<32xi32>)
func.func @age_rows(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %appends: memref<16x4xi64>, %hot: memref<1024xi64>, %cleared: memref<1024xi32>,
    %free: memref<1024xi32>, %control: memref<8xi32>, %rows: memref<32xi64>,
    %slots: memref<32xi32>) {
  dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      appends(%appends : memref<16x4xi64>) hot(%hot : memref<1024xi64>)
      cleared(%cleared : memref<1024xi32>) free(%free : memref<1024xi32>)
      control(%control : memref<8xi32>) into(%rows, %slots : memref<32xi64>, memref<32xi32>)
  return
}

// A step's promotion decisions over the device residency state (CLOCK).
// CHECK-LABEL: func.func @plan_promotions
// CHECK: dhs.plan_promotions pool(%{{.*}} : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>) fetched(%{{.*}} : memref<4x64xi32>) history(%{{.*}} : memref<4xi64>) hot(%{{.*}} : memref<1024xi64>) cleared(%{{.*}} : memref<1024xi32>) free(%{{.*}} : memref<1024xi32>) control(%{{.*}} : memref<8xi32>) into(%{{.*}}, %{{.*}} : memref<512xi64>, memref<512xi32>) replacement = clock promotions = 16
func.func @plan_promotions(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<1024xi64>,
    %cleared: memref<1024xi32>, %free: memref<1024xi32>, %control: memref<8xi32>,
    %rows: memref<512xi64>, %slots: memref<512xi32>) {
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<1024xi64>) cleared(%cleared : memref<1024xi32>)
      free(%free : memref<1024xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<512xi64>, memref<512xi32>) replacement = clock promotions = 16
  return
}

// Each request's row ids ascending, -1 last (in place or into another buffer).
// CHECK-LABEL: func.func @sort_rows
// CHECK: dhs.sort_rows rows(%{{.*}} : memref<16x8192xi32>) into(%{{.*}} : memref<16x8192xi32>)
// CHECK: dhs.sort_rows rows(%[[U:.*]] : memref<?x?xi32>) into(%[[U]] : memref<?x?xi32>)
func.func @sort_rows(%union: memref<16x8192xi32>, %sorted: memref<16x8192xi32>,
                     %open: memref<?x?xi32>) {
  dhs.sort_rows rows(%union : memref<16x8192xi32>) into(%sorted : memref<16x8192xi32>)
  dhs.sort_rows rows(%open : memref<?x?xi32>) into(%open : memref<?x?xi32>)
  return
}

// A plan under the pool's residency spec (the same rule and cap; floor = 0,
// the default, is not printed).
// CHECK-LABEL: func.func @plan_promotions_spec
// CHECK: dhs.residency pool(%[[POOL:[^ ]*]] : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>) newest = 64 policy = adaptive replacement = clock promotions = 16{{$}}
// CHECK-NEXT: dhs.plan_promotions pool(%[[POOL]] : {{.*}}) {{.*}} replacement = clock promotions = 16
func.func @plan_promotions_spec(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<1024xi64>,
    %cleared: memref<1024xi32>, %free: memref<1024xi32>, %control: memref<8xi32>,
    %rows: memref<512xi64>, %slots: memref<512xi32>) {
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      newest = 64 floor = 0 policy = adaptive replacement = clock promotions = 16
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<1024xi64>) cleared(%cleared : memref<1024xi32>)
      free(%free : memref<1024xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<512xi64>, memref<512xi32>) replacement = clock promotions = 16
  return
}

// A verify step's selections with the rows every position selected first,
// in tiles of 64 (static and `?` shapes; one position).
// CHECK-LABEL: func.func @share_rows
// CHECK: dhs.share_rows rows(%{{.*}} : memref<4x5x256xi32>) slots(%{{.*}} : memref<4x5x256xi32>) tile = 64 into(%{{.*}}, %{{.*}}, %{{.*}} : memref<4x5x256xi32>, memref<4x5x256xi32>, memref<4xi32>)
// CHECK: dhs.share_rows rows(%{{.*}} : memref<?x?x?xi32>) slots(%{{.*}} : memref<?x?x?xi32>) tile = 16 into(%{{.*}}, %{{.*}}, %{{.*}} : memref<?x?x?xi32>, memref<?x?x?xi32>, memref<?xi32>)
// CHECK: dhs.share_rows rows(%{{.*}} : memref<2x1x2048xi32>) slots(%{{.*}} : memref<2x1x2048xi32>) tile = 64 into
// Shared only where 32 prefix rows are missing from HBM (0, the default,
// is not printed).
// CHECK: dhs.share_rows rows(%{{.*}} : memref<4x5x256xi32>) slots(%{{.*}} : memref<4x5x256xi32>) tile = 64 min_missing = 32 into(
// CHECK: dhs.share_rows rows(%{{.*}} : memref<4x5x256xi32>) slots(%{{.*}} : memref<4x5x256xi32>) tile = 64 into(
func.func @share_rows(%rows: memref<4x5x256xi32>, %slots: memref<4x5x256xi32>,
                      %shared_rows: memref<4x5x256xi32>, %shared_slots: memref<4x5x256xi32>,
                      %tiles: memref<4xi32>, %open: memref<?x?x?xi32>, %open_tiles: memref<?xi32>,
                      %one: memref<2x1x2048xi32>, %one_tiles: memref<2xi32>) {
  dhs.share_rows rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>) tile = 64
      into(%shared_rows, %shared_slots, %tiles
           : memref<4x5x256xi32>, memref<4x5x256xi32>, memref<4xi32>)
  dhs.share_rows rows(%open : memref<?x?x?xi32>) slots(%open : memref<?x?x?xi32>) tile = 16
      into(%open, %open, %open_tiles : memref<?x?x?xi32>, memref<?x?x?xi32>, memref<?xi32>)
  dhs.share_rows rows(%one : memref<2x1x2048xi32>) slots(%one : memref<2x1x2048xi32>) tile = 64
      into(%one, %one, %one_tiles : memref<2x1x2048xi32>, memref<2x1x2048xi32>, memref<2xi32>)
  dhs.share_rows rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>) tile = 64
      min_missing = 32 into(%shared_rows, %shared_slots, %tiles
           : memref<4x5x256xi32>, memref<4x5x256xi32>, memref<4xi32>)
  dhs.share_rows rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>) tile = 64
      min_missing = 0 into(%shared_rows, %shared_slots, %tiles
           : memref<4x5x256xi32>, memref<4x5x256xi32>, memref<4xi32>)
  return
}

// A step's misses written back: the pool's write-back ring, each missing
// selection's ring entry from resolve, carried by the union, the sort and
// the plan to place_rows; a fetch of the missing rows writes them there too.
// CHECK-LABEL: func.func @write_back
// CHECK: dhs.pool_write_back of %{{.*}} : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?> -> memref<?x4x656xi8>
// CHECK: dhs.resolve pool(%{{.*}}) rows(%{{.*}} : memref<4x1x64xi32>) history(%{{.*}}, %{{.*}} : memref<4xi64>, memref<4xi32>) into(%{{.*}} : memref<4x1x64xi32>) write_back(%{{.*}} : memref<4x1x64xi32>)
// CHECK: dhs.fetch pool(%{{.*}}) rows(%{{.*}} : memref<4x1x64xi32>) slots(%{{.*}} : memref<4x1x64xi32>) write_back(%{{.*}} : memref<4x1x64xi32>) history(%{{.*}}, %{{.*}} : memref<4xi64>, memref<4xi32>) into(%{{.*}} : memref<4x64x4x656xi8>)
// CHECK: dhs.union_missing rows(%{{.*}} : memref<4x1x64xi32>) slots(%{{.*}} : memref<4x1x64xi32>) into(%{{.*}}, %{{.*}} : memref<4x64xi32>, memref<4x1x64xi32>) write_back(%{{.*}} : memref<4x1x64xi32>) sources(%{{.*}} : memref<4x64xi32>)
// CHECK: dhs.sort_rows rows(%{{.*}} : memref<4x64xi32>) into(%{{.*}} : memref<4x64xi32>) carry(%{{.*}} : memref<4x64xi32>) into(%{{.*}} : memref<4x64xi32>)
// CHECK: dhs.plan_promotions {{.*}} into(%{{.*}}, %{{.*}} : memref<512xi64>, memref<512xi32>) sources(%{{.*}} : memref<4x64xi32>) into(%{{.*}} : memref<512xi32>) replacement = clock
// CHECK: dhs.place_rows pool(%{{.*}}) rows(%{{.*}} : memref<512xi64>) slots(%{{.*}} : memref<512xi32>) sources(%{{.*}} : memref<512xi32>)
func.func @write_back(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
                      %rows: memref<4x1x64xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
                      %slots: memref<4x1x64xi32>, %entries: memref<4x1x64xi32>,
                      %union: memref<4x64xi32>, %remap: memref<4x1x64xi32>,
                      %sources: memref<4x64xi32>, %hot: memref<1024xi64>,
                      %cleared: memref<1024xi32>, %free: memref<1024xi32>,
                      %control: memref<8xi32>, %plan_rows: memref<512xi64>,
                      %plan_slots: memref<512xi32>, %plan_sources: memref<512xi32>,
                      %stage: memref<4x64x4x656xi8>) {
  %ring = dhs.pool_write_back of %pool
      : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?> -> memref<?x4x656xi8>
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      rows(%rows : memref<4x1x64xi32>) history(%start, %len : memref<4xi64>, memref<4xi32>)
      into(%slots : memref<4x1x64xi32>) write_back(%entries : memref<4x1x64xi32>)
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      rows(%rows : memref<4x1x64xi32>) slots(%slots : memref<4x1x64xi32>)
      write_back(%entries : memref<4x1x64xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>) into(%stage : memref<4x64x4x656xi8>)
  dhs.union_missing rows(%rows : memref<4x1x64xi32>) slots(%slots : memref<4x1x64xi32>)
      into(%union, %remap : memref<4x64xi32>, memref<4x1x64xi32>)
      write_back(%entries : memref<4x1x64xi32>) sources(%sources : memref<4x64xi32>)
  dhs.sort_rows rows(%union : memref<4x64xi32>) into(%union : memref<4x64xi32>)
      carry(%sources : memref<4x64xi32>) into(%sources : memref<4x64xi32>)
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      fetched(%union : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<1024xi64>) cleared(%cleared : memref<1024xi32>)
      free(%free : memref<1024xi32>) control(%control : memref<8xi32>)
      into(%plan_rows, %plan_slots : memref<512xi64>, memref<512xi32>)
      sources(%sources : memref<4x64xi32>) into(%plan_sources : memref<512xi32>)
      replacement = clock
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      rows(%plan_rows : memref<512xi64>) slots(%plan_slots : memref<512xi32>)
      sources(%plan_sources : memref<512xi32>)
  return
}
