// The default step: one layer of MLA BF16 sparse attention for 4 requests,
// one query position each, 16 heads, top-256 selected rows per query. The
// pool keeps 2048 HBM slots; the host store grows with the requests.
//
//   dhs-run examples/default_step.mlir   compile, run, check against fp64
func.func @step(%queries: memref<4x1x16x576xbf16>,
                %rows: memref<4x1x256xi32>,
                %slots: memref<4x1x256xi32>,
                %history_start: memref<4xi64>,
                %history_len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>,
                %out: memref<4x1x16x512xbf16>) {
  dhs.sparse_attention queries(%queries : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}
