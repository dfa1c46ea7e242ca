// The decision step of one layer group with the pool's write-back ring
// (examples/decision_step.mlir describes the decisions): the layer steps'
// dhs.resolve gave each missing selection its ring entry (bound by role:
// write_back) and their attentions wrote the host rows they read there, so
// the entries are carried through the union, the sort and the plan, and
// dhs.place_rows copies each promoted row from its entry (HBM to HBM)
// instead of reading the host store again; a row without an entry (past the
// ring) is read from the host store.
//
//   dhs-compile examples/decision_step_write_back.mlir --requests 16 \
//       --positions 1 --topk 2048 --hbm-slots 65536 -o /tmp/decisions
//
// The runtime binds the rings (RuntimeConfig::writeBackRows tokens a pool)
// where every attention of the layer steps writes back.
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                %rows: memref<?x?x?xi32>, %slots: memref<?x?x?xi32>, %start: memref<?xi64>,
                %entries: memref<?x?x?xi32>,
                %union: memref<?x?xi32>, %remap: memref<?x?x?xi32>, %sources: memref<?x?xi32>,
                %fetched: memref<?x?xi32>, %fetched_sources: memref<?x?xi32>,
                %hot: memref<?xi64>, %cleared: memref<?xi32>, %free: memref<?xi32>,
                %control: memref<8xi32>, %plan_rows: memref<?xi64>, %plan_slots: memref<?xi32>,
                %plan_sources: memref<?xi32>) {
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      newest = 64 floor = 0 policy = adaptive replacement = clock
  dhs.union_missing rows(%rows : memref<?x?x?xi32>) slots(%slots : memref<?x?x?xi32>)
      into(%union, %remap : memref<?x?xi32>, memref<?x?x?xi32>)
      write_back(%entries : memref<?x?x?xi32>) sources(%sources : memref<?x?xi32>)
  dhs.sort_rows rows(%union : memref<?x?xi32>) into(%fetched : memref<?x?xi32>)
      carry(%sources : memref<?x?xi32>) into(%fetched_sources : memref<?x?xi32>)
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      fetched(%fetched : memref<?x?xi32>) history(%start : memref<?xi64>)
      hot(%hot : memref<?xi64>) cleared(%cleared : memref<?xi32>)
      free(%free : memref<?xi32>) control(%control : memref<8xi32>)
      into(%plan_rows, %plan_slots : memref<?xi64>, memref<?xi32>)
      sources(%fetched_sources : memref<?x?xi32>) into(%plan_sources : memref<?xi32>)
      replacement = clock
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      rows(%plan_rows : memref<?xi64>) slots(%plan_slots : memref<?xi32>)
      sources(%plan_sources : memref<?xi32>)
  return
}
