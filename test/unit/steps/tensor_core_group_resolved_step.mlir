// The unit tests' tensor-core layer group (tensor_core_group_step.mlir)
// with its selections resolved on the device first (dhs.resolve through the
// residency maps the placement step keeps), for the engine's selections in
// device memory. Compiled with --overlap-retrieval: the group's forms, chosen
// per step from the group's step log.
func.func @step(%queries0: memref<4x2x64x576xbf16>, %queries1: memref<4x2x64x576xbf16>,
                %rows: memref<4x2x256xi32>,
                %slots: memref<4x2x256xi32>,
                %history_start: memref<4xi64>,
                %history_len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 2048, host = ?>,
                %out0: memref<4x2x64x512xbf16>, %out1: memref<4x2x64x512xbf16>) {
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = 2048, host = ?>)
      rows(%rows : memref<4x2x256xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      into(%slots : memref<4x2x256xi32>)
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
