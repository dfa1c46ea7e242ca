// The unit tests' tensor-core layer group: 4 requests x 2 query positions x
// 64 heads, top-256 of FP8 MLA rows in a pool of 2 layers a token (1312 B)
// and 2048 slots, both layers over one selection. Compiled as written (each
// layer's attention reads its missing rows from the host store itself) and
// with --overlap-retrieval (one fetch of whole tokens beside both layers'
// attentions, which wait for its ready flags).
func.func @step(%queries0: memref<4x2x64x576xbf16>, %queries1: memref<4x2x64x576xbf16>,
                %rows: memref<4x2x256xi32>,
                %slots: memref<4x2x256xi32>,
                %history_start: memref<4xi64>,
                %history_len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 2048, host = ?>,
                %out0: memref<4x2x64x512xbf16>, %out1: memref<4x2x64x512xbf16>) {
  dhs.sparse_attention queries(%queries0 : memref<4x2x64x576xbf16>)
      rows(%rows : memref<4x2x256xi32>) slots(%slots : memref<4x2x256xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 2048, host = ?>)
      layer = 0 output(%out0 : memref<4x2x64x512xbf16>) scale = 0.0721687824
  dhs.sparse_attention queries(%queries1 : memref<4x2x64x576xbf16>)
      rows(%rows : memref<4x2x256xi32>) slots(%slots : memref<4x2x256xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 2048, host = ?>)
      layer = 1 output(%out1 : memref<4x2x64x512xbf16>) scale = 0.0721687824
  return
}
