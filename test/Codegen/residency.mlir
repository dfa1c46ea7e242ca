// A pool's residency spec reaches the manifest, where the runtime reads its
// protected working set and its hints for optional residency; no kernel runs
// it. The replacement defaults to LRU for a fixed hot buffer.
// RUN: dhs-compile %s --emit=manifest | FileCheck %s

// CHECK: "residency": [
// CHECK-NEXT: {
// CHECK-NEXT:   "floor": 2048,
// CHECK-NEXT:   "max_promotions": 256,
// CHECK-NEXT:   "newest": 64,
// CHECK-NEXT:   "policy": "fixed",
// CHECK-NEXT:   "pool": 5,
// CHECK-NEXT:   "replacement": "lru"
// CHECK-NEXT: }
// CHECK-NEXT: ],
func.func @step(%q: memref<2x1x8x576xbf16>, %rows: memref<2x1x64xi32>,
                %slots: memref<2x1x64xi32>, %start: memref<2xi64>, %len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 8192, host = ?>,
                %out: memref<2x1x8x512xbf16>) {
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 8192, host = ?>)
      newest = 64 floor = 2048 policy = fixed promotions = 256
  dhs.sparse_attention queries(%q : memref<2x1x8x576xbf16>)
      rows(%rows : memref<2x1x64xi32>) slots(%slots : memref<2x1x64xi32>)
      history(%start, %len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 8192, host = ?>)
      layer = 0 output(%out : memref<2x1x8x512xbf16>) scale = 0.0416666679
  return
}
