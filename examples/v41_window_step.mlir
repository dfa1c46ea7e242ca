// One DeepSeek-V4.1-Flash-like layer in a verify step (gamma = 4: five query
// positions per request). Each query attends, in one softmax, to
//  - the top-512 compressed entries (528 B: 512 e4m3 dims with a ue8m0 scale
//    per 32) its indexer selected: resident ones from HBM, the rest from
//    staging, fetched once per request for all five positions (the pipeline
//    shares retrieval across the verify phase), and
//  - the 128 newest raw tokens it may see, which stay resident in a
//    per-request HBM ring of 128 + 5 - 1 = 132 tokens.
// 8 requests, 64 heads.
//
//   dhs-run examples/v41_window_step.mlir --overlap 0.85 --resident 0,0.5,1
func.func @step(%queries: memref<8x5x64x512xbf16>,
                %rows: memref<8x5x512xi32>,
                %slots: memref<8x5x512xi32>,
                %history_start: memref<8xi64>,
                %history_len: memref<8xi32>,
                %pool: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 8192, host = ?>,
                %window: memref<8x132x1x528xi8>,
                %window_tokens: memref<8xi32>,
                %out: memref<8x5x64x512xbf16>) {
  dhs.verify gamma = 4 {
    %stage = dhs.scratch : memref<8x2560x1x528xi8>
    dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 8192, host = ?>)
        rows(%rows : memref<8x5x512xi32>) slots(%slots : memref<8x5x512xi32>)
        history(%history_start, %history_len : memref<8xi64>, memref<8xi32>)
        into(%stage : memref<8x2560x1x528xi8>)
    dhs.attention queries(%queries : memref<8x5x64x512xbf16>)
        rows(%rows : memref<8x5x512xi32>) slots(%slots : memref<8x5x512xi32>)
        staging(%stage : memref<8x2560x1x528xi8>)
        pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 8192, host = ?>)
        window(%window, %window_tokens : memref<8x132x1x528xi8>, memref<8xi32>) size = 128
        layer = 0 output(%out : memref<8x5x64x512xbf16>) scale = 0.0441941738
  }
  return
}
