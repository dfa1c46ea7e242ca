// A grouped-query-attention layer (Llama-3-8B-like: 32 query heads over 8 KV
// heads of 128 dims, bf16; a row holds a token's 8 keys then its 8 values,
// 4096 B): 4 requests, one decode position, top-512 rows selected per query
// (sparse attention over a GQA model's history).
//
//   dhs-run examples/gqa_step.mlir --resident 0,0.5,1
func.func @step(%queries: memref<4x1x32x128xbf16>,
                %rows: memref<4x1x512xi32>,
                %slots: memref<4x1x512xi32>,
                %history_start: memref<4xi64>,
                %history_len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.gqa<kv_heads = 8, head_dim = 128, dtype = bf16>, layers = 1, hbm = 4096, host = ?>,
                %out: memref<4x1x32x128xbf16>) {
  dhs.sparse_attention queries(%queries : memref<4x1x32x128xbf16>)
      rows(%rows : memref<4x1x512xi32>) slots(%slots : memref<4x1x512xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.gqa<kv_heads = 8, head_dim = 128, dtype = bf16>, layers = 1, hbm = 4096, host = ?>)
      layer = 0 output(%out : memref<4x1x32x128xbf16>) scale = 0.0883883461
  return
}
