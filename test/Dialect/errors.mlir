// RUN: dhs-opt %s -split-input-file -verify-diagnostics

// expected-error @below {{HBM capacity must be a positive number of slots or '?', got 0}}
func.func @zero_hbm(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 0, host = ?>) {
  return
}

// -----

// expected-error @below {{host capacity must be a positive number of rows or '?', got -5}}
func.func @negative_host(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 8, host = -5>) {
  return
}

// -----

// expected-error @+2 {{unknown attribute `mla_fp4` in dialect `dhs`}}
// expected-error @+1 {{failed to parse Dhs_KVPoolType parameter 'format'}}
func.func @unknown_format(%pool: !dhs.kv_pool<#dhs.mla_fp4, layers = 1, hbm = 8, host = ?>) {
  return
}

// -----

// expected-error @below {{a layer group has at least one layer, got 0}}
func.func @no_layers(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 0, hbm = 8, host = ?>) {
  return
}

// -----

// expected-error @+2 {{GQA head_dim must be a positive multiple of 32, got 100}}
// expected-error @+1 {{failed to parse Dhs_KVPoolType parameter 'format'}}
func.func @gqa_head_dim(%pool: !dhs.kv_pool<#dhs.gqa<kv_heads = 8, head_dim = 100, dtype = bf16>, layers = 1, hbm = 8, host = ?>) {
  return
}

// -----

// expected-error @+2 {{GQA rows hold bf16, f16 or f32, not 'i32'}}
// expected-error @+1 {{failed to parse Dhs_KVPoolType parameter 'format'}}
func.func @gqa_dtype(%pool: !dhs.kv_pool<#dhs.gqa<kv_heads = 8, head_dim = 128, dtype = i32>, layers = 1, hbm = 8, host = ?>) {
  return
}

// -----

// kv_heads = 0: a GQA row without KV heads.
// expected-error @+2 {{a GQA row needs at least one KV head, got 0}}
// expected-error @+1 {{failed to parse Dhs_KVPoolType parameter 'format'}}
func.func @gqa_no_kv_heads(%pool: !dhs.kv_pool<#dhs.gqa<kv_heads = 0, head_dim = 128, dtype = bf16>, layers = 1, hbm = 8, host = ?>) {
  return
}

// -----

func.func @tier_wrong_row_bytes(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>) {
  // expected-error @below {{'dhs.pool_tier' op the result holds rows of 1152 bytes but row format mla_fp8 has 656}}
  %0 = dhs.pool_tier hbm of %pool
      : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?> -> memref<4096x4x1152xi8>
  return
}

// -----

func.func @tier_wrong_layers(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>) {
  // expected-error @below {{'dhs.pool_tier' op the result holds 2 layers per token but the pool's group has 4}}
  %0 = dhs.pool_tier hbm of %pool
      : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?> -> memref<4096x2x656xi8>
  return
}

// -----

func.func @tier_wrong_capacity(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>) {
  // expected-error @below {{'dhs.pool_tier' op the hbm tier holds 4096 tokens but the result has 1024}}
  %0 = dhs.pool_tier hbm of %pool
      : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?> -> memref<1024x1x1152xi8>
  return
}

// -----

func.func @tier_wrong_dtype(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>) {
  // expected-error @below {{'dhs.pool_tier' op result #0 must be 3D memref of 8-bit signless integer values}}
  %0 = dhs.pool_tier host of %pool
      : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?> -> memref<?x576xbf16>
  return
}

// -----

// A tier is viewed whole: a strided view with an offset is not the tier.
func.func @tier_strided(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>) {
  // expected-error @below {{'dhs.pool_tier' op rows must have the identity layout}}
  %0 = dhs.pool_tier hbm of %pool
      : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>
        -> memref<4096x4x656xi8, strided<[2624, 656, 1], offset: 656>>
  return
}

// -----

func.func @status_not_one_word() {
  // expected-error @below {{'dhs.step_status' op the status is one word: expected memref<1xi32>, got 'memref<2xi32>'}}
  %0 = dhs.step_status : memref<2xi32>
  return
}

// -----

func.func @group_bindings_static_groups() {
  // expected-error @below {{'dhs.group_bindings' op the table's groups and parameters are the launch's: expected memref<?x?xi64>, got 'memref<4x?xi64>'}}
  %0 = dhs.group_bindings : memref<4x?xi64>
  return
}

// -----

