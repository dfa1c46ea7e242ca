// The decision step with a write-back ring, for WriteBackTest: the missing
// rows' ring entries (dhs.resolve's write_back) carried through the union,
// the sort and the plan to dhs.place_rows, which copies a promoted row from
// its ring entry (HBM to HBM) and from the host store when it has none.
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>,
                %rows: memref<4x1x256xi32>, %slots: memref<4x1x256xi32>, %start: memref<4xi64>,
                %entries: memref<4x1x256xi32>,
                %union: memref<4x256xi32>, %remap: memref<4x1x256xi32>, %sources: memref<4x256xi32>,
                %fetched: memref<4x256xi32>, %fetched_sources: memref<4x256xi32>,
                %hot: memref<2048xi64>, %cleared: memref<2048xi32>, %free: memref<2048xi32>,
                %control: memref<8xi32>, %plan_rows: memref<2048xi64>,
                %plan_slots: memref<2048xi32>, %plan_sources: memref<2048xi32>) {
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      newest = 64 floor = 0 policy = adaptive replacement = clock
  dhs.union_missing rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      into(%union, %remap : memref<4x256xi32>, memref<4x1x256xi32>)
      write_back(%entries : memref<4x1x256xi32>) sources(%sources : memref<4x256xi32>)
  dhs.sort_rows rows(%union : memref<4x256xi32>) into(%fetched : memref<4x256xi32>)
      carry(%sources : memref<4x256xi32>) into(%fetched_sources : memref<4x256xi32>)
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      fetched(%fetched : memref<4x256xi32>) history(%start : memref<4xi64>)
      hot(%hot : memref<2048xi64>) cleared(%cleared : memref<2048xi32>)
      free(%free : memref<2048xi32>) control(%control : memref<8xi32>)
      into(%plan_rows, %plan_slots : memref<2048xi64>, memref<2048xi32>)
      sources(%fetched_sources : memref<4x256xi32>) into(%plan_sources : memref<2048xi32>)
      replacement = clock
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      rows(%plan_rows : memref<2048xi64>) slots(%plan_slots : memref<2048xi32>)
      sources(%plan_sources : memref<2048xi32>)
  return
}
