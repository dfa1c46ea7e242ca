// The placement step for the unit tests' tensor-core layer group
// (tensor_core_group_resolved_step.mlir): FP8 tokens of 2 layers.
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = ?, host = ?>,
                %rows: memref<4096xi64>, %slots: memref<4096xi32>) {
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 2, hbm = ?, host = ?>)
      rows(%rows : memref<4096xi64>) slots(%slots : memref<4096xi32>)
  return
}
