// RUN: dhs-opt %s -split-input-file -verify-diagnostics

// expected-error @below {{HBM capacity must be a positive number of slots or '?', got 0}}
func.func @zero_hbm(%pool: !dhs.kv_pool<mla_bf16, hbm = 0, host = ?>) {
  return
}

// -----

// expected-error @below {{host capacity must be a positive number of rows or '?', got -5}}
func.func @negative_host(%pool: !dhs.kv_pool<mla_bf16, hbm = 8, host = -5>) {
  return
}

// -----

// expected-error @+2 {{expected ::mlir::dhs::RowFormat to be one of: mla_bf16}}
// expected-error @+1 {{failed to parse Dhs_KVPoolType parameter 'format'}}
func.func @unknown_format(%pool: !dhs.kv_pool<mla_fp4, hbm = 8, host = ?>) {
  return
}

// -----

func.func @tier_wrong_rows(%pool: !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?>) {
  // expected-error @below {{'dhs.pool_tier' op rows have 512 elements, row format mla_bf16 has 576}}
  %0 = dhs.pool_tier hbm of %pool
      : !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?> -> memref<4096x512xbf16>
  return
}

// -----

func.func @tier_wrong_capacity(%pool: !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?>) {
  // expected-error @below {{'dhs.pool_tier' op the hbm tier holds 4096 rows but the result has 1024}}
  %0 = dhs.pool_tier hbm of %pool
      : !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?> -> memref<1024x576xbf16>
  return
}

// -----

func.func @tier_wrong_dtype(%pool: !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?>) {
  // expected-error @below {{'dhs.pool_tier' op rows have element type 'f16' but row format mla_bf16 stores 'bf16'}}
  %0 = dhs.pool_tier host of %pool
      : !dhs.kv_pool<mla_bf16, hbm = 4096, host = ?> -> memref<?x576xf16>
  return
}

// -----

func.func @status_not_one_word() {
  // expected-error @below {{'dhs.step_status' op the status is one word: expected memref<1xi32>, got 'memref<2xi32>'}}
  %0 = dhs.step_status : memref<2xi32>
  return
}

// -----

func.func @queries_wrong_dtype(%q: memref<4x1x16x576xf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{operand #0 must be 4D memref of bfloat16 type values}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>)
      output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @queries_wrong_head_dim(%q: memref<4x1x16x128xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{queries have 128 dims per head but row format mla_bf16 has keys of 576 dims}}
  dhs.sparse_attention queries(%q : memref<4x1x16x128xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>)
      output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @output_wrong_value_dim(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>, %out: memref<4x1x16x576xbf16>) {
  // expected-error @below {{output has 576 dims per head but row format mla_bf16 has values of 512 dims}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>)
      output(%out : memref<4x1x16x576xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @rows_wrong_batch(%q: memref<4x1x16x576xbf16>, %rows: memref<3x1x256xi32>,
    %slots: memref<3x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{row_ids dimension 0 (requests) is 3, expected 4}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<3x1x256xi32>) slots(%slots : memref<3x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>)
      output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @output_wrong_heads(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>, %out: memref<4x1x8x512xbf16>) {
  // expected-error @below {{output dimension 2 (heads) is 8, expected 16}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>)
      output(%out : memref<4x1x8x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @slots_wrong_shape(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x128xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{slots must have the shape of row_ids: one slot per selected row, got 'memref<4x1x128xi32>' for 'memref<4x1x256xi32>'}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x128xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>)
      output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @history_wrong_batch(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<2xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{history_start dimension 0 (requests) is 2, expected 4}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<2xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>)
      output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @history_len_wrong_dtype(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi64>,
    %pool: !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{operand #4 must be 1D memref of 32-bit signless integer values}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi64>)
      pool(%pool : !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>)
      output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @no_rows_selected(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x0xi32>,
    %slots: memref<4x1x0xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{selects no rows (K = 0)}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x0xi32>) slots(%slots : memref<4x1x0xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>)
      output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}

// -----

func.func @bad_scale(%q: memref<4x1x16x576xbf16>, %rows: memref<4x1x256xi32>,
    %slots: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
    %pool: !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>, %out: memref<4x1x16x512xbf16>) {
  // expected-error @below {{softmax scale must be a positive finite number, got -1}}
  dhs.sparse_attention queries(%q : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<mla_bf16, hbm = 2048, host = ?>)
      output(%out : memref<4x1x16x512xbf16>) scale = -1.0
  return
}