func.func @queries_wrong_dtype(%q: memref<4x1x16x576xf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{operand #0 must be 4D memref of bfloat16 type values}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @queries_wrong_head_dim(%q: memref<4x1x16x128xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{queries have 128 dims per head but row format mla_bf16 has keys of 576 dims}}
  dhs.sparse_attention queries(%q : memref<4x1x16x128xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @output_wrong_value_dim(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<4x1x16x576xbf16>) {
  // expected-error @below {{output has 576 dims per head but row format mla_bf16 has values of 512 dims}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x576xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @rows_wrong_batch(%q: memref<4x1x16x576xbf16>, %rows: memref<3x1x256xi32>,
    %slots: memref<3x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{row_ids dimension 0 (requests) is 3, expected 4}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<3x1x256xi32>) slots(%slots : memref<3x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// row_ids: 2 query positions for 1.
func.func @rows_wrong_positions(%q: memref<4x1x16x576xbf16>, %rows: memref<4x2x256xi32>,
    %slots: memref<4x2x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{'dhs.sparse_attention' op row_ids dimension 1 (query positions) is 2, expected 1}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x2x256xi32>) slots(%slots : memref<4x2x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @shared_wrong_batch(%q: memref<4x5x64x576xbf16>, %rows: memref<4x5x256xi32>,
    %slots: memref<4x5x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>, %tiles: memref<2xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>, %out: memref<4x5x64x512xbf16>) {
  // expected-error @below {{shared dimension 0 (requests) is 2, expected 4}}
  dhs.sparse_attention queries(%q : memref<4x5x64x576xbf16>)
      rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>) shared(%tiles : memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x5x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @shared_too_many_positions(%q: memref<4x9x64x576xbf16>, %rows: memref<4x9x256xi32>,
    %slots: memref<4x9x256xi32>, %stage: memref<4x2304x1x656xi8>, %tiles: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>, %out: memref<4x9x64x512xbf16>) {
  // expected-error @below {{shares rows among 9 query positions; a cluster holds at most 8}}
  dhs.attention queries(%q : memref<4x9x64x576xbf16>)
      rows(%rows : memref<4x9x256xi32>) slots(%slots : memref<4x9x256xi32>)
      staging(%stage : memref<4x2304x1x656xi8>) shared(%tiles : memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x9x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @output_wrong_heads(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<4x1x8x512xbf16>) {
  // expected-error @below {{output dimension 2 (heads) is 8, expected 16}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x8x512xbf16>) scale = 0.0416666679
  return
}

// -----

// output: 2 requests for 4 requests' queries.
func.func @sparse_attention_output_batch(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<2x1x16x512xbf16>) {
  // expected-error @below {{'dhs.sparse_attention' op output dimension 0 (requests) is 2, expected 4}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<2x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// output: 2 query positions for 1.
func.func @sparse_attention_output_positions(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<4x2x16x512xbf16>) {
  // expected-error @below {{'dhs.sparse_attention' op output dimension 1 (query positions) is 2, expected 1}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x2x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

// No requests: every shape agrees, but the operands are empty.
func.func @sparse_attention_empty(%q: memref<0x1x16x576xbf16>, %rows: memref<0x1x256xi32>,
    %slots: memref<0x1x256xi32>, %start: memref<0xi64>, %len: memref<0xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<0x1x16x512xbf16>) {
  // expected-error @below {{'dhs.sparse_attention' op has an empty operand of type 'memref<0x1x16x576xbf16>'}}
  dhs.sparse_attention queries(%q : memref<0x1x16x576xbf16>)
      rows(%rows : memref<0x1x256xi32>) slots(%slots : memref<0x1x256xi32>)
      history(%start, %len : memref<0xi64>, memref<0xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<0x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @slots_wrong_shape(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x128xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{slots must have the shape of row_ids: one slot per selected row, got 'memref<4x1x128xi32>' for 'memref<4x1x256xi32>'}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x128xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @history_wrong_batch(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<2xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{history_start dimension 0 (requests) is 2, expected 4}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<2xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @history_len_wrong_dtype(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi64>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{operand #4 must be 1D memref of 32-bit signless integer values}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi64>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @no_rows_selected(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x0xi32>,
    %slots: memref<4x1x0xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{selects no rows (K = 0)}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x0xi32>) slots(%slots : memref<4x1x0xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @bad_scale(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{softmax scale must be a positive finite number, got -1}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = -1.0
  return
}

// -----

func.func @layer_outside_group(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{layer 4 is outside the pool's group of 4 layers}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 2048, host = ?>)
      layer = 4 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @gqa_heads(%q: memref<4x1x12x128xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.gqa<kv_heads = 8, head_dim = 128, dtype = bf16>, layers = 1, hbm = 2048, host = ?>,
    %out: memref<4x1x12x128xbf16>) {
  // expected-error @below {{12 query heads cannot share 8 KV heads evenly}}
  dhs.sparse_attention queries(%q : memref<4x1x12x128xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.gqa<kv_heads = 8, head_dim = 128, dtype = bf16>, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x12x128xbf16>) scale = 0.088
  return
}

// -----

func.func @topk_too_many(%s: memref<2x1x100xf32>, %len: memref<2xi32>, %rows: memref<2x1x128xi32>) {
  // expected-error @below {{selects k = 128 rows out of 100 scored rows}}
  dhs.topk scores(%s : memref<2x1x100xf32>) history(%len : memref<2xi32>)
      into(%rows : memref<2x1x128xi32>)
  return
}

// -----

// K = 0: nothing to select.
func.func @topk_no_rows(%s: memref<2x1x100xf32>, %len: memref<2xi32>, %rows: memref<2x1x0xi32>) {
  // expected-error @below {{'dhs.topk' op selects no rows (k = 0)}}
  dhs.topk scores(%s : memref<2x1x100xf32>) history(%len : memref<2xi32>)
      into(%rows : memref<2x1x0xi32>)
  return
}

// -----

// rows: 3 requests for 2 requests' scores.
func.func @topk_rows_batch(%s: memref<2x1x100xf32>, %len: memref<2xi32>, %rows: memref<3x1x64xi32>) {
  // expected-error @below {{'dhs.topk' op rows dimension 0 (requests) is 3, expected 2}}
  dhs.topk scores(%s : memref<2x1x100xf32>) history(%len : memref<2xi32>)
      into(%rows : memref<3x1x64xi32>)
  return
}

// -----

// rows: 2 query positions for 1 position's scores.
func.func @topk_rows_positions(%s: memref<2x1x100xf32>, %len: memref<2xi32>, %rows: memref<2x2x64xi32>) {
  // expected-error @below {{'dhs.topk' op rows dimension 1 (query positions) is 2, expected 1}}
  dhs.topk scores(%s : memref<2x1x100xf32>) history(%len : memref<2xi32>)
      into(%rows : memref<2x2x64xi32>)
  return
}

// -----

// history_len: 4 lengths for 2 requests.
func.func @topk_history_batch(%s: memref<2x1x100xf32>, %len: memref<4xi32>, %rows: memref<2x1x64xi32>) {
  // expected-error @below {{'dhs.topk' op history_len dimension 0 (requests) is 4, expected 2}}
  dhs.topk scores(%s : memref<2x1x100xf32>) history(%len : memref<4xi32>)
      into(%rows : memref<2x1x64xi32>)
  return
}

// -----

// slots: 32 per position for 64 selections.
func.func @resolve_slots_shape(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>,
    %rows: memref<4x1x64xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %slots: memref<4x1x32xi32>) {
  // expected-error @below {{'dhs.resolve' op slots must have the shape of rows, got 'memref<4x1x32xi32>' for 'memref<4x1x64xi32>'}}
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
      rows(%rows : memref<4x1x64xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>) into(%slots : memref<4x1x32xi32>)
  return
}

// -----

// history_start: 2 starts for 4 requests.
func.func @resolve_history_start(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>,
    %rows: memref<4x1x64xi32>, %start: memref<2xi64>, %len: memref<4xi32>,
    %slots: memref<4x1x64xi32>) {
  // expected-error @below {{'dhs.resolve' op history_start dimension 0 (requests) is 2, expected 4}}
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
      rows(%rows : memref<4x1x64xi32>)
      history(%start, %len : memref<2xi64>, memref<4xi32>) into(%slots : memref<4x1x64xi32>)
  return
}

// -----

// history_len: 8 lengths for 4 requests.
func.func @resolve_history_len(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>,
    %rows: memref<4x1x64xi32>, %start: memref<4xi64>, %len: memref<8xi32>,
    %slots: memref<4x1x64xi32>) {
  // expected-error @below {{'dhs.resolve' op history_len dimension 0 (requests) is 8, expected 4}}
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
      rows(%rows : memref<4x1x64xi32>)
      history(%start, %len : memref<4xi64>, memref<8xi32>) into(%slots : memref<4x1x64xi32>)
  return
}

// -----

func.func @fetch_format_mismatch(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>,
    %rows: memref<2x1x64xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %stage: memref<2x64x4x1152xi8>) {
  // expected-error @below {{staging holds rows of 1152 bytes but row format mla_fp8 has 656}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x64x4x1152xi8>)
  return
}

// -----

func.func @fetch_staging_too_small(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>,
    %rows: memref<2x5x64xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %stage: memref<2x64x4x656xi8>) {
  // expected-error @below {{staging dimension 1 (rows per request) is 64, expected 320}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>)
      rows(%rows : memref<2x5x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x64x4x656xi8>)
  return
}

// -----

func.func @fetch_ready_tiles(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %rows: memref<2x2x128xi32>, %slots: memref<2x2x128xi32>, %start: memref<2xi64>,
    %len: memref<2xi32>, %stage: memref<2x256x1x656xi8>, %ready: memref<2x2xi32>) {
  // expected-error @below {{ready dimension 1 (tiles of listed rows) is 2, expected 4}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      rows(%rows : memref<2x2x128xi32>) slots(%slots : memref<2x2x128xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x256x1x656xi8>) ready(%ready : memref<2x2xi32>)
  return
}

// -----

func.func @fetch_ready_partial_tiles(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %rows: memref<2x2x96xi32>, %slots: memref<2x2x96xi32>, %start: memref<2xi64>,
    %len: memref<2xi32>, %stage: memref<2x192x1x656xi8>, %ready: memref<2x3xi32>) {
  // expected-error @below {{ready flags mark tiles of 64 listed rows of a query position: a position lists 96}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      rows(%rows : memref<2x2x96xi32>) slots(%slots : memref<2x2x96xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x192x1x656xi8>) ready(%ready : memref<2x3xi32>)
  return
}

// -----

// rows: a flat list, without a requests dimension.
func.func @fetch_rows_rank(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>,
    %rows: memref<64xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %stage: memref<2x64x4x656xi8>) {
  // expected-error @below {{'dhs.fetch' op rows are [requests, ...], got 'memref<64xi32>'}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>)
      rows(%rows : memref<64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x64x4x656xi8>)
  return
}

// -----

// slots: 32 per position for 64 listed rows.
func.func @fetch_slots_shape(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>,
    %rows: memref<2x1x64xi32>, %slots: memref<2x1x32xi32>, %start: memref<2xi64>,
    %len: memref<2xi32>, %stage: memref<2x64x4x656xi8>) {
  // expected-error @below {{'dhs.fetch' op slots must have the shape of rows, got 'memref<2x1x32xi32>' for 'memref<2x1x64xi32>'}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x64x4x656xi8>)
  return
}

// -----

// write_back entries belong to resolved selections: a union fetch has none.
func.func @fetch_write_back_union(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>,
    %rows: memref<2x64xi32>, %entries: memref<2x64xi32>, %start: memref<2xi64>,
    %len: memref<2xi32>, %stage: memref<2x64x4x656xi8>) {
  // expected-error @below {{'dhs.fetch' op write_back needs slots: its entries belong to resolved selections (dhs.resolve)}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>)
      rows(%rows : memref<2x64xi32>) write_back(%entries : memref<2x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x64x4x656xi8>)
  return
}

// -----

// Beside a one-layer attention (ready flags), the tiles the attention takes
// would miss the ring.
func.func @fetch_write_back_beside_one_layer(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %rows: memref<2x1x64xi32>, %slots: memref<2x1x64xi32>, %entries: memref<2x1x64xi32>,
    %start: memref<2xi64>, %len: memref<2xi32>, %stage: memref<2x64x1x656xi8>,
    %ready: memref<2x1xi32>) {
  // expected-error @below {{'dhs.fetch' op write_back with ready flags needs a layer group's pool: beside a one-layer attention, the tiles it takes are not written back}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      write_back(%entries : memref<2x1x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x64x1x656xi8>) ready(%ready : memref<2x1xi32>)
  return
}

// -----

// write_back: an entry for 32 of 64 selections a position.
func.func @fetch_write_back_shape(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>,
    %rows: memref<2x1x64xi32>, %slots: memref<2x1x64xi32>, %entries: memref<2x1x32xi32>,
    %start: memref<2xi64>, %len: memref<2xi32>, %stage: memref<2x64x4x656xi8>) {
  // expected-error @below {{'dhs.fetch' op write_back must have the shape of rows, got 'memref<2x1x32xi32>' for 'memref<2x1x64xi32>'}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      write_back(%entries : memref<2x1x32xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x64x4x656xi8>)
  return
}

// -----

// staging: 3 requests' rows for 2 requests.
func.func @fetch_staging_batch(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>,
    %rows: memref<2x1x64xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %stage: memref<3x64x4x656xi8>) {
  // expected-error @below {{'dhs.fetch' op staging dimension 0 (requests) is 3, expected 2}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<3x64x4x656xi8>)
  return
}

// -----

// ready: flags for 4 requests, 2 listed.
func.func @fetch_ready_batch(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %rows: memref<2x2x128xi32>, %slots: memref<2x2x128xi32>, %start: memref<2xi64>,
    %len: memref<2xi32>, %stage: memref<2x256x1x656xi8>, %ready: memref<4x4xi32>) {
  // expected-error @below {{'dhs.fetch' op ready dimension 0 (requests) is 4, expected 2}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      rows(%rows : memref<2x2x128xi32>) slots(%slots : memref<2x2x128xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      into(%stage : memref<2x256x1x656xi8>) ready(%ready : memref<4x4xi32>)
  return
}

// -----

// history_start: 3 starts for 2 requests.
func.func @fetch_history_start(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>,
    %rows: memref<2x1x64xi32>, %start: memref<3xi64>, %len: memref<2xi32>,
    %stage: memref<2x64x4x656xi8>) {
  // expected-error @below {{'dhs.fetch' op history_start dimension 0 (requests) is 3, expected 2}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x64xi32>)
      history(%start, %len : memref<3xi64>, memref<2xi32>)
      into(%stage : memref<2x64x4x656xi8>)
  return
}

// -----

// history_len: 4 lengths for 2 requests.
func.func @fetch_history_len(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>,
    %rows: memref<2x1x64xi32>, %start: memref<2xi64>, %len: memref<4xi32>,
    %stage: memref<2x64x4x656xi8>) {
  // expected-error @below {{'dhs.fetch' op history_len dimension 0 (requests) is 4, expected 2}}
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>)
      rows(%rows : memref<2x1x64xi32>)
      history(%start, %len : memref<2xi64>, memref<4xi32>)
      into(%stage : memref<2x64x4x656xi8>)
  return
}

// -----

func.func @attention_ready_with_index(%q: memref<2x1x64x576xbf16>, %rows: memref<2x1x64xi32>,
    %slots: memref<2x1x64xi32>, %stage: memref<2x64x1x656xi8>, %index: memref<2x1x64xi32>,
    %ready: memref<2x1xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %out: memref<2x1x64x512xbf16>) {
  // expected-error @below {{ready flags follow the selection order: no staging index}}
  dhs.attention queries(%q : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      staging(%stage : memref<2x64x1x656xi8>) ready(%ready : memref<2x1xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      index(%index : memref<2x1x64xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @attention_ready_without_history(%q: memref<2x1x64x576xbf16>,
    %rows: memref<2x1x64xi32>, %slots: memref<2x1x64xi32>, %stage: memref<2x64x1x656xi8>,
    %ready: memref<2x1xi32>, %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %out: memref<2x1x64x512xbf16>) {
  // expected-error @below {{ready flags and history go together}}
  dhs.attention queries(%q : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      staging(%stage : memref<2x64x1x656xi8>) ready(%ready : memref<2x1xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @attention_ready_history_shape(%q: memref<2x1x64x576xbf16>,
    %rows: memref<2x1x64xi32>, %slots: memref<2x1x64xi32>, %stage: memref<2x64x1x656xi8>,
    %ready: memref<2x1xi32>, %start: memref<3xi64>, %len: memref<2xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %out: memref<2x1x64x512xbf16>) {
  // expected-error @below {{history_start dimension 0 (requests) is 3, expected 2}}
  dhs.attention queries(%q : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      staging(%stage : memref<2x64x1x656xi8>) ready(%ready : memref<2x1xi32>)
      history(%start, %len : memref<3xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

// index: 32 entries per position for 64 selections.
func.func @attention_index_shape(%q: memref<2x1x64x576xbf16>, %rows: memref<2x1x64xi32>,
    %slots: memref<2x1x64xi32>, %stage: memref<2x64x1x656xi8>, %index: memref<2x1x32xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %out: memref<2x1x64x512xbf16>) {
  // expected-error @below {{'dhs.attention' op the staging index must have the shape of row_ids, got 'memref<2x1x32xi32>' for 'memref<2x1x64xi32>'}}
  dhs.attention queries(%q : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      staging(%stage : memref<2x64x1x656xi8>) index(%index : memref<2x1x32xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

// No heads: every shape agrees, but the operands are empty.
func.func @attention_empty(%q: memref<2x1x0x576xbf16>, %rows: memref<2x1x64xi32>,
    %slots: memref<2x1x64xi32>, %stage: memref<2x64x1x656xi8>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %out: memref<2x1x0x512xbf16>) {
  // expected-error @below {{'dhs.attention' op has an empty operand of type 'memref<2x1x0x576xbf16>'}}
  dhs.attention queries(%q : memref<2x1x0x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      staging(%stage : memref<2x64x1x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x0x512xbf16>) scale = 0.0416666679
  return
}

// -----

// output: 4 requests for 2 requests' queries.
func.func @attention_output_batch(%q: memref<2x1x64x576xbf16>, %rows: memref<2x1x64xi32>,
    %slots: memref<2x1x64xi32>, %stage: memref<2x64x1x656xi8>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %out: memref<4x1x64x512xbf16>) {
  // expected-error @below {{'dhs.attention' op output dimension 0 (requests) is 4, expected 2}}
  dhs.attention queries(%q : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      staging(%stage : memref<2x64x1x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<4x1x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

// output: 3 query positions for 1.
func.func @attention_output_positions(%q: memref<2x1x64x576xbf16>, %rows: memref<2x1x64xi32>,
    %slots: memref<2x1x64xi32>, %stage: memref<2x64x1x656xi8>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %out: memref<2x3x64x512xbf16>) {
  // expected-error @below {{'dhs.attention' op output dimension 1 (query positions) is 3, expected 1}}
  dhs.attention queries(%q : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      staging(%stage : memref<2x64x1x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x3x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

// row_ids: 2 query positions for 1.
func.func @attention_rows_positions(%q: memref<2x1x64x576xbf16>, %rows: memref<2x2x64xi32>,
    %slots: memref<2x2x64xi32>, %stage: memref<2x64x1x656xi8>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %out: memref<2x1x64x512xbf16>) {
  // expected-error @below {{'dhs.attention' op row_ids dimension 1 (query positions) is 2, expected 1}}
  dhs.attention queries(%q : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x2x64xi32>) slots(%slots : memref<2x2x64xi32>)
      staging(%stage : memref<2x64x1x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

// staging: 3 requests' rows for 2 requests.
func.func @attention_staging_batch(%q: memref<2x1x64x576xbf16>, %rows: memref<2x1x64xi32>,
    %slots: memref<2x1x64xi32>, %stage: memref<3x64x1x656xi8>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %out: memref<2x1x64x512xbf16>) {
  // expected-error @below {{'dhs.attention' op staging dimension 0 (requests) is 3, expected 2}}
  dhs.attention queries(%q : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      staging(%stage : memref<3x64x1x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

// staging: 64 rows a request for 2 positions x 64 selections, without an index.
func.func @attention_staging_rows(%q: memref<2x2x64x576xbf16>, %rows: memref<2x2x64xi32>,
    %slots: memref<2x2x64xi32>, %stage: memref<2x64x1x656xi8>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %out: memref<2x2x64x512xbf16>) {
  // expected-error @below {{'dhs.attention' op staging dimension 1 (rows per request, one per selection) is 64, expected 128}}
  dhs.attention queries(%q : memref<2x2x64x576xbf16>)
      rows(%rows : memref<2x2x64xi32>) slots(%slots : memref<2x2x64xi32>)
      staging(%stage : memref<2x64x1x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x2x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

// staging: 1152-byte rows for a pool of 656-byte rows.
func.func @attention_staging_row_bytes(%q: memref<2x1x64x576xbf16>, %rows: memref<2x1x64xi32>,
    %slots: memref<2x1x64xi32>, %stage: memref<2x64x1x1152xi8>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %out: memref<2x1x64x512xbf16>) {
  // expected-error @below {{'dhs.attention' op staging holds rows of 1152 bytes but row format mla_fp8 has 656}}
  dhs.attention queries(%q : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      staging(%stage : memref<2x64x1x1152xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

// staging: 2 layers per token for a group of 1.
func.func @attention_staging_layers(%q: memref<2x1x64x576xbf16>, %rows: memref<2x1x64xi32>,
    %slots: memref<2x1x64xi32>, %stage: memref<2x64x2x656xi8>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>,
    %out: memref<2x1x64x512xbf16>) {
  // expected-error @below {{'dhs.attention' op staging holds 2 layers per token but the pool's group has 1}}
  dhs.attention queries(%q : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      staging(%stage : memref<2x64x2x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 64, host = ?>)
      layer = 0 output(%out : memref<2x1x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

// layer = 4 in a group of layers 0 to 3.
func.func @attention_layer_outside_group(%q: memref<2x1x64x576xbf16>, %rows: memref<2x1x64xi32>,
    %slots: memref<2x1x64xi32>, %stage: memref<2x64x4x656xi8>,
    %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>,
    %out: memref<2x1x64x512xbf16>) {
  // expected-error @below {{'dhs.attention' op layer 4 is outside the pool's group of 4 layers}}
  dhs.attention queries(%q : memref<2x1x64x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      staging(%stage : memref<2x64x4x656xi8>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 64, host = ?>)
      layer = 4 output(%out : memref<2x1x64x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @union_too_small(%rows: memref<2x5x64xi32>, %slots: memref<2x5x64xi32>,
    %u: memref<2x64xi32>, %remap: memref<2x5x64xi32>) {
  // expected-error @below {{missing has room for 64 rows per request but the queries may select 320 distinct missing rows}}
  dhs.union_missing rows(%rows : memref<2x5x64xi32>) slots(%slots : memref<2x5x64xi32>)
      into(%u, %remap : memref<2x64xi32>, memref<2x5x64xi32>)
  return
}

// -----

// slots: 32 per position for 64 selections.
func.func @union_slots_shape(%rows: memref<2x5x64xi32>, %slots: memref<2x5x32xi32>,
    %u: memref<2x320xi32>, %remap: memref<2x5x64xi32>) {
  // expected-error @below {{'dhs.union_missing' op slots and remap must have the shape of rows 'memref<2x5x64xi32>'}}
  dhs.union_missing rows(%rows : memref<2x5x64xi32>) slots(%slots : memref<2x5x32xi32>)
      into(%u, %remap : memref<2x320xi32>, memref<2x5x64xi32>)
  return
}

// -----

// remap: 4 positions for 5.
func.func @union_remap_shape(%rows: memref<2x5x64xi32>, %slots: memref<2x5x64xi32>,
    %u: memref<2x320xi32>, %remap: memref<2x4x64xi32>) {
  // expected-error @below {{'dhs.union_missing' op slots and remap must have the shape of rows 'memref<2x5x64xi32>'}}
  dhs.union_missing rows(%rows : memref<2x5x64xi32>) slots(%slots : memref<2x5x64xi32>)
      into(%u, %remap : memref<2x320xi32>, memref<2x4x64xi32>)
  return
}

// -----

// missing: lists for 4 requests, 2 selected.
func.func @union_missing_batch(%rows: memref<2x5x64xi32>, %slots: memref<2x5x64xi32>,
    %u: memref<4x320xi32>, %remap: memref<2x5x64xi32>) {
  // expected-error @below {{'dhs.union_missing' op missing dimension 0 (requests) is 4, expected 2}}
  dhs.union_missing rows(%rows : memref<2x5x64xi32>) slots(%slots : memref<2x5x64xi32>)
      into(%u, %remap : memref<4x320xi32>, memref<2x5x64xi32>)
  return
}

// -----

func.func @verify_wrong_positions(%q: memref<2x3x16x576xbf16>, %rows: memref<2x3x64xi32>,
    %slots: memref<2x3x64xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 512, host = ?>,
    %out: memref<2x3x16x512xbf16>) {
  dhs.verify gamma = 4 {
    // expected-error @below {{in a verify phase of gamma = 4 has 3 query positions; the phase checks gamma + 1 = 5}}
    dhs.sparse_attention queries(%q : memref<2x3x16x576xbf16>)
        rows(%rows : memref<2x3x64xi32>) slots(%slots : memref<2x3x64xi32>)
        history(%start, %len : memref<2xi64>, memref<2xi32>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 512, host = ?>)
        layer = 0 output(%out : memref<2x3x16x512xbf16>) scale = 0.0416666679
  }
  return
}

// -----

func.func @draft_window_too_small(%ring: memref<2x4x1x1152xi8>) {
  // expected-error @below {{a draft ring of 4 tokens is smaller than a draft block of 5 tokens}}
  dhs.draft ring(%ring : memref<2x4x1x1152xi8>) block = 5 {
  }
  return
}

// -----

func.func @draft_other_ring(%ring: memref<2x8x1x1152xi8>, %other: memref<2x8x1x1152xi8>,
    %new: memref<2x5x1x1152xi8>, %pos: memref<2xi32>) {
  dhs.draft ring(%ring : memref<2x8x1x1152xi8>) block = 5 {
    // expected-error @below {{uses a ring other than its draft phase's}}
    dhs.ring_append rows(%new : memref<2x5x1x1152xi8>) positions(%pos : memref<2xi32>)
        into(%other : memref<2x8x1x1152xi8>)
  }
  return
}

// -----

// Phases do not nest: a verify phase in a verify phase ...
func.func @verify_in_verify() {
  dhs.verify gamma = 4 {
    // expected-error @below {{'dhs.verify' op cannot nest inside a verify phase}}
    dhs.verify gamma = 4 {
    }
  }
  return
}

// -----

// ... a draft phase in a verify phase ...
func.func @draft_in_verify(%ring: memref<2x8x1x1152xi8>) {
  dhs.verify gamma = 4 {
    // expected-error @below {{'dhs.draft' op cannot nest inside a verify phase}}
    dhs.draft ring(%ring : memref<2x8x1x1152xi8>) block = 5 {
    }
  }
  return
}

// -----

// ... a verify phase in a draft phase ...
func.func @verify_in_draft(%ring: memref<2x8x1x1152xi8>) {
  dhs.draft ring(%ring : memref<2x8x1x1152xi8>) block = 5 {
    // expected-error @below {{'dhs.verify' op cannot nest inside a draft phase}}
    dhs.verify gamma = 4 {
    }
  }
  return
}

// -----

// ... or a draft phase in a draft phase.
func.func @draft_in_draft(%ring: memref<2x8x1x1152xi8>) {
  dhs.draft ring(%ring : memref<2x8x1x1152xi8>) block = 5 {
    // expected-error @below {{'dhs.draft' op cannot nest inside a draft phase}}
    dhs.draft ring(%ring : memref<2x8x1x1152xi8>) block = 5 {
    }
  }
  return
}

// -----

func.func @ring_overflow(%ring: memref<2x4x1x1152xi8>, %new: memref<2x5x1x1152xi8>, %pos: memref<2xi32>) {
  // expected-error @below {{moves 5 rows through a ring of 4 tokens}}
  dhs.ring_append rows(%new : memref<2x5x1x1152xi8>) positions(%pos : memref<2xi32>)
      into(%ring : memref<2x4x1x1152xi8>)
  return
}

// -----

// rows: 3 requests' rows for a ring of 2 requests.
func.func @ring_append_rows_batch(%ring: memref<2x8x1x1152xi8>, %new: memref<3x5x1x1152xi8>,
    %pos: memref<2xi32>) {
  // expected-error @below {{'dhs.ring_append' op rows dimension 0 (requests) is 3, expected 2}}
  dhs.ring_append rows(%new : memref<3x5x1x1152xi8>) positions(%pos : memref<2xi32>)
      into(%ring : memref<2x8x1x1152xi8>)
  return
}

// -----

// positions: 4 for a ring of 2 requests.
func.func @ring_append_positions(%ring: memref<2x8x1x1152xi8>, %new: memref<2x5x1x1152xi8>,
    %pos: memref<4xi32>) {
  // expected-error @below {{'dhs.ring_append' op positions dimension 0 (requests) is 4, expected 2}}
  dhs.ring_append rows(%new : memref<2x5x1x1152xi8>) positions(%pos : memref<4xi32>)
      into(%ring : memref<2x8x1x1152xi8>)
  return
}

// -----

// positions: 4 for a ring of 2 requests.
func.func @ring_read_positions(%ring: memref<2x8x1x1152xi8>, %pos: memref<4xi32>,
    %rows: memref<2x4x1x1152xi8>) {
  // expected-error @below {{'dhs.ring_read' op positions dimension 0 (requests) is 4, expected 2}}
  dhs.ring_read ring(%ring : memref<2x8x1x1152xi8>) positions(%pos : memref<4xi32>)
      into(%rows : memref<2x4x1x1152xi8>)
  return
}

// -----

// rows: 3 requests' rows from a ring of 2 requests.
func.func @ring_read_rows_batch(%ring: memref<2x8x1x1152xi8>, %pos: memref<2xi32>,
    %rows: memref<3x4x1x1152xi8>) {
  // expected-error @below {{'dhs.ring_read' op rows dimension 0 (requests) is 3, expected 2}}
  dhs.ring_read ring(%ring : memref<2x8x1x1152xi8>) positions(%pos : memref<2xi32>)
      into(%rows : memref<3x4x1x1152xi8>)
  return
}

// -----

// rows: 2 layers per token for a ring of 1.
func.func @ring_read_layers(%ring: memref<2x8x1x1152xi8>, %pos: memref<2xi32>,
    %rows: memref<2x4x2x1152xi8>) {
  // expected-error @below {{'dhs.ring_read' op rows dimension 2 (layers) is 2, expected 1}}
  dhs.ring_read ring(%ring : memref<2x8x1x1152xi8>) positions(%pos : memref<2xi32>)
      into(%rows : memref<2x4x2x1152xi8>)
  return
}

// -----

// rows: 656-byte rows from a ring of 1152-byte rows.
func.func @ring_read_row_bytes(%ring: memref<2x8x1x1152xi8>, %pos: memref<2xi32>,
    %rows: memref<2x4x1x656xi8>) {
  // expected-error @below {{'dhs.ring_read' op rows dimension 3 (row bytes) is 656, expected 1152}}
  dhs.ring_read ring(%ring : memref<2x8x1x1152xi8>) positions(%pos : memref<2xi32>)
      into(%rows : memref<2x4x1x656xi8>)
  return
}

// -----

// slots: 4 requests' slots for 2 requests' positions.
func.func @ring_index_slots(%pos: memref<2xi32>, %idx: memref<4x5xi32>) {
  // expected-error @below {{'dhs.ring_index' op slots dimension 0 (requests) is 4, expected 2}}
  dhs.ring_index positions(%pos : memref<2xi32>) offset = -5 window = 128
      into(%idx : memref<4x5xi32>)
  return
}

// -----

func.func @copy_rows_two_indices(%src: memref<2x5x1x1152xi8>, %dst: memref<2x8x1x1152xi8>,
    %i: memref<2x8xi32>, %j: memref<2x5xi32>) {
  // expected-error @below {{takes exactly one of src_index (gather) and dst_index (scatter)}}
  dhs.copy_rows src(%src : memref<2x5x1x1152xi8>) dst(%dst : memref<2x8x1x1152xi8>)
      src_index(%i : memref<2x8xi32>) dst_index(%j : memref<2x5xi32>)
  return
}

// -----

// dst: 3 requests for 2.
func.func @copy_rows_dst_batch(%src: memref<2x5x1x1152xi8>, %dst: memref<3x8x1x1152xi8>,
    %j: memref<2x5xi32>) {
  // expected-error @below {{'dhs.copy_rows' op dst dimension 0 (requests) is 3, expected 2}}
  dhs.copy_rows src(%src : memref<2x5x1x1152xi8>) dst(%dst : memref<3x8x1x1152xi8>)
      dst_index(%j : memref<2x5xi32>)
  return
}

// -----

// dst: 4 layers per token for 1.
func.func @copy_rows_dst_layers(%src: memref<2x5x1x1152xi8>, %dst: memref<2x8x4x1152xi8>,
    %j: memref<2x5xi32>) {
  // expected-error @below {{'dhs.copy_rows' op dst dimension 2 (layers) is 4, expected 1}}
  dhs.copy_rows src(%src : memref<2x5x1x1152xi8>) dst(%dst : memref<2x8x4x1152xi8>)
      dst_index(%j : memref<2x5xi32>)
  return
}

// -----

// dst: 656-byte rows for 1152-byte rows.
func.func @copy_rows_dst_row_bytes(%src: memref<2x5x1x1152xi8>, %dst: memref<2x8x1x656xi8>,
    %j: memref<2x5xi32>) {
  // expected-error @below {{'dhs.copy_rows' op dst dimension 3 (row bytes) is 656, expected 1152}}
  dhs.copy_rows src(%src : memref<2x5x1x1152xi8>) dst(%dst : memref<2x8x1x656xi8>)
      dst_index(%j : memref<2x5xi32>)
  return
}

// -----

// A gather: src_index has one entry per destination row (5), not 4.
func.func @copy_rows_src_index(%src: memref<2x8x1x1152xi8>, %dst: memref<2x5x1x1152xi8>,
    %i: memref<2x4xi32>) {
  // expected-error @below {{'dhs.copy_rows' op src_index dimension 1 (rows) is 4, expected 5}}
  dhs.copy_rows src(%src : memref<2x8x1x1152xi8>) dst(%dst : memref<2x5x1x1152xi8>)
      src_index(%i : memref<2x4xi32>)
  return
}

// -----

// A scatter: dst_index has one entry per source row (5), not 4.
func.func @copy_rows_dst_index(%src: memref<2x5x1x1152xi8>, %dst: memref<2x8x1x1152xi8>,
    %j: memref<2x4xi32>) {
  // expected-error @below {{'dhs.copy_rows' op dst_index dimension 1 (rows) is 4, expected 5}}
  dhs.copy_rows src(%src : memref<2x5x1x1152xi8>) dst(%dst : memref<2x8x1x1152xi8>)
      dst_index(%j : memref<2x4xi32>)
  return
}

// -----

func.func @accept_needs_q(%draft: memref<2x4xi32>, %p: memref<2x5x100xf32>, %seeds: memref<2xi64>,
    %step: memref<1xi64>, %n: memref<2xi32>, %next: memref<2xi32>) {
  // expected-error @below {{rejection sampling needs the drafter's probabilities (draft_probs)}}
  dhs.accept rejection_sampling draft(%draft : memref<2x4xi32>) target(%p : memref<2x5x100xf32>)
      seeds(%seeds : memref<2xi64>) step(%step : memref<1xi64>)
      into(%n, %next : memref<2xi32>, memref<2xi32>)
  return
}

// -----

func.func @accept_gamma(%draft: memref<2x4xi32>, %p: memref<2x4x100xf32>, %seeds: memref<2xi64>,
    %step: memref<1xi64>, %n: memref<2xi32>, %next: memref<2xi32>) {
  // expected-error @below {{target dimension 1 (positions: gamma + 1) is 4, expected 5}}
  dhs.accept greedy draft(%draft : memref<2x4xi32>) target(%p : memref<2x4x100xf32>)
      seeds(%seeds : memref<2xi64>) step(%step : memref<1xi64>)
      into(%n, %next : memref<2xi32>, memref<2xi32>)
  return
}

// -----

// target: 3 requests' probabilities for 2 requests' drafts.
func.func @accept_target_batch(%draft: memref<2x4xi32>, %p: memref<3x5x100xf32>,
    %seeds: memref<2xi64>, %step: memref<1xi64>, %n: memref<2xi32>, %next: memref<2xi32>) {
  // expected-error @below {{'dhs.accept' op target dimension 0 (requests) is 3, expected 2}}
  dhs.accept greedy draft(%draft : memref<2x4xi32>) target(%p : memref<3x5x100xf32>)
      seeds(%seeds : memref<2xi64>) step(%step : memref<1xi64>)
      into(%n, %next : memref<2xi32>, memref<2xi32>)
  return
}

// -----

// Greedy acceptance with the drafter's probabilities it never reads.
func.func @accept_greedy_with_q(%draft: memref<2x4xi32>, %p: memref<2x5x100xf32>,
    %q: memref<2x4x100xf32>, %seeds: memref<2xi64>, %step: memref<1xi64>,
    %n: memref<2xi32>, %next: memref<2xi32>) {
  // expected-error @below {{'dhs.accept' op greedy acceptance does not use draft_probs}}
  dhs.accept greedy draft(%draft : memref<2x4xi32>) target(%p : memref<2x5x100xf32>)
      draft_probs(%q : memref<2x4x100xf32>)
      seeds(%seeds : memref<2xi64>) step(%step : memref<1xi64>)
      into(%n, %next : memref<2xi32>, memref<2xi32>)
  return
}

// -----

// draft_probs: 3 requests for 2.
func.func @accept_q_batch(%draft: memref<2x4xi32>, %p: memref<2x5x100xf32>,
    %q: memref<3x4x100xf32>, %seeds: memref<2xi64>, %step: memref<1xi64>,
    %n: memref<2xi32>, %next: memref<2xi32>) {
  // expected-error @below {{'dhs.accept' op draft_probs dimension 0 (requests) is 3, expected 2}}
  dhs.accept rejection_sampling draft(%draft : memref<2x4xi32>) target(%p : memref<2x5x100xf32>)
      draft_probs(%q : memref<3x4x100xf32>)
      seeds(%seeds : memref<2xi64>) step(%step : memref<1xi64>)
      into(%n, %next : memref<2xi32>, memref<2xi32>)
  return
}

// -----

// draft_probs: 5 positions for gamma = 4 drafts.
func.func @accept_q_gamma(%draft: memref<2x4xi32>, %p: memref<2x5x100xf32>,
    %q: memref<2x5x100xf32>, %seeds: memref<2xi64>, %step: memref<1xi64>,
    %n: memref<2xi32>, %next: memref<2xi32>) {
  // expected-error @below {{'dhs.accept' op draft_probs dimension 1 (gamma) is 5, expected 4}}
  dhs.accept rejection_sampling draft(%draft : memref<2x4xi32>) target(%p : memref<2x5x100xf32>)
      draft_probs(%q : memref<2x5x100xf32>)
      seeds(%seeds : memref<2xi64>) step(%step : memref<1xi64>)
      into(%n, %next : memref<2xi32>, memref<2xi32>)
  return
}

// -----

// draft_probs: a vocabulary of 50 for the target's 100.
func.func @accept_q_vocabulary(%draft: memref<2x4xi32>, %p: memref<2x5x100xf32>,
    %q: memref<2x4x50xf32>, %seeds: memref<2xi64>, %step: memref<1xi64>,
    %n: memref<2xi32>, %next: memref<2xi32>) {
  // expected-error @below {{'dhs.accept' op draft_probs dimension 2 (vocabulary) is 50, expected 100}}
  dhs.accept rejection_sampling draft(%draft : memref<2x4xi32>) target(%p : memref<2x5x100xf32>)
      draft_probs(%q : memref<2x4x50xf32>)
      seeds(%seeds : memref<2xi64>) step(%step : memref<1xi64>)
      into(%n, %next : memref<2xi32>, memref<2xi32>)
  return
}

// -----

// seeds: 4 for 2 requests.
func.func @accept_seeds(%draft: memref<2x4xi32>, %p: memref<2x5x100xf32>, %seeds: memref<4xi64>,
    %step: memref<1xi64>, %n: memref<2xi32>, %next: memref<2xi32>) {
  // expected-error @below {{'dhs.accept' op seeds dimension 0 (requests) is 4, expected 2}}
  dhs.accept greedy draft(%draft : memref<2x4xi32>) target(%p : memref<2x5x100xf32>)
      seeds(%seeds : memref<4xi64>) step(%step : memref<1xi64>)
      into(%n, %next : memref<2xi32>, memref<2xi32>)
  return
}

// -----

// accepted: 4 counts for 2 requests.
func.func @accept_accepted(%draft: memref<2x4xi32>, %p: memref<2x5x100xf32>, %seeds: memref<2xi64>,
    %step: memref<1xi64>, %n: memref<4xi32>, %next: memref<2xi32>) {
  // expected-error @below {{'dhs.accept' op accepted dimension 0 (requests) is 4, expected 2}}
  dhs.accept greedy draft(%draft : memref<2x4xi32>) target(%p : memref<2x5x100xf32>)
      seeds(%seeds : memref<2xi64>) step(%step : memref<1xi64>)
      into(%n, %next : memref<4xi32>, memref<2xi32>)
  return
}

// -----

// next_token: 1 token for 2 requests.
func.func @accept_next_token(%draft: memref<2x4xi32>, %p: memref<2x5x100xf32>, %seeds: memref<2xi64>,
    %step: memref<1xi64>, %n: memref<2xi32>, %next: memref<1xi32>) {
  // expected-error @below {{'dhs.accept' op next_token dimension 0 (requests) is 1, expected 2}}
  dhs.accept greedy draft(%draft : memref<2x4xi32>) target(%p : memref<2x5x100xf32>)
      seeds(%seeds : memref<2xi64>) step(%step : memref<1xi64>)
      into(%n, %next : memref<2xi32>, memref<1xi32>)
  return
}

// -----

// step: the step counter is one word, not 2.
func.func @accept_step(%draft: memref<2x4xi32>, %p: memref<2x5x100xf32>, %seeds: memref<2xi64>,
    %step: memref<2xi64>, %n: memref<2xi32>, %next: memref<2xi32>) {
  // expected-error @below {{'dhs.accept' op step dimension 0 (one word) is 2, expected 1}}
  dhs.accept greedy draft(%draft : memref<2x4xi32>) target(%p : memref<2x5x100xf32>)
      seeds(%seeds : memref<2xi64>) step(%step : memref<2xi64>)
      into(%n, %next : memref<2xi32>, memref<2xi32>)
  return
}

// -----

func.func @scratch_negative_offset() {
  // expected-error @below {{arena offset must be non-negative, got -64}}
  %0 = dhs.scratch {offset = -64 : i64} : memref<4xi32>
  return
}

// -----

func.func @scratch_negative_slot() {
  // expected-error @below {{staging is double-buffered: slot 0 or 1, got -1}}
  %0 = dhs.scratch {slot = -1 : i64} : memref<4xi32>
  return
}

// -----

func.func @scratch_slot() {
  // expected-error @below {{staging is double-buffered: slot 0 or 1, got 2}}
  %0 = dhs.scratch {slot = 2 : i64} : memref<4xi32>
  return
}

// -----

// Scratch buffers are dense: no strided layout.
func.func @scratch_strided() {
  // expected-error @below {{'dhs.scratch' op scratch buffers are dense: identity layout only}}
  %0 = dhs.scratch : memref<4x4xi32, strided<[8, 1]>>
  return
}

// -----

func.func @window_ring_too_small(%q: memref<2x5x64x512xbf16>, %rows: memref<2x5x512xi32>,
    %slots: memref<2x5x512xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %pool: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>,
    %ring: memref<2x128x1x528xi8>, %tokens: memref<2xi32>,
    %out: memref<2x5x64x512xbf16>) {
  // expected-error @below {{a window ring of 128 tokens cannot hold a 128-token window for 5 query positions; it needs at least 132}}
  dhs.sparse_attention queries(%q : memref<2x5x64x512xbf16>)
      rows(%rows : memref<2x5x512xi32>) slots(%slots : memref<2x5x512xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>)
      window(%ring, %tokens : memref<2x128x1x528xi8>, memref<2xi32>) size = 128
      layer = 0 output(%out : memref<2x5x64x512xbf16>) scale = 0.0441941738
  return
}

// -----

func.func @window_ring_wrong_rows(%q: memref<2x5x64x512xbf16>, %rows: memref<2x5x512xi32>,
    %slots: memref<2x5x512xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %pool: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>,
    %ring: memref<2x132x1x656xi8>, %tokens: memref<2xi32>,
    %out: memref<2x5x64x512xbf16>) {
  // expected-error @below {{window ring holds rows of 656 bytes but row format v41_fp8 has 528}}
  dhs.sparse_attention queries(%q : memref<2x5x64x512xbf16>)
      rows(%rows : memref<2x5x512xi32>) slots(%slots : memref<2x5x512xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>)
      window(%ring, %tokens : memref<2x132x1x656xi8>, memref<2xi32>) size = 128
      layer = 0 output(%out : memref<2x5x64x512xbf16>) scale = 0.0441941738
  return
}

// -----

func.func @window_ring_wrong_batch(%q: memref<2x5x64x512xbf16>, %rows: memref<2x5x512xi32>,
    %slots: memref<2x5x512xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %pool: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>,
    %ring: memref<3x132x1x528xi8>, %tokens: memref<2xi32>,
    %out: memref<2x5x64x512xbf16>) {
  // expected-error @below {{window ring dimension 0 (requests) is 3, expected 2}}
  dhs.sparse_attention queries(%q : memref<2x5x64x512xbf16>)
      rows(%rows : memref<2x5x512xi32>) slots(%slots : memref<2x5x512xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>)
      window(%ring, %tokens : memref<3x132x1x528xi8>, memref<2xi32>) size = 128
      layer = 0 output(%out : memref<2x5x64x512xbf16>) scale = 0.0441941738
  return
}

// -----

func.func @window_tokens_wrong_batch(%q: memref<2x5x64x512xbf16>, %rows: memref<2x5x512xi32>,
    %slots: memref<2x5x512xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %pool: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>,
    %ring: memref<2x132x1x528xi8>, %tokens: memref<4xi32>,
    %out: memref<2x5x64x512xbf16>) {
  // expected-error @below {{window tokens dimension 0 (requests) is 4, expected 2}}
  dhs.sparse_attention queries(%q : memref<2x5x64x512xbf16>)
      rows(%rows : memref<2x5x512xi32>) slots(%slots : memref<2x5x512xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>)
      window(%ring, %tokens : memref<2x132x1x528xi8>, memref<4xi32>) size = 128
      layer = 0 output(%out : memref<2x5x64x512xbf16>) scale = 0.0441941738
  return
}

// -----

func.func @window_without_size(%q: memref<2x5x64x512xbf16>, %rows: memref<2x5x512xi32>,
    %slots: memref<2x5x512xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
    %pool: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>,
    %out: memref<2x5x64x512xbf16>) {
  // expected-error @below {{a sliding window needs its ring, its token counts and its size together}}
  dhs.sparse_attention queries(%q : memref<2x5x64x512xbf16>)
      rows(%rows : memref<2x5x512xi32>) slots(%slots : memref<2x5x512xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = ?, host = ?>)
      layer = 0 output(%out : memref<2x5x64x512xbf16>) scale = 0.0441941738 {window_size = 128 : i64}
  return
}

// -----

func.func @fixed_without_floor(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>) {
  // expected-error @below {{a fixed hot buffer needs floor > 0 slots per request}}
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      newest = 64 policy = fixed
  return
}

// -----

func.func @working_set_too_big(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>) {
  // expected-error @below {{the working set of one request (newest 64 + floor 4096 = 4160 slots) does not fit the pool's 2048 HBM slots}}
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      newest = 64 floor = 4096 policy = adaptive
  return
}

// -----

func.func @two_specs(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>) {
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      newest = 64 policy = adaptive
  // expected-error @below {{is the second residency spec of its pool}}
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      newest = 32 policy = adaptive
  return
}

// -----

func.func @verify_tokens_not_protected(%q: memref<4x5x16x576xbf16>, %rows: memref<4x5x256xi32>,
    %slots: memref<4x5x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>, %out: memref<4x5x16x512xbf16>) {
  // expected-error @below {{protects the 2 newest tokens, but attention on this pool queries from 5 positions: the tokens being decoded or verified must stay resident}}
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      newest = 2 policy = adaptive
  dhs.sparse_attention queries(%q : memref<4x5x16x576xbf16>)
      rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x5x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @place_rows_mismatch(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>,
                               %rows: memref<512xi64>, %slots: memref<256xi32>) {
  // expected-error @below {{slots dimension 0 (rows placed) is 256, expected 512}}
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      rows(%rows : memref<512xi64>) slots(%slots : memref<256xi32>)
  return
}

// -----

func.func @pool_recency_size(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = 1000>) {
  // expected-error @below {{the replacement state has one entry per HBM slot (2048), got 1000}}
  %recency = dhs.pool_recency of %pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = 1000> -> memref<1000x2xi32>
  return
}

// -----

func.func @pool_recency_pairs(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = 1000>) {
  // expected-error @below {{the replacement state is [last use, previous use] per slot: expected [slots, 2], got 'memref<2048x3xi32>'}}
  %recency = dhs.pool_recency of %pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = 1000> -> memref<2048x3xi32>
  return
}

// -----

func.func @pool_map_size(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = 1000>) {
  // expected-error @below {{a residency map has one entry per host row (1000), got 999}}
  %map = dhs.pool_map of %pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = 1000> -> memref<999xi32>
  return
}

// -----

func.func @plan_promotions_lru(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<1024xi64>,
    %cleared: memref<1024xi32>, %free: memref<1024xi32>, %control: memref<8xi32>,
    %rows: memref<512xi64>, %slots: memref<512xi32>) {
  // expected-error @below {{decides CLOCK promotions only: lru victim orders are not generated on the device yet (use the host controller)}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<1024xi64>) cleared(%cleared : memref<1024xi32>)
      free(%free : memref<1024xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<512xi64>, memref<512xi32>) replacement = lru
  return
}

// -----

func.func @plan_promotions_lru2(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<?xi64>,
    %cleared: memref<?xi32>, %free: memref<?xi32>, %control: memref<8xi32>,
    %rows: memref<512xi64>, %slots: memref<512xi32>) {
  // expected-error @below {{decides CLOCK promotions only: lru2 victim orders}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<?xi64>) cleared(%cleared : memref<?xi32>)
      free(%free : memref<?xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<512xi64>, memref<512xi32>) replacement = lru2
  return
}

// -----

func.func @plan_promotions_history(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<8xi64>, %hot: memref<?xi64>,
    %cleared: memref<?xi32>, %free: memref<?xi32>, %control: memref<8xi32>,
    %rows: memref<512xi64>, %slots: memref<512xi32>) {
  // expected-error @below {{history_start dimension 0 (requests) is 8, expected 4}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<8xi64>)
      hot(%hot : memref<?xi64>) cleared(%cleared : memref<?xi32>)
      free(%free : memref<?xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<512xi64>, memref<512xi32>) replacement = clock
  return
}

// -----

func.func @plan_promotions_slot_tables(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<1024xi64>,
    %cleared: memref<1024xi32>, %free: memref<2048xi32>, %control: memref<8xi32>,
    %rows: memref<512xi64>, %slots: memref<512xi32>) {
  // expected-error @below {{free dimension 0 (slots) is 2048, expected 1024}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<1024xi64>) cleared(%cleared : memref<1024xi32>)
      free(%free : memref<2048xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<512xi64>, memref<512xi32>) replacement = clock
  return
}

// -----

// hot: 512 entries for a pool of 1024 HBM slots.
func.func @plan_promotions_hot(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<512xi64>,
    %cleared: memref<1024xi32>, %free: memref<1024xi32>, %control: memref<8xi32>,
    %rows: memref<512xi64>, %slots: memref<512xi32>) {
  // expected-error @below {{'dhs.plan_promotions' op hot dimension 0 (slots) is 512, expected 1024}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<512xi64>) cleared(%cleared : memref<1024xi32>)
      free(%free : memref<1024xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<512xi64>, memref<512xi32>) replacement = clock
  return
}

// -----

func.func @plan_promotions_control(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<?xi64>,
    %cleared: memref<?xi32>, %free: memref<?xi32>, %control: memref<4xi32>,
    %rows: memref<512xi64>, %slots: memref<512xi32>) {
  // expected-error @below {{control dimension 0 (control words) is 4, expected 8}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<?xi64>) cleared(%cleared : memref<?xi32>)
      free(%free : memref<?xi32>) control(%control : memref<4xi32>)
      into(%rows, %slots : memref<512xi64>, memref<512xi32>) replacement = clock
  return
}

// -----

func.func @plan_promotions_list(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<?xi64>,
    %cleared: memref<?xi32>, %free: memref<?xi32>, %control: memref<8xi32>,
    %rows: memref<256xi64>, %slots: memref<256xi32>) {
  // expected-error @below {{rows dimension 0 (2 x fetched rows: promotions, then releases) is 256, expected 512}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<?xi64>) cleared(%cleared : memref<?xi32>)
      free(%free : memref<?xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<256xi64>, memref<256xi32>) replacement = clock
  return
}

// -----

// slots: 256 for a list of 512 rows.
func.func @plan_promotions_slots(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<1024xi64>,
    %cleared: memref<1024xi32>, %free: memref<1024xi32>, %control: memref<8xi32>,
    %rows: memref<512xi64>, %slots: memref<256xi32>) {
  // expected-error @below {{'dhs.plan_promotions' op slots dimension 0 (rows placed) is 256, expected 512}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<1024xi64>) cleared(%cleared : memref<1024xi32>)
      free(%free : memref<1024xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<512xi64>, memref<256xi32>) replacement = clock
  return
}

// -----

func.func @sort_rows_shape(%rows: memref<4x64xi32>, %sorted: memref<4x32xi32>) {
  // expected-error @below {{sorted must have the shape of rows 'memref<4x64xi32>', got 'memref<4x32xi32>'}}
  dhs.sort_rows rows(%rows : memref<4x64xi32>) into(%sorted : memref<4x32xi32>)
  return
}

// -----

func.func @sort_rows_element(%rows: memref<4x64xi64>, %sorted: memref<4x64xi32>) {
  // expected-error @below {{operand #0 must be 2D memref of 32-bit signless integer values}}
  dhs.sort_rows rows(%rows : memref<4x64xi64>) into(%sorted : memref<4x64xi32>)
  return
}

// -----

// The pool's residency spec must be the plan's rule: its cap ...
func.func @plan_promotions_spec_cap(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<1024xi64>,
    %cleared: memref<1024xi32>, %free: memref<1024xi32>, %control: memref<8xi32>,
    %rows: memref<512xi64>, %slots: memref<512xi32>) {
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      newest = 64 policy = adaptive replacement = clock promotions = 32
  // expected-error @below {{promotes 16 rows per request and step, but the pool's residency spec says 32}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<1024xi64>) cleared(%cleared : memref<1024xi32>)
      free(%free : memref<1024xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<512xi64>, memref<512xi32>) replacement = clock promotions = 16
  return
}

// -----

func.func @plan_promotions_spec_uncapped(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<1024xi64>,
    %cleared: memref<1024xi32>, %free: memref<1024xi32>, %control: memref<8xi32>,
    %rows: memref<512xi64>, %slots: memref<512xi32>) {
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      newest = 64 policy = adaptive promotions = 8
  // expected-error @below {{promotes no cap rows per request and step, but the pool's residency spec says 8}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<1024xi64>) cleared(%cleared : memref<1024xi32>)
      free(%free : memref<1024xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<512xi64>, memref<512xi32>) replacement = clock
  return
}

// -----

// ... and its policy, floor and replacement.
func.func @plan_promotions_spec_floor(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<1024xi64>,
    %cleared: memref<1024xi32>, %free: memref<1024xi32>, %control: memref<8xi32>,
    %rows: memref<512xi64>, %slots: memref<512xi32>) {
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      newest = 64 floor = 128 policy = adaptive
  // expected-error @below {{plans the adaptive policy with floor 0 and CLOCK, but the pool's residency spec is adaptive with floor 128 and clock}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<1024xi64>) cleared(%cleared : memref<1024xi32>)
      free(%free : memref<1024xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<512xi64>, memref<512xi32>) replacement = clock
  return
}

// -----

func.func @plan_promotions_spec_lru(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<1024xi64>,
    %cleared: memref<1024xi32>, %free: memref<1024xi32>, %control: memref<8xi32>,
    %rows: memref<512xi64>, %slots: memref<512xi32>) {
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      newest = 64 policy = adaptive replacement = lru
  // expected-error @below {{the pool's residency spec is adaptive with floor 0 and lru}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<1024xi64>) cleared(%cleared : memref<1024xi32>)
      free(%free : memref<1024xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<512xi64>, memref<512xi32>) replacement = clock
  return
}

// -----

func.func @age_rows_entry_words(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %appends: memref<16x3xi64>, %hot: memref<1024xi64>, %cleared: memref<1024xi32>,
    %free: memref<1024xi32>, %control: memref<8xi32>, %rows: memref<32xi64>,
    %slots: memref<32xi32>) {
  // expected-error @below {{appends dimension 1 (entry words) is 3, expected 4}}
  dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      appends(%appends : memref<16x3xi64>) hot(%hot : memref<1024xi64>)
      cleared(%cleared : memref<1024xi32>) free(%free : memref<1024xi32>)
      control(%control : memref<8xi32>) into(%rows, %slots : memref<32xi64>, memref<32xi32>)
  return
}

// -----

func.func @age_rows_slot_tables(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
    %appends: memref<16x4xi64>, %hot: memref<1024xi64>, %cleared: memref<512xi32>,
    %free: memref<1024xi32>, %control: memref<8xi32>, %rows: memref<32xi64>,
    %slots: memref<32xi32>) {
  // expected-error @below {{cleared dimension 0 (slots) is 512, expected 1024}}
  dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      appends(%appends : memref<16x4xi64>) hot(%hot : memref<1024xi64>)
      cleared(%cleared : memref<512xi32>) free(%free : memref<1024xi32>)
      control(%control : memref<8xi32>) into(%rows, %slots : memref<32xi64>, memref<32xi32>)
  return
}

// -----

// hot: 512 entries for a pool of 1024 HBM slots.
func.func @age_rows_hot(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %appends: memref<16x4xi64>, %hot: memref<512xi64>, %cleared: memref<1024xi32>,
    %free: memref<1024xi32>, %control: memref<8xi32>, %rows: memref<32xi64>,
    %slots: memref<32xi32>) {
  // expected-error @below {{'dhs.age_rows' op hot dimension 0 (slots) is 512, expected 1024}}
  dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      appends(%appends : memref<16x4xi64>) hot(%hot : memref<512xi64>)
      cleared(%cleared : memref<1024xi32>) free(%free : memref<1024xi32>)
      control(%control : memref<8xi32>) into(%rows, %slots : memref<32xi64>, memref<32xi32>)
  return
}

// -----

func.func @age_rows_control(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %appends: memref<16x4xi64>, %hot: memref<1024xi64>, %cleared: memref<1024xi32>,
    %free: memref<1024xi32>, %control: memref<5xi32>, %rows: memref<32xi64>,
    %slots: memref<32xi32>) {
  // expected-error @below {{control dimension 0 (control words) is 5, expected 8}}
  dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      appends(%appends : memref<16x4xi64>) hot(%hot : memref<1024xi64>)
      cleared(%cleared : memref<1024xi32>) free(%free : memref<1024xi32>)
      control(%control : memref<5xi32>) into(%rows, %slots : memref<32xi64>, memref<32xi32>)
  return
}

// -----

func.func @age_rows_list(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %appends: memref<16x4xi64>, %hot: memref<1024xi64>, %cleared: memref<1024xi32>,
    %free: memref<1024xi32>, %control: memref<8xi32>, %rows: memref<16xi64>,
    %slots: memref<16xi32>) {
  // expected-error @below {{rows dimension 0 (2 x appends: new rows, then releases) is 16, expected 32}}
  dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      appends(%appends : memref<16x4xi64>) hot(%hot : memref<1024xi64>)
      cleared(%cleared : memref<1024xi32>) free(%free : memref<1024xi32>)
      control(%control : memref<8xi32>) into(%rows, %slots : memref<16xi64>, memref<16xi32>)
  return
}

// -----

// slots: 16 for a list of 32 rows.
func.func @age_rows_slots(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %appends: memref<16x4xi64>, %hot: memref<1024xi64>, %cleared: memref<1024xi32>,
    %free: memref<1024xi32>, %control: memref<8xi32>, %rows: memref<32xi64>,
    %slots: memref<16xi32>) {
  // expected-error @below {{'dhs.age_rows' op slots dimension 0 (rows placed) is 16, expected 32}}
  dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      appends(%appends : memref<16x4xi64>) hot(%hot : memref<1024xi64>)
      cleared(%cleared : memref<1024xi32>) free(%free : memref<1024xi32>)
      control(%control : memref<8xi32>) into(%rows, %slots : memref<32xi64>, memref<16xi32>)
  return
}

// -----

func.func @share_rows_shape(%rows: memref<4x5x64xi32>, %slots: memref<4x5x64xi32>,
                            %sr: memref<4x5x32xi32>, %ss: memref<4x5x64xi32>, %t: memref<4xi32>) {
  // expected-error @below {{shared_rows must have the shape of rows 'memref<4x5x64xi32>', got 'memref<4x5x32xi32>'}}
  dhs.share_rows rows(%rows : memref<4x5x64xi32>) slots(%slots : memref<4x5x64xi32>) tile = 64
      into(%sr, %ss, %t : memref<4x5x32xi32>, memref<4x5x64xi32>, memref<4xi32>)
  return
}

// -----

func.func @share_rows_slots(%rows: memref<4x5x64xi32>, %slots: memref<4x2x64xi32>,
                            %sr: memref<4x5x64xi32>, %ss: memref<4x5x64xi32>, %t: memref<4xi32>) {
  // expected-error @below {{slots must have the shape of rows 'memref<4x5x64xi32>', got 'memref<4x2x64xi32>'}}
  dhs.share_rows rows(%rows : memref<4x5x64xi32>) slots(%slots : memref<4x2x64xi32>) tile = 64
      into(%sr, %ss, %t : memref<4x5x64xi32>, memref<4x5x64xi32>, memref<4xi32>)
  return
}

// -----

func.func @share_rows_tiles(%rows: memref<4x5x64xi32>, %slots: memref<4x5x64xi32>,
                            %sr: memref<4x5x64xi32>, %ss: memref<4x5x64xi32>, %t: memref<8xi32>) {
  // expected-error @below {{tiles dimension 0 (requests) is 8, expected 4}}
  dhs.share_rows rows(%rows : memref<4x5x64xi32>) slots(%slots : memref<4x5x64xi32>) tile = 64
      into(%sr, %ss, %t : memref<4x5x64xi32>, memref<4x5x64xi32>, memref<8xi32>)
  return
}

// -----

func.func @share_rows_element(%rows: memref<4x5x64xi32>, %slots: memref<4x5x64xi64>,
                              %sr: memref<4x5x64xi32>, %ss: memref<4x5x64xi32>, %t: memref<4xi32>) {
  // expected-error @below {{operand #1 must be 3D memref of 32-bit signless integer values}}
  dhs.share_rows rows(%rows : memref<4x5x64xi32>) slots(%slots : memref<4x5x64xi64>) tile = 64
      into(%sr, %ss, %t : memref<4x5x64xi32>, memref<4x5x64xi32>, memref<4xi32>)
  return
}

// -----

func.func @share_rows_tiles_element(%rows: memref<4x5x64xi32>, %slots: memref<4x5x64xi32>,
                                    %sr: memref<4x5x64xi32>, %ss: memref<4x5x64xi32>,
                                    %t: memref<4xi64>) {
  // expected-error @below {{operand #4 must be 1D memref of 32-bit signless integer values}}
  dhs.share_rows rows(%rows : memref<4x5x64xi32>) slots(%slots : memref<4x5x64xi32>) tile = 64
      into(%sr, %ss, %t : memref<4x5x64xi32>, memref<4x5x64xi32>, memref<4xi64>)
  return
}

// -----

func.func @share_rows_tile(%rows: memref<4x5x64xi32>, %slots: memref<4x5x64xi32>,
                           %sr: memref<4x5x64xi32>, %ss: memref<4x5x64xi32>, %t: memref<4xi32>) {
  // expected-error @below {{attribute 'tile' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  dhs.share_rows rows(%rows : memref<4x5x64xi32>) slots(%slots : memref<4x5x64xi32>) tile = 0
      into(%sr, %ss, %t : memref<4x5x64xi32>, memref<4x5x64xi32>, memref<4xi32>)
  return
}

// -----

func.func @share_rows_min_missing(%rows: memref<4x5x64xi32>, %slots: memref<4x5x64xi32>,
                                  %sr: memref<4x5x64xi32>, %ss: memref<4x5x64xi32>,
                                  %t: memref<4xi32>) {
  // expected-error @below {{attribute 'min_missing' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  dhs.share_rows rows(%rows : memref<4x5x64xi32>) slots(%slots : memref<4x5x64xi32>) tile = 64
      min_missing = -1 into(%sr, %ss, %t : memref<4x5x64xi32>, memref<4x5x64xi32>, memref<4xi32>)
  return
}

// -----

func.func @share_rows_positions(%rows: memref<4x9x64xi32>, %t: memref<4xi32>) {
  // expected-error @below {{shares rows among at most 8 query positions (a portable cluster), got 9}}
  dhs.share_rows rows(%rows : memref<4x9x64xi32>) slots(%rows : memref<4x9x64xi32>) tile = 64
      into(%rows, %rows, %t : memref<4x9x64xi32>, memref<4x9x64xi32>, memref<4xi32>)
  return
}

// -----

func.func @share_rows_selections(%rows: memref<4x5x4096xi32>, %t: memref<4xi32>) {
  // expected-error @below {{sorts at most 16384 selections per request (Q x K) in shared memory, got 5 x 4096 = 20480}}
  dhs.share_rows rows(%rows : memref<4x5x4096xi32>) slots(%rows : memref<4x5x4096xi32>) tile = 64
      into(%rows, %rows, %t : memref<4x5x4096xi32>, memref<4x5x4096xi32>, memref<4xi32>)
  return
}

// -----

func.func @share_rows_verify_phase(%rows: memref<4x3x64xi32>, %t: memref<4xi32>) {
  dhs.verify gamma = 3 {
    // expected-error @below {{in a verify phase of gamma = 3 has 3 query positions; the phase checks gamma + 1 = 4}}
    dhs.share_rows rows(%rows : memref<4x3x64xi32>) slots(%rows : memref<4x3x64xi32>) tile = 64
        into(%rows, %rows, %t : memref<4x3x64xi32>, memref<4x3x64xi32>, memref<4xi32>)
  }
  return
}

// -----

func.func @pool_write_back_static(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>) {
  // expected-error @below {{the ring's entries are the runtime's choice: expected a dynamic first dimension, got 'memref<64x4x656xi8>'}}
  %ring = dhs.pool_write_back of %pool
      : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?> -> memref<64x4x656xi8>
  return
}

// -----

func.func @pool_write_back_layers(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>) {
  // expected-error @below {{the ring holds 1 layers per token but the pool's group has 4}}
  %ring = dhs.pool_write_back of %pool
      : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?> -> memref<?x1x656xi8>
  return
}

// -----

func.func @resolve_write_back_shape(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 1024, host = ?>,
    %rows: memref<4x1x64xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %slots: memref<4x1x64xi32>, %entries: memref<4x1x32xi32>) {
  // expected-error @below {{write_back must have the shape of rows, got 'memref<4x1x32xi32>' for 'memref<4x1x64xi32>'}}
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 1024, host = ?>)
      rows(%rows : memref<4x1x64xi32>) history(%start, %len : memref<4xi64>, memref<4xi32>)
      into(%slots : memref<4x1x64xi32>) write_back(%entries : memref<4x1x32xi32>)
  return
}

// -----

func.func @union_missing_sources_shape(%rows: memref<4x1x64xi32>, %slots: memref<4x1x64xi32>,
    %union: memref<4x64xi32>, %remap: memref<4x1x64xi32>, %sources: memref<4x32xi32>) {
  // expected-error @below {{sources must have the shape 'memref<4x64xi32>', got 'memref<4x32xi32>'}}
  dhs.union_missing rows(%rows : memref<4x1x64xi32>) slots(%slots : memref<4x1x64xi32>)
      into(%union, %remap : memref<4x64xi32>, memref<4x1x64xi32>)
      write_back(%slots : memref<4x1x64xi32>) sources(%sources : memref<4x32xi32>)
  return
}

// -----

// Values and sorted values come together (the generic form can give one).
func.func @sort_rows_values_alone(%rows: memref<4x64xi32>, %sorted: memref<4x64xi32>) {
  // expected-error @below {{values and sorted values come together}}
  "dhs.sort_rows"(%rows, %sorted, %rows) {operandSegmentSizes = array<i32: 1, 1, 1, 0>}
      : (memref<4x64xi32>, memref<4x64xi32>, memref<4x64xi32>) -> ()
  return
}

// -----

func.func @plan_promotions_sources_shape(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>,
    %fetched: memref<4x64xi32>, %start: memref<4xi64>, %hot: memref<1024xi64>,
    %cleared: memref<1024xi32>, %free: memref<1024xi32>, %control: memref<8xi32>,
    %rows: memref<512xi64>, %slots: memref<512xi32>, %sources: memref<256xi32>) {
  // expected-error @below {{sources must have the shape 'memref<512xi32>', got 'memref<256xi32>'}}
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 1024, host = ?>)
      fetched(%fetched : memref<4x64xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<1024xi64>) cleared(%cleared : memref<1024xi32>)
      free(%free : memref<1024xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<512xi64>, memref<512xi32>)
      sources(%fetched : memref<4x64xi32>) into(%sources : memref<256xi32>)
      replacement = clock
  return
}

// -----

func.func @place_rows_sources_size(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>,
                                   %rows: memref<512xi64>, %slots: memref<512xi32>,
                                   %sources: memref<256xi32>) {
  // expected-error @below {{sources dimension 0 (rows placed) is 256, expected 512}}
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      rows(%rows : memref<512xi64>) slots(%slots : memref<512xi32>)
      sources(%sources : memref<256xi32>)
  return
}
