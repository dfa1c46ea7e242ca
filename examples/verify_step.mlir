// A verify step (gamma = 4: five query positions per request) written as
// retrieval then attention: the pipeline shares retrieval across the
// positions (one fetch of the union of each request's missing rows), and
// attention reads resident rows from HBM and the rest from staging. 4
// requests, 16 heads, top-256, MLA BF16 rows.
//
//   dhs-run examples/verify_step.mlir --overlap 0.85 --resident 0,0.5,1
func.func @step(%queries: memref<4x5x16x576xbf16>,
                %rows: memref<4x5x256xi32>,
                %slots: memref<4x5x256xi32>,
                %history_start: memref<4xi64>,
                %history_len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>,
                %out: memref<4x5x16x512xbf16>) {
  dhs.verify gamma = 4 {
    %stage = dhs.scratch : memref<4x1280x1x1152xi8>
    dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
        into(%stage : memref<4x1280x1x1152xi8>)
    dhs.attention queries(%queries : memref<4x5x16x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        staging(%stage : memref<4x1280x1x1152xi8>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 4096, host = ?>)
        layer = 0 output(%out : memref<4x5x16x512xbf16>) scale = 0.0416666679
  }
  return
}
