// dhs.sparse_attention alone with a shared prefix whose tile counts nothing
// in the step computes, for SharedPrefixTest: the test writes them into the
// staging arena (where a --share-tiles step's dhs.share_rows leaves them)
// and runs the manifest's launch directly, feeding the tensor-core kernel's
// "sharing" mode (a cluster of the five position CTAs) valid and invalid
// counts and prefixes, and reads its status word (BadSharedRows). (As an
// argument the counts would be refused when the manifest is loaded: only
// the step can compute them; the Runtime would leave this arena unfilled.)
func.func @step(%queries: memref<2x5x64x576xbf16>, %rows: memref<2x5x256xi32>,
                %slots: memref<2x5x256xi32>, %history_start: memref<2xi64>,
                %history_len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 1024, host = ?>,
                %out: memref<2x5x64x512xbf16>) {
  %tiles = dhs.scratch : memref<2xi32>
  dhs.sparse_attention queries(%queries : memref<2x5x64x576xbf16>)
      rows(%rows : memref<2x5x256xi32>) slots(%slots : memref<2x5x256xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      shared(%tiles : memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 1024, host = ?>)
      layer = 0 output(%out : memref<2x5x64x512xbf16>) scale = 0.0721687824
  return
}
